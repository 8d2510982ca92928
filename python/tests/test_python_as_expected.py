"""What Python users expect of files: Ctrl-C that stops a wait, other
threads that run during reads, the exceptions and options they know. Every
wait here is bounded; no test asserts a speed."""

import datetime
import inspect
import io
import json
import os
import pathlib
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request

import h5py
import numpy as np
import pytest

import remfile_hdf5


def _control(server, what):
    with urllib.request.urlopen(f"{server.base}/{what}", timeout=30) as r:
        return r.read()


@pytest.fixture
def stalling(server):
    """The server, told to stall every request past its files' first 128 KiB
    until the test ends."""
    _control(server, "__stall?on")
    yield server
    _control(server, "__stall?off")


_CTRL_C = textwrap.dedent(
    """
    import os, signal, sys, threading, time, urllib.request
    import h5py, remfile_hdf5
    how, url, base = sys.argv[1:]
    if how == "open":
        # The open fetches the file's last MiB, past what the server answers.
        read = lambda: h5py.File(url, "r", driver="remfile", metadata_prefetch=False)[
            "contiguous"][200_000:200_100].tobytes()
    elif how == "driver":
        f = h5py.File(url, "r", driver="remfile", metadata_prefetch=False)
        read = lambda: f["contiguous"][200_000:200_100].tobytes()
    else:
        f = remfile_hdf5.RemoteFile(url)
        read = lambda: f.read_at(2_500_000, 100)
    urllib.request.urlopen(base + "/__stall?on").read()
    def interrupt():
        time.sleep(1.0)
        global sent
        sent = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=interrupt).start()
    try:
        read()
        print("no exception")
    except KeyboardInterrupt:
        print("KeyboardInterrupt", time.monotonic() - sent)
    urllib.request.urlopen(base + "/__stall?off").read()
    sys.stdout.buffer.write(read())
    """
)


@pytest.mark.parametrize("how", ["open", "driver", "file"])
def test_ctrl_c_stops_a_stalled_read_and_the_file_reads_on(server, files, how):
    name = "blob.bin" if how == "file" else "data.h5"
    run = subprocess.run(
        [sys.executable, "-c", _CTRL_C, how, server.url(name), server.base],
        capture_output=True, timeout=120,
    )
    _control(server, "__stall?off")
    first, _, rest = run.stdout.partition(b"\n")
    assert first.startswith(b"KeyboardInterrupt"), (run.stdout[:200], run.stderr[-2000:])
    latency = float(first.split()[1])
    assert latency < 2.0, f"honoured {latency:.2f} s after SIGINT"
    if how != "file":
        with h5py.File(os.path.join(files, "data.h5"), "r") as local:
            assert rest == local["contiguous"][200_000:200_100].tobytes()
    else:
        local = open(os.path.join(files, "blob.bin"), "rb").read()
        assert rest == local[2_500_000:2_500_100]


class Heartbeat:
    """A thread that ticks every 20 ms and keeps its longest gap."""

    def __init__(self):
        self.worst, self._stop = 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self):
        last = time.monotonic()
        while not self._stop.wait(0.02):
            now = time.monotonic()
            self.worst, last = max(self.worst, now - last), now

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def test_a_heartbeat_keeps_ticking_while_the_driver_waits(server, files):
    # Each request waits 2 s: the open, the metadata, the attributes.
    url = f"{server.base}/data.h5?delay_ms=2000"
    with Heartbeat() as beat:
        started = time.monotonic()
        with h5py.File(url, "r", driver="remfile") as f:
            title = f.attrs["title"]
            first = f["group00/inner"].attrs["label"]
        waited = time.monotonic() - started
    assert (title, first) == ("a test file", "group 0")
    assert waited >= 2.0
    # With the GIL held through the waits, the worst gap was the wait itself.
    assert beat.worst < 1.0, f"the heartbeat stopped for {beat.worst:.2f} s"


