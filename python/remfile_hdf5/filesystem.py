"""An fsspec filesystem that reads through remfile_hdf5's engine.

Paths are whole URLs (``https://``, ``http://``, ``s3://``)::

    import fsspec  # type: ignore[import-untyped]
    fs = fsspec.filesystem("remfile")          # no import needed: an entry point
    with fs.open("https://example.org/data.nc") as f:
        ...                                    # a RemoteFile: h5py, h5netcdf, xarray
    fs.cat_ranges([url, url], [0, 4096], [8, 4104])   # one round for all

Keyword arguments are the package's options (``disk_cache=...``,
``cache_capacity=...``), applied to every file the filesystem opens.

:func:`route_fsspec` makes fsspec's own ``http``, ``https`` and ``s3``
protocols this filesystem for the whole process, so that code which hands
plain URLs to fsspec (xarray, pandas, dask, kerchunk) reads through the
engine unchanged.

What it serves: ``open`` (read-only), ``cat_file``, ``cat_ranges``, ``cat``,
``info``, ``size``, ``exists``, ``isfile``, ``ukey``, ``modified``, ``get``
and ``ls`` of a file (the file itself). It lists no directory or bucket:
``ls`` of a prefix is a ``NotImplementedError``.
"""

from __future__ import annotations

import email.utils
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from fsspec.spec import AbstractFileSystem  # type: ignore[import-untyped]
from fsspec.utils import stringify_path  # type: ignore[import-untyped]

from . import RemoteFile, options_string

__all__ = ["RemfileFileSystem", "route_fsspec", "unroute_fsspec", "RoutedHTTP", "RoutedHTTPS", "RoutedS3", "RoutedS3A"]

# Keywords fsspec itself passes to `open` (and some callers to the
# constructor) that mean nothing to the engine: its blocks, cache and
# read-ahead are its own.
_FSSPEC_OPEN_KEYS = {"block_size", "cache_type", "cache_options", "autocommit", "size"}
_FSSPEC_INIT_KEYS = {
    "skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths",
    "asynchronous", "loop",
}
# s3fs's and fsspec HTTP's usual storage options, as the engine's.
_S3FS_KEYS = {
    "anon": "s3_anonymous", "key": "s3_access_key_id", "secret": "s3_secret_access_key",
    "token": "s3_session_token", "profile": "s3_profile", "requester_pays": "s3_requester_pays",
}
# Handles kept open for `cat_*` (each holds connections and a block
# cache): the most recently used, each reused while it is younger than
# `_FRESH` seconds (then the file is opened again, which says whether it
# changed). `info` always opens it again.
_MOST_HANDLES = 64
_FRESH = 10.0
# Files read at once by one `cat_ranges`.
_MOST_FILES_AT_ONCE = 16


def _engine_options(protocol: str, storage_options: Dict[str, Any]) -> Dict[str, Any]:
    """The engine's options for fsspec storage options: s3fs's and fsspec
    HTTP's usual keys translated, the engine's own passed on (a key neither
    knows is a ``TypeError`` when the first file opens, naming it)."""
    options = dict(storage_options)
    for key, engine_key in _S3FS_KEYS.items():
        if key in options:
            options[engine_key] = options.pop(key)
    client = dict(options.pop("client_kwargs", None) or {})
    if "endpoint_url" in options:
        client["endpoint_url"] = options.pop("endpoint_url")
    for key, engine_key in (("endpoint_url", "s3_endpoint"), ("region_name", "s3_region"),
                            ("headers", "headers")):
        if key in client:
            options[engine_key] = client.pop(key)
    if client:
        raise TypeError(f"client_kwargs {sorted(client)} mean nothing to remfile "
                        "(it takes endpoint_url, region_name and headers)")
    options_string(**options)  # a wrong key or value says so now
    return options


