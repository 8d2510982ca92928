"""``python -m remfile_hdf5 download URL DEST``: a remote file to a local one,
over several connections, resumable, verified, with a progress bar.
``python -m remfile_hdf5 explain URL``: an HDF5 file's open and walk, round
trip by round trip, and what its author could change."""

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
    why = commands.add_parser(
        "explain", help="an HDF5 file's open and walk, round by round",
        description="Opens URL with the driver and walks it (every object's header and "
                    "attributes), then prints each round trip: its requests, their bytes, "
                    "which of HDF5's structures it brought; the totals; and what the file's "
                    "author could change to need fewer rounds.")
    why.add_argument("url")
    why.add_argument("--open-only", action="store_true", help="open the file, walk nothing")
    why.add_argument("--json", action="store_true", help="print the account as JSON")
    why.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                     help="one of the package's options, e.g. -o cache_capacity=1GiB")
    args = parser.parse_args(argv)
    options = {}
    for pair in args.option:
        key, sep, value = pair.partition("=")
        if not sep:
            parser.error(f"an option is KEY=VALUE, not {pair!r}")
        options[key.strip()] = value.strip()
    if args.command == "explain":
        return _explain(args.url, not args.open_only, args.json, options)
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


def _explain(url: str, walk: bool, as_json: bool, options: dict) -> int:
    import json
    import urllib.parse

    from . import _url, explain

    try:
        account = explain(url, walk=walk, **options)
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError, TypeError, RuntimeError) as e:
        print(f"explain failed: {e}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps(account, indent=1))
    else:
        # Without its query string or credentials, as the package's messages.
        parts = urllib.parse.urlsplit(_url(url))
        host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
        print(urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", "")))
        print(account["text"], end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
