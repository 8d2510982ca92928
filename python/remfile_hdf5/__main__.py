"""``python -m remfile_hdf5 download URL DEST``: a remote file to a local one,
over several connections, resumable, verified, with a progress bar."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from ._download import download


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m remfile_hdf5")
    commands = parser.add_subparsers(dest="command", required=True)
    get = commands.add_parser(
        "download", help="download a file: parallel, resumable, verified",
        description="Downloads URL to DEST over several connections. Stopped, it goes on "
                    "where it was when started again (unless the file changed); the bytes "
                    "are verified (size, ETag, and MD5 where the ETag is one) before DEST "
                    "takes them.")
    get.add_argument("url")
    get.add_argument("dest")
    get.add_argument("-j", "--connections", type=int, default=4, help="requests at once (4)")
    get.add_argument("--no-progress", action="store_true", help="show no progress bar")
    get.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                     help="one of the package's options (headers excepted), e.g. -o read_timeout=60s")
    args = parser.parse_args(argv)
    options = {}
    for pair in args.option:
        key, sep, value = pair.partition("=")
        if not sep:
            parser.error(f"an option is KEY=VALUE, not {pair!r}")
        options[key.strip()] = value.strip()
    try:
        how = download(args.url, args.dest, connections=args.connections,
                       progress=not args.no_progress, **options)
    except KeyboardInterrupt:
        print("stopped: run the same command again to go on", file=sys.stderr)
        return 130
    except (OSError, ValueError, TypeError) as e:
        print(f"download failed: {e}", file=sys.stderr)
        return 1
    print(f"{args.dest}: {how}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