def _bounds(start: Optional[int], end: Optional[int], size: int) -> Tuple[int, int]:
    """fsspec's range convention: ``None`` is the file's start or end, a
    negative value counts from the end; the range is clipped to the file."""
    start = 0 if start is None else (size + start if start < 0 else start)
    end = size if end is None else (size + end if end < 0 else end)
    start, end = min(max(start, 0), size), min(max(end, 0), size)
    return start, max(start, end)


class RemfileFileSystem(AbstractFileSystem):
    """Files on HTTP(S) servers and in S3 buckets, by URL, read through
    remfile_hdf5's engine (block cache, metadata prefetch of HDF5 files,
    disk cache, retries). Read-only."""

    protocol: Any = ("remfile",)
    root_marker = ""

    def __init__(self, *args: Any, **storage_options: Any) -> None:
        fsspec_own = {k: storage_options.pop(k) for k in list(storage_options) if k in _FSSPEC_INIT_KEYS}
        super().__init__(*args, **fsspec_own)
        protocol = self.protocol if isinstance(self.protocol, str) else self.protocol[0]
        self._engine = _engine_options(protocol, storage_options)
        self._handles: "OrderedDict[str, Tuple[RemoteFile, float]]" = OrderedDict()
        self._handles_lock = threading.Lock()

    # Paths -----------------------------------------------------------------

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = stringify_path(path)
        if path.startswith("remfile://"):
            path = path[len("remfile://"):]
        if path.startswith("s3a://"):
            path = "s3://" + path[len("s3a://"):]
        # s3fs's convention: "bucket/key" is s3://bucket/key.
        if any(p.startswith("s3") for p in cls._protocols()) and "://" not in path and path:
            path = "s3://" + path.lstrip("/")
        return path

    @classmethod
    def _protocols(cls) -> Tuple[str, ...]:
        return (cls.protocol,) if isinstance(cls.protocol, str) else tuple(cls.protocol)

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> Dict[str, Any]:
        return {}

    @classmethod
    def _parent(cls, path: str) -> str:
        parent = super()._parent(path)
        return parent if "://" in parent and not parent.endswith("://") else ""

    def unstrip_protocol(self, name: str) -> str:
        return name

    def _url(self, path: Any) -> str:
        url = self._strip_protocol(path)
        if "://" not in url:
            raise ValueError(f"{url!r} is not a URL (https://, http:// or s3://)")
        return url

    # Files -------------------------------------------------------------------

    def _handle(self, path: Any, fresh: bool = False) -> RemoteFile:
        """The filesystem's own open file for ``path`` (shared by its
        ``cat_*`` and ``info`` calls, and their block cache); opened again
        if ``fresh`` or older than `_FRESH` seconds."""
        url = self._url(path)
        now = time.monotonic()
        with self._handles_lock:
            kept = self._handles.get(url)
            if kept is not None and not fresh and not kept[0].closed and now - kept[1] < _FRESH:
                self._handles.move_to_end(url)
                return kept[0]
        # Opened without the lock: an open is a round trip.
        handle = RemoteFile(url, **self._engine)
        with self._handles_lock:
            self._handles[url] = (handle, now)
            self._handles.move_to_end(url)
            evicted = [self._handles.popitem(last=False) for _ in range(len(self._handles) - _MOST_HANDLES)]
        # Let go of outside the lock (not closed: a thread may be reading
        # through one; the last reference closes it).
        del evicted
        return handle

    def invalidate_cache(self, path: Optional[str] = None) -> None:
        """Forgets the open files (of ``path``, or all): the next call opens
        them again."""
        with self._handles_lock:
            if path is None:
                self._handles.clear()
            else:
                self._handles.pop(self._url(path), None)
        super().invalidate_cache(path)

    def _open(self, path: Any, mode: str = "rb", **kwargs: Any) -> RemoteFile:
        if mode != "rb":
            raise NotImplementedError(f"remfile files are read-only: mode {mode!r}")
        options = {k: v for k, v in kwargs.items() if k not in _FSSPEC_OPEN_KEYS}
        return RemoteFile(self._url(path), **{**self._engine, **options})

    def cat_file(self, path: Any, start: Optional[int] = None, end: Optional[int] = None,
                 **kwargs: Any) -> bytes:
        handle = self._handle(path)
        start, end = _bounds(start, end, handle.size)
        return handle.read_at(start, end - start)

    def cat_ranges(self, paths: List[Any], starts: Any, ends: Any, max_gap: Optional[int] = None,
                   on_error: str = "return", **kwargs: Any) -> List[Any]:
        """The bytes of each ``(path, start, end)``: each file's ranges in one
        request round, the files at once (at most 16 at a time). ``max_gap``
        is ignored: the engine merges ranges as the link makes worth it."""
        if not isinstance(paths, list):
            raise TypeError("paths must be a list")
        starts = starts if isinstance(starts, list) else [starts] * len(paths)
        ends = ends if isinstance(ends, list) else [ends] * len(paths)
        if not (len(starts) == len(ends) == len(paths)):
            raise ValueError("paths, starts and ends differ in length")
        by_file: "OrderedDict[str, List[int]]" = OrderedDict()
        out: List[Any] = [None] * len(paths)
        for i, path in enumerate(paths):
            try:
                by_file.setdefault(self._url(path), []).append(i)
            except ValueError as error:
                if on_error != "return":
                    raise
                out[i] = error

        def one_file(url: str) -> None:
            indices = by_file[url]
            try:
                handle = self._handle(url)
                ranges = [_bounds(starts[i], ends[i], handle.size) for i in indices]
                parts: Sequence[Any] = handle.read_ranges(ranges)
            except Exception as error:  # noqa: BLE001 - handed to the caller per fsspec
                if on_error != "return":
                    raise
                parts = [error] * len(indices)
            for i, part in zip(indices, parts):
                out[i] = part

        if len(by_file) == 1:
            one_file(next(iter(by_file)))
        else:
            with ThreadPoolExecutor(min(len(by_file), _MOST_FILES_AT_ONCE)) as pool:
                for done in [pool.submit(one_file, url) for url in by_file]:
                    done.result()
        return out

    # What a file is -----------------------------------------------------------

    def info(self, path: Any, **kwargs: Any) -> Dict[str, Any]:
        # Opened again: what the server says now (a changed file's size and
        # ETag), as fsspec's HTTP filesystem asks each time.
        handle = self._handle(path, fresh=True)
        info: Dict[str, Any] = {"name": self._url(path), "size": handle.size, "type": "file"}
        if handle.etag is not None:
            info["ETag"] = handle.etag
        if handle.last_modified is not None:
            info["LastModified"] = handle.last_modified
        return info

    def expand_path(self, path: Any, recursive: bool = False, maxdepth: Optional[int] = None,
                    **kwargs: Any) -> List[str]:
        # URLs as given: a query's "?" is no wildcard, and nothing lists.
        paths = path if isinstance(path, (list, tuple)) else [path]
        return [self._url(p) for p in paths]

    def ls(self, path: Any, detail: bool = True, **kwargs: Any) -> List[Any]:
        url = self._url(path)
        if url.endswith("/"):
            raise NotImplementedError(
                f"remfile reads files by URL and lists no directory or bucket: {url!r}"
            )
        info = self.info(url)
        return [info] if detail else [info["name"]]

    def ukey(self, path: Any) -> str:
        info = self.info(path)
        return info.get("ETag") or f"{info['size']}-{info.get('LastModified', '')}"

    def modified(self, path: Any) -> Any:
        stamp = self.info(path).get("LastModified")
        if stamp is None:
            raise NotImplementedError("the server gave no Last-Modified date")
        return email.utils.parsedate_to_datetime(stamp)

    # Writing -------------------------------------------------------------------

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("remfile files are read-only")

    mkdir = makedirs = rm_file = _rm = cp_file = pipe_file = put_file = touch = _read_only


