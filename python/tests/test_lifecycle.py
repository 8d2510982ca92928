"""A read's life as users end it: Ctrl-C and the same read again, a script
that ends while a daemon thread reads, a subinterpreter in the process,
signal handlers and finalizers that use h5py while the driver waits,
netCDF4 in another thread, and hundreds of interrupted reads. Each run in a
process of its own under a deadline: a hang is a failure, never a frozen
test run. Nothing here asserts a time."""

import json
import os
import subprocess
import sys
import textwrap
import urllib.request

import h5py
import numpy as np
import pytest

import remfile_hdf5

# Far more than any of these runs takes; reached only by one that hangs.
DEADLINE = 90


def _run(script, *args, expect_rc=0):
    env = dict(os.environ)
    for name in ["HDF5_DRIVER", "HDF5_DRIVER_CONFIG", "HDF5_PLUGIN_PATH"]:
        env.pop(name, None)
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script), *args],
            capture_output=True, text=True, timeout=DEADLINE, env=env,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"still running after {DEADLINE} s:\n{e.stdout}\n{e.stderr}")
    assert done.returncode == expect_rc, f"exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _control(server, what):
    with urllib.request.urlopen(f"{server.base}/{what}", timeout=30) as r:
        return r.read()


@pytest.fixture
def holding(server):
    yield server
    _control(server, "__stall?off")


# Waits (in the script) until the server holds `n` requests.
_HELD = """
    import json, time, urllib.request
    def held(base):
        with urllib.request.urlopen(base + "/__held", timeout=30) as r:
            return json.loads(r.read())
    def wait_until_held(base, n=1):
        while held(base)["now"] < n:
            time.sleep(0.01)
    def wait_until_hung_up(base, n=1):
        # The server sees a hang-up when it next looks at the connection.
        while held(base)["hung_up"] < n:
            time.sleep(0.01)
"""

# Opens the served data.h5 through the driver (`ds`, its contiguous
# dataset), then has the server hold every later request past its start.
_HELD_DATASET = _HELD + """
    import sys, threading
    import h5py, remfile_hdf5
    url, base = sys.argv[1:]
    f = h5py.File(url, "r", driver="remfile", metadata_prefetch=False, timeout=600)
    ds = f["contiguous"]
    urllib.request.urlopen(base + "/__stall?hold").read()
"""


def test_ctrl_c_then_the_same_read_through_the_same_file_fetches_at_once(holding, files):
    # The first read's request is held by the server until its client
    # hangs up; the stall is then lifted for new requests only. The second
    # read must make its own request, not wait for the first's.
    script = _HELD_DATASET + """
    import os, signal
    def interrupt():
        wait_until_held(base)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=interrupt).start()
    try:
        ds[200_000:200_100]
        print(json.dumps("no exception"))
    except KeyboardInterrupt:
        print(json.dumps("KeyboardInterrupt"))
    urllib.request.urlopen(base + "/__stall?off").read()
    with urllib.request.urlopen(base + "/__log") as r:
        mark = len(json.loads(r.read()))
    again = ds[200_000:200_100].tolist()
    with urllib.request.urlopen(base + "/__log") as r:
        asked = len(json.loads(r.read())) - mark
    print(json.dumps({"again": again, "asked": asked, "held": held(base)}))
    """
    out = _run(script, holding.url("data.h5"), holding.base).splitlines()
    assert json.loads(out[0]) == "KeyboardInterrupt"
    result = json.loads(out[1])
    with h5py.File(os.path.join(files, "data.h5"), "r") as local:
        assert result["again"] == local["contiguous"][200_000:200_100].tolist()
    assert result["asked"] >= 1, "the second read made its own request"
    assert result["held"]["hung_up"] >= 1, "the stopped read closed its connection"


def test_a_script_ends_while_a_daemon_thread_reads_through_the_driver(holding, files):
    script = _HELD_DATASET + """
    def reader():
        while True:
            try:
                ds[200_000:200_100]
            except BaseException as e:
                pass
    threading.Thread(target=reader, daemon=True).start()
    wait_until_held(base)
    print("main returns", flush=True)
    """
    out = _run(script, holding.url("data.h5"), holding.base)
    assert "main returns" in out


