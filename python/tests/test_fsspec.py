"""The fsspec filesystem: found by fsspec with no import, its calls equal
local reads, h5py and xarray read through it, and `route_fsspec` makes
fsspec's own http(s) protocols it."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

fsspec = pytest.importorskip("fsspec")

import remfile_hdf5  # noqa: E402
from remfile_hdf5.filesystem import RemfileFileSystem, route_fsspec, unroute_fsspec  # noqa: E402


def local(files, name):
    with open(os.path.join(files, name), "rb") as f:
        return f.read()


def gets(server, mark, name=None):
    """The byte requests the server answered since ``mark``."""
    return [r for r in server.requests_since(mark) if r[0] == "GET" and (name is None or name in r[1])]


def test_fsspec_finds_it_by_its_entry_point_with_no_import(server):
    script = textwrap.dedent(f"""
        import sys, fsspec
        assert "remfile_hdf5" not in sys.modules
        fs = fsspec.filesystem("remfile")
        print(type(fs).__module__, fs.info({server.url("blob.bin")!r})["size"])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["remfile_hdf5.filesystem", "3000000"], out


def test_open_cat_and_info_equal_local_bytes(server, files):
    fs = fsspec.filesystem("remfile", skip_instance_cache=True)
    url = server.url("blob.bin")
    data = local(files, "blob.bin")
    info = fs.info(url)
    assert info["size"] == len(data) and info["type"] == "file"
    assert info["ETag"].startswith('"') and info["name"] == url
    assert fs.size(url) == len(data) and fs.isfile(url) and not fs.isdir(url)
    assert fs.ukey(url) == info["ETag"]
    with fs.open(url, "rb") as f:
        f.seek(1_234_567)
        assert f.read(1000) == data[1_234_567:1_235_567]
    assert fs.cat_file(url, 10, 20) == data[10:20]
    assert fs.cat_file(url, -5) == data[-5:]
    assert fs.cat_file(url, 2_999_990, 4_000_000) == data[2_999_990:]
    assert fs.cat(url) == data
    assert fs.ls(url, detail=False) == [url]
    # fsspec's own way in: a URL with the protocol in front.
    with fsspec.open("remfile://" + url) as f:
        assert f.read(8) == data[:8]


def test_cat_ranges_takes_one_round_per_file(slow_server, files):
    server = slow_server
    fs = fsspec.filesystem("remfile", skip_instance_cache=True, block_size="64KiB")
    blob, h5 = server.url("blob.bin"), server.url("data.h5")
    for url in (blob, h5):  # opened, and quiet: what follows is the ranges alone
        fs.info(url)
        fs._handle(url).wait_for_background_fetches()
    starts = [100_000, 900_000, 1_700_000, 2_500_000]
    paths = [blob] * 4 + [h5, h5]
    starts_all = starts + [0, 1_000_000]
    ends_all = [s + 5000 for s in starts] + [8, 1_000_100]
    server.peak()
    mark = server.mark()
    parts = fs.cat_ranges(paths, starts_all, ends_all)
    data, data_h5 = local(files, "blob.bin"), local(files, "data.h5")
    assert parts[:4] == [data[s:s + 5000] for s in starts]
    assert parts[4:] == [data_h5[:8], data_h5[1_000_000:1_000_100]]
    # Each of the blob's ranges its own request (no block holds two), and
    # every request of both files under way at once: one round.
    assert len(gets(server, mark, "blob.bin")) == 4
    assert server.peak() == len(gets(server, mark)), server.requests_since(mark)


def test_a_missing_file_is_not_there_and_its_error_is_returned(server):
    fs = fsspec.filesystem("remfile", skip_instance_cache=True)
    missing = server.url("nothing-here.h5")
    assert not fs.exists(missing)
    with pytest.raises(FileNotFoundError):
        fs.info(missing)
    out = fs.cat_ranges([missing, server.url("blob.bin")], [0, 0], [4, 4])
    assert isinstance(out[0], FileNotFoundError) and len(out[1]) == 4
    with pytest.raises(FileNotFoundError):
        fs.cat_ranges([missing], [0], [4], on_error="raise")


def test_it_is_read_only_and_names_what_it_cannot_do(server):
    fs = fsspec.filesystem("remfile", skip_instance_cache=True)
    with pytest.raises(NotImplementedError):
        fs.open(server.url("blob.bin"), "wb")
    with pytest.raises(NotImplementedError):
        fs.ls(server.base + "/")
    with pytest.raises(NotImplementedError):
        fs.rm(server.url("blob.bin"))
    with pytest.raises(TypeError, match="cache_capacty"):
        RemfileFileSystem(cache_capacty="1GiB")


