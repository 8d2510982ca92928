#!/usr/bin/env bash
# Installs what the cloud benchmark needs beyond the crate:
#  - Python remfile, fsspec (HTTP, block cache) and h5py from PyPI, the other
#    readers, and pynwb, which writes the benchmark's NWB files as real NWB
#    files are made, in a virtual environment under target/peers-venv;
#  - Debian's python3-h5py, the only h5py here built with the ros3 driver
#    (run with the system /usr/bin/python3), and hdf5-tools, whose
#    `h5repack -L` rewrites the pynwb file in the latest file format;
#  - the remfile_hdf5 wheel from target/wheels, if built.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv target/peers-venv
target/peers-venv/bin/pip install --quiet "remfile==0.1.*" "fsspec[http]" requests h5py pynwb netCDF4 tables h5netcdf anndata
# The Python package, if its wheel was built (bash .ci/run builds it).
if ls target/wheels/remfile_hdf5-*.whl >/dev/null 2>&1; then
    target/peers-venv/bin/pip install --quiet --force-reinstall --no-deps target/wheels/remfile_hdf5-*.whl
fi
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-h5py hdf5-tools
target/peers-venv/bin/python -c "import remfile, fsspec, h5py, pynwb; print('peers ready: h5py', h5py.__version__, 'pynwb', pynwb.__version__)"
/usr/bin/python3 -c "import h5py; assert 'ros3' in h5py.registered_drivers(); print('ros3 ready')"
command -v h5repack >/dev/null && echo "h5repack ready"