def test_a_script_ends_while_a_daemon_thread_reads_a_file_object(holding, files):
    script = _HELD + """
    import sys, threading
    import remfile_hdf5
    url, base = sys.argv[1:]
    f = remfile_hdf5.RemoteFile(url, timeout=600)
    urllib.request.urlopen(base + "/__stall?hold").read()
    threading.Thread(target=lambda: f.read_at(2_000_000, 100), daemon=True).start()
    wait_until_held(base)
    print("main returns", flush=True)
    """
    assert "main returns" in _run(script, holding.url("blob.bin"), holding.base)


def test_a_subinterpreter_in_the_process_and_then_reads(server, files):
    script = """
    import sys
    try:
        import _interpreters as interpreters
    except ImportError:
        import _xxsubinterpreters as interpreters
    interpreters.destroy(interpreters.create())
    import h5py, remfile_hdf5
    url_h5, url_bin = sys.argv[1:]
    f = remfile_hdf5.RemoteFile(url_bin)
    sys.stdout.write(f.read_at(1_000_000, 16).hex() + "\\n")
    with h5py.File(url_h5, "r", driver="remfile") as h:
        sys.stdout.write(str(h.attrs["title"]) + "\\n")
    """
    out = _run(script, server.url("data.h5"), server.url("blob.bin")).splitlines()
    with open(os.path.join(files, "blob.bin"), "rb") as local:
        local.seek(1_000_000)
        assert out[0] == local.read(16).hex()
    assert out[1] == "a test file"


def test_handlers_and_finalizers_that_use_h5py_run_after_the_hdf5_call(server, files):
    # A timer signal every 20 ms and cyclic garbage with finalizers, both
    # touching h5py, while every request of the driver waits 300 ms. None
    # may run inside the driver (HDF5 is not re-entrant); all run after.
    script = """
    import gc, signal, sys
    import h5py, numpy as np
    import remfile_hdf5
    from remfile_hdf5 import _native
    url, local_path = sys.argv[1:]
    local = h5py.File(local_path, "r")
    ran = {"alarm": 0, "del": 0, "inside": 0}
    def touch(kind):
        ran[kind] += 1
        ran["inside"] += _native._waiting_inside_hdf5()
        local.attrs["title"]
    def on_alarm(sig, frame):
        touch("alarm")
        Cycle()
    class Cycle:
        def __init__(self):
            self.me = self
        def __del__(self):
            touch("del")
    gc.set_threshold(1, 1, 1)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.02, 0.02)
    with h5py.File(url, "r", driver="remfile", metadata_prefetch=False) as f:
        got = f["big"][:500]
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    gc.collect()
    assert np.array_equal(got, local["big"][:500])
    print(ran)
    """
    url = f"{server.base}/data.h5?delay_ms=300"
    out = _run(script, url, os.path.join(files, "data.h5"))
    ran = eval(out.strip())
    assert ran["alarm"] > 0 and ran["del"] > 0, ran
    assert ran["inside"] == 0, ran


def test_netcdf4_reads_in_another_thread_while_the_driver_waits(server, files):
    pytest.importorskip("netCDF4")
    script = """
    import sys, threading
    import h5py, netCDF4, numpy as np
    import remfile_hdf5
    from remfile_hdf5 import _native
    url, nc_path, h5_path = sys.argv[1:]
    done, started = threading.Event(), threading.Event()
    count = [0]
    def other():
        while not done.is_set():
            with netCDF4.Dataset(nc_path) as d:
                assert d["temperature"][3, 4] == 34
            count[0] += 1
            started.set()
    t = threading.Thread(target=other)
    t.start()
    started.wait()
    with h5py.File(url, "r", driver="remfile", metadata_prefetch=False) as f:
        before = count[0]
        got = f["big"][:300]
        during = count[0] - before
    done.set()
    t.join()
    with h5py.File(h5_path, "r") as local:
        assert np.array_equal(got, local["big"][:300])
    print(during, _native._releases_gil_inside_hdf5())
    """
    url = f"{server.base}/data.h5?delay_ms=200"
    during, released = _run(script, url, os.path.join(files, "local.nc"),
                            os.path.join(files, "data.h5")).split()
    # h5py's wheel carries its own HDF5, which only h5py calls: the driver
    # lets the GIL go inside it, and the other thread read meanwhile.
    assert released == "True"
    assert int(during) > 0


