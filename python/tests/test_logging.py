"""The crate's events in Python's logging: requests at DEBUG, retries and
renewals at WARNING, under ``remfile`` loggers, with no secret in them,
from inside h5py's calls too, and none below the level asked for."""

import subprocess
import sys
import textwrap


def run(script):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [line.split("|", 2) for line in out.stdout.splitlines() if line.count("|") >= 2]


def test_requests_come_at_debug_with_no_secret(server):
    records = run(f"""
        import logging, sys
        logging.basicConfig(level=logging.DEBUG, stream=sys.stdout,
                            format="%(name)s|%(levelname)s|%(message)s")
        import h5py, remfile_hdf5
        with h5py.File({server.url("data.h5")!r}, "r", driver="remfile") as f:
            f["big"][:10]
        with remfile_hdf5.RemoteFile({server.url("blob.bin")!r}) as fo:
            fo.read_at(2_000_000, 10)
    """)
    ours = [r for r in records if r[0].startswith("remfile")]
    requests = [r for r in ours if r[0] == "remfile.http.request" and r[1] == "DEBUG"]
    assert any("data.h5" in r[2] and "range=" in r[2] for r in requests), ours
    assert any("blob.bin" in r[2] for r in requests), ours
    assert not any("secret" in "|".join(r) for r in records), records


def test_a_renewed_url_is_a_warning_and_debug_stays_quiet(server):
    records = run(f"""
        import logging, sys, urllib.request
        logging.basicConfig(level=logging.WARNING, stream=sys.stdout,
                            format="%(name)s|%(levelname)s|%(message)s")
        import remfile_hdf5

        class Signer:
            asked = int(urllib.request.urlopen({server.base!r} + "/__expire").read())
            def get_url(self):
                self.asked += 1
                return {server.base!r} + f"/blob.bin?token={{self.asked - 1}}&X-Amz-Signature=secret"

        f = remfile_hdf5.File(Signer())
        urllib.request.urlopen({server.base!r} + "/__expire").read()
        f.read_at(2_500_000, 10)
    """)
    ours = [r for r in records if r[0].startswith("remfile")]
    assert [r[:2] for r in ours] == [["remfile.http.retry", "WARNING"]], ours
    assert "fresh URL" in ours[0][2] and "secret" not in ours[0][2]


def test_verbose_shows_the_requests_on_standard_error(server):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import remfile_hdf5 as remfile
        remfile.File({server.url("blob.bin")!r}, verbose=True).read_at(0, 10)
    """)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "remfile.http.request: http request" in out.stderr, out.stderr
    assert "secret" not in out.stderr
