"""Peak memory of h5py reading hostile HDF5 files through the remfile plugin.

Serves every input of the driver's fuzz corpus (fuzz/corpus/hdf5_driver: two
bytes of choices, then the file; the first byte says what size the server
claims, up to 2^50 bytes, zeros past the file) from a local server, and in a
fresh Python process per file opens it with h5py through the plugin
(HDF5_DRIVER=remfile), walks every object and attribute and reads each
dataset's first values, then prints the process's peak RSS. HDF5's own errors
are expected; a crash or a peak far past the cache's budget is not.

    python benches/hostile_rss.py PLUGIN_DIR [CORPUS_DIR]

PLUGIN_DIR holds libremfile_hdf5.so (target/hdf5-plugin-release after
`cargo test --features hdf5 --test plugin`, or target/release). Needs h5py.
"""

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, resource, sys
import h5py
import numpy as np

out = {"opened": False, "errors": 0, "objects": 0}
try:
    f = h5py.File(sys.argv[1], "r")
    out["opened"] = True
    def visit(name, obj):
        out["objects"] += 1
        try:
            for k in obj.attrs:
                obj.attrs[k]
            if isinstance(obj, h5py.Dataset) and obj.shape and obj.size:
                obj[(slice(0, 16),) + (slice(0, 16),) * (len(obj.shape) - 1)]
        except Exception:
            out["errors"] += 1
    try:
        f.visititems(visit)
    except Exception:
        out["errors"] += 1
    f.close()
except Exception:
    out["errors"] += 1
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def claimed_len(kind: int, file_len: int) -> int:
    """The size the fuzz harness serves an input's file at."""
    kind %= 8
    if kind <= 3:
        return file_len
    return {4: file_len + (1 << 20), 5: file_len + (1 << 32), 6: 1 << 40}.get(kind, 1 << 50)


class Sparse(http.server.BaseHTTPRequestHandler):
    """Range GETs of `self.server.file`, `self.server.size` bytes long."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (the standard library's name)
        data, size = self.server.file, self.server.size
        spec = self.headers.get("Range", "bytes=0-")[len("bytes="):]
        first, _, last = spec.partition("-")
        if not first:  # a suffix: the last bytes
            first, last = max(0, size - int(last)), size - 1
        first = int(first)
        last = min(int(last) if last else size - 1, size - 1)
        if first >= size:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = data[first : last + 1]
        body += bytes(last + 1 - first - len(body))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"hostile"')
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    plugin_dir = Path(sys.argv[1]).resolve()
    corpus = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "fuzz/corpus/hdf5_driver"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sparse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/f.h5"
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(plugin_dir), HDF5_DRIVER="remfile")
    for k in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        env.pop(k, None)
    worst = 0.0
    for path in sorted(corpus.iterdir()):
        raw = path.read_bytes()
        if len(raw) < 3 or path.name.startswith("open-finding-"):
            continue
        server.file, server.size = raw[2:], claimed_len(raw[0], len(raw) - 2)
        run = subprocess.run(
            [sys.executable, "-c", CHILD, url], env=env, capture_output=True, text=True, timeout=300
        )
        line = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
        result = json.loads(line) if line.startswith("{") else {"exit": run.returncode}
        result["file"], result["claimed"] = path.name, server.size
        worst = max(worst, result.get("peak_rss_mb", float("inf")))
        print(json.dumps(result), flush=True)
    print(json.dumps({"worst_peak_rss_mb": worst}))
    server.shutdown()


if __name__ == "__main__":
    main()
