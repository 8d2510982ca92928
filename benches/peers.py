#!/usr/bin/env python3
"""Other remote HDF5 readers on the same server and file, phase by phase.

    peers.py URL LOCAL_PATH PEER [PEER ...]

PEER is one of: remfile-py (Python remfile + h5py), fsspec (fsspec's HTTP file
with a block cache + h5py), ros3 (h5py's ros3 driver), local (the file on
disk). Prints one JSON object per peer and phase: wall and CPU seconds, and
the requests, bytes and connections the server counted (from its /__stats
endpoint). A peer whose package is missing prints an "error" line instead.
The cloud benchmark (benches/cloud.rs) runs this script and merges its lines
into its table.
"""

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
    if peer == "plugin":
        # The remfile plugin, loaded by this h5py's own HDF5 from
        # HDF5_PLUGIN_PATH because HDF5_DRIVER says so.
        if os.environ.get("HDF5_DRIVER") != "remfile":
            raise RuntimeError("set HDF5_DRIVER=remfile and HDF5_PLUGIN_PATH")
        return lambda: h5py.File(url, "r")
    raise ValueError(f"unknown peer {peer}")


def run(peer, url, path):
    remote = None if peer == "local" else url
    open_file = opener(peer, url, path)

    def measure(phase, work):
        logged = len(server_log(remote))
        before, c0, t0 = server_stats(remote), cpu(), time.perf_counter()
        result = work()
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

    f = measure("open", open_file)
    measure("metadata", lambda: walk(f))
    measure("bulk", lambda: f[DATA][SLICE[0] : SLICE[1], :])


def main():
    url, path, peers = sys.argv[1], sys.argv[2], sys.argv[3:]
    for peer in peers:
        try:
            run(peer, url, path)
        except Exception as e:  # report and go on with the next peer
            print(json.dumps({"peer": peer, "error": f"{type(e).__name__}: {e}"}), flush=True)


if __name__ == "__main__":
    main()
