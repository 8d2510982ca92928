"""Threads and forks at any moment: `stats`, opens, reads and closes from
several threads at once, a fork while another thread's read waits on a slow
server, and children forked again and again while the parent's metadata
prefetch runs. Each run in a process of its own, killed if it does not end:
a deadlock or a crash is a failure here, never a frozen test run."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import h5py
import pytest

import remfile_hdf5

# Far more than any of these runs takes; reached only by a process that
# waits forever.
DEADLINE = 60


def _run(script, *args):
    """Runs `script` in a fresh Python with `args`; its output, or a failure
    saying how it ended (and, if it hung, where each thread waited)."""
    env = dict(os.environ)
    for name in ["HDF5_DRIVER", "HDF5_DRIVER_CONFIG", "HDF5_PLUGIN_PATH"]:
        env.pop(name, None)
    prologue = f"import faulthandler; faulthandler.dump_traceback_later({DEADLINE - 20}, exit=True)\n"
    try:
        done = subprocess.run(
            [sys.executable, "-c", prologue + textwrap.dedent(script), *args],
            capture_output=True, text=True, timeout=DEADLINE, env=env,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"still running after {DEADLINE} s:\n{e.stderr}")
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_stats_opens_reads_and_closes_from_threads_never_deadlock(server, files):
    # Each thread does one of the things users do at once (a progress
    # thread asking for statistics, workers opening and reading files), for
    # a few seconds: every one of them must keep going.
    script = """
        import sys, threading, time
        import h5py, numpy as np
        import remfile_hdf5

        url, local = sys.argv[1], sys.argv[2]
        with h5py.File(local, "r") as f:
            expected = f["big"][:]
        shared = h5py.File(url, "r", driver="remfile")
        stop = time.monotonic() + 3
        done = {}

        def stats():
            n = 0
            while time.monotonic() < stop:
                assert remfile_hdf5.stats(shared)["requests"] >= 1
                n += 1
            done["stats"] = n

        def opens():
            n = 0
            while time.monotonic() < stop:
                with h5py.File(url, "r", driver="remfile") as f:
                    assert f["group03/inner"].attrs["index"] == 3
                    assert remfile_hdf5.stats(f) is not None
                n += 1
            done["opens"] = n

        def reads():
            n = 0
            while time.monotonic() < stop:
                np.testing.assert_array_equal(shared["big"][n % 2000], expected[n % 2000])
                n += 1
            done["reads"] = n

        def closes():
            n = 0
            while time.monotonic() < stop:
                f = remfile_hdf5.open(url, metadata_prefetch=False)
                f["big"][:10]
                f.close()
                n += 1
            done["closes"] = n

        threads = [threading.Thread(target=t) for t in (stats, opens, reads, closes) * 2]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        shared.close()
        assert sorted(done) == ["closes", "opens", "reads", "stats"], done
        print(done)
        """
    out = _run(script, server.url("data.h5"), os.path.join(files, "data.h5"))
    counts = eval(out)
    assert all(n > 0 for n in counts.values()), counts


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_child_forked_during_a_slow_read_reads_the_inherited_file(slow_server, files):
    local = open(os.path.join(files, "blob.bin"), "rb").read()
    fo = remfile_hdf5.RemoteFile(slow_server.url("blob.bin"))
    reading = threading.Event()
    got = []

    def read():
        fo.seek(2_000_000)
        reading.set()
        # Holds the position's lock for the server's 400 ms.
        got.append(fo.read(1000))

    reader = threading.Thread(target=read)
    reader.start()
    reading.wait()
    time.sleep(0.1)
    assert reader.is_alive(), "the read still waits on the server"

    def child():
        fo.seek(1000)
        first = fo.read(100)
        second = fo.read_at(2_500_000, 50)
        fo.seek(-10, os.SEEK_END)
        last = fo.read()
        fo.close()
        expected = (local[1000:1100], local[2_500_000:2_500_050], local[-10:])
        return b"ok" if (first, second, last) == expected else b"wrong bytes"

    answer = _in_child(child)
    reader.join()
    fo.close()
    assert got == [local[2_000_000:2_001_000]]
    assert answer == (0, b"ok")


def _in_child(body, deadline=30.0):
    """Runs `body` in a forked child: the child's exit status (or the
    signal that ended it, negative) and the bytes `body` returned; a child
    still running at the deadline is killed and reported as such."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(r)
            os.write(w, body())
            status = 0
        finally:
            os._exit(status)
    os.close(w)
    return _wait_child(pid, r, deadline)


