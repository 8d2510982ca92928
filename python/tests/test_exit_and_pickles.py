"""Exit handlers and a file a daemon thread reads, and what a
pickle without secrets holds."""
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import remfile_hdf5
from test_lifecycle import _HELD, holding  # noqa: F401  (a fixture)


def test_an_exit_handler_reads_a_file_a_stopped_daemon_thread_was_reading(holding, files):
    # The daemon thread's read of `f` is held by the server (past the file's
    # first 128 KiB); the handler, registered before the import, reads the
    # start of the same file object (on hand since its open). The script
    # must end, the handler's bytes right.
    script = """
    import atexit, sys
    url, base = sys.argv[1:]
    on_hand = {}
    def at_exit():
        f = on_hand["f"]
        print(f.read_at(0, 8).hex(), flush=True)
        f.seek(0)
        print(f.read(8).hex(), flush=True)
    atexit.register(at_exit)
    """ + _HELD + """
    import threading
    import remfile_hdf5
    f = remfile_hdf5.RemoteFile(url, timeout=600, read_ahead_max=0)
    on_hand["f"] = f
    urllib.request.urlopen(base + "/__stall?hold").read()
    def reader():
        f.seek(1_000_000)
        f.read(100)
    threading.Thread(target=reader, daemon=True).start()
    wait_until_held(base)
    print("main returns", flush=True)
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("HDF5_")}
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script), holding.url("blob.bin"), holding.base],
            capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the exit hung:\n{e.stdout}\n{e.stderr}")
    with open(os.path.join(files, "blob.bin"), "rb") as local:
        start = local.read(8).hex()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["main returns", start, start], done.stderr


def test_a_pickle_without_secrets_stays_so_through_every_reopen(server, files):
    # Headers and S3 keys, each under the name it was given by: out of the
    # pickle, of the file opened from it, and of that file's own pickle.
    planted = ["PLANTEDKEYID77", "PLANTED-secret-77", "PLANTED-token-77", "PLANTED-hdr-77"]
    with open(os.path.join(files, "blob.bin"), "rb") as local:
        start = local.read(16)
    with remfile_hdf5.RemoteFile(server.url("blob.bin"), s3_access_key_id=planted[0],
                                 s3_secret_access_key=planted[1], s3_session_token=planted[2],
                                 headers=[("X-Planted", planted[3])], timeout=30,
                                 pickle_secrets=False) as fo:
        data = pickle.dumps(fo)
    for _ in range(3):
        assert not any(s.encode() in data for s in planted)
        with pickle.loads(data) as again:
            assert again.read_at(0, 16) == start
            data = pickle.dumps(again)