_ROUTED: Dict[str, Any] = {}
_ROUTE_DEFAULTS: Dict[str, Dict[str, Any]] = {}
_ROUTING = threading.Lock()


class _Routed(RemfileFileSystem):
    """The filesystem in place of fsspec's own for a protocol, with the
    options :func:`route_fsspec` gave. A class of the module per protocol,
    so that instances pickle (dask, spawned processes)."""

    def __init__(self, *args: Any, **storage_options: Any) -> None:
        protocol = self.protocol[0]
        super().__init__(*args, **{**_ROUTE_DEFAULTS.get(protocol, {}), **storage_options})


class RoutedHTTP(_Routed):
    """:class:`RemfileFileSystem` as fsspec's ``http``."""

    protocol = ("http",)


class RoutedHTTPS(_Routed):
    """:class:`RemfileFileSystem` as fsspec's ``https``."""

    protocol = ("https",)


class RoutedS3(_Routed):
    """:class:`RemfileFileSystem` as fsspec's ``s3``."""

    protocol = ("s3",)


class RoutedS3A(_Routed):
    """:class:`RemfileFileSystem` as fsspec's ``s3a``."""

    protocol = ("s3a",)


_ROUTES = {"http": RoutedHTTP, "https": RoutedHTTPS, "s3": RoutedS3, "s3a": RoutedS3A}