def _wait_child(pid, pipe, deadline):
    end = time.monotonic() + deadline
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(pipe)
            return ("hung", b"")
        time.sleep(0.01)
    with os.fdopen(pipe, "rb") as p:
        out = p.read()
    return (os.waitstatus_to_exitcode(status), out)


@pytest.mark.parametrize("disk_cache", [False, True], ids=["memory", "disk-cache"])
def test_children_forked_while_the_parent_prefetches_open_read_and_close(server, files, tmp_path, disk_cache):
    # The parent holds a file open with the driver (its metadata crawl
    # thread alive) and keeps opening another one in a thread while it
    # forks: eight children at a time, twenty rounds, each child opening,
    # reading and closing a file through the driver; with a disk cache
    # shared by all of them, or without.
    script = """
        import json, os, sys, threading, time, warnings
        import h5py, numpy as np
        import remfile_hdf5

        warnings.simplefilter("ignore", DeprecationWarning)
        url, local, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
        options = json.loads(sys.argv[4])
        with h5py.File(local, "r") as f:
            expected = f["big"][:]
            expected_names = sorted(f)
        held = h5py.File(url, "r", driver="remfile", **options)
        assert sorted(held) == expected_names
        stop = threading.Event()

        def reopen():
            while not stop.is_set():
                with h5py.File(url, "r", driver="remfile", **options) as f:
                    f["group05/inner/small"][:]

        busy = threading.Thread(target=reopen)
        busy.start()
        outcomes = {}

        def child():
            with h5py.File(url, "r", driver="remfile", **options) as f:
                ok = sorted(f) == expected_names and np.array_equal(f["big"][:], expected)
            os._exit(0 if ok else 3)

        for _ in range(rounds):
            pids = []
            for _ in range(8):
                pid = os.fork()
                if pid == 0:
                    try:
                        child()
                    finally:
                        os._exit(4)
                pids.append(pid)
            for pid in pids:
                end = time.monotonic() + 30
                while True:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        code = os.waitstatus_to_exitcode(status)
                        break
                    if time.monotonic() > end:
                        os.kill(pid, 9)
                        os.waitpid(pid, 0)
                        code = "hung"
                        break
                    time.sleep(0.01)
                outcomes[code] = outcomes.get(code, 0) + 1
        stop.set()
        busy.join()
        held.close()
        print(outcomes)
        """
    options = {"disk_cache": str(tmp_path / "cache")} if disk_cache else {}
    out = _run(script, server.url("data.h5"), os.path.join(files, "data.h5"), "20", json.dumps(options))
    assert eval(out) == {0: 160}, f"how the children ended (exit code: count): {out}"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_forked_child_is_told_to_open_an_inherited_hdf5_file_again(server, files):
    # Reading through the parent's connections would mix both processes'
    # answers; the child gets an error that says what to do, and closing
    # the inherited file there waits on nothing of the parent's.
    f = h5py.File(server.url("data.h5"), "r", driver="remfile")
    assert f["group01/inner"].attrs["index"] == 1

    def child():
        try:
            f["contiguous"][-10:]
            said = b"read through the parent's connections"
        except (OSError, KeyError) as e:
            # h5py's KeyError when the object's header cannot be read.
            said = b"ok" if "before a fork" in str(e) else str(e).encode()
        f.close()
        return said

    answer = _in_child(child)
    with h5py.File(os.path.join(files, "data.h5"), "r") as local:
        assert (f["contiguous"][-10:] == local["contiguous"][-10:]).all()
    f.close()
    assert answer == (0, b"ok")
