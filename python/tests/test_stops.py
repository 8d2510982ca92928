"""Ctrl-C ends every wait of an open, not only a socket's: another
process's first open of the same file through a shared disk cache, a
credential service that accepts and never answers, and a TCP connect to a
listener whose accept queue is full. Each wait could last tens of seconds
(20 s for a claim, the service's timeout, the connect timeout, here set to
minutes); each script runs under a deadline far below that and far above
what a stop takes, so a wait that ignores Ctrl-C fails the test and
nothing asserts a time."""

import os
import subprocess
import sys
import textwrap

import pytest

# Far below the waits above, far above a stop's 0.05 s.
DEADLINE = 15

# A server that accepts, reads each request and never answers; and a
# Ctrl-C sent once the main thread waits inside the package's native code.
_COMMON = """
    import os, signal, socket, sys, threading, time

    def black_hole():
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        asked = threading.Event()
        held = []
        def serve():
            while True:
                conn, _ = listener.accept()
                held.append(conn)
                conn.recv(65536)
                asked.set()
        threading.Thread(target=serve, daemon=True).start()
        return listener.getsockname()[1], asked

    def interrupt_when_waiting():
        import remfile_hdf5
        def interrupt():
            while not remfile_hdf5._native._main_thread_waiting():
                time.sleep(0.005)
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=interrupt, daemon=True).start()
"""


def _run(script, *args, env=None):
    full = textwrap.dedent(_COMMON) + textwrap.dedent(script)
    run_env = dict(os.environ if env is None else env)
    for name in ["HDF5_DRIVER", "HDF5_DRIVER_CONFIG", "HDF5_PLUGIN_PATH"]:
        run_env.pop(name, None)
    try:
        done = subprocess.run([sys.executable, "-c", full, *args], capture_output=True, text=True,
                              timeout=DEADLINE, env=run_env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"a Ctrl-C did not end the wait within {DEADLINE} s:\n{e.stdout}\n{e.stderr}")
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout.strip().splitlines()


def test_ctrl_c_ends_a_wait_for_another_processs_first_open(tmp_path):
    # Another process opens the file first, through the same disk cache: its
    # opening request is never answered, so it keeps the file's first-open
    # claim; this process's open waits for that claim.
    script = """
    import subprocess
    import remfile_hdf5
    port, asked = black_hole()
    url, cache = f"http://127.0.0.1:{port}/f.bin", sys.argv[1]
    first = subprocess.Popen([sys.executable, "-c",
        "import sys, remfile_hdf5; remfile_hdf5.RemoteFile(sys.argv[1], disk_cache=sys.argv[2], read_timeout='600s')",
        url, cache], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    asked.wait(30)
    interrupt_when_waiting()
    try:
        remfile_hdf5.RemoteFile(url, disk_cache=cache, read_timeout="600s")  # the wait
        print("opened")
    except KeyboardInterrupt:
        print("KeyboardInterrupt")
    first.kill()
    """
    assert _run(script, str(tmp_path / "cache")) == ["KeyboardInterrupt"]


def test_ctrl_c_ends_a_wait_for_s3_keys_from_a_service_that_never_answers(tmp_path):
    script = """
    import remfile_hdf5
    port, asked = black_hole()
    os.environ["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = f"http://127.0.0.1:{port}/creds"
    interrupt_when_waiting()
    try:
        remfile_hdf5.RemoteFile("s3://bucket/f.bin", s3_endpoint=f"http://127.0.0.1:{port}")  # the wait
        print("opened")
    except KeyboardInterrupt:
        print("KeyboardInterrupt")
    print("asked" if asked.is_set() else "not asked")
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_REGION": "us-east-1",
    })
    out = _run(script, env=env)
    assert out[0] == "KeyboardInterrupt"


def test_ctrl_c_ends_a_connect_to_a_listener_whose_queue_is_full():
    script = """
    import remfile_hdf5
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    addr, held = listener.getsockname(), []
    while True:
        s = socket.socket()
        s.settimeout(0.1)
        try:
            s.connect(addr)
            held.append(s)
        except OSError:
            break
    interrupt_when_waiting()
    try:
        remfile_hdf5.RemoteFile(f"http://127.0.0.1:{addr[1]}/f.bin", connect_timeout="600s")  # the wait
        print("opened")
    except KeyboardInterrupt:
        print("KeyboardInterrupt")
    """
    assert _run(script) == ["KeyboardInterrupt"]
