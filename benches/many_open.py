#!/usr/bin/env python3
"""Many files open at once in one process: memory, threads, descriptors.

    many_open.py URL N DATASET [ROWS]

Opens the file at URL N times under N names (URL?copy=I) with
driver="remfile", keeps them all open, reads ROWS (10) rows of DATASET of
each, and prints one JSON line: RSS, threads and open
file descriptors before, with all open, and after the reads, and the
requests, bytes and connections the server counted.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import server_stats  # noqa: E402


def now():
    status = dict(
        line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line
    )
    return {
        "rss_mb": int(status["VmRSS"].split()[0]) / 1024,
        "threads": int(status["Threads"]),
        "fds": len(os.listdir("/proc/self/fd")),
    }


def main():
    import h5py
    import remfile_hdf5  # noqa: F401

    url, count = sys.argv[1], int(sys.argv[2])
    dataset = sys.argv[3]
    rows = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    before, stats0, t0 = now(), server_stats(url), time.perf_counter()
    files = [h5py.File(f"{url}?copy={i}", "r", driver="remfile") for i in range(count)]
    opened = now()
    for f in files:
        f[dataset][:rows]
    time.sleep(1)
    read = now()
    stats1 = server_stats(url)
    wall = time.perf_counter() - t0
    for f in files:
        f.close()
    print(json.dumps({
        "files": count, "wall": wall, "before": before, "open": opened, "read": read,
        "requests": stats1["requests"] - stats0["requests"],
        "mb": (stats1["bytes"] - stats0["bytes"]) / 1e6,
        "connections": stats1["connections"] - stats0["connections"],
    }))


if __name__ == "__main__":
    main()