def test_h5py_and_xarray_read_through_it(server, files):
    import h5py

    fs = fsspec.filesystem("remfile", skip_instance_cache=True)
    with fs.open(server.url("data.h5")) as f, h5py.File(f, "r") as remote, \
            h5py.File(os.path.join(files, "data.h5"), "r") as here:
        assert sorted(remote) == sorted(here)
        np.testing.assert_array_equal(remote["big"][:1000], here["big"][:1000])
    xr = pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf")
    with fs.open(server.url("local.nc")) as f, xr.open_dataset(f, engine="h5netcdf") as remote, \
            xr.open_dataset(os.path.join(files, "local.nc"), engine="h5netcdf") as here:
        assert remote.identical(here.load())
        assert remote.temperature.attrs["units"] == "K"


def test_route_fsspec_makes_fsspecs_own_https_the_engine(server, files):
    url = server.url("blob.bin")
    data = local(files, "blob.bin")
    try:
        route_fsspec(cache_capacity="64MiB")
        fs = fsspec.filesystem("http", skip_instance_cache=True)
        assert isinstance(fs, RemfileFileSystem)
        with fsspec.open(url, "rb") as f:
            assert type(f) is remfile_hdf5.RemoteFile
            f.seek(2_000_000)
            assert f.read(100) == data[2_000_000:2_000_100]
        fs2, path = fsspec.core.url_to_fs(url)
        assert isinstance(fs2, RemfileFileSystem) and path == url
        assert fs2.cat_file(path, 0, 16) == data[:16]
        # A library's storage options add to the routed defaults; a wrong
        # one says so.
        with pytest.raises(TypeError):
            fsspec.filesystem("http", skip_instance_cache=True, no_such_option=1)
    finally:
        unroute_fsspec()
    # Given back: fsspec's own (imported again on first use, which needs its
    # optional aiohttp) or nothing registered yet.
    restored = fsspec.registry.get("http")
    assert restored is None or not issubclass(restored, RemfileFileSystem)


def test_s3fs_storage_options_become_the_engines():
    from remfile_hdf5.filesystem import _engine_options

    options = _engine_options("s3", {
        "anon": True, "requester_pays": True,
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"},
    })
    assert options == {
        "s3_anonymous": True, "s3_requester_pays": True,
        "s3_endpoint": "http://127.0.0.1:9000", "s3_region": "eu-west-1",
    }
    assert RemfileFileSystem._strip_protocol("remfile://https://h/x") == "https://h/x"

    class S3(RemfileFileSystem):
        protocol = ("s3",)

    assert S3._strip_protocol("bucket/key.nc") == "s3://bucket/key.nc"
    assert S3._strip_protocol("s3://bucket/key.nc") == "s3://bucket/key.nc"


def test_a_routed_filesystem_pickles_and_s3a_is_s3(server, files):
    import pickle

    try:
        route_fsspec(["https", "http", "s3a"], cache_capacity="64MiB")
        fs = fsspec.filesystem("http", skip_instance_cache=True)
        again = pickle.loads(pickle.dumps(fs))
        assert type(again) is type(fs) and again._engine == fs._engine
        with fsspec.open(server.url("blob.bin")) as f:
            opened = pickle.loads(pickle.dumps(f))
            assert opened.read(4) == local(files, "blob.bin")[:4]
        s3a = fsspec.filesystem("s3a", skip_instance_cache=True)
        assert s3a._strip_protocol("s3a://bucket/key") == "s3://bucket/key"
        assert s3a._strip_protocol("bucket/key") == "s3://bucket/key"
        with pytest.raises(ValueError, match="not 'ftp'"):
            route_fsspec("ftp")
    finally:
        unroute_fsspec()


def test_info_says_what_the_server_has_now(tmp_path):
    from conftest import Server

    path = tmp_path / "changing.bin"
    path.write_bytes(b"a" * 1000)
    server = Server(str(tmp_path))
    try:
        fs = fsspec.filesystem("remfile", skip_instance_cache=True)
        url = server.url("changing.bin")
        before = fs.info(url)
        assert before["size"] == 1000 and fs.cat_file(url) == b"a" * 1000
        path.write_bytes(b"b" * 5000)
        os.utime(path, (1, 1))  # another ETag, whatever the clock's resolution
        after = fs.info(url)
        assert after["size"] == 5000 and after["ETag"] != before["ETag"]
        assert fs.ukey(url) == after["ETag"]
        assert fs.cat_file(url, 0, 10) == b"b" * 10
    finally:
        server.close()


def test_client_kwargs_headers_are_sent_and_others_refused(server):
    fs = fsspec.filesystem("remfile", skip_instance_cache=True,
                           client_kwargs={"headers": {"X-Test": "yes"}})
    mark = server.mark()
    fs.cat_file(server.url("blob.bin"), 0, 4)
    assert any(h.get("x-test") == "yes" for h in server.headers_since(mark))
    with pytest.raises(TypeError, match="trust_env"):
        fsspec.filesystem("remfile", skip_instance_cache=True, client_kwargs={"trust_env": True})
