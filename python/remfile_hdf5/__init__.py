"""Files on HTTP(S) servers and in S3 buckets, read as if they were local.

* ``h5py.File(url, "r", driver="remfile", **options)``: importing this package
  registers the driver with h5py, bound to h5py's own HDF5 library. Only the
  files opened with it use it.
* :func:`open`: the same, as a function (for ``pynwb.NWBHDF5IO(file=...)``).
* :class:`RemoteFile`: a binary file object (``io.RawIOBase``) for any
  library that reads a file object.
* :func:`stats`: what reading a file cost (requests, round trips, bytes).
* :func:`read` and :func:`prefetch`: a slice of a dataset whose chunks are
  fetched together, in one round, before h5py reads it.
* :func:`set_defaults`: options for every file the process opens after it.

Options are keyword arguments, the same for the driver, :func:`open`,
:class:`RemoteFile`, :func:`prefetch_files` and :func:`set_defaults` (all
listed below, and by :func:`option_keys`): sizes as ``"1.5GiB"``, ``"512k"``
or a number of bytes, durations as ``"30s"``, a number of seconds or a
``timedelta``, switches as ``True`` or ``False``, paths as strings or path
objects. A misspelt key is a ``TypeError`` that suggests the right one, a
wrong value a ``ValueError`` naming its key. ``headers={"Authorization": "Bearer …"}`` sends headers to
the file's own server only, and no message shows them.

``s3://bucket/key`` URLs are signed with the AWS credentials the AWS SDKs
would find (``AWS_ACCESS_KEY_ID``..., ``AWS_PROFILE``, a web identity, the
container's or the instance's role), or go unsigned where there are none
(``s3_anonymous=True`` skips the search); the bucket's region is learnt
from S3, and ``s3_endpoint`` names an S3-compatible store.

``REMFILE_OPTIONS`` in the environment (a configuration
string, ``"cache_capacity=1GiB;read_timeout=60s"``) sets defaults for the
whole process.

Reads wait on the network without holding the GIL (through h5py, when its
HDF5 is its own private copy, as in its wheels), so other threads run
meanwhile. Ctrl-C stops a wait within a tenth of a second with
``KeyboardInterrupt``; the stopped read lets go of what it held, so the same
read again fetches at once, and the file stays usable. Inside h5py's calls no
other signal handler or finalizer runs (HDF5 is not re-entrant): they run
once the call returns. At interpreter exit every read stops (``OSError``
with ``ECANCELED`` in threads still reading), so scripts end; but the reads of
the thread that runs the exit handlers (``atexit``) go on, so that a handler
registered before the import still reads, except from HDF5 files that h5py
reads through a :class:`RemoteFile`: those still open are closed then (left
open, h5py's file-object driver would crash the process as HDF5 closes them
after the interpreter is gone).

Errors are ``OSError``\\ s with ``errno``, ``strerror`` and ``filename`` (the
URL without its query string) set, through h5py as from :class:`RemoteFile`:
a missing file (HTTP 404) is a ``FileNotFoundError``, a refusal (401, 403) a
``PermissionError``, a timeout a ``TimeoutError``, a refused or broken
connection a ``ConnectionError``.
"""

from __future__ import annotations

import atexit
import ctypes
import datetime
import difflib
import inspect
import io
import itertools
import logging
import math
import operator
import os
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Protocol, Sequence, TypedDict, Union

from . import _native

if TYPE_CHECKING:
    import h5py as _h5py  # type: ignore[import-untyped]
    from typing_extensions import Unpack

__version__ = _native.__version__

__all__ = [
    "RemoteFile",
    "UrlProvider",
    "File",
    "DiskCache",
    "Options",
    "open",
    "stats",
    "prefetch",
    "prefetch_files",
    "explain",
    "PrefetchedFiles",
    "read",
    "set_defaults",
    "defaults",
    "option_keys",
    "options_string",
    "hdf5_version",
]

#: A size: bytes, or a string with a unit (``"1.5GiB"``, ``"512k"``, ``"1 MB"``).
Size = Union[int, str]
#: A duration: seconds, a ``timedelta``, or a string with a unit (``"30s"``).
Duration = Union[float, int, str, datetime.timedelta]
#: A path: a string or a path object (``~`` is expanded).
Path = Union[str, "os.PathLike[str]"]


class Options(TypedDict, total=False):
    """Every option of the driver and of :class:`RemoteFile`, typed: for
    type checkers and IDEs (``**options: Unpack[Options]``). What each sets
    and its default: ``help(remfile_hdf5)`` or :func:`option_keys`."""

    block_size: Size
    cache_capacity: Size
    open_tail: Size
    read_ahead_max: Size
    max_concurrent_requests: int
    max_connections: int
    retries: int
    byte_weight: int
    read_timeout: Duration
    connect_timeout: Duration
    metadata_prefetch: bool
    chunk_read_ahead: bool
    ca_file: Path
    https_only: bool
    allow_redirect_to_http: bool
    disk_cache: Path
    disk_capacity: Size
    cache_key: str
    revalidate_after: Duration
    immutable: bool
    stats: bool
    trace: bool
    headers: Mapping[str, str]
    s3_region: str
    s3_endpoint: str
    s3_profile: str
    s3_path_style: bool
    s3_anonymous: bool
    s3_requester_pays: bool
    s3_access_key_id: str
    s3_secret_access_key: str
    s3_session_token: str
    # Earlier names of cache_capacity, open_tail, max_concurrent_requests,
    # max_connections and read_timeout, still taken.
    cache: Size
    tail: Size
    concurrency: int
    connections: int
    timeout: Duration


