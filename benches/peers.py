#!/usr/bin/env python3
"""Other remote HDF5 readers on the same server and file, phase by phase.

    peers.py URL LOCAL_PATH PEER [PEER ...]
    peers.py --corpus URL LOCAL_PATH PEER [PEER ...]

PEER is one of: remfile-py (Python remfile + h5py), fsspec (fsspec's HTTP file
with a block cache + h5py), ros3 (h5py's ros3 driver), local (the file on
disk), plugin (the HDF5 plugin, by HDF5_DRIVER), wheel (the remfile_hdf5
package's driver="remfile"), wheel-fileobj (its RemoteFile + h5py). Prints one JSON object per peer and phase: wall and CPU seconds, and
the requests, bytes and connections the server counted (from its /__stats
endpoint). A peer whose package is missing prints an "error" line instead.
The cloud benchmark (benches/cloud.rs) runs this script and merges its lines
into its table.

With --corpus, the workloads users run on any file of the corpus
(benches/corpus.py): h5py's walk asking for each object's info (visititems,
every attribute, each dataset's shape, dtype, chunks and filters), then a
slice of the largest chunked dataset; and for NWB files, in a fresh file,
pynwb's NWBHDF5IO(file=h5py.File(...)).read().
"""

import gc
import json
import os
import re
import resource
import sys
import time
import urllib.request

SLICE = (1_000_000, 1_180_000)
DATA = "acquisition/ElectricalSeries/data"


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def server_stats(url):
    if not url:
        return {"requests": 0, "bytes": 0, "connections": 0}
    base = url.split("/", 3)
    with urllib.request.urlopen(f"{base[0]}//{base[2]}/__stats") as resp:
        return json.load(resp)


def server_log(url):
    """The (arrival, end) times of every request the server saw, in ms."""
    if not url:
        return []
    base = url.split("/", 3)
    with urllib.request.urlopen(f"{base[0]}//{base[2]}/__log") as resp:
        text = resp.read().decode()
    times = re.findall(r"([\d.]+)\.\.\s*([\d.]+) ms", text)
    return [(float(a), float(b)) for a, b in times]


def rounds(requests):
    """Rounds of requests: those sent before any answer of the current round
    came back belong to it; one sent after starts the next."""
    count, first_answer = 0, None
    for arrived, done in sorted(requests):
        if first_answer is None or arrived >= first_answer:
            count, first_answer = count + 1, done
        else:
            first_answer = min(first_answer, done)
    return count


def walk(f):
    """Visits every group and dataset and reads every attribute."""
    count = 0

    def visit(name, obj):
        nonlocal count
        count += 1
        for key in obj.attrs:
            obj.attrs[key]

    for key in f.attrs:
        f.attrs[key]
    f.visititems(visit)
    return count


def walk_info(f):
    """h5py's walk as notebooks do it: every object, its attributes, and each
    dataset's shape, dtype, chunks and filters (h5py asks HDF5 for each
    object's info on the way)."""
    count = 0

    def visit(name, obj):
        nonlocal count
        count += 1
        for key in obj.attrs:
            try:
                obj.attrs[key]
            except (OSError, TypeError, ValueError):
                pass  # a type h5py cannot read: HDF5 still read the attribute
        if hasattr(obj, "shape"):
            obj.shape, obj.dtype, obj.chunks, obj.compression, obj.id.get_create_plist().get_nfilters()

    for key in f.attrs:
        f.attrs[key]
    f.visititems(visit)
    return count


