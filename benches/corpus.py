"""Writes a corpus of HDF5 files made by real writers, to count the HTTP round
trips that opening a file and walking its metadata costs.

    python benches/corpus.py OUTDIR [--size small|full] [--only NAME[,NAME...]]

nwb_*.nwb        pynwb through h5py defaults: superblock 0, v1 object headers,
                 symbol-table groups (local heap + v1 B-tree), many small
                 datasets and attributes, DynamicTables with ragged, compound
                 and object-reference columns, v1 B-tree chunk indexes.
                 deep: extracellular session, nested behaviour containers,
                 chunked bulk ElectricalSeries, gzip LFP. ophys: gzip 3-D
                 TwoPhotonSeries, pixel_mask ROIs. icephys: hundreds of sweeps
                 (wide groups whose B-trees have many leaves), icephys tables.
netcdf4.nc       netCDF-C via netCDF4-python: superblock 2, creation-ordered
                 links, dimension scales (DIMENSION_LIST, REFERENCE_LIST,
                 _Netcdf4Dimid), NC_STRING vlen strings in the global heap, CF
                 packing, groups, zlib+shuffle chunks appended step by step
                 along an unlimited dimension.
h5py_track_order_v110.h5, h5py_latest.h5
                 h5py, libver v110 / latest (HDF5 2.x message versions, e.g.
                 data layout v5), track_order: v2 object headers, dense links
                 and attributes (fractal heaps, v2 B-tree name and
                 creation-order indexes), vlen strings, every chunk index
                 (extensible array, fixed array, v2 B-tree, single chunk), a
                 compact dataset, a soft link.
h5py_gzip.h5     h5py defaults, every dataset gzip+shuffle in ~1 MiB chunks.
pytables.h5      PyTables: CLASS/VERSION/TITLE attributes, compound Table,
                 EArray, CArray, VLArray; zlib rather than blosc, so that any
                 reader can decode every chunk.
h5netcdf.nc      h5netcdf: netCDF4 conventions written by h5py, a group, gzip.
anndata.h5ad     anndata's write_h5ad: obs and var DataFrames (string index,
                 categorical, bool, int and float columns), X a CSR sparse
                 matrix (data, indices, indptr), a dense float32 layer, obsm
                 embeddings, uns with nested dicts, string arrays and
                 scalars; every element tagged with encoding-type and
                 encoding-version attributes.

--size small keeps each file within a few MB and the same object tree (only
icephys has fewer sweeps); --size full makes files of a few hundred MB. Seeds,
dates and ids are fixed, so reruns give the same bytes.
"""

import argparse
import contextlib
import os
import random
import sys
import uuid
import warnings
from datetime import datetime, timezone
from unittest import mock

import h5py
import numpy as np

START = datetime(2026, 1, 1, 9, 30, tzinfo=timezone.utc)