# The driver's keys (name, kind of value, default, what it sets, other
# names, group), but its `header` (one `Name: value` each, repeated) is
# `headers` here: a mapping of names to values.
_TABLE = [
    ("headers", "headers", None, "headers for every request to the file's own server, "
     "a mapping such as {'Authorization': 'Bearer …'}; never logged", [], group)
    if key == "header"
    else (key, kind, default, text, aliases, group)
    for key, kind, default, text, aliases, group, _ in _native.option_keys()
]
# Each key's description: what it sets, the kind of its value, its default
# and its other names.
_KEYS = {
    key: f"{text} ({kind}"
    + (f"; default {default}" if default else "")
    + (f"; also taken as {', '.join(aliases)}" if aliases else "")
    + ")"
    for key, kind, default, text, aliases, _ in _TABLE
}
# Earlier names, still taken: each with the key it names.
_ALIASES = {alias: key for key, _, _, _, aliases, _ in _TABLE for alias in aliases}
# Keys whose values are secrets: no error quotes them.
_SECRET = {
    "headers" if key == "header" else key
    for key, _, _, _, _, _, secret in _native.option_keys()
    if secret
}
# The kind of each key's value ("size", "duration", "switch", "count",
# "path", "text", "headers"), also by its earlier names.
_KINDS = {key: kind for key, kind, _, _, _, _ in _TABLE}
_KINDS.update({alias: _KINDS[key] for alias, key in _ALIASES.items()})
_DEFAULTS = {key: default for key, _, default, _, _, _ in _TABLE}


# The kinds of values as Python writes them.
_PYTHON_KINDS = {"switch": "bool", "count": "int", "text": "str", "headers": "mapping"}


def _options_help() -> str:
    """Every option, grouped, with the kind of its value, its default, what
    it sets and its other names: the section the docstrings of the driver,
    :func:`open`, :class:`RemoteFile` and :func:`prefetch_files` end with."""
    lines = ["Options", "-------"]
    for group, rows in itertools.groupby(_TABLE, key=lambda row: row[5]):
        lines += ["", group]
        for key, kind, default, text, aliases, _ in rows:
            head = f"  {key}: {_PYTHON_KINDS.get(kind, kind)}"
            if default is not None:
                head += f", default {_default_value(key)!r}"
            if aliases:
                head += f" (also taken as {', '.join(aliases)})"
            lines += [head, f"      {text}"]
    return "\n".join(lines)


def _default_value(key: str) -> Any:
    text = _DEFAULTS[key]
    if text is not None and _KINDS[key] == "switch":
        return text == "on"
    if text is not None and _KINDS[key] == "count":
        return int(text)
    return text


_OPTIONS_HELP = _options_help()


def _with_options_help(doc: Optional[str]) -> str:
    return f"{inspect.cleandoc(doc or '')}\n\n{_OPTIONS_HELP}\n"


__doc__ = _with_options_help(__doc__)


def option_keys() -> dict:
    """The options the driver and :class:`RemoteFile` take, each with what it
    sets, the kind of its value and its built-in default."""
    return dict(_KEYS)


def _wrong(key: str, why: str) -> ValueError:
    # Worded as the driver's own parser words it.
    return ValueError(f"remfile driver configuration: `{key}`: {why}")


def _unknown(key: str, where: str) -> TypeError:
    close = difflib.get_close_matches(key, [*_KEYS, *_ALIASES], n=1)
    # An alias is suggested by the name it is an alias of.
    hint = f" (did you mean {_ALIASES.get(close[0], close[0])!r}?)" if close else ""
    return TypeError(
        f"{where}() got an unexpected keyword argument {key!r}{hint}; "
        f"the options are: {', '.join(_KEYS)}"
    )


def _value(key: str, value: Any, where: str = "options_string") -> str:
    kind = _KINDS.get(key)
    if kind is None:
        raise _unknown(key, where)
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
    secret = key in _SECRET
    if not isinstance(value, str):
        got = type(value).__name__ if secret else repr(value)
        raise _wrong(key, f"expected a {kind}, not {got}")
    if ";" in value or "\0" in value:
        raise _wrong(key, f"{'the value' if secret else repr(value)} may not hold ';'")
    return value


