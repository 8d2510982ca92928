"""Python remfile's interface over this package's engine: code written for
``remfile.File(url, disk_cache=remfile.DiskCache(dirname))`` runs with
``import remfile_hdf5 as remfile`` and nothing else changed."""

from __future__ import annotations

import logging
import os
from typing import Any, Optional, Union

from . import RemoteFile, UrlProvider


class DiskCache:
    """A directory the files read keep their bytes in, shared by processes:
    Python remfile's ``DiskCache(dirname)``. Given to :class:`File` as
    ``disk_cache=``, it is the engine's ``disk_cache`` option (a cache that
    checks each file's identity, evicts within ``disk_capacity`` and is
    private to the user), not remfile's one-file-per-chunk layout: the two
    do not share a directory."""

    def __init__(self, dirname: Union[str, "os.PathLike[str]"]) -> None:
        self.dirname = os.fspath(dirname)

    def __repr__(self) -> str:
        return f"DiskCache({self.dirname!r})"


class File(RemoteFile):
    """A remote file as Python remfile's ``remfile.File`` makes one: the same
    arguments, read through this package's engine (a :class:`RemoteFile`).

    ``url`` is a URL or an object with ``get_url()`` (renewed when the server
    refuses the URL it gave). ``disk_cache`` is a :class:`DiskCache`.
    ``verbose=True`` shows the engine's requests and retries on standard
    error (the ``remfile`` logger at ``DEBUG``). Of the underscored
    arguments, ``_min_chunk_size`` is the block size, ``_max_cache_size``
    the cache's capacity, ``_max_chunk_size`` the most a read-ahead fetches
    and ``_size`` the size the file must have; the others (thread counts,
    growth factors, sessions, imposed failures) are taken and change
    nothing: the engine sizes its requests and connections by the link.
    The package's own options may follow as keyword arguments.

    >>> import remfile_hdf5 as remfile
    >>> import h5py
    >>> f = remfile.File(url, disk_cache=remfile.DiskCache("/tmp/cache"))  # doctest: +SKIP
    >>> h5py.File(f, "r")["/"].keys()  # doctest: +SKIP
    """

    def __init__(
        self,
        url: Union[str, UrlProvider],
        *,
        verbose: bool = False,
        disk_cache: Optional[DiskCache] = None,
        _min_chunk_size: Optional[int] = None,
        _max_cache_size: Optional[int] = None,
        _chunk_increment_factor: Any = None,
        _bytes_per_thread: Any = None,
        _max_threads: Any = None,
        _max_chunk_size: Optional[int] = None,
        _impose_request_failures_for_testing: bool = False,
        _size: Optional[int] = None,
        _use_session: bool = True,
        **options: Any,
    ) -> None:
        mapped: dict = {}
        if disk_cache is not None:
            mapped["disk_cache"] = _cache_dir(disk_cache)
        if _min_chunk_size is not None:
            mapped["block_size"] = int(_min_chunk_size)
        if _max_cache_size is not None:
            mapped["cache_capacity"] = int(_max_cache_size)
        if _max_chunk_size is not None:
            mapped["read_ahead_max"] = int(_max_chunk_size)
        if verbose:
            _show_requests()
        super().__init__(url, **{**mapped, **options})
        if _size is not None and int(_size) != self.size:
            size = self.size
            self.close()
            raise ValueError(f"the file has {size} bytes, not the {_size} given as _size")

    @property
    def length(self) -> int:
        """The file's length in bytes (remfile's name for :attr:`size`)."""
        return self.size


def _cache_dir(disk_cache: Any) -> str:
    for attr in ("dirname", "_dirname"):  # ours, or remfile's own DiskCache
        value = getattr(disk_cache, attr, None)
        if value is not None:
            return os.fspath(value)
    return os.fspath(disk_cache)


def _show_requests() -> None:
    """Python remfile's ``verbose``: the engine's requests on standard error."""
    logger = logging.getLogger("remfile")
    if not any(getattr(h, "_remfile_verbose", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler._remfile_verbose = True  # type: ignore[attr-defined]
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.DEBUG:
        logger.setLevel(logging.DEBUG)
