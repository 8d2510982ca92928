"""A whole remote file to a local one: in pieces over several connections,
resumable after an interruption, verified before it takes its name."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from . import RemoteFile

#: The bytes one request of a download fetches.
PIECE = 8 << 20


def download(url: str, dest: str, *, connections: int = 4, progress: bool = True,
             **options: Any) -> str:
    """Downloads ``url`` to ``dest`` and returns how it was verified.

    The bytes go to ``dest + ".part"``; ``dest + ".part.json"`` records the
    file's size and ETag and the pieces written, so that a download stopped
    (Ctrl-C, a lost connection, a killed process) goes on from there when
    started again, unless the file changed meanwhile (it starts over then).
    At the end the file is verified: its size, its ETag as the server gives
    it now against the one the download began with, and, where the ETag is
    a plain MD5 (S3's for an object uploaded in one part), the MD5 of the
    bytes written. Then ``dest`` takes the file. The files it writes are
    private to the user until they are renamed.
    """
    if connections < 1:
        raise ValueError(f"connections must be 1 or more, not {connections}")
    options.setdefault("metadata_prefetch", False)
    part, state_path = dest + ".part", dest + ".part.json"
    with RemoteFile(url, **options) as remote:
        size, etag = remote.size, remote.etag
        pieces = (size + PIECE - 1) // PIECE
        done = _resumed(state_path, part, size, etag)
        fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        lock = threading.Lock()
        written = [sum(min(PIECE, size - i * PIECE) for i in done)]
        try:
            os.ftruncate(fd, size)
            bar = None
            if progress:
                from . import _progress

                bar = _progress.Bar(size, "download", "B", unit_is_bytes=True)
                bar.to(written[0], written[0])

            def fetch(i: int) -> None:
                start = i * PIECE
                data = remote.read_at(start, min(PIECE, size - start))
                os.pwrite(fd, data, start)
                with lock:
                    done.add(i)
                    written[0] += len(data)
                    _save(state_path, size, etag, done)
                    if bar is not None:
                        bar.to(written[0], written[0])

            left = [i for i in range(pieces) if i not in done]
            with ThreadPoolExecutor(connections) as pool:
                for finished in [pool.submit(fetch, i) for i in left]:
                    finished.result()
            os.fsync(fd)
            if bar is not None:
                bar.close()
        finally:
            os.close(fd)
    how = _verify(url, part, size, etag, options)
    os.replace(part, dest)
    os.remove(state_path)
    return how


def _resumed(state_path: str, part: str, size: int, etag: Optional[str]) -> set:
    """The pieces an earlier run wrote, if it downloaded this same file."""
    try:
        with open(state_path) as f:
            state = json.load(f)
        same = state["size"] == size and state["etag"] == etag and etag is not None
        if same and os.path.getsize(part) == size:
            return {int(i) for i in state["done"] if 0 <= int(i) < (size + PIECE - 1) // PIECE}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return set()


def _save(state_path: str, size: int, etag: Optional[str], done: set) -> None:
    tmp = state_path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"size": size, "etag": etag, "piece": PIECE, "done": sorted(done)}, f)
    os.replace(tmp, state_path)


def _verify(url: str, part: str, size: int, etag: Optional[str], options: dict) -> str:
    if os.path.getsize(part) != size:
        raise OSError(f"the download has {os.path.getsize(part)} bytes, not {size}")
    with RemoteFile(url, **options) as again:
        if (again.size, again.etag) != (size, etag):
            os.remove(part)
            raise OSError("the file changed on the server during the download: start again")
    if etag is None or not re.fullmatch(r'"?[0-9a-f]{32}"?', etag):
        return f"{size} bytes, ETag {etag} unchanged" if etag is not None else f"{size} bytes"
    digest = hashlib.md5(usedforsecurity=False)
    with open(part, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != etag.strip('"'):
        os.remove(part)
        raise OSError(f"the download's MD5 {digest.hexdigest()} is not its ETag {etag}")
    return f"{size} bytes, MD5 equal to the ETag"