def signal(start, stop, width, seed=0, noise_bits=4):
    """Rows start..stop of a (rows, width) int16 signal: a ramp pattern that
    compresses well plus a few bits of hashed noise that does not."""
    out = np.empty((stop - start, width), dtype=np.int16)
    c = np.arange(width, dtype=np.int64)[None, :]
    for a, b in slabs(stop - start, max(1, (1 << 20) // width)):  # bounds the int64 temporaries
        r = np.arange(start + a, start + b, dtype=np.int64)[:, None]
        base = ((r // 4) * 31 + c * 1009 + seed * 7919) % 8191 - 4096
        x = (r * width + c + seed * 1_000_003).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        x ^= x >> np.uint64(31)  # splitmix64's finaliser: without it the noise repeats and deflates
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(29)
        out[a:b] = base + (x >> np.uint64(64 - noise_bits)).astype(np.int64)
    return out


def slabs(rows, step):
    for start in range(0, rows, step):
        yield start, min(rows, start + step)


def slab_iterator(shape, chunk_shape, make):
    """An hdmf iterator over make(row_start, row_stop), eight chunks of rows
    at a time, so that the bulk of a file is never all in memory."""
    from hdmf.data_utils import GenericDataChunkIterator

    class Slabs(GenericDataChunkIterator):
        def _get_data(self, selection):
            return make(selection[0].start, selection[0].stop)[(slice(None),) + tuple(selection[1:])]

        def _get_maxshape(self):
            return shape

        def _get_dtype(self):
            return np.dtype(np.int16)

    buffer = (min(shape[0], chunk_shape[0] * 8),) + tuple(shape[1:])
    return Slabs(chunk_shape=chunk_shape, buffer_shape=buffer)


def new_nwbfile(identifier, description):
    from pynwb import NWBFile
    from pynwb.file import Subject

    nwb = NWBFile(session_description=description, identifier=identifier, session_start_time=START,
                  file_create_date=[START], experimenter=["Doe, Jane", "Roe, Richard"], lab="Corpus lab",
                  institution="Corpus institute", experiment_description=description,
                  session_id=identifier + "-session", keywords=["benchmark", "corpus"])
    nwb.subject = Subject(subject_id="mouse-1", species="Mus musculus", sex="M", age="P90D",
                          description="a wild-type mouse", genotype="C57BL/6J", weight="25 g")
    return nwb


def write_nwb(nwb, path):
    from pynwb import NWBHDF5IO

    with NWBHDF5IO(path, "w") as io:
        io.write(nwb)


def nwb_deep(path, size):
    from hdmf.backends.hdf5.h5_utils import H5DataIO
    from pynwb import TimeSeries
    from pynwb.behavior import BehavioralEvents, BehavioralTimeSeries, Position
    from pynwb.ecephys import LFP, ElectricalSeries

    # 2 MiB chunks, the size DANDI recommends for cloud reads.
    channels, rows, chunk_rows = 64, *((2_400_000, 16_384) if size == "full" else (8_192, 2_048))
    rng = np.random.default_rng(1)
    nwb = new_nwbfile("corpus-nwb-deep", "extracellular session with behaviour")
    probe = nwb.create_device(name="probe", description="64-channel silicon probe", manufacturer="acme")
    nwb.create_device(name="camera", description="behaviour camera", manufacturer="acme")
    groups = [nwb.create_electrode_group(name=f"shank{i}", description=f"shank {i}", location="CA1",
                                         device=probe) for i in range(4)]
    for column, description in (("label", "channel label"), ("depth_um", "depth along the probe"),
                                ("is_bad", "excluded from analysis")):
        nwb.add_electrode_column(name=column, description=description)
    for ch in range(channels):
        nwb.add_electrode(group=groups[ch // 16], location="CA1", x=1.0, y=2.0, z=0.02 * ch, imp=1.5e5,
                          filtering="0.1-7500 Hz", rel_x=0.0, rel_y=20.0 * (ch % 16),
                          label=f"ch{ch:02}", depth_um=20.0 * ch, is_bad=ch % 17 == 0)
    region = nwb.create_electrode_table_region(list(range(channels)), "all electrodes")
    data = slab_iterator((rows, channels), (chunk_rows, channels), lambda a, b: signal(a, b, channels))
    nwb.add_acquisition(ElectricalSeries(name="ElectricalSeries", data=data, electrodes=region, starting_time=0.0,
                                         rate=30_000.0, conversion=1.95e-7, filtering="0.1-7500 Hz"))
    ecephys = nwb.create_processing_module("ecephys", "processed extracellular data")
    lfp = H5DataIO(signal(0, 20_000, channels, seed=1), chunks=(4_096, channels), compression="gzip",
                   compression_opts=4, shuffle=True)
    ecephys.add(LFP(ElectricalSeries(name="LFP", data=lfp, electrodes=region, starting_time=0.0, rate=1000.0)))

    behavior = nwb.create_processing_module("behavior", "behavioural data")
    with warnings.catch_warnings():  # deprecated since pynwb 3, yet in most files on DANDI
        warnings.filterwarnings("ignore", message="BehavioralEvents is deprecated")
        events = BehavioralEvents()
    series, position = BehavioralTimeSeries(), Position()
    for name, n in (("rewards", 120), ("licks", 2_000), ("air_puffs", 40)):
        events.add_timeseries(TimeSeries(name=name, data=np.ones(n), unit="n.a.", description=f"{name} times",
                                         timestamps=np.sort(rng.uniform(0, 600, n))))
    for name in ("running_speed", "pupil_diameter"):
        series.add_timeseries(TimeSeries(name=name, data=rng.uniform(0, 1, 6_000), unit="a.u.", rate=10.0))
    position.create_spatial_series(name="position", data=rng.uniform(0, 1, (6_000, 2)),
                                   reference_frame="arena corner", rate=10.0, unit="meters")
    position.create_spatial_series(name="head_direction", data=rng.uniform(0, 6.28, 6_000),
                                   reference_frame="north", rate=10.0, unit="radians")
    behavior.add([events, position, series])

    nwb.add_unit_column(name="quality", description="sorting quality")
    for u in range(40):
        nwb.add_unit(spike_times=np.sort(rng.uniform(0, 600, 500)), electrodes=[u % channels, (u + 1) % channels],
                     quality="good" if u % 4 else "mua")
    for column, description in (("correct", "whether the trial was correct"), ("stimulus", "stimulus shown"),
                                ("response_time", "seconds from stimulus to response")):
        nwb.add_trial_column(name=column, description=description)
    for t in range(300):
        nwb.add_trial(start_time=2.0 * t, stop_time=2.0 * t + 1.5, correct=bool(t % 3),
                      stimulus=("grating", "noise", "blank")[t % 3], response_time=0.3 + 0.001 * t)
    write_nwb(nwb, path)


def nwb_ophys(path, size):
    from hdmf.backends.hdf5.h5_utils import H5DataIO
    from pynwb.base import Images
    from pynwb.image import GrayscaleImage
    from pynwb.ophys import DfOverF, Fluorescence, ImageSegmentation, OpticalChannel, TwoPhotonSeries

    side, chunk_frames, rois = 256, 16, 50
    frames = 2_400 if size == "full" else 16
    rng = np.random.default_rng(2)
    nwb = new_nwbfile("corpus-nwb-ophys", "two-photon calcium imaging session")
    microscope = nwb.create_device(name="Microscope", description="two-photon microscope", manufacturer="acme")
    channel = OpticalChannel(name="OpticalChannel", description="green channel", emission_lambda=520.0)
    plane = nwb.create_imaging_plane(
        name="ImagingPlane", optical_channel=channel, description="layer 2/3", device=microscope,
        excitation_lambda=920.0, imaging_rate=30.0, indicator="GCaMP6f", location="V1",
        origin_coords=[1.0, 2.0, 0.2], grid_spacing=[1e-6, 1e-6])
    movie = slab_iterator((frames, side, side), (chunk_frames, side, side),
                          lambda a, b: signal(a * side, b * side, side, seed=2).reshape(-1, side, side))
    tps = TwoPhotonSeries(name="TwoPhotonSeries", data=H5DataIO(movie, compression="gzip", compression_opts=4),
                          imaging_plane=plane, rate=30.0, unit="n.a.", dimension=[side, side])
    nwb.add_acquisition(tps)

    ophys = nwb.create_processing_module("ophys", "optical physiology processed data")
    segmentation = ImageSegmentation()
    planes = segmentation.create_plane_segmentation(name="PlaneSegmentation", description="suite2p-like ROIs",
                                                    imaging_plane=plane, reference_images=tps)
    for _ in range(rois):
        y0, x0 = rng.integers(0, side - 12, 2)
        planes.add_roi(pixel_mask=[(int(x0 + i % 12), int(y0 + i // 12), float(w))
                                   for i, w in enumerate(rng.uniform(0, 1, 144))])
    # Every container joins the file before its series, so that each series'
    # ROI region shares an ancestor with the table it points into.
    fluorescence, dff = Fluorescence(), DfOverF()
    ophys.add([segmentation, fluorescence, dff])
    region = planes.create_roi_table_region(region=list(range(rois)), description="all ROIs")
    traces = signal(0, frames, rois, seed=3).astype(np.float32) / 4096
    for container, data in ((fluorescence, traces), (dff, traces - traces.mean(axis=0))):
        container.create_roi_response_series(name="RoiResponseSeries", data=data, rois=region, unit="n.a.", rate=30.0)
    mean = GrayscaleImage(name="mean", data=rng.uniform(0, 1, (side, side)).astype(np.float32), description="mean")
    ophys.add(Images(name="SummaryImages", images=[mean], description="summary images"))
    write_nwb(nwb, path)


def nwb_icephys(path, size):
    from pynwb.icephys import (CurrentClampSeries, CurrentClampStimulusSeries, VoltageClampSeries,
                               VoltageClampStimulusSeries)

    sweeps, samples, stride = (300, 100_000, 997) if size == "full" else (40, 2_000, 97)
    per_sequence, per_repetition, per_condition = 10, 2, 3
    nwb = new_nwbfile("corpus-nwb-icephys", "whole-cell patch clamp session")
    amplifier = nwb.create_device(name="amplifier", description="patch clamp amplifier", manufacturer="acme")
    electrode = nwb.create_icephys_electrode(name="electrode0", description="borosilicate pipette", device=amplifier,
                                             resistance="5 MOhm", location="CA1")
    # Sweeps are overlapping windows of one buffer: distinct data, no copies.
    trace = signal(0, samples + sweeps * stride, 1, seed=4)[:, 0].astype(np.float32) * np.float32(1e-5)
    steps = np.repeat(np.arange(-4, 6, dtype=np.float32), samples // 10 + 1)[:samples]
    current_steps, voltage_steps = steps * np.float32(2e-11), steps * np.float32(1e-2)
    simultaneous = []
    for i in range(sweeps):
        window = trace[i * stride: i * stride + samples]
        common = dict(electrode=electrode, rate=20_000.0, starting_time=6.0 * i, sweep_number=np.uint32(i))
        if (i // per_sequence) % 2 == 0:
            stimulus = CurrentClampStimulusSeries(name=f"stimulus_{i:04}", data=current_steps, gain=1.0, **common)
            response = CurrentClampSeries(name=f"response_{i:04}", data=window, gain=0.02, bias_current=0.0,
                                          bridge_balance=1e7, capacitance_compensation=1e-12, **common)
        else:
            stimulus = VoltageClampStimulusSeries(name=f"stimulus_{i:04}", data=voltage_steps, gain=1.0, **common)
            response = VoltageClampSeries(name=f"response_{i:04}", data=window, gain=0.02,
                                          capacitance_fast=1e-12, resistance_comp_correction=70.0, **common)
        row = nwb.add_intracellular_recording(electrode=electrode, stimulus=stimulus, response=response)
        simultaneous.append(nwb.add_icephys_simultaneous_recording(recordings=[row]))
    sequential = [nwb.add_icephys_sequential_recording(stimulus_type=("current steps", "voltage steps")[k % 2],
                                                       simultaneous_recordings=simultaneous[s: s + per_sequence])
                  for k, s in enumerate(range(0, sweeps, per_sequence))]
    repetitions = [nwb.add_icephys_repetition(sequential_recordings=sequential[s: s + per_repetition])
                   for s in range(0, len(sequential), per_repetition)]
    for s in range(0, len(repetitions), per_condition):
        nwb.add_icephys_experimental_condition(repetitions=repetitions[s: s + per_condition])
    write_nwb(nwb, path)


def netcdf4(path, size):
    import netCDF4

    nlat, nlon, nlevel, steps = (181, 360, 8, 60) if size == "full" else (19, 36, 4, 6)
    sizes = {"time": None, "lat": nlat, "lon": nlon, "level": nlevel, "member": 4}
    dims2, dims3, dims_m = ("time", "lat", "lon"), ("time", "level", "lat", "lon"), ("time", "member", "lat", "lon")
    variables = []  # (variable, packed as int16?)

    def add(group, name, packed, dims, units, standard_name):
        dtype, fill = ("i2", -32768) if packed else ("f4", np.float32(9.96921e36))
        chunks = (1,) + tuple(sizes[d] for d in dims[1:])  # one output step per chunk
        var = group.createVariable(name, dtype, dims, fill_value=fill, chunksizes=chunks, zlib=True, complevel=4,
                                   shuffle=True)
        var.set_var_chunk_cache(size=4 << 20)  # netCDF-C's 64 MiB per variable would hold all the output
        var.setncatts(dict(units=units, long_name=name.replace("_", " "), standard_name=standard_name))
        if packed:
            var.scale_factor, var.add_offset = np.float32(0.01), np.float32(250.0)
            var.set_auto_maskandscale(False)  # the values written below are already packed
        variables.append((var, packed))

    with netCDF4.Dataset(path, "w", format="NETCDF4") as ds:
        ds.setncatts(dict(Conventions="CF-1.8", title="synthetic reanalysis", institution="Corpus institute",
                          source="a model of the atmosphere",
                          history="2026-01-01T09:30:00Z created by benches/corpus.py"))
        ds.setncattr_string("references", "none")  # NC_STRING rather than NC_CHAR: a vlen string
        ds.setncattr_string("keywords", ["temperature", "pressure", "humidity"])
        for name, dtype, units, standard_name, axis in (
                ("time", "f8", "hours since 2026-01-01 00:00:00", "time", "T"),
                ("lat", "f4", "degrees_north", "latitude", "Y"), ("lon", "f4", "degrees_east", "longitude", "X"),
                ("level", "f4", "hPa", "air_pressure", "Z")):
            ds.createDimension(name, sizes[name])
            ds.createVariable(name, dtype, (name,)).setncatts(
                dict(units=units, standard_name=standard_name, long_name=f"{name} coordinate", axis=axis))
        ds["time"].calendar, ds["level"].positive = "standard", "down"
        ds["lat"][:], ds["lon"][:] = np.linspace(-90, 90, nlat), np.linspace(0, 360, nlon, endpoint=False)
        ds["level"][:] = np.linspace(1000, 100, nlevel)
        ds.createVariable("step_label", str, ("time",)).long_name = "label of each output step"
        add(ds, "surface_pressure", False, dims2, "Pa", "surface_air_pressure")
        add(ds, "precipitation", True, dims2, "kg m-2 s-1", "precipitation_flux")
        for group_name in ("forecast", "analysis"):
            group = ds.createGroup(group_name)
            group.description = f"{group_name} fields on pressure levels"
            group.createDimension("member", 4)
            member = group.createVariable("member", "i4", ("member",))
            member.long_name, member[:] = "ensemble member", np.arange(4)
            add(group, "air_temperature", True, dims3, "K", "air_temperature")
            add(group, "specific_humidity", False, dims3, "1", "specific_humidity")
            add(group, "ensemble_spread", False, dims_m, "K", "air_temperature standard_error")

        # Step by step along the unlimited dimension, as a model writes its output.
        for t in range(steps):
            ds["time"][t] = 6.0 * t
            ds["step_label"][t] = f"step {t} of run corpus, lead {6 * t} h"
            for k, (var, packed) in enumerate(variables):
                shape = var.shape[1:]
                per_step = int(np.prod(shape[:-2]))
                flat = signal(t * per_step, (t + 1) * per_step, shape[-2] * shape[-1], seed=10 + k, noise_bits=6)
                var[t] = (flat if packed else flat * np.float32(0.01) + np.float32(280.0)).reshape(shape)


def many_attrs(obj, label, n):
    """n attributes of mixed types; more than 8 moves them to dense storage."""
    obj.attrs["description"] = f"{label}: a vlen string attribute"
    obj.attrs["tags"] = np.array([f"{label} tag {i}" for i in range(3)], dtype=h5py.string_dtype())
    for i in range(n - 2):
        obj.attrs[f"param_{i:02}"] = (float(i), np.arange(i + 1, dtype=np.int32), np.int64(i))[i % 3]


def h5py_tree(path, size, libver):
    rows, cols, chunk_rows = (1_200_000 if size == "full" else 4_096), 128, 4_096  # 1 MiB chunks
    rng = np.random.default_rng(5)
    config = h5py.get_config()
    saved, config.track_order = config.track_order, True  # for every group and dataset created below
    try:
        with h5py.File(path, "w", libver=libver) as f:
            many_attrs(f, "file", 16)
            many_attrs(f.create_group("session"), "session", 12)
            for t in range(32):  # more than 8 links: dense link storage
                trial = f.create_group(f"session/trials/trial_{t:03}")
                many_attrs(trial, f"trial {t}", 10 + t % 5)
                trial.create_dataset("spike_times", data=np.sort(rng.uniform(0, 2, 200 + t)), chunks=(64,),
                                     compression="gzip")
                trial.create_dataset("events", data=np.arange(t + 4, dtype=np.int32))
                if t % 4 == 0:
                    many_attrs(trial.create_dataset("analysis/pass1/score", data=rng.uniform(0, 1, 16)), "score", 9)
            for d in range(20):
                many_attrs(f.create_group(f"devices/device_{d:02}"), f"device {d}", 4)
            f.create_dataset("labels", data=[f"label {i}" for i in range(40)], dtype=h5py.string_dtype())

            raw = f.create_group("raw")
            bulk = raw.create_dataset("bulk", shape=(rows, cols), maxshape=(None, cols), chunks=(chunk_rows, cols),
                                      dtype=np.int16)  # extensible array chunk index
            for a, b in slabs(rows, chunk_rows * 16):
                bulk[a:b] = signal(a, b, cols, seed=5)
            many_attrs(bulk, "bulk", 12)
            raw.create_dataset("fixed", data=signal(0, 4_096, 64, seed=6), chunks=(512, 64),
                               compression="gzip", shuffle=True)  # fixed array chunk index
            raw.create_dataset("growing", data=signal(0, 512, 64, seed=7), chunks=(128, 16),
                               maxshape=(None, None))  # v2 B-tree chunk index
            raw.create_dataset("single", data=signal(0, 256, 64, seed=8), chunks=(256, 64),
                               compression="gzip")  # single chunk index
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT)
            raw.create_dataset("compact", data=np.arange(64, dtype=np.int32), dcpl=dcpl)
            f["latest_trial"] = h5py.SoftLink("/session/trials/trial_031")
    finally:
        config.track_order = saved


def h5py_gzip(path, size):
    rows, cols, chunk_rows = (1_000_000 if size == "full" else 8_192), 256, 2_048  # 1 MiB chunks
    gzip = dict(compression="gzip", compression_opts=4, shuffle=True)
    rng = np.random.default_rng(6)
    with h5py.File(path, "w") as f:
        f.attrs["description"] = "gzip+shuffle everywhere"
        for run in range(4):
            group = f.create_group(f"experiment/run_{run}")
            group.attrs["run"] = run
            waveforms = group.create_dataset("waveforms", shape=(rows // 4, cols), dtype=np.int16,
                                             chunks=(chunk_rows, cols), **gzip)
            for a, b in slabs(rows // 4, chunk_rows * 16):
                waveforms[a:b] = signal(run * rows + a, run * rows + b, cols, seed=run, noise_bits=8)
            for ch in range(8):
                channel = group.create_group(f"channel_{ch}")
                channel.attrs["gain"] = 0.5 + ch
                channel.create_dataset("timestamps", data=np.cumsum(rng.uniform(0, 1, 5_000)), **gzip)
                channel.create_dataset("amplitudes", data=rng.normal(size=5_000).astype(np.float32), **gzip)
        f.create_dataset("experiment/summary/labels", data=[f"run {i}" for i in range(4)], **gzip)


def pytables(path, size):
    import tables

    class Event(tables.IsDescription):
        event_id = tables.Int64Col(pos=0)
        name = tables.StringCol(16, pos=1)
        time = tables.Float64Col(pos=2)
        energy = tables.Float32Col(pos=3)
        channel = tables.UInt16Col(pos=4)
        valid = tables.BoolCol(pos=5)
        position = tables.Float32Col(shape=(3,), pos=6)

    rows, channels, chunk_rows = (2_000_000 if size == "full" else 8_192), 64, 8_192
    events = 500_000 if size == "full" else 2_000
    zlib = tables.Filters(complevel=4, complib="zlib", shuffle=True)
    rng = np.random.default_rng(7)
    # PyTables stamps every leaf with its creation time; leave it out, so that reruns give the same file.
    with tables.open_file(path, "w", title="PyTables corpus file") as h5:
        detector = h5.create_group("/", "detector", "Detector readout")
        table = h5.create_table(detector, "events", Event, "Reconstructed events", filters=zlib, expectedrows=events,
                                track_times=False)
        for a, b in slabs(events, 50_000):
            i, block = np.arange(a, b), np.zeros(b - a, dtype=table.dtype)
            block["event_id"], block["time"], block["channel"], block["valid"] = i, i * 1e-3, i % channels, i % 7 > 0
            block["name"] = [b"evt%d" % (n % 100) for n in i]
            block["energy"], block["position"] = rng.uniform(0, 100, b - a), rng.uniform(-1, 1, (b - a, 3))
            table.append(block)
        table.attrs.operator, table.attrs.run_number = "Doe, Jane", 42
        raw = h5.create_earray(detector, "raw", tables.Int16Atom(), shape=(0, channels), title="Raw samples",
                               chunkshape=(chunk_rows, channels), expectedrows=rows, track_times=False)
        for a, b in slabs(rows, chunk_rows * 16):
            raw.append(signal(a, b, channels, seed=9))
        raw.attrs.sampling_rate = 30_000.0
        calibration = h5.create_group("/", "calibration", "Calibration constants")
        gains = h5.create_carray(calibration, "gain_map", tables.Float32Atom(), shape=(512, 512),
                                 filters=zlib, title="Per-pixel gain", track_times=False)
        gains[:] = signal(0, 512, 512, seed=10).astype(np.float32) / 4096
        h5.create_array(calibration, "channel_ids", np.arange(channels, dtype=np.int32), "Channel ids",
                        track_times=False)
        ragged = h5.create_vlarray(calibration, "hits", tables.Int32Atom(), "Hits per trigger", track_times=False)
        for i in range(200):
            ragged.append(np.arange(i % 17, dtype=np.int32))
        h5.create_group(calibration, "history", "Earlier calibrations")._v_attrs.valid_from = "2026-01-01"


def h5netcdf_file(path, size):
    import h5netcdf

    ny, nx, steps = (512, 512, 900) if size == "full" else (64, 64, 40)
    gzip = dict(compression="gzip", compression_opts=4, shuffle=True)
    with h5netcdf.File(path, "w") as f:
        f.attrs.update(Conventions="CF-1.8", title="synthetic satellite scenes")
        f.dimensions = {"time": None, "y": ny, "x": nx}
        for name, n in (("y", ny), ("x", nx)):
            var = f.create_variable(name, (name,), "f4", data=np.arange(n, dtype=np.float32) * 1000)
            var.attrs.update(units="m", standard_name=f"projection_{name}_coordinate")
        time = f.create_variable("time", ("time",), "f8")
        time.attrs["units"] = "seconds since 2026-01-01 00:00:00"
        radiance = f.create_variable("radiance", ("time", "y", "x"), "i2", chunks=(1, ny, nx), fillvalue=-1, **gzip)
        radiance.attrs.update(units="W m-2 sr-1 um-1", long_name="radiance", scale_factor=np.float32(0.01))
        f.resize_dimension("time", steps)
        for a, b in slabs(steps, 16):
            time[a:b] = np.arange(a, b) * 600.0
            radiance[a:b] = signal(a * ny, b * ny, nx, seed=11, noise_bits=6).reshape(b - a, ny, nx)
        calibration = f.create_group("calibration")
        calibration.dimensions = {"band": 16}
        calibration.create_variable("band", ("band",), "i4", data=np.arange(16, dtype=np.int32))
        for name in ("gain", "offset", "wavelength"):
            var = calibration.create_variable(name, ("band",), "f8", data=np.linspace(0, 1, 16), **gzip)
            var.attrs["long_name"] = f"band {name}"


def anndata_file(path, size):
    import anndata
    import pandas as pd
    import scipy.sparse

    # full: a 200 MB dense layer beside a CSR X of 5 M stored values.
    n_obs, n_vars, density = (50_000, 1_000, 0.1) if size == "full" else (1_000, 500, 0.1)
    rng = np.random.default_rng(12)
    cell_types = ["B cell", "T cell", "NK cell", "monocyte", "dendritic cell", "platelet"]
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(rng.choice(cell_types, n_obs), categories=cell_types),
            "batch": pd.Categorical([f"batch{i % 4}" for i in range(n_obs)]),
            "n_counts": rng.integers(500, 20_000, n_obs).astype(np.int64),
            "percent_mito": rng.uniform(0, 0.2, n_obs).astype(np.float32),
            "is_doublet": rng.uniform(0, 1, n_obs) < 0.05,
        },
        index=[f"cell_{i:06}" for i in range(n_obs)],
    )
    var = pd.DataFrame(
        {
            "gene_symbol": [f"GENE{i}" for i in range(n_vars)],
            "feature_type": pd.Categorical(np.where(np.arange(n_vars) % 50 == 0, "spike-in", "gene")),
            "highly_variable": np.arange(n_vars) % 7 == 0,
            "mean_expression": rng.uniform(0, 5, n_vars),
        },
        index=[f"ENSG{i:011}" for i in range(n_vars)],
    )
    x = scipy.sparse.random(n_obs, n_vars, density=density, format="csr", dtype=np.float32, random_state=rng)
    x.data[:] = np.floor(x.data * 20) + 1  # counts
    scaled = signal(0, n_obs, n_vars, seed=12, noise_bits=8).astype(np.float32) / np.float32(4096)
    adata = anndata.AnnData(X=x, obs=obs, var=var, layers={"scaled": scaled})
    adata.obsm["X_pca"] = signal(0, n_obs, 50, seed=13).astype(np.float32) / np.float32(512)
    adata.obsm["X_umap"] = rng.uniform(-10, 10, (n_obs, 2)).astype(np.float32)
    adata.varm["PCs"] = rng.normal(size=(n_vars, 50)).astype(np.float32)
    adata.uns["cell_type_colors"] = np.array(["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"])
    adata.uns["neighbors"] = {"params": {"n_neighbors": 15, "method": "umap", "metric": "euclidean",
                                         "random_state": 0}, "connectivities_key": "connectivities"}
    adata.uns["pca"] = {"params": {"zero_center": True, "use_highly_variable": True},
                        "variance_ratio": rng.uniform(0, 0.1, 50), "variance": rng.uniform(0, 10, 50)}
    adata.uns["pipeline"] = {"name": "corpus", "version": "1.0",
                             "steps": {"qc": {"min_genes": 200, "max_mito": 0.2}, "normalize": {"target_sum": 1e4},
                                       "log1p": {"base": "e"}}}
    adata.write_h5ad(path)


WRITERS = {
    "nwb_deep.nwb": nwb_deep,
    "nwb_ophys.nwb": nwb_ophys,
    "nwb_icephys.nwb": nwb_icephys,
    "netcdf4.nc": netcdf4,
    "h5py_track_order_v110.h5": lambda path, size: h5py_tree(path, size, ("v110", "v110")),
    "h5py_latest.h5": lambda path, size: h5py_tree(path, size, "latest"),
    "h5py_gzip.h5": h5py_gzip,
    "pytables.h5": pytables,
    "h5netcdf.nc": h5netcdf_file,
    "anndata.h5ad": anndata_file,
}


def write(name, path, size):
    """Writes corpus file `name` ("small" or "full") at `path`, whole or not at all."""
    stem, ext = os.path.splitext(path)
    partial = f"{stem}.partial{ext}"  # pynwb warns unless the name ends in .nwb
    # hdmf gives every container a random uuid4 object_id; seeded ones make the same file on every run.
    rng = random.Random(name)
    with mock.patch("hdmf.container.uuid4", lambda: uuid.UUID(int=rng.getrandbits(128), version=4)):
        WRITERS[name](partial, size)
    os.replace(partial, path)


def count_objects(path):
    """Groups, datasets and named datatypes, each counted once, root included."""
    names = []
    with h5py.File(path, "r") as f:
        f.visit(names.append)
    return 1 + len(names)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--size", choices=("small", "full"), default="full")
    ap.add_argument("--only", help="comma-separated names, from: " + ", ".join(WRITERS))
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(WRITERS)
    if unknown := [n for n in names if n not in WRITERS]:
        sys.exit(f"unknown corpus files: {', '.join(unknown)}")
    os.makedirs(args.outdir, exist_ok=True)
    for name in names:
        path = os.path.join(args.outdir, name)
        marker = path + ".done"  # holds the size the file was written with
        if not (os.path.exists(path) and os.path.exists(marker) and open(marker).read().strip() == args.size):
            with contextlib.suppress(FileNotFoundError):
                os.remove(marker)
            write(name, path, args.size)
            with open(marker, "w") as out:
                out.write(args.size + "\n")
        print(f"{name:26} {os.path.getsize(path):>12} {count_objects(path):>6}", flush=True)


if __name__ == "__main__":
    main()