def test_threads_reading_different_file_objects_wait_at_once(server, files):
    # Through h5py the waits of different files cannot overlap: h5py's lock
    # (`phil`) serialises every HDF5 call, and HDF5 is not reentrant, so a
    # thread waiting inside HDF5 keeps the others out of HDF5 (though not
    # out of Python). File objects have no such lock.
    json.loads(_control(server, "__peak"))
    barrier = threading.Barrier(4)
    local = open(os.path.join(files, "blob.bin"), "rb").read()
    got = {}

    def read(i):
        with remfile_hdf5.RemoteFile(f"{server.base}/blob.bin?delay_ms=500&reader={i}",
                                     tail=0) as fo:
            barrier.wait()
            got[i] = fo.read_at(1_000_000 * i, 1000)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert all(got[i] == local[1_000_000 * i:1_000_000 * i + 1000] for i in range(4))
    peak = json.loads(_control(server, "__peak"))
    assert peak >= 4, f"at most {peak} requests at once"


def _refused_url():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/data.h5"


@pytest.mark.parametrize(
    "name, exception, errno",
    [
        ("missing.h5", FileNotFoundError, 2),
        ("status-403.h5", PermissionError, 13),
        ("refused", ConnectionRefusedError, 111),
    ],
)
@pytest.mark.parametrize("how", ["h5py", "file"])
def test_errors_are_the_os_errors_python_raises_for_files(server, name, exception, errno, how):
    url = _refused_url() if name == "refused" else server.url(name)
    with pytest.raises(exception) as raised:
        if how == "h5py":
            h5py.File(url, "r", driver="remfile", retries=0)
        else:
            remfile_hdf5.RemoteFile(url, retries=0)
    e = raised.value
    assert e.errno == errno and isinstance(e, ConnectionError if name == "refused" else OSError)
    assert e.filename and e.filename.startswith("http://127.0.0.1:")
    assert "secret" not in str(e) and "secret" not in e.filename


@pytest.mark.parametrize("how", ["h5py", "file"])
def test_a_timeout_is_a_timeout_error(stalling, how):
    with pytest.raises(TimeoutError) as raised:
        if how == "h5py":
            with h5py.File(stalling.url("data.h5"), "r", driver="remfile", retries=0,
                           connect_timeout=1, metadata_prefetch=False, timeout="1s") as f:
                f["contiguous"][200_000:200_010]
        else:
            remfile_hdf5.RemoteFile(stalling.url("blob.bin"), retries=0, timeout=1).read_at(
                2_500_000, 10)
    assert raised.value.errno == 110 and "secret" not in str(raised.value)


def test_a_file_that_is_not_hdf5_says_what_it_is(server, files):
    with open(os.path.join(files, "page.html"), "w") as f:
        f.write("<!DOCTYPE html><html><body>Please sign in</body></html>\n" * 50)
    with pytest.raises(OSError, match="is not an HDF5 file.*DOCTYPE html") as raised:
        h5py.File(server.url("page.html"), "r", driver="remfile")
    assert "secret" not in str(raised.value)
    # A file with a user block begins otherwise, and opens all the same.
    path = os.path.join(files, "userblock.h5")
    with h5py.File(path, "w", userblock_size=512) as f:
        f["x"] = np.arange(10)
    with h5py.File(server.url("userblock.h5"), "r", driver="remfile") as f:
        assert list(f["x"][:]) == list(range(10))


def test_every_option_is_in_the_signatures_with_its_default():
    keys = remfile_hdf5.option_keys()
    assert set(remfile_hdf5.Options.__annotations__) == set(keys) | set(remfile_hdf5._ALIASES)
    defaults = remfile_hdf5.defaults()
    for function in (remfile_hdf5.RemoteFile, remfile_hdf5.open, remfile_hdf5.set_defaults):
        parameters = inspect.signature(function).parameters
        for key in keys:
            p = parameters[key]
            assert p.kind == p.KEYWORD_ONLY, (function, key)
            assert p.default == defaults[key], (function, key)
    assert defaults["read_timeout"] == "5min" and defaults["cache_capacity"] == "256MiB"
    assert defaults["retries"] == 5 and defaults["metadata_prefetch"] is True
    assert "**options" in str(inspect.signature(remfile_hdf5.open)), "h5py's own go on"


