"""The wheel, installed: the h5py driver, pynwb, netCDF4 beside it, options,
errors, the file object, threads and child processes; all against the
tests' own server on 127.0.0.1, every value compared with a local read."""

import concurrent.futures
import io
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
import zipfile

import h5py
import numpy as np
import pytest

import remfile_hdf5
from conftest import Server


def walk(f):
    """Every object's name, kind, attributes, shape, dtype, chunks and filters,
    and every small dataset's values (h5py's visititems, as users walk)."""
    out = {"/": sorted((k, repr(v)) for k, v in f.attrs.items())}

    def visit(name, obj):
        entry = [type(obj).__name__, sorted((k, repr(v)) for k, v in obj.attrs.items())]
        if isinstance(obj, h5py.Dataset):
            entry += [obj.shape, str(obj.dtype), obj.chunks, obj.compression]
            if obj.size <= 10_000:
                entry.append(repr(obj[()]))
        out[name] = entry

    f.visititems(visit)
    return out


def test_walk_and_slice_equal_the_local_file(server, files):
    local = os.path.join(files, "data.h5")
    with h5py.File(local, "r") as f:
        expected = walk(f)
        expected_slice = f["big"][150:1700, 3:40]
        expected_tail = f["contiguous"][-1000:]
    with h5py.File(server.url("data.h5"), "r", driver="remfile") as f:
        assert walk(f) == expected
        np.testing.assert_array_equal(f["big"][150:1700, 3:40], expected_slice)
        np.testing.assert_array_equal(f["contiguous"][-1000:], expected_tail)
        s = remfile_hdf5.stats(f)
        assert s["requests"] >= 1 and s["hdf5_reads"] > 0
        assert s["bytes_fetched"] <= os.path.getsize(local) * 2
        # Any object of the file reports its file's statistics.
        assert remfile_hdf5.stats(f["big"])["requests"] >= s["requests"]


def test_a_file_opened_otherwise_has_no_driver_statistics(files):
    with h5py.File(os.path.join(files, "data.h5"), "r") as f:
        assert remfile_hdf5.stats(f) is None


def test_open_is_h5py_with_the_driver(server):
    with remfile_hdf5.open(server.url("data.h5"), cache="64MiB") as f:
        assert remfile_hdf5.stats(f) is not None, "read through the driver"
        assert f["group03/inner"].attrs["index"] == 3
    with pytest.raises(ValueError, match="read-only"):
        remfile_hdf5.open(server.url("data.h5"), "r+")


def test_pynwb_reads_through_the_driver(server, files):
    from pynwb import NWBHDF5IO

    with NWBHDF5IO(os.path.join(files, "session.nwb"), "r") as io_:
        local = io_.read()
        expected = {k: v.data[:] for k, v in local.acquisition.items()}
        expected_speed = local.processing["behavior"]["speed"].data[:]
    with NWBHDF5IO(file=remfile_hdf5.open(server.url("session.nwb")), mode="r") as io_:
        nwb = io_.read()
        assert nwb.session_description == "a test session"
        got = {k: v.data[:] for k, v in nwb.acquisition.items()}
        assert got.keys() == expected.keys()
        for k in got:
            np.testing.assert_array_equal(got[k], expected[k])
        np.testing.assert_array_equal(nwb.processing["behavior"]["speed"].data[:], expected_speed)


