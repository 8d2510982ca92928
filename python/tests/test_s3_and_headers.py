"""``s3://`` URLs through the driver and the file object, with requests
signed for an S3-compatible server that checks signatures (s3s-fs), and
headers sent to a private server: walks and slices equal the local file,
and no secret reaches a message."""

import os
import shutil
import socket
import subprocess
import time

import h5py
import numpy as np
import pytest

import remfile_hdf5

ACCESS_KEY = "REMFILEPYKEY"
SECRET_KEY = "remfile-python-secret-0123456789"
BUCKET = "bucket"


def _s3s_fs():
    found = shutil.which("s3s-fs") or os.path.expanduser("~/.cargo/bin/s3s-fs")
    if os.path.exists(found):
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("s3s-fs is missing (bash .ci/run installs it)")
    pytest.skip("s3s-fs is not installed (cargo install s3s-fs --version 0.14.1 --features binary --locked)")


@pytest.fixture(scope="module")
def store(files, tmp_path_factory):
    """s3s-fs on 127.0.0.1 with the served files in its bucket."""
    binary = _s3s_fs()
    root = tmp_path_factory.mktemp("s3root")
    shutil.copytree(files, root / BUCKET)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [binary, "--host", "127.0.0.1", "--port", str(port),
         "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY, str(root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "s3s-fs did not start"
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    process.kill()
    process.wait()


@pytest.fixture
def no_aws(monkeypatch):
    """An environment with no AWS settings, and no instance metadata."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


def _walk(f):
    out = []

    def visit(name, obj):
        attrs = sorted((k, repr(np.asarray(v).tolist())) for k, v in obj.attrs.items())
        if isinstance(obj, h5py.Dataset):
            out.append((name, obj.shape, str(obj.dtype), attrs, repr(obj[()].tolist()) if obj.size < 100_000 else None))
        else:
            out.append((name, attrs))

    f.visititems(visit)
    return out


def _same_as_local(remote, local_path):
    with h5py.File(local_path, "r") as local:
        assert _walk(remote) == _walk(local)
        assert np.array_equal(remote["big"][150:1300, 3:9], local["big"][150:1300, 3:9])
        assert np.array_equal(remote["contiguous"][12_345:200_000], local["contiguous"][12_345:200_000])


def test_the_driver_reads_an_s3_object_with_keys_given(store, files, no_aws):
    keys = dict(s3_endpoint=store, s3_access_key_id=ACCESS_KEY, s3_secret_access_key=SECRET_KEY)
    with h5py.File(f"s3://{BUCKET}/data.h5", "r", driver="remfile", **keys) as f:
        _same_as_local(f, os.path.join(files, "data.h5"))
        stats = remfile_hdf5.stats(f)
        assert stats["requests"] >= 1


def test_the_file_object_reads_an_s3_object_with_keys_from_the_environment(store, files, no_aws):
    no_aws.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    no_aws.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    no_aws.setenv("AWS_ENDPOINT_URL_S3", store)
    with remfile_hdf5.RemoteFile(f"s3://{BUCKET}/data.h5") as fo:
        assert fo.url == f"s3://{BUCKET}/data.h5"
        with h5py.File(fo, "r") as f:
            _same_as_local(f, os.path.join(files, "data.h5"))
    with open(os.path.join(files, "blob.bin"), "rb") as local:
        want = local.read()
    with remfile_hdf5.RemoteFile(f"s3://{BUCKET}/blob.bin", block_size="256KiB") as fo:
        assert fo.read_at(1_000_003, 700_000) == want[1_000_003:1_700_003]
        assert fo.read() == want


def test_pynwb_reads_an_s3_session(store, files, no_aws):
    from pynwb import NWBHDF5IO

    keys = dict(s3_endpoint=store, s3_access_key_id=ACCESS_KEY, s3_secret_access_key=SECRET_KEY)
    with remfile_hdf5.open(f"s3://{BUCKET}/session.nwb", **keys) as f, NWBHDF5IO(file=f, mode="r") as io:
        nwb = io.read()
        assert nwb.session_description == "a test session"
        assert np.array_equal(nwb.acquisition["series3"].data[100:200], np.arange(100.0, 200.0) * 3)


def test_a_wrong_secret_is_a_permission_error_naming_no_secret(store, no_aws):
    wrong = "not-the-right-secret-000000000000"
    keys = dict(s3_endpoint=store, s3_access_key_id=ACCESS_KEY, s3_secret_access_key=wrong)
    for how in ("driver", "file object"):
        with pytest.raises(PermissionError) as raised:
            if how == "driver":
                h5py.File(f"s3://{BUCKET}/data.h5", "r", driver="remfile", **keys)
            else:
                remfile_hdf5.RemoteFile(f"s3://{BUCKET}/data.h5", **keys)
        shown = f"{raised.value} {raised.value!r} {raised.value.filename}"
        assert wrong not in shown and ACCESS_KEY not in shown, shown
        assert f"s3://{BUCKET}/data.h5" in shown


def test_an_unknown_profile_says_so(store, no_aws):
    with pytest.raises(PermissionError, match='"nope"'):
        remfile_hdf5.RemoteFile(f"s3://{BUCKET}/data.h5", s3_endpoint=store, s3_profile="nope")


def test_headers_go_to_the_server_and_into_no_message(server, files):
    mark = server.mark()
    token = "Bearer a-token-no-message-shows"
    with h5py.File(server.url("data.h5"), "r", driver="remfile", headers={"Authorization": token, "X-Api-Key": "k1"}) as f:
        assert f.attrs["title"] == "a test file"
    with remfile_hdf5.RemoteFile(server.url("blob.bin"), headers={"Authorization": token}) as fo:
        fo.read_at(2_000_000, 10)
        assert token not in repr(fo)
    sent = server.headers_since(mark)
    assert sent and all(h.get("authorization") == token for h in sent), sent
    assert any(h.get("x-api-key") == "k1" for h in sent)
    with pytest.raises(ValueError) as raised:
        remfile_hdf5.RemoteFile(server.url("blob.bin"), headers={"Authorization": "Bearer a;b-secret"})
    assert "b-secret" not in str(raised.value)
    with pytest.raises(ValueError):
        remfile_hdf5.RemoteFile(server.url("blob.bin"), headers={"Range": "bytes=0-1"})
    with pytest.raises(ValueError):
        remfile_hdf5.RemoteFile(server.url("blob.bin"), headers="Authorization: x")
    with pytest.raises(ValueError) as raised:
        remfile_hdf5.RemoteFile(server.url("blob.bin"), headers={"Authorization: Bearer pasted-secret": ""})
    assert "pasted-secret" not in str(raised.value)


def test_headers_and_s3_options_are_in_the_signatures():
    import inspect

    params = inspect.signature(remfile_hdf5.RemoteFile).parameters
    for key in ("headers", "s3_region", "s3_endpoint", "s3_anonymous", "s3_requester_pays", "s3_access_key_id"):
        assert key in params, key
    assert "header" not in params
    taken = set(remfile_hdf5.option_keys()) | set(remfile_hdf5._ALIASES)
    assert set(remfile_hdf5.Options.__annotations__) == taken


def test_headers_in_remfile_options_reach_the_server(server):
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import sys, h5py, remfile_hdf5
        print(remfile_hdf5.defaults()["headers"])
        with h5py.File(sys.argv[1], "r", driver="remfile") as f:
            print(f.attrs["title"])
        """
    )
    mark = server.mark()
    env = {**os.environ, "REMFILE_OPTIONS": "header=X-Api-Key: k9;header=X-Team: lab;tail=0"}
    env.pop("HDF5_DRIVER", None)
    out = subprocess.run([sys.executable, "-c", script, server.url("data.h5")], env=env,
                         capture_output=True, text=True, timeout=120)
    lines = out.stdout.split("\n")
    assert lines[0] == "{'X-Api-Key': 'k9', 'X-Team': 'lab'}", out.stderr
    assert lines[1] == "a test file", out.stderr
    sent = server.headers_since(mark)
    assert sent and all(h.get("x-api-key") == "k9" and h.get("x-team") == "lab" for h in sent)


