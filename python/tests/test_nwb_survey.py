"""The survey example (python/examples/nwb_survey.py): sessions described
through pynwb after their metadata was fetched at once, equal to the local
files' descriptions, a failing URL reported at its own open."""

import importlib.util
import os
import subprocess
import sys

import h5py
import pynwb

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "nwb_survey.py")
spec = importlib.util.spec_from_file_location("nwb_survey", EXAMPLE)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


def local_description(path):
    with h5py.File(path, "r") as f, pynwb.NWBHDF5IO(file=f, mode="r") as io:
        nwb = io.read()
        return nwb.session_description, sorted(nwb.acquisition)


def test_the_survey_describes_each_session_as_the_local_file_does(server, files):
    url = server.url("session.nwb")
    gone = server.url("gone.nwb")
    run = subprocess.run(
        [sys.executable, EXAMPLE, url, gone],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    session, acquisition = local_description(os.path.join(files, "session.nwb"))
    lines = run.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(url.split("?")[0])
    assert repr(session) in lines[0] and repr(acquisition) in lines[0]
    # The failing URL is reported, its signature not shown.
    assert "gone.nwb failed" in run.stderr and "404" in run.stderr
    assert "secret" not in run.stderr + run.stdout


def test_a_description_through_the_batch_sends_no_request(server, files):
    import remfile_hdf5

    url = server.url("session.nwb")
    options = {"cache": "95MiB"}
    with remfile_hdf5.prefetch_files([url], wait=True, **options):
        mark = server.mark()
        described = example.describe(url, options)
        assert server.requests_since(mark) == []
    assert described["session"] == local_description(os.path.join(files, "session.nwb"))[0]
