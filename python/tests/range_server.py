"""A range server on 127.0.0.1 for the tests: serves the files of one
directory with range requests and ETags, answers 404 for others, keeps
connections alive, and lists the requests it served at /__log (as JSON),
their headers at /__headers, and when each came and was answered at /__times.

Usage: range_server.py DIR [DELAY_MS] (prints its base URL, then serves until
killed; each answer DELAY_MS late, if given).

For tests of waits and failures:
* ``?delay_ms=N`` in a file's URL delays each answer for it N ms;
* ``/__stall?on`` makes every request for bytes past the first 128 KiB wait
  without an answer until ``/__stall?off`` (at most 60 s);
* ``/__stall?hold`` makes them wait until their client hangs up (at most
  60 s), whatever comes after: ``/__stall?off`` then serves new requests
  only. ``/__held`` says how many wait now and how many were hung up on.
* a file named ``status-NNN...`` is answered with that status;
* a URL with ``token=N`` in its query is refused (403) once ``/__expire``
  has been asked for more than N times: a presigned URL that expired.
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

    def _send_json(self, value):
        """Answers 200 with `value` as JSON."""
        payload = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _serve(self, body):
        server = self.server
        path, _, query = self.path.partition("?")
        if path == "/__stall":
            server.stalling = query in ("on", "hold")
            server.holding = query == "hold"
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/__held":
            with server.lock:
                payload = {"now": server.held, "hung_up": server.hung_up}
            self._send_json(payload)
            return
        if path == "/__peak":
            # The most requests for files answered at once, since the last ask.
            with server.lock:
                payload = server.peak
                server.peak = server.in_flight
            self._send_json(payload)
            return
        if path == "/__expire":
            # Every URL signed before now is refused from now on.
            with server.lock:
                server.token_floor += 1
                payload = server.token_floor
            self._send_json(payload)
            return
        if path == "/__times":
            # When each request logged came (its headers read) and was
            # answered (its body written), in seconds.
            with server.lock:
                payload = list(server.times)
            self._send_json(payload)
            return
        if path in ("/__log", "/__headers"):
            with server.lock:
                payload = list(server.log if path == "/__log" else server.headers_log)
            self._send_json(payload)
            return
        came = time.monotonic()
        with server.lock:
            server.log.append((self.command, path, self.headers.get("Range")))
            server.times.append(None)
            entry = len(server.times) - 1
            server.headers_log.append({k.lower(): v for k, v in self.headers.items()})
            server.in_flight += 1
            server.peak = max(server.peak, server.in_flight)
        try:
            self._answer(body, path, query)
        finally:
            with server.lock:
                server.in_flight -= 1
                server.times[entry] = (came, time.monotonic())

    def _answer(self, body, path, query):
        server = self.server
        time.sleep(server.delay)
        delay = re.search(r"(?:^|&)delay_ms=(\d+)", query)
        if delay:
            time.sleep(int(delay.group(1)) / 1000)
        wanted = self.headers.get("Range")
        first = re.match(r"bytes=(\d+)", wanted or "")
        if first and int(first.group(1)) >= 128 << 10:
            if server.holding:
                self._hold_until_hung_up()
                return
            until = time.monotonic() + 60
            while server.stalling and time.monotonic() < until:
                time.sleep(0.01)
        status = re.match(r"status-(\d{3})", os.path.basename(path))
        code = int(status.group(1)) if status else None
        token = re.search(r"(?:^|&)token=(\d+)", query)
        if token and int(token.group(1)) < server.token_floor:
            code = 403
        if code is not None:
            payload = b"<Error><Code>AccessDenied</Code></Error>"
            self.send_response(code)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if body:
                self.wfile.write(payload)
            return
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

    def _hold_until_hung_up(self):
        """Answers nothing until the client closes the connection."""
        server = self.server
        with server.lock:
            server.held += 1
        until = time.monotonic() + 60
        hung_up = False
        try:
            self.connection.settimeout(0.02)
            while time.monotonic() < until:
                try:
                    if not self.connection.recv(1):
                        hung_up = True
                        break
                except (TimeoutError, BlockingIOError):
                    continue
                except OSError:
                    hung_up = True
                    break
        finally:
            with server.lock:
                server.held -= 1
                server.hung_up += hung_up
            self.close_connection = True

    def do_GET(self):
        self._serve(True)

    def do_HEAD(self):
        self._serve(False)


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A client that stops reading (a read interrupted, a timeout) is
        # what the tests do on purpose.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


def main():
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.root = sys.argv[1]
    httpd.delay = int(sys.argv[2]) / 1000 if len(sys.argv) > 2 else 0
    httpd.log = []
    httpd.headers_log = []
    httpd.stalling = False
    httpd.holding = False
    httpd.held = 0
    httpd.hung_up = 0
    httpd.in_flight = 0
    httpd.peak = 0
    httpd.token_floor = 0
    httpd.times = []
    httpd.lock = threading.Lock()
    host, port = httpd.server_address
    print(f"http://{host}:{port}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
