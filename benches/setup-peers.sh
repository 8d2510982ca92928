#!/usr/bin/env bash
# Installs the other readers the cloud benchmark compares with:
#  - Python remfile, fsspec (HTTP, block cache) and h5py from PyPI, in a
#    virtual environment under target/peers-venv;
#  - Debian's python3-h5py, the only h5py here built with the ros3 driver
#    (run with the system /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv target/peers-venv
target/peers-venv/bin/pip install --quiet "remfile==0.1.*" "fsspec[http]" requests h5py
if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-h5py
else
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-h5py
fi
target/peers-venv/bin/python -c "import remfile, fsspec, h5py; print('peers ready: h5py', h5py.__version__)"
/usr/bin/python3 -c "import h5py; assert 'ros3' in h5py.registered_drivers(); print('ros3 ready')"
