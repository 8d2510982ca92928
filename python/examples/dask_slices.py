"""Slices of many remote HDF5 files, read in parallel by a dask cluster.

    python dask_slices.py DATASET START:STOP URL [URL ...] [--processes N | --threads N]
                          [--disk-cache DIR]

Each task opens its file in the worker that runs it, through
``driver="remfile"``, reads rows START:STOP of DATASET and closes the file:
an open ``h5py.File`` does not pickle, a URL does (and so does a
``remfile_hdf5.RemoteFile``: it pickles as its URL, options and position,
and opens again where it lands). The tasks of one worker process share its
connections to a server, its background workers and its disk cache; the
workers of a machine share the disk cache directory (``--disk-cache``), so a
block one worker fetched is read from disk by the others, and by the next
run. On a cluster whose nodes share a filesystem, give every worker the same
directory there (a directory the user alone can read: the cache refuses one
that others may write).
"""

import argparse

import h5py
import numpy as np

import remfile_hdf5  # noqa: F401  (registers driver="remfile" with h5py)


def read_slice(url, dataset, rows, disk_cache=None):
    """Rows ``rows`` (a ``(start, stop)`` pair) of ``dataset`` in the file at
    ``url``, read in the worker that runs this."""
    # Imported here too: a worker that unpickles this function by value
    # has not imported the package, and the import registers the driver.
    import remfile_hdf5  # noqa: F401

    options = {"disk_cache": disk_cache} if disk_cache else {}
    with h5py.File(url, "r", driver="remfile", **options) as f:
        return f[dataset][rows[0] : rows[1]]


def read_slice_of(remote, dataset, rows):
    """As :func:`read_slice`, from a ``remfile_hdf5.RemoteFile`` the task was
    given (pickled to the worker, opened again there)."""
    with h5py.File(remote, "r") as f:
        return f[dataset][rows[0] : rows[1]]


def slices(client, urls, dataset, rows, disk_cache=None):
    """The slices of every file, in the order of ``urls``, read by the
    cluster of ``client``."""
    futures = client.map(
        read_slice,
        urls,
        dataset=dataset,
        rows=rows,
        disk_cache=disk_cache,
        pure=False,
    )
    return client.gather(futures)


def main():
    from dask.distributed import Client, LocalCluster

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("rows", help="START:STOP")
    parser.add_argument("urls", nargs="+")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--processes", type=int, default=2, help="worker processes")
    kind.add_argument("--threads", type=int, help="worker threads in this process instead")
    parser.add_argument("--disk-cache", help="a disk cache directory the workers share")
    args = parser.parse_args()
    start, stop = (int(x) for x in args.rows.split(":"))
    if args.threads:
        cluster = LocalCluster(processes=False, n_workers=1, threads_per_worker=args.threads)
    else:
        cluster = LocalCluster(processes=True, n_workers=args.processes, threads_per_worker=2)
    with cluster, Client(cluster) as client:
        for url, rows in zip(args.urls, slices(client, args.urls, args.dataset, (start, stop), args.disk_cache)):
            name = url.split("?", 1)[0]  # never a signature in the output
            print(f"{name}: {rows.shape} {rows.dtype}, sum {np.sum(rows, dtype=np.float64):.6g}")


if __name__ == "__main__":
    main()
