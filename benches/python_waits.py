"""What a Python user feels while the package waits on the network: how soon
Ctrl-C is honoured, whether other threads run, and how much memory closed
files keep.

    python benches/python_waits.py [WHAT ...]

WHAT is any of ``ctrl-c``, ``heartbeat``, ``threads``, ``memory`` (all by
default). Runs against the tests' range server (python/tests/range_server.py)
on 127.0.0.1, with files written here by h5py. Needs the package (any
version: run it in two virtual environments to compare), h5py and numpy.

* ctrl-c: SIGINT 1 s into a read of a stalled server (the driver, then
  ``RemoteFile``); prints the time from when the signal was due (a read that
  holds the GIL delays the thread that sends it) to the exception, and the
  exception's class.
* heartbeat: a thread ticking every 10 ms while the driver opens a file and
  reads two attributes, each request answered 2 s late; prints its worst gap.
* threads: four files each opened and read (500 ms per request) by four
  threads at once, and one after the other, through the driver and through
  ``RemoteFile``.
* memory: 50 files opened with the driver, 10 rows read from each, closed;
  RSS at each step.
"""

import os
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python" / "tests"))

import h5py  # noqa: E402
import numpy as np  # noqa: E402

import remfile_hdf5  # noqa: E402
from conftest import Server  # noqa: E402


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def write_files(root):
    rng = np.random.default_rng(1)
    with h5py.File(root / "d.h5", "w") as f:
        f.create_dataset("big", data=np.arange(4_000_000, dtype="f8"))
        f.attrs["title"] = "a file"
        for i in range(30):
            f.create_group(f"g{i}").attrs["x"] = i
    with h5py.File(root / "many.h5", "w") as f:
        f.create_dataset("rows", data=rng.normal(size=(200_000, 16)), chunks=(1000, 16))
        for i in range(200):
            f.create_group(f"group{i}").attrs["index"] = i
    (root / "blob.bin").write_bytes(rng.integers(0, 256, 8_000_000, dtype="u1").tobytes())


def control(server, what):
    urllib.request.urlopen(f"{server.base}/{what}", timeout=30).read()


def ctrl_c(server):
    for how in ("driver", "file"):
        if how == "driver":
            f = h5py.File(server.url("d.h5"), "r", driver="remfile", metadata_prefetch=False)
            read = lambda: f["big"][2_000_000:2_000_010]  # noqa: E731
        else:
            f = remfile_hdf5.RemoteFile(server.url("blob.bin"))
            read = lambda: f.read_at(5_000_000, 100)  # noqa: E731
        control(server, "__stall?on")
        sent = []

        def interrupt():
            time.sleep(1.0)
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()
        first, caught = None, None
        # The signal is due 1 s from here: a thread that needs the GIL to
        # send it sends it late if the read holds the GIL.
        due = time.monotonic() + 1.0
        try:
            try:
                read()
            except BaseException as e:  # the exception is what is measured
                first, caught = e, time.monotonic()
            # A KeyboardInterrupt that arrives after another error.
            time.sleep(0.5)
        except KeyboardInterrupt as late:
            first, caught = first or late, caught or time.monotonic()
            print(f"  (KeyboardInterrupt after {type(first).__name__})")
        print(f"ctrl-c {how}: {type(first).__name__} {caught - due:.3f} s after SIGINT was due "
              f"({caught - sent[0]:.3f} s after it was sent)")
        control(server, "__stall?off")
        f.close()


def heartbeat(server):
    gaps, stop = [0.0], threading.Event()

    def beat():
        last = time.monotonic()
        while not stop.wait(0.01):
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    t = threading.Thread(target=beat)
    t.start()
    started = time.monotonic()
    with h5py.File(f"{server.base}/d.h5?delay_ms=2000", "r", driver="remfile") as f:
        f.attrs["title"]
        f["g3"].attrs["x"]
    took = time.monotonic() - started
    stop.set()
    t.join()
    print(f"heartbeat: open + 2 attributes {took:.1f} s, worst gap {max(gaps) * 1000:.0f} ms "
          "(period 10 ms)")


def threads(server):
    def driver(i):
        with h5py.File(f"{server.base}/many.h5?delay_ms=500&reader={i}", "r",
                       driver="remfile") as f:
            f["rows"][1000 * i:1000 * i + 10]
            [f[f"group{g}"].attrs["index"] for g in range(0, 200, 40)]

    def file_object(i):
        with remfile_hdf5.RemoteFile(f"{server.base}/blob.bin?delay_ms=500&reader={i}") as fo:
            for k in range(3):
                fo.read_at(2_000_000 * k + 100_000 * i, 1000)

    for name, work in (("driver", driver), ("RemoteFile", file_object)):
        started = time.monotonic()
        for i in range(4):
            work(i)
        alone = time.monotonic() - started
        started = time.monotonic()
        ts = [threading.Thread(target=work, args=(i + 4,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        together = time.monotonic() - started
        print(f"threads {name}: 4 files one after the other {alone:.1f} s, "
              f"4 threads at once {together:.1f} s")


def memory(server):
    print(f"memory: at start {rss_mb():.0f} MB")
    files = [h5py.File(f"{server.base}/many.h5?n={i}", "r", driver="remfile") for i in range(50)]
    print(f"memory: 50 files open {rss_mb():.0f} MB")
    for i, f in enumerate(files):
        f["rows"][i * 100:i * 100 + 10]
    print(f"memory: 10 rows read from each {rss_mb():.0f} MB")
    for f in files:
        f.close()
    print(f"memory: all closed {rss_mb():.0f} MB")


def main():
    wanted = sys.argv[1:] or ["ctrl-c", "heartbeat", "threads", "memory"]
    print(f"remfile_hdf5 {remfile_hdf5.__version__} from {Path(remfile_hdf5.__file__).parent}")
    with tempfile.TemporaryDirectory() as root:
        write_files(Path(root))
        server = Server(root)
        try:
            for what in wanted:
                {"ctrl-c": ctrl_c, "heartbeat": heartbeat, "threads": threads,
                 "memory": memory}[what](server)
        finally:
            server.close()


if __name__ == "__main__":
    main()