def test_help_lists_every_option_with_its_default_and_names_aliases_as_such():
    import pydoc

    table = remfile_hdf5._native.option_keys()
    assert len(table) == len(remfile_hdf5.option_keys())
    pages = {
        "the driver (help(remfile_hdf5))": pydoc.render_doc(remfile_hdf5, renderer=pydoc.plaintext),
        "help(open)": pydoc.render_doc(remfile_hdf5.open, renderer=pydoc.plaintext),
        "help(RemoteFile)": pydoc.render_doc(remfile_hdf5.RemoteFile, renderer=pydoc.plaintext),
        "help(prefetch_files)": pydoc.render_doc(
            remfile_hdf5.prefetch_files, renderer=pydoc.plaintext
        ),
    }
    python_kind = {"switch": "bool", "count": "int", "text": "str", "header": "mapping"}
    defaults = remfile_hdf5.defaults()
    for where, page in pages.items():
        for key, kind, default, text, aliases, group, _ in table:
            key = "headers" if key == "header" else key
            head = f"  {key}: {python_kind.get(kind, kind)}"
            if default is not None:
                # As Python takes it: True, 5, '128KiB'.
                head += f", default {defaults[key]!r}"
            assert head in page, (where, key, head)
            assert group in page, (where, group)
            if aliases:
                assert f"{head} (also taken as {', '.join(aliases)})" in page, (where, key)
    # One name per option: the docstrings use no alias as a name.
    assert 'cache="' not in pages["help(RemoteFile)"]
    assert "cache=1GiB" not in remfile_hdf5.__doc__
    assert "also taken as cache" in remfile_hdf5.option_keys()["cache_capacity"]
    assert remfile_hdf5._SECRET == {
        "headers", "s3_access_key_id", "s3_secret_access_key", "s3_session_token"
    }
    with pytest.raises(TypeError, match="did you mean 'cache_capacity'"):
        remfile_hdf5.options_string(cach="1GiB")


def test_options_take_the_builders_names_and_the_earlier_ones():
    new = remfile_hdf5.options_string(cache_capacity="1GiB", read_timeout=30)
    old = remfile_hdf5.options_string(cache="1GiB", timeout=30)
    assert new == "cache_capacity=1GiB;read_timeout=30000ms"
    assert old == "cache=1GiB;timeout=30000ms"
    # The signatures show the builder's names only.
    shown = inspect.signature(remfile_hdf5.RemoteFile).parameters
    assert "cache_capacity" in shown and "cache" not in shown
    with pytest.raises(ValueError, match="`cache`"):
        remfile_hdf5.options_string(cache="lots")


def test_a_misspelt_option_is_a_type_error_that_suggests_the_key(server):
    mark = server.mark()
    with pytest.raises(TypeError, match="'cahce'.*did you mean 'cache_capacity'"):
        remfile_hdf5.RemoteFile(server.url("blob.bin"), cahce="1GiB")
    with pytest.raises(TypeError, match="'cahce'.*did you mean 'cache_capacity'"):
        h5py.File(server.url("data.h5"), "r", driver="remfile", cahce="1GiB")
    assert server.requests_since(mark) == []


def test_sizes_and_durations_read_as_people_write_them():
    text = remfile_hdf5.options_string(
        cache="1gb", block_size="512k", disk_capacity="1.5GiB", read_ahead_max="8 MB",
        timeout="1.5s", connect_timeout=datetime.timedelta(seconds=3),
    )
    assert text == (
        "cache=1gb;block_size=512k;disk_capacity=1.5GiB;read_ahead_max=8 MB;"
        "timeout=1.5s;connect_timeout=3000ms"
    )
    with pytest.raises(ValueError, match="`cache`"):
        remfile_hdf5.options_string(cache="1.2.3GiB")


def test_process_wide_defaults_reach_the_driver_and_the_file_object(server, files):
    mark = server.mark()
    remfile_hdf5.set_defaults(block_size="64KiB", tail=0)
    try:
        assert remfile_hdf5.defaults()["block_size"] == "64KiB"
        with h5py.File(server.url("data.h5"), "r", driver="remfile") as f:
            assert f.attrs["title"] == "a test file"
        with remfile_hdf5.RemoteFile(server.url("blob.bin")) as fo:
            fo.read(10)
        # A file's own keyword wins.
        with remfile_hdf5.RemoteFile(server.url("blob.bin"), block_size="32KiB") as fo:
            fo.read_at(1_000_000, 10)
    finally:
        remfile_hdf5.set_defaults(block_size=None, tail=None)
    log = server.requests_since(mark)
    h5 = [r for _, path, r in log if path.endswith("data.h5")]
    blob = [r for _, path, r in log if path.endswith("blob.bin")]
    assert h5[0] == "bytes=0-65535", h5
    assert blob == ["bytes=0-65535", "bytes=0-32767", "bytes=983040-1015807"], blob
    assert remfile_hdf5.defaults()["block_size"] == "128KiB"