def _header_pairs(headers: Any) -> list:
    """``headers`` (a mapping, or pairs) as the driver's ``header=Name: value``
    pairs, checked; no error quotes a value."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    try:
        pairs = [(name, value) for name, value in items]
    except (TypeError, ValueError):
        raise _wrong("headers", "expected a mapping of header names to values") from None
    out = []
    for name, value in pairs:
        if not isinstance(name, str) or not isinstance(value, str):
            raise _wrong("headers", "names and values must be str")
        # Neither is quoted: a value pasted into the name would be shown.
        if not name or any(c in name for c in ":;\0") or any(c.isspace() for c in name):
            raise _wrong("headers", "a header name may not hold ':', ';' or white space")
        if any(c in value for c in ";\0\r\n"):
            raise _wrong("headers", "a header value may not hold ';' or a line break")
        out.append(f"header={name}: {value}")
    return out


def _text(options: Mapping[str, Any], where: str) -> str:
    pairs = []
    for key, value in options.items():
        if key == "headers":
            pairs += _header_pairs(value)
        else:
            pairs.append(f"{key}={_value(key, value, where)}")
    text = ";".join(pairs)
    _native.check_options(text)
    return text


def options_string(**options: Unpack[Options]) -> str:
    """The driver's configuration string for ``options`` (as ``HDF5_DRIVER_CONFIG``
    and ``REMFILE_OPTIONS`` take it), checked: a ``TypeError`` names a misspelt
    key, a ``ValueError`` a wrong value."""
    return _text(options, "options_string")


def _parse_environment() -> dict:
    text = os.environ.get("REMFILE_OPTIONS", "")
    # Checked by the driver's parser, which names a wrong key or value.
    _native.check_options(text)
    pairs = (pair.split("=", 1) for pair in text.split(";") if pair.strip())
    found: dict = {}
    for key, value in pairs:
        if key.strip() == "header":
            name, _, header_value = value.partition(":")
            found.setdefault("headers", {})[name.strip()] = header_value.strip()
        else:
            found[_ALIASES.get(key.strip(), key.strip())] = value.strip()
    return found


# The process-wide defaults: REMFILE_OPTIONS, then set_defaults().
_process_defaults: dict = {}
_environment_error: Optional[ValueError] = None
try:
    _process_defaults.update(_parse_environment())
except ValueError as e:
    # Raised when a file is opened, not at import (a notebook's first cell).
    _environment_error = ValueError(f"REMFILE_OPTIONS: {e}")


def set_defaults(**options: Unpack[Options]) -> None:
    """Sets options for every file opened after it in this process, through
    the driver (``h5py.File(url, driver="remfile")``) as through
    :class:`RemoteFile`; a file's own keyword arguments win. ``None`` gives a
    key back its built-in default. Checked as :func:`options_string` checks.

    >>> remfile_hdf5.set_defaults(cache_capacity="1GiB", disk_cache="~/.cache/remfile")  # doctest: +SKIP
    """
    given = {key: value for key, value in options.items() if value is not None}
    _text(given, "set_defaults")
    for key, value in options.items():
        key = _ALIASES.get(key, key)
        if value is None:
            _process_defaults.pop(key, None)
        else:
            _process_defaults[key] = value


def defaults() -> dict:
    """Every option's value for a file opened now with no keyword argument:
    the built-in default, or the process's own (``REMFILE_OPTIONS``,
    :func:`set_defaults`). ``None`` where the default depends on the file
    (``cache_key``: its URL) or is none (``disk_cache``)."""
    merged = {key: _default_value(key) for key in _KEYS}
    merged.update(_process_defaults)
    return merged


# The crate's events (requests at DEBUG, retries at WARNING, ...) reach
# `logging` under "remfile" loggers; silent unless the program configures
# logging, as a library's should be.
_logger = logging.getLogger("remfile")
_logger.addHandler(logging.NullHandler())


def _log_gate() -> int:
    """The most verbose level one of the package's loggers lets through."""
    level = 100 if _logger.disabled else _logger.getEffectiveLevel()
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith("remfile.") and isinstance(logger, logging.Logger) and not logger.disabled:
            level = min(level, logger.getEffectiveLevel())
    return level


def _pump_logs() -> None:
    """Hands the crate's queued events to `logging` (never inside an HDF5
    call: they wait in the queue until this thread takes them)."""
    while True:
        _native._log_level(_log_gate())
        records = _native._log_take(0.5)
        if records is None:
            return
        for level, name, message in records:
            try:
                logging.getLogger(name).log(level, message)
            except Exception:  # noqa: BLE001 - a handler's failure is logging's to report
                pass


def _start_log_pump() -> None:
    global _log_pump
    _log_pump = threading.Thread(target=_pump_logs, name="remfile-logging", daemon=True)
    _log_pump.start()


_log_pump: Optional[threading.Thread] = None
_start_log_pump()


def _with_defaults(options: Mapping[str, Any], where: str) -> str:
    """The configuration string of a file opened with ``options``: the
    process's defaults, then the file's own."""
    _native._log_level(_log_gate())
    if _environment_error is not None:
        raise _environment_error
    for key in options:
        if key not in _KINDS:
            raise _unknown(key, where)
    # None, as the signatures show for keys without a default, is the default.
    given = {key: value for key, value in options.items() if value is not None}
    return _text({**_process_defaults, **given}, where)


def _shows_options(function, *, then_others: bool = False):
    """Gives ``function`` (which takes ``**options``) a signature that lists
    every option, keyword-only, with its built-in default: what ``help()``,
    ``inspect.signature`` and notebooks' completion show. ``then_others``
    keeps its ``**`` for keyword arguments that go elsewhere (h5py's)."""
    signature = inspect.signature(function)
    fixed = [p for p in signature.parameters.values() if p.kind != p.VAR_KEYWORD]
    listed = [
        inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=_default_value(key))
        for key in _KEYS
        if key not in signature.parameters
    ]
    rest = [p for p in signature.parameters.values() if p.kind == p.VAR_KEYWORD]
    if then_others:
        listed += rest
    function.__signature__ = signature.replace(parameters=fixed + listed)
    return function


