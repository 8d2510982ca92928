#!/usr/bin/env python3
"""The survey of a dataset: many files, one process, a few attributes each.

    survey.py BASE_URL DIR READER

For each file of DIR (served at BASE_URL/NAME), in one process: open it, read
the root's attributes and those of its members two levels down, close it.
READER is one of: local, local-count (h5py over a Python file object on
the local copy that records every read HDF5 makes), wheel (the remfile_hdf5 package's driver="remfile"),
wheel-prefetch (the same, every file's metadata fetched at once first with
remfile_hdf5.prefetch_files),
wheel-fileobj (its RemoteFile under h5py), fsspec (one HTTPFileSystem with a
block cache for every file), remfile-py (Python remfile). Prints one JSON
line: wall and CPU seconds for all files, the requests, rounds, bytes and new
connections the server counted (its /__stats and /__log), and a digest of the
values read, which must equal the local reader's. local-count adds
"hdf5_bytes", the size of the union of the byte ranges HDF5 read (what the
work needs of each file, without the readers' blocks and read-ahead),
"hdf5_reads", the reads it made, and "hdf5_by_file", NAME:BYTES pairs
separated by spaces.
"""

import hashlib
import io
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


class CountingFile(io.FileIO):
    """The local file, unbuffered, recording the (position, length) of every read."""

    def __init__(self, path, reads):
        super().__init__(path, "rb")
        self.reads = reads

    def read(self, size=-1):
        at = self.tell()
        data = super().read(size)
        self.reads.append((at, len(data)))
        return data

    def readinto(self, buffer):
        at = self.tell()
        n = super().readinto(buffer)
        self.reads.append((at, n or 0))
        return n


def union_size(reads):
    """Bytes covered by the union of the (position, length) ranges."""
    total, end = 0, -1
    for start, length in sorted(reads):
        stop = start + length
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def opener(reader, base, reads):
    import h5py

    if reader == "local":
        return lambda name, path: h5py.File(path, "r")
    if reader == "local-count":

        def counted(name, path):
            reads[name] = []
            return h5py.File(CountingFile(path, reads[name]), "r")

        return counted
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
    names = sorted(n for n in os.listdir(folder) if n.endswith((".nwb", ".h5", ".nc", ".h5ad")))
    remote = None if reader.startswith("local") else base + "/"
    reads = {}  # name: [(position, length)], for local-count
    try:
        open_file = opener(reader, base, reads)
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
    counted = {}
    if reader == "local-count":
        by_file = {name: union_size(r) for name, r in reads.items()}
        counted = {
            "hdf5_bytes": sum(by_file.values()),
            "hdf5_reads": sum(len(r) for r in reads.values()),
            "hdf5_by_file": " ".join(f"{name}:{n}" for name, n in by_file.items()),
        }
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
                **counted,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