def test_two_hundred_interrupted_reads_leave_no_thread_or_buffer_behind(holding, files):
    script = _HELD + """
    import os, signal, sys, resource
    import remfile_hdf5
    url, base = sys.argv[1:]
    f = remfile_hdf5.RemoteFile(url, timeout=600)
    f.read_at(0, 100)
    def threads():
        return len(os.listdir("/proc/self/task"))
    def rss():
        with open("/proc/self/statm") as s:
            return int(s.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    urllib.request.urlopen(base + "/__stall?hold").read()
    class Alarm(Exception):
        pass
    def on_alarm(sig, frame):
        raise Alarm()
    signal.signal(signal.SIGALRM, on_alarm)
    start_threads, start_rss = threads(), rss()
    interrupted = 0
    for i in range(200):
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        try:
            f.read_at(200_000 + i * 10_000, 8 << 20)
        except Alarm:
            interrupted += 1
    signal.setitimer(signal.ITIMER_REAL, 0)
    print(json.dumps({"interrupted": interrupted, "threads": [start_threads, threads()],
                      "rss": [start_rss, rss()]}))
    """
    result = json.loads(_run(script, holding.url("blob.bin"), holding.base))
    assert result["interrupted"] == 200
    before, after = result["threads"]
    # The process's idle background workers may have started meanwhile.
    assert after <= before + 4, result
    before, after = result["rss"]
    assert after - before < 64 << 20, result


def test_a_large_read_costs_its_buffer_once(server, files):
    # A 256 MiB file read in one call: the bytes object is the only copy.
    script = """
    import resource, sys
    import remfile_hdf5
    url = sys.argv[1]
    f = remfile_hdf5.RemoteFile(url)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    data = f.read_at(0, f.size)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    del data
    # Into a buffer of the caller's, through io: nothing beside it.
    g = remfile_hdf5.RemoteFile(url)
    into = bytearray(g.size)
    into[::4096] = b"x" * len(into[::4096])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    n = g.readinto(memoryview(into)[1:])
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert n == g.size - 1 and into[1:4097] == bytes(4096), n
    print(len(into), (peak - base) * 1024, (after - before) * 1024)
    """
    size = 256 << 20
    with open(os.path.join(files, "big256.bin"), "wb") as out:
        out.truncate(size)
    try:
        n, grew, grew_into = map(int, _run(script, server.url("big256.bin")).split())
    finally:
        os.remove(os.path.join(files, "big256.bin"))
    assert n == size
    assert grew < size * 1.25, f"peak grew by {grew / size:.2f}x the read"
    assert grew_into < size * 0.25, f"readinto grew the peak by {grew_into / size:.2f}x"


def test_ctrl_c_stops_a_wait_in_a_child_forked_from_another_thread(holding, files):
    # The child's main thread is the one that forked: Ctrl-C acts there.
    script = _HELD + """
    import os, signal, sys, threading
    import remfile_hdf5
    url, base = sys.argv[1:]
    urllib.request.urlopen(base + "/__stall?hold").read()
    def fork_here():
        pid = os.fork()
        if pid == 0:
            f = remfile_hdf5.RemoteFile(url, timeout=600)
            def interrupt():
                wait_until_held(base)
                os.kill(os.getpid(), signal.SIGINT)
            threading.Thread(target=interrupt).start()
            try:
                f.read_at(2_000_000, 100)
                os._exit(3)
            except KeyboardInterrupt:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    t = threading.Thread(target=fork_here)
    t.start()
    t.join()
    """
    assert _run(script, holding.url("blob.bin"), holding.base).strip() == "0"


