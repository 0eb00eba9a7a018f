"""Console progress of the rebuild (driver): files, bytes, records, rate.

Tasks add to accumulators when they finish; a thread prints what has arrived: in place
on a terminal, one line every few seconds otherwise (logs, CI).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TextIO


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def fmt_rate(nbytes: float, records: float, seconds: float) -> str:
    s = max(seconds, 1e-9)
    return f"{nbytes / s / 1e6:,.1f} MB/s, {records / s:,.0f} records/s"


class Progress:
    """Prints `render()` periodically while a stage runs."""

    def __init__(self, out: TextIO | None = None, enabled: bool = True, interval: float | None = None) -> None:
        self.out = out or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.interval = interval if interval is not None else (0.5 if self.tty else 5.0)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._render: Callable[[], str] | None = None
        self._last_len = 0

    def line(self, text: str) -> None:
        """A line of its own (ends any in-place line first)."""
        if not self.enabled:
            return
        if self.tty and self._last_len:
            self.out.write("\r" + " " * self._last_len + "\r")
            self._last_len = 0
        self.out.write(text + "\n")
        self.out.flush()

    def _show(self) -> None:
        assert self._render is not None
        text = self._render()
        if self.tty:
            pad = max(self._last_len - len(text), 0)
            self.out.write("\r" + text + " " * pad)
            self._last_len = len(text)
            self.out.flush()
        else:
            self.line(text)

    def start(self, render: Callable[[], str]) -> None:
        self._render = render
        if not self.enabled:
            return
        self._stop.clear()

        def run() -> None:
            while not self._stop.wait(self.interval):
                try:
                    self._show()
                except Exception:  # a progress line must never break the job
                    pass

        self._thread = threading.Thread(target=run, name="rebuild-progress", daemon=True)
        self._thread.start()

    def finish(self, final: str | None = None) -> None:
        """Stop the thread and print the final line of the stage."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if final is not None:
            self.line(final)
        elif self.tty and self._last_len:
            self.line("")
