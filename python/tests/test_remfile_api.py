"""Python remfile's interface: its documented usage runs with
``import remfile_hdf5 as remfile`` and nothing else changed, and an object
with ``get_url()`` renews a URL that expired."""

import os
import stat
import subprocess
import sys
import textwrap
import urllib.request

import h5py
import numpy as np
import pytest

import remfile_hdf5
import remfile_hdf5 as remfile


def test_remfiles_documented_usage_runs_with_the_import_changed(server, files, tmp_path):
    # Python remfile's README, with its URLs this server's and its prints
    # checks against the local files.
    cache = tmp_path / "remfile_test_cache"
    script = textwrap.dedent(f"""
        import h5py
        import pynwb
        import remfile_hdf5 as remfile

        url = {server.url("data.h5")!r}

        # open for reading with h5py
        file = remfile.File(url)
        with h5py.File(file, 'r') as f:
            print(sorted(f['/'].keys()) == sorted(h5py.File({os.path.join(files, "data.h5")!r}, 'r').keys()))

        # with a disk cache
        cache_dirname = {str(cache)!r}
        disk_cache = remfile.DiskCache(cache_dirname)
        file = remfile.File(url, disk_cache=disk_cache)
        with h5py.File(file, 'r') as f:
            print(float(f['big'][:1000].sum()))

        # an NWB file through pynwb
        file = remfile.File({server.url("session.nwb")!r})
        with h5py.File(file, 'r') as f:
            with pynwb.NWBHDF5IO(file=f, mode='r', load_namespaces=True) as io:
                nwbfile = io.read()
                print(nwbfile.identifier)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    with h5py.File(os.path.join(files, "data.h5"), "r") as here:
        big = float(here["big"][:1000].sum())
    import pynwb
    with pynwb.NWBHDF5IO(os.path.join(files, "session.nwb"), "r") as io:
        identifier = io.read().identifier
    assert out.stdout.split("\n")[:3] == ["True", str(big), identifier], out.stdout
    # The disk cache is the engine's: private to the user, and it holds the file.
    assert stat.S_IMODE(os.stat(cache).st_mode) & 0o077 == 0
    assert sum(len(f) for _, _, f in os.walk(cache)) > 0


def test_remfiles_arguments_are_taken(server, files):
    url = server.url("blob.bin")
    size = os.path.getsize(os.path.join(files, "blob.bin"))
    f = remfile.File(
        url, verbose=False, _min_chunk_size=128 * 1024, _max_cache_size=64 << 20,
        _chunk_increment_factor=1.7, _bytes_per_thread=4 << 20, _max_threads=3,
        _max_chunk_size=8 << 20, _impose_request_failures_for_testing=False,
        _size=size, _use_session=False,
    )
    assert isinstance(f, remfile_hdf5.RemoteFile)
    assert f.length == f.size == size
    f.seek(size - 10)
    with open(os.path.join(files, "blob.bin"), "rb") as here:
        here.seek(size - 10)
        assert f.read(10) == here.read(10)
    f.close()
    with pytest.raises(ValueError, match="not the 5"):
        remfile.File(url, _size=5)
    # remfile's own DiskCache is taken too (its directory).
    assert remfile_hdf5._remfile_api._cache_dir(type("D", (), {"_dirname": "/x"})()) == "/x"


class Signer:
    """A presigned URL's source: each URL it gives is valid until the
    server's next expiry."""

    def __init__(self, server, name):
        self.server, self.name = server, name
        # URLs signed before now are refused: this signer's are the newest.
        self.asked = int(urllib.request.urlopen(f"{server.base}/__expire").read())

    def get_url(self):
        self.asked += 1
        return f"{self.server.base}/{self.name}?token={self.asked - 1}&X-Amz-Signature=secret"


def test_get_url_renews_an_expired_url(server, files):
    signer = Signer(server, "blob.bin")
    with open(os.path.join(files, "blob.bin"), "rb") as here:
        data = here.read()
    first = signer.asked
    f = remfile.File(signer, _min_chunk_size=64 * 1024)
    assert signer.asked == first + 1
    assert f.read_at(10, 100) == data[10:100 + 10]
    urllib.request.urlopen(f"{server.base}/__expire").read()  # the URL expires
    mark = server.mark()
    assert f.read_at(2_000_000, 5000) == data[2_000_000:2_005_000]
    assert signer.asked == first + 2, "asked once more, for the refused URL"
    assert len([r for r in server.requests_since(mark) if r[0] == "GET"]) >= 2
    # The driver through h5py, with a provider too: a file object.
    h5 = Signer(server, "data.h5")
    with h5py.File(remfile.File(h5), "r") as remote, \
            h5py.File(os.path.join(files, "data.h5"), "r") as local:
        np.testing.assert_array_equal(remote["big"][:100], local["big"][:100])


def test_a_script_may_leave_a_file_over_a_provider_open(server):
    # The provider's method's globals hold the h5py file: a cycle through
    # HDF5 that Python never collects; the exit closes it in time.
    script = textwrap.dedent(f"""
        import h5py
        import remfile_hdf5 as remfile

        class Signer:
            def get_url(self):
                return {server.url("data.h5")!r}

        f = h5py.File(remfile.File(Signer()), "r")
        print(f["big"][:3].tolist())
    """)
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, (out.returncode, out.stderr)