def test_no_token_of_a_url_is_written_to_the_disk_cache_or_shown(server, files, tmp_path):
    secrets = ["PLANTEDtokenA1", "PLANTEDkeyB2", "PLANTEDheaderC3"]
    cache = tmp_path / "cache"
    url = server.url("data.h5") + f"&access_token={secrets[0]}&api_key={secrets[1]}"
    headers = {"X-Custom-Auth": secrets[2]}
    with h5py.File(url, "r", driver="remfile", disk_cache=str(cache), headers=headers) as f:
        assert f.attrs["title"] == "a test file"
        f["big"][:100]
    with remfile_hdf5.RemoteFile(server.url("blob.bin") + f"&access_token={secrets[0]}",
                                 disk_cache=str(cache), headers=headers) as r:
        r.read_at(0, 1000)
    found = []
    for dirpath, dirnames, filenames in os.walk(cache):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            blob = name.encode()
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as fh:
                    blob += fh.read()
            found += [(path, s) for s in secrets if s.encode() in blob or s.lower().encode() in blob]
    assert not found, found
    # Errors name the file, never its query or headers.
    missing = server.url("nothing-here.h5") + f"&access_token={secrets[0]}"
    for opener in (
        lambda: h5py.File(missing, "r", driver="remfile", headers=headers),
        lambda: remfile_hdf5.RemoteFile(missing, headers=headers),
    ):
        with pytest.raises(OSError) as raised:
            opener()
        text = repr(raised.value) + str(raised.value) + str(raised.value.filename)
        assert not any(s in text for s in secrets), text


def test_reads_after_every_wait_was_stopped_fail_for_good_not_for_a_retry(server, files):
    # Python's io retries a read that fails with EINTR (PEP 475): a stop
    # for good must say ECANCELED, or a buffered read would spin.
    script = """
    import errno, io, sys
    import remfile_hdf5
    from remfile_hdf5 import _native
    f = remfile_hdf5.RemoteFile(sys.argv[1], block_size="64k", cache="64k")
    _native._stop_everything()
    try:
        io.BufferedReader(f).read()
        print("read")
    except OSError as e:
        print(errno.errorcode.get(e.errno), type(e).__name__)
    """
    out = _run(script, server.url("blob.bin")).split()
    assert out == ["ECANCELED", "OSError"], out


def test_ctrl_c_stops_a_wait_for_a_batch_and_cancel_ends_its_requests(holding, files):
    # Requests past the file's first 128 KiB are held: the batch's crawl
    # waits for them, and so does `wait()`.
    script = _HELD + """
    import os, signal, sys, threading
    import remfile_hdf5
    url, base = sys.argv[1:]
    urllib.request.urlopen(base + "/__stall?hold").read()
    ahead = remfile_hdf5.prefetch_files([url], timeout=600)
    def interrupt():
        wait_until_held(base)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=interrupt).start()
    try:
        ahead.wait()
        print(json.dumps("no exception"))
    except KeyboardInterrupt:
        print(json.dumps("KeyboardInterrupt"))
    ahead.cancel()
    progress = ahead.wait()
    wait_until_hung_up(base)
    print(json.dumps({"progress": progress, "errors": list(ahead.errors.values()),
                      "held": held(base)}))
    """
    out = _run(script, holding.url("data.h5"), holding.base).splitlines()
    assert json.loads(out[0]) == "KeyboardInterrupt"
    result = json.loads(out[1])
    # Opened, its tail's request stopped (the tail is only a guess), and let
    # go of: its open opens it afresh.
    assert result["progress"]["pending"] == 0 and result["progress"]["dropped"] == 1, result
    assert result["held"]["hung_up"] >= 1, "the held request was not ended"
    assert result["errors"] == []


# Waits (in the script) until Python's main thread waits for the network in
# the package: a signal sent then arrives during that wait.
_MAIN_WAITS = """
    import time
    from remfile_hdf5 import _native
    def wait_until_main_waits():
        while not _native._main_thread_waiting():
            time.sleep(0.005)
"""

