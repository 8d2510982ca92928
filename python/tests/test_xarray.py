"""xarray on remote netCDF4 files: through the driver (``driver="remfile"``
passed by xarray's h5netcdf engine to h5py), through a file object, and
``open_mfdataset`` over many URLs after ``prefetch_files``; every value
equal to a local read."""

import os

import numpy as np
import pytest

xr = pytest.importorskip("xarray")
pytest.importorskip("h5netcdf")

import remfile_hdf5  # noqa: E402
from conftest import Server  # noqa: E402


@pytest.fixture(scope="module")
def months(tmp_path_factory):
    """Three netCDF4 files of a month each (a climate model's output split
    by time), served."""
    import netCDF4

    root = tmp_path_factory.mktemp("months")
    for month in range(3):
        with netCDF4.Dataset(os.path.join(root, f"tas_{month}.nc"), "w") as d:
            d.createDimension("time", None)
            d.createDimension("lat", 8)
            d.createDimension("lon", 16)
            time = d.createVariable("time", "f8", ("time",))
            time.units = "days since 2000-01-01"
            time[:] = np.arange(30) + 30 * month
            tas = d.createVariable("tas", "f4", ("time", "lat", "lon"), zlib=True, chunksizes=(10, 8, 16))
            tas.units = "K"
            tas[:] = 250 + np.arange(30 * 8 * 16, dtype="f4").reshape(30, 8, 16) % 50 + month
            d.title = f"month {month}"
    server = Server(str(root))
    yield root, server
    server.close()


def test_open_dataset_through_the_driver_equals_local(months):
    root, server = months
    with xr.open_dataset(server.url("tas_1.nc"), engine="h5netcdf", driver="remfile") as remote, \
            xr.open_dataset(os.path.join(root, "tas_1.nc"), engine="h5netcdf") as here:
        assert remote.identical(here.load())
        assert remote.attrs["title"] == "month 1"


def test_open_dataset_through_a_file_object_equals_local(months):
    root, server = months
    with remfile_hdf5.RemoteFile(server.url("tas_2.nc")) as fo, \
            xr.open_dataset(fo, engine="h5netcdf") as remote, \
            xr.open_dataset(os.path.join(root, "tas_2.nc"), engine="h5netcdf") as here:
        np.testing.assert_array_equal(remote.tas.values, here.tas.values)
        assert remote.tas.attrs["units"] == "K"


def test_open_mfdataset_after_prefetch_files_equals_local(months):
    root, server = months
    urls = [server.url(f"tas_{m}.nc") for m in range(3)]
    paths = [os.path.join(root, f"tas_{m}.nc") for m in range(3)]
    with remfile_hdf5.prefetch_files(urls, wait=True) as ahead:
        assert ahead.errors == {}
        mark = server.mark()
        with xr.open_mfdataset(urls, engine="h5netcdf", driver="remfile", combine="nested",
                               concat_dim="time", decode_times=False) as remote, \
                xr.open_mfdataset(paths, engine="h5netcdf", combine="nested",
                                  concat_dim="time", decode_times=False) as here:
            assert remote.tas.shape == (90, 8, 16)
            np.testing.assert_array_equal(remote.time.values, here.time.values)
            np.testing.assert_array_equal(remote.tas.values, here.tas.values)
    # Files this small the batch fetched whole: the opens and every value
    # came from memory, with no request.
    assert server.requests_since(mark) == []