@pytest.mark.parametrize("first", ["netCDF4", "h5py"])
def test_netcdf4_beside_the_driver(server, files, first):
    # In a fresh process, each import order: netCDF4's own HDF5 reads a
    # local file as before, and h5py's reads the remote one through the
    # driver (no environment variable sends every file through it).
    second = "h5py" if first == "netCDF4" else "netCDF4"
    script = textwrap.dedent(
        f"""
        import {first}, {second}
        import remfile_hdf5, h5py, netCDF4, sys
        with netCDF4.Dataset(sys.argv[1]) as d:
            local = d["temperature"][:].sum()
            assert d.title == "a netCDF file"
        with h5py.File(sys.argv[2], "r", driver="remfile") as f:
            remote = f["temperature"][:].sum()
        print(float(local), float(remote))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script, os.path.join(files, "local.nc"), server.url("local.nc")],
        capture_output=True, text=True, check=True, env=_env_without_driver(),
    ).stdout.split()
    assert out == [str(float(sum(range(200))))] * 2


def _env_without_driver():
    env = dict(os.environ)
    for name in ["HDF5_DRIVER", "HDF5_DRIVER_CONFIG", "HDF5_PLUGIN_PATH"]:
        env.pop(name, None)
    return env


def _read_big(url, **options):
    with h5py.File(url, "r", driver="remfile", metadata_prefetch=False, **options) as f:
        f["big"][:]
        f["big"][:]


def test_options_reach_the_driver(server):
    url = server.url("data.h5")
    mark = server.mark()
    _read_big(url)
    roomy = len(server.requests_since(mark))
    mark = server.mark()
    # A cache of one small block forgets each chunk before its second read.
    _read_big(url, cache="16KiB", block_size="16KiB", tail=0)
    tiny = len(server.requests_since(mark))
    assert tiny > roomy, (tiny, roomy)


def test_a_disk_cache_makes_the_second_process_cost_one_request_and_an_immutable_one_none(
    server, tmp_path
):
    script = textwrap.dedent(
        """
        import sys, h5py, remfile_hdf5
        url, cache, how = sys.argv[1:]
        if how == "asking":
            f = h5py.File(url, "r", driver="remfile", disk_cache=cache)
        elif how == "immutable":
            f = h5py.File(url, "r", driver="remfile", disk_cache=cache, immutable=True)
        else:
            f = remfile_hdf5.open(url, disk_cache=cache, immutable=True)
        with f:
            print(float(f["big"][:].sum()))
        """
    )
    run = lambda how: subprocess.run(  # noqa: E731
        [sys.executable, "-c", script, server.url("data.h5"), str(tmp_path / "cache"), how],
        capture_output=True, text=True, check=True, env=_env_without_driver(),
    ).stdout
    first = run("asking")
    mark = server.mark()
    assert run("asking") == first
    assert len(server.requests_since(mark)) == 1, server.requests_since(mark)
    assert oct(os.stat(tmp_path / "cache").st_mode & 0o777) == oct(0o700)
    # The object never changes: the version on disk is trusted, no request.
    for how in ["immutable", "open"]:
        mark = server.mark()
        assert run(how) == first
        assert server.requests_since(mark) == [], how


@pytest.mark.parametrize(
    "options, key",
    [
        ({"cache": "lots"}, "cache"),
        ({"timeout": "soon"}, "timeout"),
        ({"metadata_prefetch": "maybe"}, "metadata_prefetch"),
        ({"block_size": True}, "block_size"),
        ({"connections": -1}, "connections"),
        # In the parser's range, not in the reader's: refused before HDF5 too.
        ({"block_size": 0}, "block_size"),
        ({"connections": 1000}, "connections"),
        ({"timeout": "40d"}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
    ],
)
def test_a_bad_option_is_a_value_error_naming_it(server, options, key):
    mark = server.mark()
    with pytest.raises(ValueError, match=f"`{key}`"):
        h5py.File(server.url("data.h5"), "r", driver="remfile", **options)
    with pytest.raises(ValueError, match=f"`{key}`"):
        remfile_hdf5.RemoteFile(server.url("blob.bin"), **options)
    assert server.requests_since(mark) == [], "refused before any request"


def test_options_in_python_terms():
    assert remfile_hdf5.options_string(cache=1 << 20, timeout=1.5, stats=True) == (
        "cache=1048576;timeout=1500ms;stats=on"
    )
    assert "disk_cache" in remfile_hdf5.option_keys()


def test_a_missing_file_is_an_os_error_naming_the_status(server):
    with pytest.raises(OSError, match="404") as raised:
        h5py.File(server.url("missing.h5"), "r", driver="remfile")
    assert "secret" not in str(raised.value)
    with pytest.raises(FileNotFoundError, match="404") as raised:
        remfile_hdf5.RemoteFile(server.url("missing.bin"))
    assert "secret" not in str(raised.value)


def test_the_file_object_reads_as_a_local_file(server, files):
    local = open(os.path.join(files, "blob.bin"), "rb").read()
    with remfile_hdf5.RemoteFile(server.url("blob.bin")) as fo:
        assert fo.size == len(local) and fo.readable() and fo.seekable()
        assert "secret" not in repr(fo) and "secret" not in fo.url
        assert fo.read(10) == local[:10]
        assert fo.seek(-100, io.SEEK_END) == len(local) - 100
        assert fo.read() == local[-100:]
        assert fo.read(5) == b""
        fo.seek(1_000_000)
        buf = bytearray(70_000)
        assert fo.readinto(buf) == 70_000 and bytes(buf) == local[1_000_000:1_070_000]
        assert fo.tell() == 1_070_000
        assert fo.read_at(5, 3) == local[5:8] and fo.tell() == 1_070_000
        parts = fo.read_ranges([(0, 4), (2_000_000, 2_000_100)])
        assert parts == [local[:4], local[2_000_000:2_000_100]]
        assert fo.stats()["requests"] >= 1
        assert io.BufferedReader(remfile_hdf5.RemoteFile(server.url("blob.bin"))).read() == local
    with pytest.raises(ValueError):
        fo.read(1)
    assert fo.stats()["requests"] >= 1, "a closed file keeps what it cost"
    assert "closed" in repr(fo)
    with pytest.raises(ValueError):
        pickle.dumps(fo)


def test_the_file_object_at_its_edges(server, files):
    local = open(os.path.join(files, "blob.bin"), "rb").read()
    with remfile_hdf5.RemoteFile(server.url("blob.bin")) as fo:
        fo.seek(-10, io.SEEK_END)
        buf = bytearray(100)
        assert fo.readinto(buf) == 10 and bytes(buf[:10]) == local[-10:], "short at the end"
        assert fo.seek(-20, io.SEEK_CUR) == len(local) - 20
        assert fo.read(2**64) == local[-20:]
        assert fo.read_at(len(local) - 5, 2**64) == local[-5:]
        with pytest.raises(ValueError):
            fo.seek(-1)
        with pytest.raises(TypeError):
            fo.readinto(b"read-only")
        with pytest.raises(TypeError):
            fo.seek(1.5)
        with pytest.raises(ValueError):
            fo.wait_for_background_fetches(float("nan"))


def test_the_file_object_under_zipfile_and_h5py(server, files):
    with zipfile.ZipFile(os.path.join(files, "archive.zip"), "w") as z:
        z.writestr("a.txt", "first")
        z.writestr("b/c.txt", "second" * 1000)
    with remfile_hdf5.RemoteFile(server.url("archive.zip")) as fo:
        z = zipfile.ZipFile(fo)
        assert z.namelist() == ["a.txt", "b/c.txt"]
        assert z.read("b/c.txt") == b"second" * 1000
    with remfile_hdf5.RemoteFile(server.url("data.h5")) as fo, h5py.File(fo, "r") as f:
        with h5py.File(os.path.join(files, "data.h5"), "r") as local:
            np.testing.assert_array_equal(f["big"][10:20], local["big"][10:20])


def test_several_threads_read_at_once(server, files):
    local = open(os.path.join(files, "blob.bin"), "rb").read()
    with remfile_hdf5.RemoteFile(server.url("blob.bin"), cache="1MiB") as fo:
        def read(i):
            pos = (i * 97_531) % (len(local) - 50_000)
            return pos, fo.read_at(pos, 50_000)

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for pos, data in pool.map(read, range(64)):
                assert data == local[pos:pos + 50_000]


def _child_sum(url):
    import h5py

    import remfile_hdf5  # noqa: F401  (registers the driver in a spawned child)

    with h5py.File(url, "r", driver="remfile") as f:
        return float(f["big"][:].sum())


def _child_reads(fo):
    fo.seek(1000)
    return fo.read(100)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_child_processes_read_the_same_file(server, files, method):
    url = server.url("data.h5")
    with h5py.File(os.path.join(files, "data.h5"), "r") as f:
        expected = float(f["big"][:].sum())
    # The parent has the file open (and the driver's threads running) first.
    with h5py.File(url, "r", driver="remfile") as f:
        assert float(f["big"][:].sum()) == expected
        ctx = multiprocessing.get_context(method)
        with ctx.Pool(2) as pool:
            assert pool.map(_child_sum, [url, url]) == [expected, expected]
    local = open(os.path.join(files, "blob.bin"), "rb").read()
    with remfile_hdf5.RemoteFile(server.url("blob.bin")) as fo:
        with multiprocessing.get_context(method).Pool(1) as pool:
            assert pool.apply(_child_reads, (fo,)) == local[1000:1100]


def test_other_threads_run_while_a_read_waits(slow_server, files):
    local = open(os.path.join(files, "blob.bin"), "rb").read()
    fo = remfile_hdf5.RemoteFile(slow_server.url("blob.bin"))
    got, reading = [], threading.Event()

    def read():
        reading.set()
        got.append(fo.read_at(2_000_000, 1000))

    reader = threading.Thread(target=read)
    reader.start()
    reading.wait()
    # If the read held the GIL through its 400 ms wait, this thread could
    # run again only once it ended.
    time.sleep(0.05)
    ran_while_waiting = reader.is_alive()
    reader.join()
    fo.close()
    assert ran_while_waiting
    assert got == [local[2_000_000:2_001_000]]


_INHERITED = None


def _read_inherited(_):
    return _INHERITED.read_at(1_500_000, 100)


def test_a_forked_child_opens_an_inherited_file_again(server, files):
    global _INHERITED
    local = open(os.path.join(files, "blob.bin"), "rb").read()
    _INHERITED = remfile_hdf5.RemoteFile(server.url("blob.bin"))
    try:
        assert _INHERITED.read_at(0, 10) == local[:10]
        mark = server.mark()
        with multiprocessing.get_context("fork").Pool(1) as pool:
            assert pool.map(_read_inherited, [0]) == [local[1_500_000:1_500_100]]
        # The child opened the file anew (its own first request) rather
        # than reading through the parent's connections.
        assert len(server.requests_since(mark)) >= 2
        assert _INHERITED.read_at(2_500_000, 10) == local[2_500_000:2_500_010]
    finally:
        _INHERITED.close()
        _INHERITED = None


def test_prefetch_brings_a_selection_so_that_its_read_waits_on_no_request(server, files):
    local = os.path.join(files, "data.h5")
    selections = [
        (slice(1210, 1890), slice(None)),
        (slice(1210, 1890), 7),
        (Ellipsis, slice(60, 64)),
        (slice(-300, None, 130),),
        (slice(1210, 1890, 3), slice(3, 40)),
    ]
    with h5py.File(local, "r") as f:
        expected = [f["big"][s] for s in selections]
        expected_contiguous = f["contiguous"][250_000:260_000]
    # Each in a cache of its own (files of one capacity share one).
    for n, (selection, values) in enumerate(zip(selections, expected)):
        cache = f"{70 + n}MiB"
        with h5py.File(server.url("data.h5"), "r", driver="remfile", cache=cache,
                       chunk_read_ahead=False, metadata_prefetch=False) as f:
            big = f["big"]
            mark = server.mark()
            assert big[selection].shape == values.shape
            assert server.requests_since(mark), "the selection is not cached by the open"
        with h5py.File(server.url("data.h5"), "r", driver="remfile", cache=f"{80 + n}MiB",
                       chunk_read_ahead=False, metadata_prefetch=False) as f:
            big = f["big"]
            assert remfile_hdf5.prefetch(big, selection) > 0
            mark = server.mark()
            np.testing.assert_array_equal(big[selection], values)
            assert server.requests_since(mark) == [], selection
    with h5py.File(server.url("data.h5"), "r", driver="remfile", cache="90MiB") as f:
        assert remfile_hdf5.prefetch(f["contiguous"], slice(250_000, 260_000)) == 1
        mark = server.mark()
        np.testing.assert_array_equal(f["contiguous"][250_000:260_000], expected_contiguous)
        assert server.requests_since(mark) == []
        np.testing.assert_array_equal(
            remfile_hdf5.read(f["big"], (slice(1210, 1890), 7)), expected[1]
        )
        assert remfile_hdf5.prefetch(f["big"], slice(5, 5)) == 0
        with pytest.raises(IndexError):
            remfile_hdf5.prefetch(f["big"], (0, 0, 0))
        with pytest.raises(IndexError):
            remfile_hdf5.prefetch(f["big"], 2000)
        with pytest.raises(TypeError):
            remfile_hdf5.prefetch(f["big"], "rows")
        with pytest.raises(TypeError):
            remfile_hdf5.prefetch(f, ...)
    with h5py.File(local, "r") as f:
        with pytest.raises(ValueError, match="remfile"):
            remfile_hdf5.prefetch(f["big"], slice(0, 100))


def test_read_takes_what_h5py_takes_and_fetches_no_span_for_a_column(server, files):
    local = os.path.join(files, "data.h5")
    with h5py.File(local, "r") as f:
        rows = f["big"][[3, 700, 1500]]
        tail = f["contiguous"][::1000]
    with h5py.File(server.url("data.h5"), "r", driver="remfile", cache="95MiB") as f:
        np.testing.assert_array_equal(remfile_hdf5.read(f["big"], [3, 700, 1500]), rows)
        # A stride over a contiguous dataset: no span of all of it.
        assert remfile_hdf5.prefetch(f["contiguous"], slice(None, None, 1000)) == 0
        np.testing.assert_array_equal(remfile_hdf5.read(f["contiguous"], slice(None, None, 1000)), tail)


def survey(f):
    """The root's attributes and its members' two levels down, with each
    dataset's shape and type: what a survey of a dataset reads."""
    out = {"/": sorted((k, repr(v)) for k, v in f.attrs.items())}
    for name, first in f.items():
        out[name] = sorted((k, repr(v)) for k, v in first.attrs.items())
        if isinstance(first, h5py.Group):
            for inner, second in first.items():
                entry = sorted((k, repr(v)) for k, v in second.attrs.items())
                if isinstance(second, h5py.Dataset):
                    entry += [second.shape, str(second.dtype)]
                out[f"{name}/{inner}"] = entry
        else:
            out[name] += [first.shape, str(first.dtype)]
    return out


def test_files_prefetched_together_open_and_survey_with_no_request(server, files):
    names = ["session.nwb", "data.h5", "local.nc"]
    urls = [server.url(name) for name in names]
    gone = server.url("gone.h5")
    expected = {}
    for name in names:
        with h5py.File(os.path.join(files, name), "r") as f:
            expected[name] = (survey(f), walk(f))
    # A cache of their own: no block of another test's opens is found there.
    options = dict(cache="97MiB")
    ahead = remfile_hdf5.prefetch_files(urls + [gone], wait=True, **options)
    progress = ahead.progress
    assert (progress["crawled"], progress["failed"], progress["pending"]) == (3, 1, 0)
    assert list(ahead.errors) == [gone]
    assert "404" in ahead.errors[gone] and "secret" not in ahead.errors[gone]
    mark = server.mark()
    for name, url in zip(names, urls):
        with remfile_hdf5.open(url, **options) as f:
            assert survey(f) == expected[name][0]
    assert server.requests_since(mark) == []
    assert ahead.progress["opened"] == 3
    # The failed file raises at its own open only.
    with pytest.raises(OSError, match="404"):
        remfile_hdf5.open(gone, **options)
    # Opened again, a file is opened afresh, its blocks still cached.
    with remfile_hdf5.open(urls[0], **options) as f:
        assert walk(f) == expected[names[0]][1]
    ahead.cancel()


def test_prefetch_files_checks_what_it_is_given(server):
    with pytest.raises(TypeError, match="list of URLs"):
        remfile_hdf5.prefetch_files(server.url("data.h5"))
    with pytest.raises(TypeError, match="cahce"):
        remfile_hdf5.prefetch_files([server.url("data.h5")], cahce="1GiB")
    with pytest.raises(ValueError, match="timeout"):
        remfile_hdf5.prefetch_files([]).wait(-1)


def test_files_of_a_batch_opened_with_other_options_open_afresh(server, files):
    url = server.url("session.nwb")
    ahead = remfile_hdf5.prefetch_files([url], wait=True, cache="98MiB")
    mark = server.mark()
    with remfile_hdf5.open(url, cache="99MiB") as f:
        with h5py.File(os.path.join(files, "session.nwb"), "r") as local:
            assert survey(f) == survey(local)
    # Its own open: the batch's file, with other options, is not taken.
    assert len(server.requests_since(mark)) >= 1
    assert ahead.progress["crawled"] == 1
    ahead.cancel()
    assert ahead.progress["crawled"] == 0


def _survey(f):
    """The root's attributes and its members' two levels down."""
    seen = []

    def attrs(obj):
        seen.append((obj.name, sorted(obj.attrs)))

    attrs(f)
    for name in sorted(f):
        first = f.get(name)
        attrs(first)
        if isinstance(first, h5py.Group):
            for inner in sorted(first):
                attrs(first.get(inner))
    return seen


@pytest.fixture(scope="module")
def spread(tmp_path_factory):
    """A file whose groups lie among their data, served: its metadata is
    spread over 30 MB."""
    root = tmp_path_factory.mktemp("spread")
    path = os.path.join(root, "spread.h5")
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "spread"
        for i in range(30):
            g = f.create_group(f"group{i:02}")
            g.attrs["index"] = i
            g.create_dataset("data", data=np.arange(100_000, dtype="f8") + i)
            for j in range(3):
                h = g.create_group(f"inner{j}")
                h.attrs["depth"] = 2
                h.create_dataset("values", data=np.arange(20_000, dtype="i4") * j)
    server = Server(str(root))
    yield server, path
    server.close()


def test_a_file_object_of_an_hdf5_file_has_its_metadata_crawled_as_the_driver_does(spread):
    server, path = spread
    with h5py.File(path, "r") as f:
        local = _survey(f)
    sent = {}
    for crawl in (True, False):
        remote = remfile_hdf5.RemoteFile(server.url("spread.h5"), metadata_prefetch=crawl)
        # The crawl starts at open, from the superblock, with no read yet.
        assert remote.wait_for_background_fetches(60)
        mark = server.mark()
        with h5py.File(remote, "r") as f:
            assert _survey(f) == local
        sent[crawl] = len(server.requests_since(mark))
        remote.close()
    # Crawled ahead, the whole survey is in the cache: no request of its
    # own; without the crawl, HDF5's reads miss one block after another.
    assert sent[True] == 0 and sent[False] > 10, sent


def test_a_file_object_of_anything_else_fetches_nothing_ahead(server, files):
    url = server.url("blob.bin")
    mark = server.mark()
    with remfile_hdf5.RemoteFile(url) as remote:
        assert remote.wait_for_background_fetches(60)
        # The open's first block and tail, sent at once; nothing after.
        assert len(server.requests_since(mark)) == 2, server.requests_since(mark)
        assert remote.read_at(0, 10) == open(os.path.join(files, "blob.bin"), "rb").read(10)


def test_a_file_object_reads_a_dataset_of_interleaved_chunks_in_far_fewer_requests_than_chunks(tmp_path):
    # Two datasets written chunk by chunk in turn, so that their chunks
    # interleave: one read whole (chunk by chunk, as h5py reads a
    # selection) through a file object comes in far fewer requests than it
    # has chunks (the chunks after each read fetched ahead, from the chunk
    # index the crawl read).
    path = os.path.join(tmp_path, "interleaved.h5")
    n, chunk = 128, 16_384
    values = {name: np.arange(n * chunk, dtype="i4") * (k + 1) for k, name in enumerate("ab")}
    with h5py.File(path, "w") as f:
        made = {name: f.create_dataset(name, shape=(n * chunk,), dtype="i4", chunks=(chunk,)) for name in "ab"}
        for i in range(n):
            for name in "ab":
                made[name][i * chunk:(i + 1) * chunk] = values[name][i * chunk:(i + 1) * chunk]
    server = Server(str(tmp_path))
    try:
        mark = server.mark()
        with h5py.File(remfile_hdf5.RemoteFile(server.url("interleaved.h5"), block_size="64k"), "r") as f:
            assert np.array_equal(f["a"][:], values["a"])
        sent = len(server.requests_since(mark))
        assert sent <= n // 2, sent
    finally:
        server.close()