def _url(url: Any) -> str:
    """A URL given as a string, as bytes (UTF-8) or as a path object (whose
    ``//`` after the scheme a path collapses: ``Path("https://h/x")`` is
    ``https:/h/x``)."""
    if isinstance(url, bytes):
        return url.decode("utf-8")
    if isinstance(url, os.PathLike):
        text = os.fspath(url)
        text = text.decode("utf-8") if isinstance(text, bytes) else text
        for scheme in ("http:/", "https:/", "s3:/"):
            if text.startswith(scheme) and not text.startswith(scheme + "/"):
                return scheme + "/" + text[len(scheme):]
        return text
    if isinstance(url, str):
        return url
    raise TypeError(f"a URL is a str, bytes or path object, not {type(url).__name__}")


def _bind_h5py():
    import h5py
    import h5py.defs  # type: ignore[import-untyped]

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
    text = _with_defaults(options, "h5py.File")
    _bind_h5py()
    _native._set_driver(plist.id, text)


def hdf5_version() -> Optional[tuple]:
    """The version of the HDF5 library (h5py's) the driver serves, once bound."""
    return _native._hdf5_version()


def open(url: Union[str, bytes, "os.PathLike[str]"], mode: str = "r", **options: Any) -> _h5py.File:
    """``h5py.File(url, mode, driver="remfile", **options)``: an HDF5 file on an
    HTTP(S) server or in S3 (``s3://bucket/key``), read through the driver. Only mode ``"r"`` is supported.
    Keyword arguments that are h5py's (``rdcc_nbytes``, ``locking``...) go to
    h5py, the others (the options below) to the driver."""
    import h5py

    if mode != "r":
        raise ValueError(f"remote files are read-only: mode must be 'r', not {mode!r}")
    return h5py.File(_url(url), "r", driver="remfile", **options)


def stats(f) -> Optional[dict]:
    """What reading ``f`` has cost so far: requests, round trips, bytes fetched
    and read, block-cache and disk-cache hits, retries; for an HDF5 file (an
    ``h5py.File`` or any of its objects) also HDF5's reads and what the metadata
    prefetch did. ``None`` for an HDF5 file not opened with the driver."""
    if isinstance(f, RemoteFile):
        return f.stats()
    h5py, _ = _bind_h5py()
    if isinstance(f, h5py.h5f.FileID):
        file_id = f
    elif isinstance(f, h5py.File):
        file_id = f.id
    else:
        file_id = getattr(getattr(f, "file", None), "id", None)
    if file_id is None:
        raise TypeError(f"stats() takes an h5py object or a RemoteFile, not {type(f).__name__}")
    if not file_id.valid:
        raise ValueError("the HDF5 file is closed: take its stats() before closing it")
    with h5py._objects.phil:
        return _native._file_stats(file_id.id)


def explain(url: Union[str, bytes, "os.PathLike[str]"], *, walk: bool = True,
            **options: Unpack[Options]) -> dict:
    """Opens ``url`` with the driver, walks it as ``h5ls`` and h5py's
    ``visititems`` do (every object's header, its attributes, each dataset's
    shape, type and chunks; ``walk=False`` opens only), and returns what that
    took round trip by round trip: ``rounds`` (each with its ``requests``:
    range, status, bytes, when sent and answered; the ``bytes`` fetched; and
    what of HDF5's structures it ``brought``: superblock, object headers,
    header continuations, group B-tree and symbol nodes, heaps, chunk
    indexes, raw data, each as (reads, bytes)), totals, and ``advice``: what
    the file's author could change (paged aggregation with ``h5repack -S
    PAGE -G SIZE``, a larger metadata block, attributes written with their
    object) and about how many rounds it would save. ``text`` holds it as
    ``python -m remfile_hdf5 explain URL`` prints it.

    >>> print(remfile_hdf5.explain(url)["text"])  # doctest: +SKIP
    """
    h5py, _ = _bind_h5py()
    with open(url, "r", trace=True, **options) as f:
        if walk:
            _walk(f)
        with h5py._objects.phil:
            account = _native._explain(f.id.id)
    if account is None:
        raise RuntimeError("the driver kept no trace of the file")
    return account


def _walk(f) -> None:
    """Reads what a walk of the file reads: every object's header and
    attributes, each dataset's shape, type and chunks."""
    h5py, _ = _bind_h5py()

    def visit(_name: str, obj: Any) -> None:
        for key in obj.attrs:
            try:
                obj.attrs[key]
            except (OSError, TypeError, ValueError):
                pass  # a type h5py cannot show: HDF5 read it all the same
        if isinstance(obj, h5py.Dataset):
            _ = (obj.shape, obj.dtype, obj.chunks)

    visit("/", f)
    f.visititems(visit)


#: The most chunks :func:`prefetch` looks up for one selection.
MAX_PREFETCH_CHUNKS = 1 << 20


