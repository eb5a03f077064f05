"""Progress of a long start-up phase (scanning, checking files, filling the cache): a bar, or lines in a log.

A phase that ends within ``DELAY`` seconds says nothing. Past that, a terminal
gets a tqdm bar and a log file (stderr not a terminal: Slurm, nohup) gets a
line every ``EVERY`` seconds with the count and the rate, and one when the
phase ends, so that a start of minutes never looks like a hang. The caller
decides who reports (the main process, with ``train.progress`` on).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from tqdm import tqdm

DELAY = 2.0  # seconds a phase runs before it is shown
EVERY = 5.0  # seconds between two lines in a log


class Quiet:
    """No report: another process's phase, ``train.progress=false``, or a caller that asked for none."""

    def update(self, count: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


class LogLines:
    """A line with count and rate every ``EVERY`` seconds, once the phase has run ``DELAY``; one more at its end."""

    def __init__(self, what: str, total: int | None, unit: str) -> None:
        self.what, self.total, self.unit = what, total, unit
        self.count, self.started = 0, time.monotonic()
        self.next_line = self.started + DELAY  # the first line: once the phase has lasted DELAY
        self.shown = False

    def update(self, count: int = 1) -> None:
        self.count += count
        now = time.monotonic()
        if now >= self.next_line:
            self.say(now, "")
            self.next_line = now + EVERY

    def close(self) -> None:
        if self.shown:  # a phase that said nothing while it ran ends silently too
            self.say(time.monotonic(), ", done")

    def say(self, now: float, end: str) -> None:
        seconds = max(now - self.started, 1e-9)
        of = f"/{self.total:,}" if self.total is not None else ""
        rate = self.count / seconds
        print(
            f"{self.what}: {self.count:,}{of} {self.unit} in {seconds:.0f} s ({rate:,.0f} {self.unit}/s){end}",
            file=sys.stderr,
            flush=True,
        )
        self.shown = True


def meter(what: str, total: int | None = None, show: bool = True, unit: str = "files") -> Any:
    """Something with ``update(count)`` and ``close()``: a delayed tqdm bar on a terminal, else ``LogLines``."""
    if not show:
        return Quiet()
    if sys.stderr.isatty():
        return tqdm(desc=what, total=total, unit=f" {unit}", delay=DELAY, leave=False, dynamic_ncols=True)
    return LogLines(what, total, unit)


def tracked(
    items: Iterable[Any], what: str, total: int | None = None, show: bool = True, unit: str = "files"
) -> Iterator[Any]:
    """``items``, one by one, reported by ``meter`` (each item counts one ``unit``)."""
    shown = meter(what, total, show, unit)
    try:
        for item in items:
            yield item
            shown.update()
    finally:
        shown.close()
