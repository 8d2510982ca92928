"""Progress where work is long, and the download command: parallel,
resumable, verified."""

import json
import os
import pty
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import remfile_hdf5
from remfile_hdf5 import _download


def run_on_a_terminal(script):
    """Runs ``script`` with its standard error on a terminal (tqdm hidden:
    the plain line); returns what it wrote there."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.modules['tqdm'] = None\n" + script],
                            stderr=follower, stdout=subprocess.DEVNULL)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=60) == 0, out
    os.close(leader)
    return out.decode()


def test_prefetch_files_shows_its_progress_on_a_terminal_and_nothing_unasked(server):
    urls = [server.url(n) for n in ("data.h5", "session.nwb", "local.nc")]
    shown = run_on_a_terminal(textwrap.dedent(f"""
        import remfile_hdf5
        remfile_hdf5.prefetch_files({urls!r}, wait=True, progress=True)
    """))
    assert "\rprefetch_files: 3/3 files" in shown, shown
    assert shown.endswith("\r\n") or shown.endswith("\n"), shown
    quiet = run_on_a_terminal(textwrap.dedent(f"""
        import remfile_hdf5
        remfile_hdf5.prefetch_files({urls!r}, wait=True)
    """))
    assert quiet == ""
    # Not on a terminal: one line, at the end.
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys; sys.modules['tqdm'] = None
        import remfile_hdf5
        remfile_hdf5.prefetch_files({urls!r}, wait=True, progress=True)
    """)], capture_output=True, text=True, timeout=60)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("prefetch_files: 3/3 files"), out.stderr


def test_a_download_equals_the_file_and_takes_its_name_once_verified(server, files, tmp_path, monkeypatch):
    monkeypatch.setattr(_download, "PIECE", 256 << 10)
    dest = str(tmp_path / "blob.bin")
    how = _download.download(server.url("blob.bin"), dest, progress=False)
    with open(os.path.join(files, "blob.bin"), "rb") as f:
        assert open(dest, "rb").read() == f.read()
    assert "3000000 bytes" in how and "unchanged" in how
    assert sorted(os.listdir(tmp_path)) == ["blob.bin"]


def test_a_stopped_download_goes_on_where_it_was(server, files, tmp_path, monkeypatch):
    piece = 256 << 10
    monkeypatch.setattr(_download, "PIECE", piece)
    url, dest = server.url("blob.bin"), str(tmp_path / "blob.bin")
    with open(os.path.join(files, "blob.bin"), "rb") as f:
        data = f.read()
    etag = remfile_hdf5.RemoteFile(url).etag

    def earlier_run(pieces, **state):
        """The part file and record an earlier run left: `pieces` written."""
        with open(dest + ".part", "wb") as f:
            f.write(b"\0" * len(data))
            for i in pieces:
                f.seek(i * piece)
                f.write(data[i * piece:(i + 1) * piece])
        record = {"size": len(data), "etag": etag, "piece": piece,
                  "done": {str(i): _download._digest(data[i * piece:(i + 1) * piece]) for i in pieces}}
        record.update(state)
        with open(dest + ".part.json", "w") as f:
            json.dump(record, f)

    def starts_fetched(mark):
        fetched = [r[2] for r in server.requests_since(mark) if r[0] == "GET" and "blob.bin" in r[1]]
        return [int(r.split("=")[1].split("-")[0]) for r in fetched if r and r.split("=")[1][0] != "-"]

    earlier_run(range(6))
    mark = server.mark()
    _download.download(url, dest, progress=False, cache_capacity="1MiB")
    assert open(dest, "rb").read() == data
    # Only the open's first block came from the pieces written before.
    assert all(s >= 6 * piece or s == 0 for s in starts_fetched(mark))
    # A record of another version, or of another piece size, is not
    # trusted: all again; nor a piece whose bytes do not match its digest.
    for state in ({"etag": '"other"'}, {"piece": piece * 2}):
        earlier_run(range(11), **state)
        with open(dest + ".part", "r+b") as f:
            f.write(b"\0" * len(data))
        _download.download(url, dest, progress=False)
        assert open(dest, "rb").read() == data
    earlier_run(range(6))
    with open(dest + ".part", "r+b") as f:
        f.seek(2 * piece)
        f.write(b"damage")
    mark = server.mark()
    _download.download(url, dest, progress=False, cache_capacity="1MiB")
    assert open(dest, "rb").read() == data
    assert any(2 * piece <= s < 3 * piece for s in starts_fetched(mark)), "the damaged piece again"


def test_ctrl_c_stops_a_download_and_the_next_run_goes_on(slow_server, files, tmp_path):
    # Pieces of 256 KiB, one connection, each answer 400 ms late: Ctrl-C once
    # the first piece is recorded.
    dest = str(tmp_path / "blob.bin")
    script = textwrap.dedent(f"""
        import sys
        from remfile_hdf5 import _download
        _download.PIECE = 256 << 10
        sys.argv = ["x", "download", {slow_server.url("blob.bin")!r}, {dest!r}, "--no-progress", "-j", "1"]
        from remfile_hdf5.__main__ import main
        sys.exit(main())
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    record = dest + ".part.json"
    deadline = time.monotonic() + 60
    while not os.path.exists(record) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)  # a gate on the file, not an ordering of threads
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    assert proc.wait(timeout=60) == 130, proc.stderr.read()
    assert time.monotonic() - started < 5, "stopped at once, not after the whole file"
    assert "run the same command again" in proc.stderr.read()
    with open(record) as f:
        kept = json.load(f)["done"]
    assert 1 <= len(kept) < 12
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    with open(os.path.join(files, "blob.bin"), "rb") as f:
        assert open(dest, "rb").read() == f.read()


def test_the_download_command(server, files, tmp_path):
    dest = str(tmp_path / "data.h5")
    out = subprocess.run([sys.executable, "-m", "remfile_hdf5", "download", server.url("data.h5"), dest,
                          "--no-progress", "-j", "2"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{dest}: ") and "secret" not in out.stdout + out.stderr
    with open(os.path.join(files, "data.h5"), "rb") as f:
        assert open(dest, "rb").read() == f.read()
    bad = subprocess.run([sys.executable, "-m", "remfile_hdf5", "download", server.url("nope.bin"),
                          str(tmp_path / "x")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "download failed" in bad.stderr and "secret" not in bad.stderr


def test_with_tqdm_installed_the_bar_is_tqdms(server):
    pytest.importorskip("tqdm")
    urls = [server.url(n) for n in ("data.h5", "local.nc")]
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import remfile_hdf5
        remfile_hdf5.prefetch_files({urls!r}, wait=True, progress=True)
    """)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "prefetch_files: 100%" in out.stderr and "2/2" in out.stderr, out.stderr


def test_a_url_given_twice_is_one_file_on_the_bar(server):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys; sys.modules['tqdm'] = None
        import remfile_hdf5
        remfile_hdf5.prefetch_files([{server.url("data.h5")!r}] * 3, wait=True, progress=True)
    """)], capture_output=True, text=True, timeout=60)
    assert out.stderr.startswith("prefetch_files: 1/1 files"), out.stderr