def _selected(selection: Any, shape: Sequence[int]) -> list:
    """Per dimension of ``shape``, the ``range`` of indices ``selection`` (an
    index, a slice, a tuple of them, with one ``...``) takes."""
    items = selection if isinstance(selection, tuple) else (selection,)
    if sum(1 for s in items if s is Ellipsis) > 1:
        raise IndexError("a selection has at most one ...")
    if any(s is Ellipsis for s in items):
        at = next(n for n, s in enumerate(items) if s is Ellipsis)
        fill = len(shape) - (len(items) - 1)
        items = items[:at] + (slice(None),) * max(fill, 0) + items[at + 1:]
    if len(items) > len(shape):
        raise IndexError(f"{len(items)} indices for a dataset of {len(shape)} dimensions")
    items = items + (slice(None),) * (len(shape) - len(items))
    out = []
    for item, n in zip(items, shape):
        if isinstance(item, slice):
            taken = range(*item.indices(n))
            if taken.step < 0:
                taken = taken[::-1]
        else:
            try:
                i = operator.index(item)
            except TypeError:
                raise TypeError(
                    f"prefetch takes indices, slices and ..., not {type(item).__name__}"
                ) from None
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of range for a dimension of {n}")
            taken = range(i % n, i % n + 1)
        out.append(taken)
    return out


