"""Reads a file through the remfile HDF5 plugin, as h5py and pynwb users do.

Run by tests/plugin.rs with HDF5_PLUGIN_PATH and HDF5_DRIVER=remfile set, so
every h5py.File goes through the plugin unless it names another driver:

    python plugin_check.py walk URL LOCAL   # compare every object and attribute
    python plugin_check.py open URL         # print the error opening fails with
    python plugin_check.py pynwb URL        # read the file with pynwb
    python plugin_check.py corpus URL LOCAL # h5py's walk with object info, compared

Prints one line of JSON.
"""

import json
import sys

import h5py
import numpy as np


def describe(f):
    """Every object with its kind, shape, type and attributes, in order."""
    out = []

    def attrs(obj):
        return [
            [k, repr(np.asarray(v).tolist()) if not isinstance(v, (bytes, str)) else repr(v)]
            for k, v in sorted(obj.attrs.items())
        ]

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out.append([name, "dataset", list(obj.shape), str(obj.dtype), attrs(obj)])
        else:
            out.append([name, "group", attrs(obj)])

    out.append(["/", "group", attrs(f)])
    f.visititems(visit)
    return out


def walk(url, local):
    with h5py.File(local, "r", driver="sec2") as ref, h5py.File(url, "r") as remote:
        a, b = describe(remote), describe(ref)
        data = "acquisition/ElectricalSeries/data"
        rows = slice(1000, 9000)
        same_data = bool(np.array_equal(remote[data][rows], ref[data][rows]))
    print(json.dumps({"objects": len(a), "same": a == b, "same_data": same_data}))


def describe_info(f):
    """h5py's walk as notebooks do it (every object, its attributes, each
    dataset's shape, dtype, chunks and filters), as comparable values."""
    out = []

    def attrs(obj):
        shown = []
        for k in sorted(obj.attrs):
            try:
                v = obj.attrs[k]
                shown.append([k, repr(v) if isinstance(v, (bytes, str)) else repr(np.asarray(v).tolist())])
            except (OSError, TypeError, ValueError) as e:  # a type h5py cannot show
                shown.append([k, type(e).__name__])
        return shown

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            filters = obj.id.get_create_plist().get_nfilters()
            out.append([name, list(obj.shape), str(obj.dtype), obj.chunks, obj.compression, filters, attrs(obj)])
        else:
            out.append([name, "group", attrs(obj)])

    out.append(["/", "group", attrs(f)])
    f.visititems(visit)
    return out


def corpus(url, local):
    with h5py.File(local, "r", driver="sec2") as ref:
        want = describe_info(ref)
    with h5py.File(url, "r") as remote:
        got = describe_info(remote)
    print(json.dumps({"objects": len(got), "same": got == want}))


def open_only(url):
    try:
        h5py.File(url, "r").close()
        print(json.dumps({"error": None}))
    except Exception as e:  # the message is what the user sees
        print(json.dumps({"error": str(e)}))


def read_pynwb(url):
    from pynwb import NWBHDF5IO

    with h5py.File(url, "r") as f, NWBHDF5IO(file=f, mode="r", load_namespaces=True) as io:
        nwb = io.read()
        series = nwb.acquisition["ElectricalSeries"]
        first = series.data[:5, :3].tolist()
        print(json.dumps({"identifier": nwb.identifier, "shape": list(series.data.shape), "first": first}))


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    {"walk": walk, "open": open_only, "pynwb": read_pynwb, "corpus": corpus}[mode](*args)
