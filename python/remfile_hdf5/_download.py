"""A whole remote file to a local one: in pieces over several connections,
resumable after an interruption, verified before it takes its name."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Optional

from . import RemoteFile

#: The bytes one request of a download fetches.
PIECE = 8 << 20


def download(url: str, dest: str, *, connections: int = 4, progress: bool = True,
             **options: Any) -> str:
    """Downloads ``url`` to ``dest`` and returns how it was verified.

    The bytes go to ``dest + ".part"``; ``dest + ".part.json"`` records the
    file's size, its ETag, the piece size and a digest of each piece
    written (after the piece is on disk), so that a download stopped
    (Ctrl-C, a lost connection, a killed process) goes on from there when
    started again: pieces whose bytes on disk match their digest are kept,
    the rest fetched again; a record of another version of the file (or
    another piece size) starts over. Ctrl-C stops the requests under way.
    At the end the file is verified: its size, and its ETag as the server
    gives it now against the one the download began with; where the ETag
    looks like an MD5 (S3's for an object uploaded in one part, unencrypted
    or with S3's own keys), the MD5 of the bytes is compared too, and said
    when it differs (other encryption makes such ETags that are not the
    body's MD5). Then ``dest`` takes the file. The files it writes are
    private to the user until ``dest`` takes them; it follows no link.
    """
    if connections < 1:
        raise ValueError(f"connections must be 1 or more, not {connections}")
    options.setdefault("metadata_prefetch", False)
    part, state_path = dest + ".part", dest + ".part.json"
    remote = RemoteFile(url, **options)
    try:
        size, etag = remote.size, remote.etag
        pieces = (size + PIECE - 1) // PIECE
        fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            _own_file(fd, part)
            done = _resumed(state_path, fd, size, etag)
            _fetch(remote, fd, state_path, size, etag, pieces, done, connections, progress)
        finally:
            os.close(fd)
    finally:
        remote.close()
    how = _verify(url, part, size, etag, options)
    os.replace(part, dest)
    os.remove(state_path)
    return how


def _own_file(fd: int, path: str) -> None:
    """Refuses a part file that is not the user's own, private, single file."""
    st = os.fstat(fd)
    if st.st_uid != os.getuid() or st.st_nlink != 1 or not stat.S_ISREG(st.st_mode):
        raise OSError(f"{path} is not a file of this user's own: remove it and start again")
    os.fchmod(fd, 0o600)


def _fetch(remote: RemoteFile, fd: int, state_path: str, size: int, etag: Optional[str],
           pieces: int, done: Dict[int, str], connections: int, progress: bool) -> None:
    lock = threading.Lock()
    written = [sum(min(PIECE, size - i * PIECE) for i in done)]
    os.ftruncate(fd, size)
    bar = None
    if progress:
        from . import _progress

        bar = _progress.Bar(size, "download", "B", unit_is_bytes=True)
        bar.to(written[0], written[0])

    def fetch(i: int) -> None:
        start = i * PIECE
        data = remote.read_at(start, min(PIECE, size - start))
        view = memoryview(data)
        at = start
        while view:
            n = os.pwrite(fd, view, at)
            view, at = view[n:], at + n
        # On disk before the record says so: a crash leaves no hole marked
        # done.
        os.fdatasync(fd)
        with lock:
            done[i] = _digest(data)
            written[0] += len(data)
            _save(state_path, size, etag, done)
            if bar is not None:
                bar.to(written[0], written[0])

    pool = ThreadPoolExecutor(connections)
    try:
        for finished in [pool.submit(fetch, i) for i in range(pieces) if i not in done]:
            finished.result()
    except BaseException:
        # Ctrl-C or a failed piece: no piece starts, and the requests under
        # way end (the file closes under them); what is written stays.
        pool.shutdown(wait=False, cancel_futures=True)
        remote.close()
        pool.shutdown(wait=True)
        raise
    pool.shutdown()
    if bar is not None:
        bar.close()


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _resumed(state_path: str, fd: int, size: int, etag: Optional[str]) -> Dict[int, str]:
    """The pieces an earlier run wrote of this same file, as far as the
    part file still holds them."""
    try:
        sfd = os.open(state_path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(sfd) as f:
            state = json.load(f)
        pieces = (size + PIECE - 1) // PIECE
        same = (state["size"] == size and state["etag"] == etag and etag is not None
                and not etag.startswith("W/") and state["piece"] == PIECE
                and os.fstat(fd).st_size == size)
        if not same:
            return {}
        kept = {}
        for key, digest in dict(state["done"]).items():
            i = int(key)
            if not 0 <= i < pieces:
                continue
            data = os.pread(fd, min(PIECE, size - i * PIECE), i * PIECE)
            if _digest(data) == digest:
                kept[i] = digest
        return kept
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _save(state_path: str, size: int, etag: Optional[str], done: Dict[int, str]) -> None:
    tmp = state_path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"size": size, "etag": etag, "piece": PIECE,
                   "done": {str(i): d for i, d in done.items()}}, f)
    os.replace(tmp, state_path)


def _verify(url: str, part: str, size: int, etag: Optional[str], options: dict) -> str:
    if os.path.getsize(part) != size:
        raise OSError(f"the download has {os.path.getsize(part)} bytes, not {size}")
    with RemoteFile(url, **options) as again:
        if (again.size, again.etag) != (size, etag):
            os.remove(part)
            raise OSError("the file changed on the server during the download: start again")
    unchanged = f"{size} bytes, ETag {etag} unchanged" if etag is not None else f"{size} bytes"
    if etag is None or not re.fullmatch(r'"?[0-9a-f]{32}"?', etag):
        return unchanged
    digest = hashlib.md5(usedforsecurity=False)
    with open(part, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() == etag.strip('"'):
        return f"{size} bytes, MD5 equal to the ETag"
    return f"{unchanged}; the ETag is not the bytes' MD5 (an encrypted or multipart object's)"