def _chunk_indices(taken: range, chunk: int) -> tuple:
    """How many chunk indices (of chunks ``chunk`` long) the indices ``taken``
    (ascending, not empty) fall in, and those indices, in order."""
    if taken.step < chunk:
        # Steps shorter than a chunk leave no chunk between the first and the
        # last out.
        indices = range(taken[0] // chunk, taken[-1] // chunk + 1)
        return len(indices), indices
    # Steps of a chunk or more land in a chunk each.
    return len(taken), (i // chunk for i in taken)


def prefetch(dataset, selection: Any = Ellipsis) -> int:
    """Fetches the stored bytes of ``dataset[selection]`` (``dataset`` an
    ``h5py.Dataset`` of a file opened with ``driver="remfile"``) into the
    driver's cache, in one round of requests, and returns how many chunks
    (or spans, for a contiguous dataset) they are. h5py's read of the same
    selection then waits on no request.

    A plain ``dataset[a:b]`` lets HDF5 ask for the chunks one after the
    other: the driver reads ahead along the chunk index, but cannot see
    where the selection ends, so its last step may fetch a few chunks past
    it. Here the selection is known: HDF5's chunk index gives the chunks'
    places (one round for its nodes, if not cached yet), then every chunk
    comes at once. The chunks must fit in the cache (``cache_capacity``). A
    contiguous dataset's span is fetched only if the selection is most of it.

    ``selection`` is an index, a slice or a tuple of them (with at most one
    ``...``), as for ``dataset[...]``; a step skips no chunk it lands in.

    >>> with h5py.File(url, "r", driver="remfile") as f:  # doctest: +SKIP
    ...     data = f["acquisition/ElectricalSeries/data"]
    ...     remfile_hdf5.prefetch(data, (slice(1_000_000, 1_180_000), slice(None)))
    ...     block = data[1_000_000:1_180_000]
    """
    h5py, _ = _bind_h5py()
    if not isinstance(dataset, h5py.Dataset):
        raise TypeError(f"prefetch takes an h5py.Dataset, not {type(dataset).__name__}")
    shape = dataset.shape or ()
    taken = _selected(selection, shape)
    if any(len(t) == 0 for t in taken):
        return 0
    dsid = dataset.id
    ranges = []
    if dataset.chunks is None:
        offset = dsid.get_offset()
        if offset is None:
            return 0
        # The span from the first element selected to the last (C order),
        # unless the selection is a small part of it (a column, a stride):
        # HDF5 then reads its own pieces.
        first = last = 0
        selected = 1
        for t, n in zip(taken, shape):
            first, last = first * n + t[0], last * n + t[-1]
            selected *= len(t)
        size = dsid.get_type().get_size()
        span = (last - first + 1) * size
        if span > 2 * selected * size + (1 << 20):
            return 0
        ranges.append((offset + first * size, span))
    else:
        per_dim = [_chunk_indices(t, c) for t, c in zip(taken, dataset.chunks)]
        count = math.prod(n for n, _ in per_dim)
        if count > MAX_PREFETCH_CHUNKS:
            raise ValueError(
                f"the selection touches up to {count} chunks; prefetch looks up "
                f"at most {MAX_PREFETCH_CHUNKS}: prefetch parts of it"
            )
        for index in itertools.product(*(list(indices) for _, indices in per_dim)):
            coord = tuple(i * c for i, c in zip(index, dataset.chunks))
            info = dsid.get_chunk_info_by_coord(coord)
            if info.byte_offset is not None and info.size:
                ranges.append((info.byte_offset, info.size))
    if not ranges:
        return 0
    file_id = dataset.file.id
    with h5py._objects.phil:
        remote = _native._remote_of_file(file_id.id)
    if remote is None:
        raise ValueError("the dataset's file is not read through driver=\"remfile\"")
    # Outside h5py's lock: other threads' h5py calls go on meanwhile.
    remote._prefetch(ranges)
    return len(ranges)


def read(dataset, selection: Any = Ellipsis):
    """``dataset[selection]``, its chunks fetched together first
    (:func:`prefetch`): for a slice of a chunked dataset, the chunk index's
    look-ups (none once cached) and one round for the chunks, and only the
    chunks it needs. A selection :func:`prefetch` does not take (a list, a
    boolean mask, a field name) is read by h5py alone.

    >>> with h5py.File(url, "r", driver="remfile") as f:  # doctest: +SKIP
    ...     block = remfile_hdf5.read(f["acquisition/ElectricalSeries/data"],
    ...                               (slice(1_000_000, 1_180_000), 5))
    """
    try:
        prefetch(dataset, selection)
    except (TypeError, IndexError):
        # A selection prefetch does not take (a list, a mask, a field name):
        # h5py reads it, or says what is wrong with it.
        pass
    return dataset[selection]


class PrefetchedFiles:
    """The metadata of many files being fetched at once, ahead of their opens:
    what :func:`prefetch_files` returns.

    Its files are taken by their opens (``h5py.File(url, "r", driver="remfile",
    **options)`` or :func:`open` with the same options, in any order), which
    then read their metadata from memory. A file that failed here is opened
    afresh by its open, which raises its own error. :meth:`cancel` (or leaving a
    ``with`` block) stops what is under way and lets go of the files not
    opened; their blocks stay in the cache until evicted.
    """

    def __init__(self, native: "_native.Files", urls: list) -> None:
        self._native = native
        self.urls = urls
        self._cancelled = False

    def wait(self, timeout: Optional[float] = None) -> dict:
        """Waits until every file is crawled, failed or opened, or the batch
        waits for opens (the files crawled ahead fill its bound), or
        ``timeout`` seconds; returns :attr:`progress` then. Ctrl-C stops the
        wait (not the batch)."""
        return self._native.wait(timeout)

    @property
    def progress(self) -> dict:
        """``files``, ``crawled`` (waiting for their opens), ``opened``,
        ``failed``, ``dropped`` (let go of by :meth:`cancel`: their opens open
        them afresh), ``pending`` (not started or under way),
        ``waiting_for_opens`` and ``bytes_ahead`` (fetched for the files not
        opened yet)."""
        return self._native.progress()

    @property
    def errors(self) -> dict:
        """The files that failed here: each URL as given (with its query, if it
        had one: mind signatures before printing the keys) to a message that
        shows none (their opens try again)."""
        return dict(self._native.errors())

    def cancel(self) -> None:
        """Stops the batch: no further file starts, requests under way end,
        and the files not opened yet are opened afresh by their opens."""
        self._cancelled = True
        self._native.cancel()

    def __enter__(self) -> "PrefetchedFiles":
        return self

    def __exit__(self, *_exc) -> None:
        self.cancel()

    def __repr__(self) -> str:
        p = self.progress
        return (
            f"<PrefetchedFiles: {p['files']} files, {p['crawled']} crawled, "
            f"{p['opened']} opened, {p['failed']} failed, {p['pending']} pending>"
        )


def prefetch_files(urls: Iterable[Union[str, bytes, "os.PathLike[str]"]], *,
                   wait: bool = False, progress: bool = False,
                   **options: Unpack[Options]) -> PrefetchedFiles:
    """Starts fetching the metadata of many HDF5 files at once, in the
    background, for a survey: ``h5py.File(url, "r", driver="remfile",
    **options)`` (or :func:`open`) of each, with the same options, then opens
    it from memory.

    Opening files one after another costs each file's round trips in turn;
    here up to 16 files are opened and their metadata crawled side by side
    (no HDF5 is involved), within the process's connections, into the
    driver's shared cache (and the ``disk_cache``, if given). The batch runs
    ahead of the opens within a bound: it starts no further file while the
    files crawled and not opened yet (those under way counted at the average
    so far) would hold more than half of the cache (``cache``) or number 64;
    each open gives room back, so 10,000 URLs keep about that much ahead of
    the opens. The batch lives on after the returned object is gone, until
    its files are opened or it is cancelled (files never opened keep their
    room until then: cancel a batch you leave, or use ``with``). Errors stay
    per file: a file that fails here raises only at its own open.
    ``wait=True`` waits for the batch (:meth:`PrefetchedFiles.wait`) before
    returning; if that wait raises (Ctrl-C), the batch is cancelled first
    (its caller never got it to cancel). ``progress=True`` shows the files
    done and the bytes fetched on standard error while the batch works:
    tqdm's bar if tqdm is installed, else a line (rewritten in place on a
    terminal, printed once at the end elsewhere).

    >>> ahead = remfile_hdf5.prefetch_files(urls)  # doctest: +SKIP
    >>> for url in urls:  # doctest: +SKIP
    ...     with h5py.File(url, "r", driver="remfile") as f:
    ...         print(url, dict(f.attrs))
    """
    if isinstance(urls, (str, bytes)):
        raise TypeError("prefetch_files takes a list of URLs, not one URL")
    text = _with_defaults(options, "prefetch_files")
    listed = [_url(url) for url in urls]
    batch = PrefetchedFiles(_native.Files(listed, text), listed)
    if progress:
        from . import _progress

        def poll() -> tuple:
            p = batch.progress
            done = p["crawled"] + p["opened"] + p["failed"] + p["dropped"]
            return done, p["bytes_ahead"], p["pending"] == 0 or batch._cancelled

        # The batch's own count: a URL given twice is one file.
        total = batch.progress["files"]
        shown = _progress.follow(poll, _progress.Bar(total, "prefetch_files", "file"))
    if wait:
        try:
            settled = batch.wait()
        except BaseException:
            batch.cancel()
            raise
        if progress and settled["pending"] == 0:
            shown.join()  # its last line out before the caller's
    return batch


class UrlProvider(Protocol):
    """Anything with a ``get_url()`` method that returns the file's URL,
    signed anew (a presigned URL expires): Python remfile's convention. The
    URL it gives first opens the file; when the server later refuses a URL
    that worked (401 or 403), it is asked again, once per refusal, and the
    request goes on with the new URL."""

    def get_url(self) -> str: ...


def _provider_of(url: Any) -> Optional[UrlProvider]:
    if isinstance(url, (str, bytes, os.PathLike)) or not callable(getattr(url, "get_url", None)):
        return None
    return url


class RemoteFile(io.RawIOBase):
    """A file on an HTTP(S) server or in S3 as a read-only, seekable binary file object.

    It reads through the crate's ``RemoteFile``: a block cache, a read-ahead
    sized by the link, retries, an optional disk cache, and errors that say
    what went wrong. Reads wait on the network without holding the GIL, so
    other threads run meanwhile. A read at the current position holds the
    position's lock while it waits; :meth:`read_at` and :meth:`read_ranges`
    take none, so several threads read those at once. A child process
    (``fork``) that inherits the object opens the file again on first use,
    with connections and a lock of its own (also when a thread of the
    parent was reading it at the fork). :meth:`close` from another thread
    stops the reads waiting on the file at once: they raise the
    ``ValueError`` of a closed file.

    ``url`` may be an object with a ``get_url()`` method (a
    :class:`UrlProvider`) instead of a URL: a presigned URL that expires is
    then asked for anew when the server refuses it.

    A pickle of it (a dask task's argument, a ``spawn`` child's) holds the
    URL, as given (or the URL provider, which must pickle), and the options given here, ``headers`` and the S3 keys
    included: unpickled, it opens the file again with them.
    ``pickle_secrets=False`` leaves ``headers`` and the S3 keys out (the
    pickle of the file opened again from it too): it then opens with the
    unpickling process's defaults (:func:`set_defaults`,
    ``REMFILE_OPTIONS``, its own AWS credentials) in their place, and a
    server that needs them refuses it (``PermissionError``). A presigned
    URL's signature is part of its URL, and is pickled with it.

    >>> with RemoteFile("https://example.com/data.zip", cache_capacity="64MiB") as fo:  # doctest: +SKIP
    ...     zipfile.ZipFile(fo).namelist()
    """

    _final_stats: dict = {}

    def __init__(self, url: Union[str, bytes, "os.PathLike[str]", "UrlProvider"], *,
                 pickle_secrets: bool = True, **options: Unpack[Options]) -> None:
        super().__init__()
        self._options = dict(options)
        self._pickle_secrets = bool(pickle_secrets)
        self._provider = _provider_of(url)
        self._url = _url(url if self._provider is None else self._provider.get_url())
        self._text = _with_defaults(options, "RemoteFile")
        self._pos = 0
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._handle = _native.Remote(self._url, self._text, self._provider)
        _file_objects.add(self)

    def _own(self):
        """The handle and the position's lock of this process. A forked
        child opens the file again (it must not share the parent's
        connections) and takes a new lock: the inherited one may be held
        for good by a parent's thread that does not exist here."""
        if self._pid != os.getpid():
            with _reopening:
                if self._pid != os.getpid():
                    self._lock = threading.Lock()
                    # A provider's URL may have expired since: a new one.
                    if self._provider is not None:
                        self._url = _url(self._provider.get_url())
                    self._handle = _native.Remote(self._url, self._text, self._provider)
                    self._pid = os.getpid()
        return self._handle, self._lock

    def __repr__(self) -> str:
        handle = getattr(self, "_handle", None)
        if handle is None:
            return "<remfile_hdf5.RemoteFile (not opened)>"
        state = " closed" if self.closed else ""
        return f"<remfile_hdf5.RemoteFile {handle.url!r} size={handle.size}{state}>"

    def __reduce__(self):
        # A child process (spawn) opens the file again, with the same options
        # (but the secret ones, if so asked).
        if self.closed:
            raise ValueError("cannot pickle a closed RemoteFile")
        url = self._url if self._provider is None else self._provider
        if self._pickle_secrets:
            return (_reopen, (url, self._options, self.tell()))
        options = {
            key: value for key, value in self._options.items()
            if _ALIASES.get(key, key) not in _SECRET
        }
        return (_reopen, (url, options, self.tell(), False))

    @property
    def url(self) -> str:
        """The URL, without its query string or credentials."""
        return self._handle.url

    @property
    def size(self) -> int:
        """The file's length in bytes."""
        return self._handle.size

    @property
    def etag(self) -> Optional[str]:
        """The ``ETag`` the server gave the file (quotes included), or ``None``."""
        return self._own()[0].etag

    @property
    def last_modified(self) -> Optional[str]:
        """The ``Last-Modified`` date the server gave the file, or ``None``."""
        return self._own()[0].last_modified

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
            n = min(len(view), max(remote.size - self._pos, 0))
            if n:
                # Straight into the caller's buffer (no second copy of a
                # large read): the ctypes array keeps it exported, so it
                # can be neither resized nor freed during the call.
                target = (ctypes.c_char * n).from_buffer(view)
                try:
                    remote._read_into_address(self._pos, ctypes.addressof(target), n)
                finally:
                    del target
            self._pos += n
        return n

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
        together: one round trip for any number of ranges. A range that
        ends before it starts, or starts before 0, is a ``ValueError``; one
        past the end of the file gives the bytes up to it."""
        self._checkClosed()
        remote = self._own()[0]
        wanted = []
        for start, end in ranges:
            start, end = operator.index(start), operator.index(end)
            if start < 0 or end < start:
                raise ValueError(f"the range ({start}, {end}) is not a range of bytes")
            wanted.append((min(start, remote.size), min(end, remote.size)))
        return remote.read_ranges(wanted)

    def write(self, data) -> int:
        raise io.UnsupportedOperation("a RemoteFile is read-only")

    def truncate(self, size: Optional[int] = None) -> int:
        raise io.UnsupportedOperation("a RemoteFile is read-only")

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


# The RemoteFiles alive, for the exit hook.
_file_objects: "weakref.WeakSet[RemoteFile]" = weakref.WeakSet()


def _close_hdf5_files_over_file_objects(h5py: Any) -> None:
    """Closes the HDF5 files h5py reads through one of the package's
    RemoteFiles that are still open. A file left open in a reference cycle
    (a URL provider whose method's globals hold the h5py file) is never
    collected: HDF5 closes it only after the interpreter has gone, and
    h5py's file-object driver then crashes the process."""
    ours = {id(f) for f in list(_file_objects)}
    if not ours:
        return
    try:
        _bind_h5py()  # the package's calls into h5py's HDF5
    except Exception:  # noqa: BLE001 - no HDF5 to close anything in
        return
    h5f = h5py.h5f
    with h5py._objects.phil:
        for fid in h5f.get_obj_ids(types=h5f.OBJ_FILE):
            try:
                if _native._driver_info_address(fid.id) not in ours:
                    continue
                fid._close_open_objects(h5f.OBJ_LOCAL | ~h5f.OBJ_FILE)
                fid._close_open_objects(h5f.OBJ_LOCAL | h5f.OBJ_FILE)
            except Exception:  # noqa: BLE001 - at exit: what closes, closes
                pass


# Taken while an inherited RemoteFile opens its file again: a new one in
# each child, made while the child has one thread, so that no thread of the
# parent's can hold it there.
_reopening = threading.Lock()


def _after_fork_in_child() -> None:
    global _reopening
    _reopening = threading.Lock()
    # The forking thread is the child's main thread, where Python runs
    # signal handlers (Ctrl-C) from now on.
    _native._forked()
    _start_log_pump()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_shows_options(open, then_others=True)
_shows_options(RemoteFile.__init__)
_shows_options(prefetch_files)
_shows_options(set_defaults)
_shows_options(options_string)
for _documented in (open, RemoteFile, prefetch_files):
    _documented.__doc__ = _with_options_help(_documented.__doc__)


def _reopen(url: Any, options: dict, pos: int, pickle_secrets: bool = True) -> RemoteFile:
    f = RemoteFile(url, pickle_secrets=pickle_secrets, **options)
    f.seek(pos)
    return f


from ._remfile_api import DiskCache, File  # noqa: E402  (needs RemoteFile)


def _register() -> None:
    try:
        import h5py
    except ImportError:
        return
    if hasattr(h5py, "register_driver"):
        h5py.register_driver("remfile", _set_fapl)


_register()


def _at_exit() -> None:
    """Lets the process end while threads read in the background.

    Runs before the interpreter finalizes (``atexit``; non-daemon threads
    have been joined by then). Every read, open and background fetch of
    the package stops at once but those of this thread, the one that runs
    the exit handlers (an ``OSError`` with ``ECANCELED`` in threads still
    reading), so that a daemon thread inside an h5py call leaves it; then
    this thread takes h5py's lock and keeps it, so that no other thread
    enters h5py again. Finalization's deallocations take that lock too:
    held by a thread parked for good inside an h5py call, it would never
    come (the process would hang); held by this thread, they take it again.
    Exit handlers registered before the package was imported run after
    this one (``atexit`` runs the last registered first), on this thread:
    their reads, through h5py too (its lock is re-entrant), go on as any.
    """
    _native._stop_at_exit()
    h5py = sys.modules.get("h5py")
    if h5py is not None:
        _close_hdf5_files_over_file_objects(h5py)
    # The records queued so far reach logging; the pump leaves the crate's
    # frames before the interpreter finalizes.
    _native._log_stop()
    if _log_pump is not None:
        _log_pump.join(1.0)
    h5py = sys.modules.get("h5py")
    phil = getattr(getattr(h5py, "_objects", None), "phil", None)
    if phil is not None:
        # Waits without the GIL, so that the thread holding the lock can
        # leave h5py; a thread still inside a long HDF5 call of another
        # driver is waited for, as finalization would have to.
        phil.acquire()


atexit.register(_at_exit)
