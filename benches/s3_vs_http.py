"""Requests and round trips of an `s3://` open + walk + slice beside the same
over HTTP, per file of a corpus, through the package's driver.

    python benches/s3_vs_http.py CORPUS_DIR

Serves CORPUS_DIR twice on 127.0.0.1: with the tests' range server
(python/tests/range_server.py) and with s3s-fs (signed requests checked; the
files copied into its bucket). Needs `remfile_hdf5` installed and s3s-fs on
PATH or in ~/.cargo/bin. Prints one row per file: requests (round trips) of
each. Counts, not times: both servers are local.
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

import remfile_hdf5

HERE = os.path.dirname(os.path.abspath(__file__))
KEY, SECRET = "BENCHKEY", "bench-secret-0123456789"


def walk_and_slice(f):
    largest = []

    def visit(name, obj):
        dict(obj.attrs)
        if isinstance(obj, h5py.Dataset):
            largest.append((obj.size, name))

    dict(f.attrs)
    f.visititems(visit)
    if largest:
        _, name = max(largest)
        ds = f[name]
        if ds.shape:
            ds[: max(1, ds.shape[0] // 10)]


def cost(url, **options):
    with h5py.File(url, "r", driver="remfile", metadata_prefetch=True, **options) as f:
        walk_and_slice(f)
        s = remfile_hdf5.stats(f)
    return f"{s['requests']} ({s['round_trips']})"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(corpus):
    names = sorted(n for n in os.listdir(corpus) if n.endswith((".nwb", ".nc", ".h5")))
    http = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "..", "python", "tests", "range_server.py"), corpus],
        stdout=subprocess.PIPE, text=True,
    )
    base = http.stdout.readline().strip()
    root = tempfile.mkdtemp(prefix="remfile-s3-bench-")
    os.makedirs(os.path.join(root, "corpus"))
    for n in names:
        shutil.copy(os.path.join(corpus, n), os.path.join(root, "corpus", n))
    s3s = shutil.which("s3s-fs") or os.path.expanduser("~/.cargo/bin/s3s-fs")
    port = free_port()
    store = subprocess.Popen(
        [s3s, "--host", "127.0.0.1", "--port", str(port), "--access-key", KEY, "--secret-key", SECRET, root],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    s3 = dict(s3_endpoint=f"http://127.0.0.1:{port}", s3_access_key_id=KEY, s3_secret_access_key=SECRET)
    try:
        print(f"{'file':28} {'https-like (range server)':>26} {'s3:// (s3s-fs)':>16}")
        for n in names:
            print(f"{n:28} {cost(f'{base}/{n}'):>26} {cost(f's3://corpus/{n}', **s3):>16}")
    finally:
        http.kill()
        store.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1])