def test_remfile_options_in_the_environment_reach_the_driver(server):
    script = textwrap.dedent(
        """
        import sys, h5py, remfile_hdf5
        with h5py.File(sys.argv[1], "r", driver="remfile") as f:
            print(f.attrs["title"])
        """
    )
    mark = server.mark()
    env = {**os.environ, "REMFILE_OPTIONS": "block_size=32KiB;tail=0"}
    env.pop("HDF5_DRIVER", None)
    out = subprocess.run([sys.executable, "-c", script, server.url("data.h5")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "a test file", out.stderr
    assert server.requests_since(mark)[0][2] == "bytes=0-32767"
    env["REMFILE_OPTIONS"] = "blocksize=32KiB"
    out = subprocess.run([sys.executable, "-c", script, server.url("data.h5")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert "REMFILE_OPTIONS" in out.stderr and "`blocksize`" in out.stderr


def test_urls_as_bytes_and_paths(server, files):
    local = open(os.path.join(files, "blob.bin"), "rb").read()
    url = server.url("blob.bin")
    for given in (url.encode(), pathlib.PurePosixPath(url)):
        with remfile_hdf5.RemoteFile(given) as fo:
            assert fo.read(100) == local[:100]
    with pytest.raises(TypeError, match="a URL is a str"):
        remfile_hdf5.RemoteFile(42)


def test_the_file_object_refuses_as_io_does(server, files):
    with remfile_hdf5.RemoteFile(server.url("blob.bin")) as fo:
        with pytest.raises(io.UnsupportedOperation, match="read-only"):
            fo.write(b"x")
        with pytest.raises(io.UnsupportedOperation):
            fo.truncate(0)
        with pytest.raises(ValueError, match=r"\(10, 5\)"):
            fo.read_ranges([(10, 5)])
        with pytest.raises(ValueError):
            fo.read_ranges([(-1, 5)])
        assert fo.read_ranges([(fo.size - 2, fo.size + 10)])[0] == (
            open(os.path.join(files, "blob.bin"), "rb").read()[-2:])


def test_stats_of_a_closed_hdf5_file_says_it_is_closed(server):
    f = h5py.File(server.url("data.h5"), "r", driver="remfile")
    assert remfile_hdf5.stats(f)["requests"] >= 1
    f.close()
    with pytest.raises(ValueError, match="closed"):
        remfile_hdf5.stats(f)


def test_a_type_checker_catches_a_misspelt_option(tmp_path):
    api = pytest.importorskip("mypy.api", reason="mypy is installed in CI")
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent(
        """
        import remfile_hdf5
        remfile_hdf5.RemoteFile("https://example.com/x", cache="1GiB", timeout=30)
        remfile_hdf5.RemoteFile("https://example.com/x", cahce="1GiB")
        remfile_hdf5.set_defaults(retries="many")
        """
    ))
    out, _, status = api.run(["--no-incremental", "--cache-dir", str(tmp_path / "c"), str(script)])
    assert status == 1, out
    assert 'Unexpected keyword argument "cahce"' in out, out
    assert "user.py:5:" in out and '"retries"' in out, out
    assert "user.py:3:" not in out, out


def test_close_from_another_thread_ends_a_read_waiting_on_a_stalled_server(server, files):
    # As for a file Python opened: a read in one thread, close() in another,
    # and the read fails with the ValueError of a closed file.
    fo = remfile_hdf5.RemoteFile(server.url("blob.bin"), timeout=600)
    outcome = []
    mark = server.mark()
    _control(server, "__stall?on")
    try:
        def reader():
            try:
                fo.read_at(2_500_000, 100)
                outcome.append("bytes")
            except BaseException as e:
                outcome.append(e)
        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        # Until the server holds the read's request (bounded).
        deadline = time.monotonic() + 30
        while not any(r[2] and int(r[2][6:].split("-")[0]) >= 128 << 10
                      for r in server.requests_since(mark)):
            assert time.monotonic() < deadline, "the read sent no request"
            time.sleep(0.01)
        fo.close()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the read still waits after close()"
    finally:
        _control(server, "__stall?off")
    assert len(outcome) == 1 and isinstance(outcome[0], ValueError), outcome
    assert str(outcome[0]) == "I/O operation on closed file"
    assert fo.closed
    with pytest.raises(ValueError):
        fo.read_at(0, 10)
