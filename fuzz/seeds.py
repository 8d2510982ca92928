"""Writes the seed inputs of the hdf5_driver fuzz target: small HDF5 files
from the writers users' files come from, each behind the target's two bytes
of choices (claimed size, options; see src/fuzzing/driver.rs).

    python fuzz/seeds.py fuzz/corpus/hdf5_driver

Needs h5py, pynwb and netCDF4 (pip install h5py pynwb netCDF4). The files
stay small (a few KB to a few hundred KB) so that each run is fast, and are
readable by HDF5 1.10 (h5py's libver stays at v110 or earlier). Seeds, dates
and ids are fixed, so reruns give the same structure.
"""

import os
import sys
import tempfile
import uuid
import warnings
from datetime import datetime, timezone

import h5py
import numpy as np

START = datetime(2026, 1, 1, 9, 30, tzinfo=timezone.utc)


def pynwb_file(path):
    from pynwb import NWBHDF5IO, NWBFile, TimeSeries
    from pynwb.behavior import Position, SpatialSeries
    from pynwb.ecephys import ElectricalSeries

    nwb = NWBFile(
        session_description="a small session",
        identifier=str(uuid.UUID(int=1)),
        session_start_time=START,
    )
    device = nwb.create_device(name="probe")
    group = nwb.create_electrode_group("shank0", description="s", location="CA1", device=device)
    for i in range(4):
        nwb.add_electrode(location="CA1", group=group)
    region = nwb.create_electrode_table_region(list(range(4)), "all")
    data = (np.arange(2048 * 4, dtype=np.int16).reshape(2048, 4) % 97).astype(np.int16)
    from hdmf.backends.hdf5.h5_utils import H5DataIO

    nwb.add_acquisition(
        ElectricalSeries(
            name="ElectricalSeries",
            data=H5DataIO(data, chunks=(256, 4), compression="gzip"),
            electrodes=region,
            rate=1000.0,
        )
    )
    behavior = nwb.create_processing_module("behavior", "b")
    pos = Position(name="Position")
    pos.add_spatial_series(
        SpatialSeries(name="xy", data=np.zeros((100, 2)), reference_frame="origin", rate=10.0)
    )
    behavior.add(pos)
    nwb.add_acquisition(TimeSeries(name="ts", data=np.arange(50.0), unit="m", rate=1.0))
    nwb.add_trial_column("label", "a text column")
    for i in range(5):
        nwb.add_trial(start_time=float(i), stop_time=i + 0.5, label=f"t{i}")
    with NWBHDF5IO(path, "w") as io:
        io.write(nwb)


def netcdf4_file(path):
    import netCDF4

    with netCDF4.Dataset(path, "w") as ds:
        ds.title = "small"
        ds.createDimension("time", None)
        ds.createDimension("lat", 5)
        ds.createDimension("lon", 6)
        t = ds.createVariable("time", "f8", ("time",))
        t.units = "hours since 2026-01-01"
        v = ds.createVariable("temp", "i2", ("time", "lat", "lon"), zlib=True, shuffle=True)
        v.scale_factor = 0.01
        v.add_offset = 273.15
        v.long_name = "temperature"
        for step in range(4):
            t[step] = step
            v[step] = np.arange(30, dtype=np.int16).reshape(5, 6) + step
        names = ds.createVariable("station", str, ("lat",))
        for i in range(5):
            names[i] = f"station {i}"
        g = ds.createGroup("forecast")
        g.createDimension("member", 3)
        g.createVariable("spread", "f4", ("member",))[:] = [0.5, 1.0, 1.5]


def h5py_tree(path):
    """v2 object headers, dense links and attributes, every chunk index."""
    with h5py.File(path, "w", libver=("v110", "v110"), track_order=True) as f:
        for i in range(12):
            f.attrs[f"attr{i}"] = f"value {i}"
        g = f.create_group("dense", track_order=True)
        for i in range(20):
            g.create_group(f"member{i:02}")
        f.create_dataset("single_chunk", data=np.arange(64, dtype=np.int32), chunks=(64,))
        f.create_dataset("fixed_array", data=np.arange(4096, dtype=np.int16), chunks=(256,))
        f.create_dataset(
            "extensible", data=np.arange(2048, dtype=np.int16), chunks=(128,), maxshape=(None,)
        )
        f.create_dataset(
            "btree2",
            data=np.arange(1024, dtype=np.int16).reshape(32, 32),
            chunks=(8, 8),
            maxshape=(None, None),
        )
        f.create_dataset("compact", data=np.arange(10, dtype=np.int8))
        f.create_dataset("text", data=[b"a", b"bc"], dtype=h5py.string_dtype())
        f["soft"] = h5py.SoftLink("/dense")


def h5py_gzip(path):
    with h5py.File(path, "w") as f:
        data = (np.arange(64 * 256, dtype=np.int32).reshape(256, 64) * 7919) % 65521
        f.create_dataset("z", data=data, chunks=(32, 64), compression="gzip", shuffle=True)
        f.create_dataset("plain", data=np.linspace(0, 1, 3000))


def h5py_wide(path):
    """A symbol-table group with enough members for a B-tree of several
    leaves, compound and reference values, a variable-length sequence."""
    with h5py.File(path, "w") as f:
        g = f.create_group("wide")
        for i in range(80):
            g.create_group(f"g{i:03}").attrs["i"] = i
        rec = np.zeros(8, dtype=[("a", "<i4"), ("b", "<f8")])
        rec["a"] = np.arange(8)
        f.create_dataset("records", data=rec)
        refs = f.create_dataset("refs", (2,), dtype=h5py.ref_dtype)
        refs[0] = f["wide"].ref
        refs[1] = f["records"].ref
        vl = f.create_dataset("ragged", (3,), dtype=h5py.vlen_dtype(np.int32))
        for i in range(3):
            vl[i] = np.arange(i + 1)
        f["records"].attrs["names"] = np.array([b"x", b"yy"], dtype=h5py.string_dtype())


WRITERS = {
    "pynwb.nwb": pynwb_file,
    "netcdf4.nc": netcdf4_file,
    "h5py_tree_v110.h5": h5py_tree,
    "h5py_gzip.h5": h5py_gzip,
    "h5py_wide.h5": h5py_wide,
}

# The choices put before a file: (size kind, options). Each file as served,
# and the first also served as a 2^50-byte file with the crawl on and the
# hyperslab prefetch on, in 4 KiB blocks.
VARIANTS = [(0, 0), (7, 0b0000_1100)]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        for name, write in WRITERS.items():
            path = os.path.join(tmp, name)
            write(path)
            data = open(path, "rb").read()
            for kind, flags in VARIANTS:
                seed = os.path.join(out, f"seed-{name}-{kind}-{flags}")
                with open(seed, "wb") as f:
                    f.write(bytes([kind, flags]) + data)
                print(f"{seed}: {len(data)} bytes")


if __name__ == "__main__":
    main()
