"""Writes an NWB file with pynwb, the way real NWB files are made.

    python benches/write_nwb.py OUT.nwb [--rows N] [--gzip LEVEL]

An extracellular session: 64-channel int16 ElectricalSeries of N rows (by
default 6,300,000: 806 MB, as large as a typical DANDI session) in 2 MiB
chunks, an electrodes table, a units
table with ragged spike times, trials, and processing modules (LFP,
behaviour, and more time series), about 80 groups, 200+ datasets and 900+
attributes. pynwb writes through h5py with its defaults: the earliest file
format (superblock 0, symbol-table groups, version 1 object headers and
B-trees), most object headers after the bulk data.
"""

import argparse
from datetime import datetime, timezone

import numpy as np
from hdmf.backends.hdf5.h5_utils import H5DataIO
from pynwb import NWBHDF5IO, NWBFile, TimeSeries
from pynwb.behavior import Position
from pynwb.ecephys import LFP, ElectricalSeries
from pynwb.file import Subject

CHANNELS = 64
CHUNK_ROWS = 16_384  # 16384 x 64 x 2 bytes = 2 MiB


def signal(rows):
    """The same values as the crate's own generated file, made in slabs to
    bound the memory it takes."""
    out = np.empty((rows, CHANNELS), dtype=np.int16)
    c = np.arange(CHANNELS, dtype=np.int64)[None, :]
    for start in range(0, rows, 1 << 20):
        r = np.arange(start, min(rows, start + (1 << 20)), dtype=np.int64)[:, None]
        base = ((r // 4) * 31 + c * 1009) % 8191
        noise = (r * 7 + c * 13) % 4
        out[start : start + len(r)] = base + noise - 4096
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=6_300_000)
    ap.add_argument("--gzip", type=int, default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(7)

    nwb = NWBFile(
        session_description="a benchmark session",
        identifier="remfile-bench",
        session_start_time=datetime(2026, 1, 1, tzinfo=timezone.utc),
        experimenter=["Doe, Jane"],
        lab="Benchmark lab",
        institution="Benchmark institute",
        experiment_description="extracellular recording with behaviour",
        session_id="session-001",
    )
    nwb.subject = Subject(subject_id="mouse-1", species="Mus musculus", sex="M", age="P90D")
    device = nwb.create_device(name="probe", description="a 64-channel probe", manufacturer="acme")
    groups = [
        nwb.create_electrode_group(
            name=f"shank{i}", description=f"shank {i}", location="CA1", device=device
        )
        for i in range(4)
    ]
    nwb.add_electrode_column(name="label", description="channel label")
    for ch in range(CHANNELS):
        nwb.add_electrode(group=groups[ch // 16], label=f"ch{ch}", location="CA1")
    region = nwb.create_electrode_table_region(list(range(CHANNELS)), "all electrodes")

    io_options = {"chunks": (CHUNK_ROWS, CHANNELS)}
    if args.gzip is not None:
        io_options.update(compression="gzip", compression_opts=args.gzip)
    nwb.add_acquisition(
        ElectricalSeries(
            name="ElectricalSeries",
            data=H5DataIO(signal(args.rows), **io_options),
            electrodes=region,
            starting_time=0.0,
            rate=30_000.0,
        )
    )

    nwb.add_unit_column(name="quality", description="sorting quality")
    for _ in range(40):
        nwb.add_unit(spike_times=np.sort(rng.uniform(0, 60, 500)), quality="good")
    nwb.add_trial_column(name="correct", description="whether the trial was correct")
    for t in range(300):
        nwb.add_trial(start_time=2.0 * t, stop_time=2.0 * t + 1.5, correct=bool(t % 3))

    ecephys = nwb.create_processing_module("ecephys", "processed extracellular data")
    ecephys.add(
        LFP(
            ElectricalSeries(
                name="LFP",
                data=signal(20_000),
                electrodes=region,
                starting_time=0.0,
                rate=1000.0,
            )
        )
    )
    behavior = nwb.create_processing_module("behavior", "behavioural data")
    position = Position()
    position.create_spatial_series(
        name="position",
        data=rng.uniform(0, 1, (6000, 2)),
        reference_frame="arena corner",
        rate=100.0,
    )
    behavior.add(position)
    for m in range(20):
        module = nwb.create_processing_module(f"module{m:02}", f"more processed data {m}")
        for k in range(4):
            module.add(
                TimeSeries(
                    name=f"series{k}",
                    data=rng.uniform(0, 1, 100 + 50 * k),
                    unit="a.u.",
                    rate=10.0,
                    description=f"series {k} of module {m}",
                )
            )

    with NWBHDF5IO(args.out, "w") as io:
        io.write(nwb)


if __name__ == "__main__":
    main()
