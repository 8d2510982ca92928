"""The dask example (python/examples/dask_slices.py): slices of many files
read by a cluster of processes and one of threads equal the local files'."""

import importlib.util
import os
import pickle
import shutil

import h5py
import numpy as np
import pytest

if importlib.util.find_spec("distributed") is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("CI installs dask[distributed] for the dask example's test")
    pytest.skip("dask.distributed is not installed", allow_module_level=True)

from dask.distributed import Client, LocalCluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "dask_slices", os.path.join(HERE, "..", "examples", "dask_slices.py")
)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

ROWS = (150, 1250)
FILES = 6


@pytest.fixture(scope="module")
def many(files):
    """Copies of the test file under six names: six files for the server."""
    names = []
    for i in range(FILES):
        name = f"survey-{i}.h5"
        shutil.copyfile(os.path.join(files, "data.h5"), os.path.join(files, name))
        names.append(name)
    return names


def expected(files):
    with h5py.File(os.path.join(files, "data.h5"), "r") as f:
        return f["big"][ROWS[0] : ROWS[1]]


@pytest.mark.parametrize("processes", [True, False], ids=["processes", "threads"])
def test_a_cluster_reads_the_slices_of_many_files_through_a_shared_disk_cache(
    server, files, many, tmp_path, processes
):
    cache = str(tmp_path / "cache")
    urls = [server.url(name) for name in many]
    cluster = LocalCluster(
        processes=processes, n_workers=2, threads_per_worker=2, dashboard_address=None
    )
    with cluster, Client(cluster) as client:
        got = example.slices(client, urls, "big", ROWS, disk_cache=cache)
        # Run again: every block is on disk now, so each file costs only
        # the request that checks its version.
        mark = server.mark()
        again = example.slices(client, urls, "big", ROWS, disk_cache=cache)
        requests = server.requests_since(mark)
    want = expected(files)
    assert len(got) == FILES
    for rows in got + again:
        np.testing.assert_array_equal(rows, want)
    assert len(requests) == FILES, requests
    assert os.listdir(os.path.join(cache, "blocks")), "the workers wrote to the shared cache"


def test_a_remote_file_pickles_to_a_worker_and_reads_there(server, files, many):
    import remfile_hdf5

    remote = remfile_hdf5.RemoteFile(server.url(many[0]))
    assert pickle.loads(pickle.dumps(remote)).size == remote.size
    with LocalCluster(processes=True, n_workers=1, dashboard_address=None) as cluster, Client(
        cluster
    ) as client:
        rows = client.submit(example.read_slice_of, remote, "big", ROWS).result()
    np.testing.assert_array_equal(rows, expected(files))