def test_a_pickle_carries_headers_unless_told_not_to(server, files):
    import pickle

    secret = "PLANTED-header-value-41"
    url = server.url("blob.bin")
    with open(os.path.join(files, "blob.bin"), "rb") as f:
        local = f.read(4096)
    # By default the headers go with it (a dask worker reads as the client).
    with remfile_hdf5.RemoteFile(url, headers={"X-Api-Key": secret}) as fo:
        assert secret.encode() in pickle.dumps(fo)
    with remfile_hdf5.RemoteFile(url, headers={"X-Api-Key": secret}, block_size="64k",
                                 pickle_secrets=False) as fo:
        fo.seek(100)
        data = pickle.dumps(fo)
    assert secret.encode() not in data
    mark = server.mark()
    with pickle.loads(data) as again:
        # Opened again without them, its other options and position kept.
        assert again.tell() == 100 and again.read(16) == local[100:116]
        assert secret.encode() not in pickle.dumps(again)
    sent = server.headers_since(mark)
    assert sent and not any("x-api-key" in h for h in sent), sent


def test_a_pickle_without_secrets_leaves_s3_keys_out(server):
    import pickle

    key, secret = "PLANTEDKEYID99", "PLANTED-secret-access-key-99"
    with remfile_hdf5.RemoteFile(server.url("blob.bin"), s3_access_key_id=key,
                                 s3_secret_access_key=secret, s3_session_token="PLANTEDtok",
                                 pickle_secrets=False) as fo:
        data = pickle.dumps(fo)
    assert not any(s.encode() in data for s in (key, secret, "PLANTEDtok"))