# A survey of `urls` as users write one: the batch, waited for, then each
# file opened through the driver and two levels of it read.
_SURVEY = _HELD + _MAIN_WAITS + """
    import os, signal, sys, threading
    import h5py, remfile_hdf5
    def logged(base):
        with urllib.request.urlopen(base + "/__log") as r:
            return len(json.loads(r.read()))
    def survey(urls):
        ahead = remfile_hdf5.prefetch_files(urls, wait=True, timeout=600)
        seen = []
        for url in urls:
            with h5py.File(url, "r", driver="remfile", timeout=600) as f:
                seen.append([str(f.attrs["title"]), sorted(f["group03"].keys()),
                             int(f["group03/inner"].attrs["index"])])
        ahead.cancel()
        return seen
    base, n, interrupted = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "interrupted"
    urls = [f"{base}/data.h5?copy={i}" for i in range(n)]
    # Both runs survey with the line known (a file read before), so their
    # waves are planned alike.
    with h5py.File(f"{base}/data.h5?copy=line", "r", driver="remfile", timeout=600) as f:
        f["big"][:]
    if interrupted:
        # The batch opens the files, then its crawls' requests are held.
        urllib.request.urlopen(base + "/__stall?hold").read()
        def interrupt():
            wait_until_held(base, n)
            wait_until_main_waits()
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=interrupt).start()
        # The batch the call makes, which it does not return when interrupted.
        made = []
        class Spy(remfile_hdf5.PrefetchedFiles):
            def __init__(self, *args):
                super().__init__(*args)
                made.append(self)
        remfile_hdf5.PrefetchedFiles = Spy
        try:
            remfile_hdf5.prefetch_files(urls, wait=True, timeout=600)
            print(json.dumps("no exception"))
        except KeyboardInterrupt:
            print(json.dumps("KeyboardInterrupt"))
        print(json.dumps(made[0].progress))
        urllib.request.urlopen(base + "/__stall?off").read()
    mark = logged(base)
    seen = survey(urls)
    print(json.dumps({"asked": logged(base) - mark, "seen": seen}))
"""


def test_ctrl_c_in_a_waited_batch_cancels_it_and_the_survey_again_costs_no_more(holding, files):
    # The Ctrl-C comes while the batch's crawls wait for the server: the
    # batch it interrupted must not go on beside the next survey's.
    n = "8"
    cold = json.loads(_run(_SURVEY, holding.base, n, "cold").splitlines()[-1])
    out = _run(_SURVEY, holding.base, n, "interrupted").splitlines()
    assert json.loads(out[0]) == "KeyboardInterrupt"
    progress = json.loads(out[1])
    # Every file opened, its crawl under way: cancelled, all let go of.
    assert progress["dropped"] == int(n) and progress["pending"] == 0, progress
    again = json.loads(out[2])
    assert cold["seen"][0] == ["a test file", ["inner"], 3]
    assert again["seen"] == cold["seen"]
    # The survey's own waves plan with what they know when they run: a
    # block more or less as the timing has it. A batch that went on would
    # add its eight files' crawls, eight requests or more.
    assert again["asked"] <= cold["asked"] + 3, (again["asked"], cold["asked"])


def test_ctrl_c_during_an_open_the_batch_holds_fails_that_open_and_no_later_call(holding, files):
    # The batch's requests past the file's first 128 KiB are held by the
    # server; the open of the same file waits for the batch's work on it,
    # and the Ctrl-C comes during that wait. New requests are served.
    script = _HELD + _MAIN_WAITS + """
    import os, signal, sys, threading
    import h5py, remfile_hdf5
    url, other, base = sys.argv[1:]
    urllib.request.urlopen(base + "/__stall?hold").read()
    ahead = remfile_hdf5.prefetch_files([url], timeout=5)
    wait_until_held(base)
    urllib.request.urlopen(base + "/__stall?off").read()
    def interrupt():
        wait_until_main_waits()
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=interrupt).start()
    try:
        h5py.File(url, "r", driver="remfile", timeout=5)
        print(json.dumps("opened"))
    except KeyboardInterrupt:
        print(json.dumps("KeyboardInterrupt"))
    ahead.cancel()
    # Calls whose requests all succeed raise nothing.
    f = remfile_hdf5.RemoteFile(other)
    data = f.read_at(1_000_000, 16).hex()
    with h5py.File(url, "r", driver="remfile", timeout=5) as h:
        title = str(h.attrs["title"])
    print(json.dumps({"data": data, "title": title}))
    """
    out = _run(script, holding.url("data.h5"), holding.url("blob.bin"),
               holding.base).splitlines()
    assert json.loads(out[0]) == "KeyboardInterrupt"
    result = json.loads(out[1])
    with open(os.path.join(files, "blob.bin"), "rb") as local:
        local.seek(1_000_000)
        assert result["data"] == local.read(16).hex()
    assert result["title"] == "a test file"


