#!/usr/bin/env python3
"""The survey of a dataset: many files, one process, a few attributes each.

    survey.py BASE_URL DIR READER

For each file of DIR (served at BASE_URL/NAME), in one process: open it, read
the root's attributes and those of its members two levels down, close it.
READER is one of: local, wheel (the remfile_hdf5 package's driver="remfile"),
wheel-prefetch (the same, every file's metadata fetched at once first with
remfile_hdf5.prefetch_files),
wheel-fileobj (its RemoteFile under h5py), fsspec (one HTTPFileSystem with a
block cache for every file), remfile-py (Python remfile). Prints one JSON
line: wall and CPU seconds for all files, the requests, rounds, bytes and new
connections the server counted (its /__stats and /__log), and a digest of the
values read, which must equal the local reader's.
"""

import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import cpu, rounds, server_log, server_stats  # noqa: E402


def survey(f, digest):
    """The root's attributes and its members' two levels down, read."""
    import h5py

    def attrs(obj):
        for key in sorted(obj.attrs):
            try:
                value = obj.attrs[key]
            except (OSError, TypeError):
                # Attributes of types h5py cannot read (some references).
                value = "unreadable"
            digest.update(f"{obj.name}@{key}={value!r}".encode())

    attrs(f)
    for name in sorted(f):
        first = f.get(name)
        if first is None:
            continue
        attrs(first)
        if isinstance(first, h5py.Group):
            for inner in sorted(first):
                second = first.get(inner)
                if second is not None:
                    attrs(second)


def opener(reader, base):
    import h5py

    if reader == "local":
        return lambda name, path: h5py.File(path, "r")
    if reader == "wheel":
        import remfile_hdf5  # noqa: F401

        return lambda name, path: h5py.File(f"{base}/{name}", "r", driver="remfile")
    if reader == "wheel-prefetch":
        import remfile_hdf5

        return lambda name, path: h5py.File(f"{base}/{name}", "r", driver="remfile")
    if reader == "wheel-fileobj":
        import remfile_hdf5

        return lambda name, path: h5py.File(remfile_hdf5.RemoteFile(f"{base}/{name}"), "r")
    if reader == "fsspec":
        import fsspec

        fs = fsspec.filesystem("http")
        return lambda name, path: h5py.File(
            fs.open(f"{base}/{name}", "rb", block_size=1 << 20, cache_type="blockcache"), "r"
        )
    if reader == "remfile-py":
        import remfile

        return lambda name, path: h5py.File(remfile.File(f"{base}/{name}"), "r")
    raise ValueError(f"unknown reader {reader}")


def main():
    base, folder, reader = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
    names = sorted(n for n in os.listdir(folder) if n.endswith((".nwb", ".h5", ".nc")))
    remote = None if reader == "local" else base + "/"
    try:
        open_file = opener(reader, base)
    except ImportError as e:
        print(json.dumps({"reader": reader, "error": str(e)}))
        return
    digest = hashlib.sha256()
    logged = len(server_log(remote))
    before, c0, t0 = server_stats(remote), cpu(), time.perf_counter()
    if reader == "wheel-prefetch":
        import remfile_hdf5

        # Every file's metadata at once; each open below takes its file.
        remfile_hdf5.prefetch_files([f"{base}/{name}" for name in names])
    for name in names:
        with open_file(name, os.path.join(folder, name)) as f:
            survey(f, digest)
    wall, used = time.perf_counter() - t0, cpu() - c0
    after = server_stats(remote)
    print(
        json.dumps(
            {
                "reader": reader,
                "files": len(names),
                "wall": wall,
                "cpu": used,
                "requests": after["requests"] - before["requests"],
                "rounds": rounds(server_log(remote)[logged:]),
                "bytes": after["bytes"] - before["bytes"],
                "connections": after["connections"] - before["connections"],
                "digest": digest.hexdigest()[:16],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
