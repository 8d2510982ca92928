"""The tests' range server on 127.0.0.1 and the files it serves (written
here, by h5py, pynwb and netCDF4 from PyPI)."""

import json
import os
import signal
import subprocess
import sys
import urllib.request

import numpy as np
import pytest


# Ctrl-C as Python handles it, in this process and in the scripts the tests
# run, even when a runner started the suite with SIGINT ignored (a job put
# in the background by a shell is): an ignored signal is inherited through
# exec, a handler is not.
signal.signal(signal.SIGINT, signal.default_int_handler)


class Server:
    """The range server in a process of its own (the driver waits on the
    network holding the GIL, as h5py holds it through every HDF5 call, so
    a server in this process could not answer)."""

    def __init__(self, root, delay_ms=0):
        here = os.path.dirname(os.path.abspath(__file__))
        self.process = subprocess.Popen(
            [sys.executable, os.path.join(here, "range_server.py"), root, str(delay_ms)],
            stdout=subprocess.PIPE, text=True,
        )
        self.base = self.process.stdout.readline().strip()
        self.root = root

    def close(self):
        self.process.kill()
        self.process.wait()

    def url(self, name):
        return f"{self.base}/{name}?X-Amz-Signature=secret"

    def _log(self):
        with urllib.request.urlopen(f"{self.base}/__log", timeout=30) as r:
            return json.loads(r.read())

    def mark(self):
        return len(self._log())

    def peak(self):
        """The most requests for files answered at once since the last ask."""
        with urllib.request.urlopen(f"{self.base}/__peak", timeout=30) as r:
            return json.loads(r.read())

    def requests_since(self, mark):
        return self._log()[mark:]

    def headers_since(self, mark):
        """The headers of each request since ``mark``, names in lowercase."""
        with urllib.request.urlopen(f"{self.base}/__headers", timeout=30) as r:
            return json.loads(r.read())[mark:]


def _write_h5(path):
    import h5py

    rng = np.random.default_rng(7)
    with h5py.File(path, "w", libver=("v110", "v110"), track_order=True) as f:
        f.attrs["title"] = "a test file"
        f.attrs["values"] = np.arange(5)
        for g in range(20):
            grp = f.create_group(f"group{g:02}/inner")
            grp.attrs["index"] = g
            grp.attrs["label"] = f"group {g}"
            grp.create_dataset("small", data=rng.integers(0, 1000, 50))
        big = f.create_dataset(
            "big", data=rng.normal(size=(2000, 64)).astype("f4"), chunks=(100, 64),
            compression="gzip",
        )
        big.attrs["unit"] = "volt"
        f.create_dataset("contiguous", data=np.arange(300_000, dtype="i8"))
        f.create_dataset("names", data=[b"alpha", b"beta"])


def _write_nwb(path):
    from datetime import datetime, timezone

    from pynwb import NWBHDF5IO, NWBFile, TimeSeries

    nwb = NWBFile(
        session_description="a test session",
        identifier="remfile-test",
        session_start_time=datetime(2026, 1, 1, tzinfo=timezone.utc),
    )
    for i in range(5):
        nwb.add_acquisition(
            TimeSeries(name=f"series{i}", data=np.arange(1000.0) * i, unit="V", rate=100.0)
        )
    behavior = nwb.create_processing_module("behavior", "behaviour")
    behavior.add(TimeSeries(name="speed", data=np.linspace(0, 1, 500), unit="m/s", rate=10.0))
    with NWBHDF5IO(path, "w") as io:
        io.write(nwb)


def _write_nc(path):
    import netCDF4

    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("time", None)
        d.createDimension("x", 10)
        v = d.createVariable("temperature", "f4", ("time", "x"), zlib=True)
        v.units = "K"
        v[:] = np.arange(200, dtype="f4").reshape(20, 10)
        d.title = "a netCDF file"


@pytest.fixture(scope="session")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    _write_h5(os.path.join(root, "data.h5"))
    _write_nwb(os.path.join(root, "session.nwb"))
    _write_nc(os.path.join(root, "local.nc"))
    with open(os.path.join(root, "blob.bin"), "wb") as f:
        f.write(np.random.default_rng(3).integers(0, 256, 3_000_000, dtype="u1").tobytes())
    return str(root)


@pytest.fixture(scope="session")
def server(files):
    server = Server(files)
    yield server
    server.close()


@pytest.fixture(scope="session")
def slow_server(files):
    """The same files, each answer 400 ms late."""
    server = Server(files, delay_ms=400)
    yield server
    server.close()