def largest_chunked(f):
    """The chunked numeric dataset with the most elements, and a slice of it:
    the first rows along its first axis, up to about 16 MB."""
    import numpy as np

    best = []

    def visit(name, obj):
        if hasattr(obj, "chunks") and obj.chunks and obj.dtype.kind in "iuf" and obj.size:
            best.append((obj.size, name))

    f.visititems(visit)
    if not best:
        return None, None
    name = max(best)[1]
    ds = f[name]
    row = int(np.prod(ds.shape[1:], dtype=np.int64)) * ds.dtype.itemsize
    rows = max(ds.chunks[0], min(ds.shape[0], (16 << 20) // max(row, 1)))
    return name, rows


def run_corpus(peer, url, path):
    import h5py

    remote = None if peer == "local" else url
    open_file = opener(peer, url, path)
    # sec2: not through a driver HDF5_DRIVER names for every file.
    with h5py.File(path, "r", driver="sec2") as local:
        name, rows = largest_chunked(local)
    measure = measurer(peer, remote)
    f = measure("open", open_file)
    measure("walk", lambda: walk_info(f))
    if name:
        measure("slice", lambda: f[name][:rows])
    f.close()
    if path.endswith(".nwb"):
        from pynwb import NWBHDF5IO

        def pynwb_read():
            io = NWBHDF5IO(file=open_file(), mode="r")
            io.read()
            return io

        measure("open+pynwb", pynwb_read)


def opener(peer, url, path):
    import h5py

    if peer == "remfile-py":
        import remfile

        return lambda: h5py.File(remfile.File(url), "r")
    if peer == "fsspec":
        import fsspec

        def open_fsspec():
            fs = fsspec.filesystem("http")
            handle = fs.open(url, "rb", block_size=1 << 20, cache_type="blockcache")
            return h5py.File(handle, "r")

        return open_fsspec
    if peer == "ros3":
        if "ros3" not in h5py.registered_drivers():
            raise RuntimeError("this h5py has no ros3 driver")
        return lambda: h5py.File(url, "r", driver="ros3")
    if peer == "local":
        return lambda: h5py.File(path, "r")
    if peer == "wheel":
        # The Python package: the same driver, registered with h5py on import.
        import remfile_hdf5  # noqa: F401

        return lambda: h5py.File(url, "r", driver="remfile")
    if peer == "wheel-fileobj":
        # The package's file object under h5py's file-object driver, as
        # Python remfile and fsspec are: no metadata prefetch, no chunk index.
        import remfile_hdf5

        return lambda: h5py.File(remfile_hdf5.RemoteFile(url), "r")
    if peer == "plugin":
        # The remfile plugin, loaded by this h5py's own HDF5 from
        # HDF5_PLUGIN_PATH because HDF5_DRIVER says so.
        if os.environ.get("HDF5_DRIVER") != "remfile":
            raise RuntimeError("set HDF5_DRIVER=remfile and HDF5_PLUGIN_PATH")
        return lambda: h5py.File(url, "r")
    raise ValueError(f"unknown peer {peer}")


def measurer(peer, remote):
    """Runs a phase and prints what it cost, from the server's point of view."""

    def measure(phase, work):
        logged = len(server_log(remote))
        before, c0, t0 = server_stats(remote), cpu(), time.perf_counter()
        # No collection inside a phase: fsspec's IO thread collecting a
        # pynwb reader runs its __del__, which waits for h5py's lock that
        # the main thread holds while it waits for that IO thread.
        gc.disable()
        try:
            result = work()
        finally:
            gc.enable()
        wall, used = time.perf_counter() - t0, cpu() - c0
        after = server_stats(remote)
        waves = rounds(server_log(remote)[logged:])
        print(
            json.dumps(
                {
                    "peer": peer,
                    "phase": phase,
                    "wall": wall,
                    "cpu": used,
                    "requests": after["requests"] - before["requests"],
                    "rounds": waves,
                    "bytes": after["bytes"] - before["bytes"],
                    # The server does not count connections that only ask for stats.
                    "connections": after["connections"] - before["connections"],
                }
            ),
            flush=True,
        )
        return result

    return measure


def run(peer, url, path):
    remote = None if peer == "local" else url
    open_file = opener(peer, url, path)
    measure = measurer(peer, remote)
    f = measure("open", open_file)
    measure("metadata", lambda: walk(f))
    measure("bulk", lambda: f[DATA][SLICE[0] : SLICE[1], :])


def main():
    args = sys.argv[1:]
    corpus = args[:1] == ["--corpus"]
    if corpus:
        args = args[1:]
    url, path, peers = args[0], args[1], args[2:]
    for peer in peers:
        try:
            (run_corpus if corpus else run)(peer, url, path)
        except Exception as e:  # report and go on with the next peer
            print(json.dumps({"peer": peer, "error": f"{type(e).__name__}: {e}"}), flush=True)


if __name__ == "__main__":
    main()