def test_a_stop_kept_from_an_earlier_call_is_raised_by_no_later_one(server, files):
    # As a wait stopped by Ctrl-C whose failure no one reported leaves it.
    script = """
    import sys
    import remfile_hdf5
    from remfile_hdf5 import _native
    url = sys.argv[1]
    _native._keep_a_stop()
    f = remfile_hdf5.RemoteFile(url)
    _native._keep_a_stop()
    print(f.read_at(1_000_000, 16).hex())
    """
    out = _run(script, server.url("blob.bin")).split()
    with open(os.path.join(files, "blob.bin"), "rb") as local:
        local.seek(1_000_000)
        assert out == [local.read(16).hex()]


def test_exit_handlers_registered_before_the_import_read(server, files):
    # atexit runs its handlers last registered first: the package's own
    # stops reads at exit, and this one runs after it.
    # h5py's own exit hook (registered at its import) unregisters its type
    # converters: imported first, it runs after this handler.
    script = """
    import atexit, sys
    import h5py
    url_bin, url_h5 = sys.argv[1:]
    def at_exit():
        import remfile_hdf5
        with remfile_hdf5.RemoteFile(url_bin) as f:
            print(f.read_at(1_000_000, 16).hex(), flush=True)
        with h5py.File(url_h5, "r", driver="remfile") as h:
            print(h.attrs["title"], h["big"][5].tobytes().hex(), flush=True)
    atexit.register(at_exit)
    import remfile_hdf5
    print("main returns", flush=True)
    """
    out = _run(script, server.url("blob.bin"), server.url("data.h5")).splitlines()
    assert out[0] == "main returns"
    with open(os.path.join(files, "blob.bin"), "rb") as local:
        local.seek(1_000_000)
        assert out[1] == local.read(16).hex()
    with h5py.File(os.path.join(files, "data.h5"), "r") as local:
        assert out[2] == f"a test file {local['big'][5].tobytes().hex()}"


def test_an_exit_handler_reads_while_a_daemon_thread_is_stopped_inside_h5py(holding, files):
    # The daemon thread's read is held by the server inside an h5py call;
    # the handler, registered before the import, reads a small file (no
    # request of it is held): it reads, and the script ends.
    small = os.path.join(files, "small.bin")
    with open(small, "wb") as out:
        out.write(bytes(range(256)) * 256)
    script = """
    import atexit, sys
    url_h5, url_small, base = sys.argv[1:]
    def at_exit():
        import remfile_hdf5
        with remfile_hdf5.RemoteFile(url_small) as f:
            print(f.read_at(1000, 8).hex(), flush=True)
    atexit.register(at_exit)
    """ + _HELD + """
    import threading
    import h5py, remfile_hdf5
    f = h5py.File(url_h5, "r", driver="remfile", metadata_prefetch=False, timeout=600)
    ds = f["contiguous"]
    urllib.request.urlopen(base + "/__stall?hold").read()
    def reader():
        while True:
            try:
                ds[200_000:200_100]
            except BaseException:
                pass
    threading.Thread(target=reader, daemon=True).start()
    wait_until_held(base)
    print("main returns", flush=True)
    """
    try:
        out = _run(script, holding.url("data.h5"), holding.url("small.bin"),
                   holding.base).splitlines()
    finally:
        os.remove(small)
    assert out == ["main returns", (bytes(range(256)) * 256)[1000:1008].hex()]