def route_fsspec(protocols: Union[str, Sequence[str]] = ("http", "https", "s3"),
                 **options: Any) -> None:
    """Makes fsspec's ``http``, ``https`` and ``s3`` protocols (or those named;
    ``s3a`` too) this filesystem for the process: ``fsspec.open(url)``,
    ``fsspec.filesystem("https")``, and the libraries that call them
    (xarray, pandas, dask, kerchunk) read through the engine. ``options``
    (the package's, as for :class:`~remfile_hdf5.RemoteFile`) apply to
    every file those open; a library's ``storage_options`` add to them,
    with s3fs's ``anon``, ``key``, ``secret``, ``token``, ``profile`` and
    ``client_kwargs={"endpoint_url": ..., "region_name": ...}`` taken as the
    engine's S3 options. Headers given here go to every server of those
    protocols: give them per filesystem instead where they are secrets.
    :func:`unroute_fsspec` undoes it. The filesystems pickle (for dask and
    spawned processes, which must route too to find them).

    >>> import remfile_hdf5.filesystem
    >>> remfile_hdf5.filesystem.route_fsspec(cache_capacity="1GiB")  # doctest: +SKIP
    >>> xarray.open_dataset(url, engine="h5netcdf")  # doctest: +SKIP
    """
    import fsspec  # type: ignore[import-untyped]

    names = [protocols] if isinstance(protocols, str) else list(protocols)
    for protocol in names:
        if protocol not in _ROUTES:
            raise ValueError(f"remfile serves {sorted(_ROUTES)}, not {protocol!r}")
    options_string(**options)
    with _ROUTING:
        for protocol in names:
            if protocol not in _ROUTED:
                _ROUTED[protocol] = fsspec.registry.get(protocol)
            _ROUTE_DEFAULTS[protocol] = dict(options)
            # Instances made with other defaults are not reused.
            _ROUTES[protocol].clear_instance_cache()
            fsspec.register_implementation(protocol, _ROUTES[protocol], clobber=True)


def unroute_fsspec() -> None:
    """Gives fsspec back the ``http``, ``https`` and ``s3`` implementations
    :func:`route_fsspec` replaced."""
    import fsspec  # type: ignore[import-untyped]
    from fsspec.registry import _registry  # type: ignore[import-untyped]

    with _ROUTING:
        for protocol, before in _ROUTED.items():
            _registry.pop(protocol, None)
            # fsspec imports its own again from `known_implementations`.
            if before is not None:
                fsspec.register_implementation(protocol, before, clobber=True)
            _ROUTES[protocol].clear_instance_cache()
        _ROUTED.clear()
        _ROUTE_DEFAULTS.clear()
