"""Progress where work is long: tqdm's bar when tqdm is installed, else a
plain line on standard error (rewritten in place on a terminal; once, at
the end, elsewhere)."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, Optional, TextIO, Tuple

#: How often a bar is brought up to date.
TICK = 0.2


def _megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


class Bar:
    """A bar of ``total`` items called ``unit``, with the bytes so far beside."""

    def __init__(self, total: int, desc: str, unit: str, stream: Optional[TextIO] = None,
                 unit_is_bytes: bool = False) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.stream = stream if stream is not None else sys.stderr
        self.unit_is_bytes = unit_is_bytes
        self.shown = ""
        self.started = time.monotonic()
        self.tqdm: Any = None
        try:
            from tqdm import tqdm  # type: ignore[import-untyped]
        except ImportError:
            tqdm = None
        if tqdm is not None:
            scale = {"unit_scale": True, "unit_divisor": 1024} if unit_is_bytes else {}
            self.tqdm = tqdm(total=total, desc=desc, unit=unit, file=self.stream, **scale)

    def to(self, done: int, fetched: int) -> None:
        if self.tqdm is not None:
            self.tqdm.n = done
            if not self.unit_is_bytes:
                self.tqdm.set_postfix_str(_megabytes(fetched), refresh=False)
            self.tqdm.refresh()
            return
        self.shown = self._line(done, fetched)
        if self._terminal():
            self.stream.write("\r" + self.shown)
            self.stream.flush()

    def close(self) -> None:
        if self.tqdm is not None:
            self.tqdm.close()
            return
        if self.shown:
            self.stream.write(("\r" if self._terminal() else "") + self.shown + "\n")
            self.stream.flush()

    def _line(self, done: int, fetched: int) -> str:
        seconds = time.monotonic() - self.started
        if self.unit_is_bytes:
            return f"{self.desc}: {_megabytes(done)} of {_megabytes(self.total)} ({seconds:.1f} s)"
        return f"{self.desc}: {done}/{self.total} {self.unit}s, {_megabytes(fetched)} ({seconds:.1f} s)"

    def _terminal(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())


def follow(poll: Callable[[], Tuple[int, int, bool]], bar: Bar) -> threading.Thread:
    """Brings ``bar`` up to date from ``poll()`` (done, bytes, finished) every
    :data:`TICK` seconds, on a daemon thread, until ``poll`` says finished."""

    def run() -> None:
        while True:
            try:
                done, fetched, finished = poll()
            except Exception:  # noqa: BLE001 - the work's own calls report its errors
                bar.close()
                return
            bar.to(done, fetched)
            if finished:
                bar.close()
                return
            time.sleep(TICK)

    thread = threading.Thread(target=run, name="remfile-progress", daemon=True)
    thread.start()
    return thread
