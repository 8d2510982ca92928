"""A range server on 127.0.0.1 for the tests: serves the files of one
directory with range requests and ETags, answers 404 for others, keeps
connections alive, and lists the requests it served at /__log (as JSON).

Usage: range_server.py DIR [DELAY_MS] (prints its base URL, then serves until
killed; each answer DELAY_MS late, if given).
"""

import http.server
import json
import os
import re
import sys
import threading
import time


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _serve(self, body):
        server = self.server
        path = self.path.split("?", 1)[0]
        if path == "/__log":
            with server.lock:
                payload = json.dumps(server.log).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        with server.lock:
            server.log.append((self.command, path, self.headers.get("Range")))
        time.sleep(server.delay)
        name = os.path.join(server.root, os.path.basename(path))
        if not os.path.isfile(name):
            payload = b"no such file"
            self.send_response(404)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if body:
                self.wfile.write(payload)
            return
        size = os.path.getsize(name)
        etag = '"%x-%x"' % (size, int(os.path.getmtime(name)))
        wanted = self.headers.get("Range")
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted or "")
        if m is None:
            start, end, status = 0, size - 1, 200
        else:
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("Content-Length", str(end - start + 1))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if body:
            with open(name, "rb") as f:
                f.seek(start)
                left = end - start + 1
                while left:
                    chunk = f.read(min(left, 1 << 20))
                    self.wfile.write(chunk)
                    left -= len(chunk)

    def do_GET(self):
        self._serve(True)

    def do_HEAD(self):
        self._serve(False)


def main():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.root = sys.argv[1]
    httpd.delay = int(sys.argv[2]) / 1000 if len(sys.argv) > 2 else 0
    httpd.log = []
    httpd.lock = threading.Lock()
    host, port = httpd.server_address
    print(f"http://{host}:{port}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
