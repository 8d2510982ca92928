"""Files on HTTP(S) servers, read as if they were local.

* ``h5py.File(url, "r", driver="remfile", **options)``: importing this package
  registers the driver with h5py, bound to h5py's own HDF5 library. Only the
  files opened with it use it.
* :func:`open`: the same, as a function (for ``pynwb.NWBHDF5IO(file=...)``).
* :class:`RemoteFile`: a binary file object (``io.RawIOBase``) for any
  library that reads a file object.
* :func:`stats`: what reading a file cost (requests, round trips, bytes).

Options are the driver's configuration keys (:func:`option_keys`), as keyword
arguments: sizes as ``"1GiB"`` or a number of bytes, durations as ``"30s"``
or a number of seconds, switches as ``True`` or ``False``, paths as strings
or path objects. A wrong key or value is a ``ValueError`` naming it.

Errors are ``OSError``\\ s naming the status and the URL (without its query
string); from :class:`RemoteFile` a missing file (HTTP 404) is a
``FileNotFoundError``, a refusal (401, 403) a ``PermissionError``, a timeout a
``TimeoutError``; through h5py, its own ``OSError`` carries the message.
"""

from __future__ import annotations

import datetime
import io
import math
import operator
import os
import threading
from typing import Any, Iterable, Optional, Sequence

from . import _native

__version__ = _native.__version__

__all__ = [
    "RemoteFile",
    "open",
    "stats",
    "option_keys",
    "options_string",
    "hdf5_version",
]

_KEYS = dict(_native.option_keys())
# The kind of each key's value, from the first word its description puts in
# parentheses: "size", "duration", "switch", "count" or "path".
_KINDS = {
    key: (text.split("(", 1)[1].split(";")[0].split(")")[0].split()[0] if "(" in text else "text")
    for key, text in _KEYS.items()
}


def option_keys() -> dict:
    """The options the driver and :class:`RemoteFile` take, with what each sets."""
    return dict(_KEYS)


def _wrong(key: str, why: str) -> ValueError:
    # Worded as the driver's own parser words it.
    return ValueError(f"remfile driver configuration: `{key}`: {why}")


def _value(key: str, value: Any) -> str:
    kind = _KINDS.get(key)
    if kind is None:
        raise _wrong(key, f"unknown key (known: {', '.join(_KEYS)})")
    if isinstance(value, bool):
        if kind != "switch":
            raise _wrong(key, f"expected a {kind}, not {value!r}")
        return "on" if value else "off"
    if kind == "duration":
        if isinstance(value, datetime.timedelta):
            value = value.total_seconds()
        if isinstance(value, (int, float)):
            if not math.isfinite(value) or value < 0:
                raise _wrong(key, f"expected a duration, not {value!r}")
            # Up to the next millisecond: a short timeout is not zero.
            return f"{math.ceil(value * 1000)}ms"
    if kind == "path" and isinstance(value, os.PathLike):
        value = os.fspath(value)
    if kind == "path" and isinstance(value, str):
        value = os.path.expanduser(value)
    if isinstance(value, int) and kind in ("size", "count"):
        if value < 0:
            raise _wrong(key, f"expected a {kind}, not {value!r}")
        return str(value)
    if not isinstance(value, str):
        raise _wrong(key, f"expected a {kind}, not {value!r}")
    if ";" in value or "\0" in value:
        raise _wrong(key, f"{value!r} may not hold ';'")
    return value


def options_string(**options: Any) -> str:
    """The driver's configuration string for ``options`` (as ``HDF5_DRIVER_CONFIG``
    takes it), checked: a ``ValueError`` names a wrong key or value."""
    text = ";".join(f"{key}={_value(key, value)}" for key, value in options.items())
    _native.check_options(text)
    return text


def _bind_h5py():
    import h5py
    import h5py.defs

    version = _native._hdf5_version()
    if version is None:
        # Registering the driver is an HDF5 call, so under h5py's lock; and
        # under no lock of ours: h5py holds its lock when it calls
        # `_set_fapl`, so any lock of ours taken here could be taken in the
        # other order by another thread.
        with h5py._objects.phil:
            version = _native._bind_hdf5(h5py.defs.__file__)
    return h5py, version


def _set_fapl(plist, **options):
    text = options_string(**options)
    _bind_h5py()
    _native._set_driver(plist.id, text)


def hdf5_version() -> Optional[tuple]:
    """The version of the HDF5 library (h5py's) the driver serves, once bound."""
    return _native._hdf5_version()


def open(url: str, mode: str = "r", **options: Any):
    """``h5py.File(url, mode, driver="remfile", **options)``: an HDF5 file on an
    HTTP(S) server, read through the driver. Only mode ``"r"`` is supported.
    Keyword arguments that are h5py's (``rdcc_nbytes``, ``locking``...) go to
    h5py, the others to the driver."""
    import h5py

    if mode != "r":
        raise ValueError(f"remote files are read-only: mode must be 'r', not {mode!r}")
    return h5py.File(url, "r", driver="remfile", **options)


def stats(f) -> Optional[dict]:
    """What reading ``f`` has cost so far: requests, round trips, bytes fetched
    and read, block-cache and disk-cache hits, retries; for an HDF5 file (an
    ``h5py.File`` or any of its objects) also HDF5's reads and what the metadata
    prefetch did. ``None`` for an HDF5 file not opened with the driver."""
    if isinstance(f, RemoteFile):
        return f.stats()
    h5py, _ = _bind_h5py()
    file_id = f.file.id if not isinstance(f, h5py.h5f.FileID) else f
    with h5py._objects.phil:
        return _native._file_stats(file_id.id)


class RemoteFile(io.RawIOBase):
    """A file on an HTTP(S) server as a read-only, seekable binary file object.

    It reads through the crate's ``RemoteFile``: a block cache, a read-ahead
    sized by the link, retries, an optional disk cache, and errors that say
    what went wrong. Reads wait on the network without holding the GIL, so
    other threads run meanwhile. A read at the current position holds the
    position's lock while it waits; :meth:`read_at` and :meth:`read_ranges`
    take none, so several threads read those at once. A child process
    (``fork``) that inherits the object opens the file again on first use,
    with connections and a lock of its own (also when a thread of the
    parent was reading it at the fork).

    >>> with RemoteFile("https://example.com/data.zip", cache="64MiB") as fo:  # doctest: +SKIP
    ...     zipfile.ZipFile(fo).namelist()
    """

    _final_stats: dict = {}

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__()
        self._options = dict(options)
        self._url = url
        self._text = options_string(**options)
        self._pos = 0
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._handle = _native.Remote(url, self._text)

    def _own(self):
        """The handle and the position's lock of this process. A forked
        child opens the file again (it must not share the parent's
        connections) and takes a new lock: the inherited one may be held
        for good by a parent's thread that does not exist here."""
        if self._pid != os.getpid():
            with _reopening:
                if self._pid != os.getpid():
                    self._lock = threading.Lock()
                    self._handle = _native.Remote(self._url, self._text)
                    self._pid = os.getpid()
        return self._handle, self._lock

    def __repr__(self) -> str:
        handle = getattr(self, "_handle", None)
        if handle is None:
            return "<remfile_hdf5.RemoteFile (not opened)>"
        state = " closed" if self.closed else ""
        return f"<remfile_hdf5.RemoteFile {handle.url!r} size={handle.size}{state}>"

    def __reduce__(self):
        # A child process (spawn) opens the file again, with the same options.
        if self.closed:
            raise ValueError("cannot pickle a closed RemoteFile")
        return (_reopen, (self._url, self._options, self.tell()))

    @property
    def url(self) -> str:
        """The URL, without its query string or credentials."""
        return self._handle.url

    @property
    def size(self) -> int:
        """The file's length in bytes."""
        return self._handle.size

    def readable(self) -> bool:
        self._checkClosed()
        return True

    def seekable(self) -> bool:
        self._checkClosed()
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        self._checkClosed()
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._checkClosed()
        offset = operator.index(offset)
        remote, lock = self._own()
        with lock:
            if whence == io.SEEK_SET:
                pos = offset
            elif whence == io.SEEK_CUR:
                pos = self._pos + offset
            elif whence == io.SEEK_END:
                pos = remote.size + offset
            else:
                raise ValueError(f"invalid whence ({whence!r})")
            if pos < 0:
                raise ValueError(f"negative seek position {pos}")
            self._pos = pos
            return pos

    def readinto(self, buffer) -> int:
        self._checkClosed()
        view = memoryview(buffer).cast("B")
        if view.readonly:
            raise TypeError("readinto() needs a writable buffer")
        remote, lock = self._own()
        with lock:
            data = remote.read_at(self._pos, len(view))
            self._pos += len(data)
        view[: len(data)] = data
        return len(data)

    def read(self, size: Optional[int] = -1) -> bytes:
        self._checkClosed()
        remote, lock = self._own()
        with lock:
            left = max(remote.size - self._pos, 0)
            size = left if size is None or size < 0 else min(operator.index(size), left)
            data = remote.read_at(self._pos, size)
            self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def read_at(self, pos: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``pos`` (fewer only at the end of the file),
        leaving the position alone."""
        self._checkClosed()
        pos, size = operator.index(pos), operator.index(size)
        if pos < 0 or size < 0:
            raise ValueError("position and size must not be negative")
        remote, _ = self._own()
        return remote.read_at(pos, min(size, max(remote.size - pos, 0)))

    def read_ranges(self, ranges: Iterable[Sequence[int]]) -> list:
        """The bytes of each ``(start, end)`` range, end exclusive, fetched
        together: one round trip for any number of ranges."""
        self._checkClosed()
        return self._own()[0].read_ranges([(int(a), int(b)) for a, b in ranges])

    def wait_for_background_fetches(self, timeout: float = 60.0) -> bool:
        """Waits up to ``timeout`` seconds for read-ahead fetches to end; whether
        they did."""
        return self._own()[0].wait_for_background_fetches(timeout)

    def stats(self) -> dict:
        """What reading the file has cost so far (see :func:`stats`); after
        :meth:`close`, what it cost in all."""
        if self.closed:
            return dict(self._final_stats)
        return self._own()[0].stats()

    def close(self) -> None:
        handle = getattr(self, "_handle", None)
        if not self.closed and handle is not None:
            self._final_stats = handle.stats() if self._pid == os.getpid() else {}
            # Lets go of the connections (and waits for disk-cache writes)
            # without holding the GIL.
            handle.close()
        super().close()


# Taken while an inherited RemoteFile opens its file again: a new one in
# each child, made while the child has one thread, so that no thread of the
# parent's can hold it there.
_reopening = threading.Lock()


def _after_fork_in_child() -> None:
    global _reopening
    _reopening = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _reopen(url: str, options: dict, pos: int) -> RemoteFile:
    f = RemoteFile(url, **options)
    f.seek(pos)
    return f


def _register() -> None:
    try:
        import h5py
    except ImportError:
        return
    if hasattr(h5py, "register_driver"):
        h5py.register_driver("remfile", _set_fapl)


_register()
