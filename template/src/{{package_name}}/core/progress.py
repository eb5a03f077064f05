"""Progress of a long phase: a bar on a terminal, or lines in a log (stderr not a terminal: Slurm, nohup, a pipe).

A start-up phase (scanning, checking files, filling the cache) that ends
within ``DELAY`` seconds says nothing. Past that, a terminal gets a tqdm bar
and a log file a line every ``EVERY`` seconds with the count and the rate, and
one when the phase ends, so that a start of minutes never looks like a hang.
An epoch's batches (``TrainingProgress``) get a bar, or a line every
``LINE_EVERY`` seconds, and the run an estimate of its length: once, and
again after each change of pace (``PaceChange``: the backbone starts
training). The caller decides who reports (the main process, with
``train.progress`` on).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tqdm import tqdm

from .config import TrainConfig

# No tqdm monitor thread (every tqdm, a disabled one too, starts it, to adjust a bar that stalls): loader workers
# fork while a bar is alive, and a fork of a process with threads may deadlock (Python 3.12 warns of it).
tqdm.monitor_interval = 0
DELAY = 2.0  # seconds a phase runs before it is shown
EVERY = 5.0  # seconds between two lines in a log
LINE_EVERY = 30.0  # seconds between two progress lines of an epoch in a log (each one host sync: P5)
ESTIMATE_AFTER = (3, 10.0)  # batches timed and seconds passed, after the first batch, before the run's estimate
# Where a torchrun rank that checks the files posts how far every phase is, for the ranks that wait for it
# (core/waiting.py sets it around the checks, a ``Board``); None: nobody waits.
board: Any = None


class Quiet:
    """No report: another process's phase, ``train.progress=false``, or a caller that asked for none."""

    def update(self, count: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


class LogLines:
    """A line with count, rate and time left every ``EVERY`` seconds, once the phase has run ``DELAY``; one more
    at its end."""

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
        rate = rate_said(self.count, seconds, self.unit)
        left = ""  # the estimate, where the total is known and the phase goes on
        if self.total is not None and not end and 0 < self.count < self.total:
            left = f", about {duration((self.total - self.count) * seconds / self.count)} left"
        print(
            f"{self.what}: {self.count:,}{of} {self.unit} in {seconds:.0f} s ({rate}{left}){end}",
            file=sys.stderr,
            flush=True,
        )
        self.shown = True


# The units the phases count in, one of each: a rate below one a second is said as seconds for one.
ONE = {"batches": "a batch", "files": "a file", "images": "an image", "folds": "a fold"}


def rate_said(count: int, seconds: float, unit: str) -> str:
    """``1,234 files/s``; below one a second, ``2.8 s a batch`` (not ``0 batches/s``)."""
    rate = count / max(seconds, 1e-9)
    if count and rate < 1:
        return f"{seconds / count:.1f} s {ONE.get(unit, f'a {unit}')}"
    return f"{rate:,.0f} {unit}/s"


def bar(items: Iterable[Any], what: str, show: bool) -> Iterable[Any]:
    """``items`` in a tqdm bar where ``show`` (a terminal), else as they are: a disabled tqdm is still an object."""
    return tqdm(items, what, leave=False, dynamic_ncols=True) if show else items


def meter(what: str, total: int | None = None, show: bool = True, unit: str = "files") -> Any:
    """Something with ``update(count)`` and ``close()``: a delayed tqdm bar on a terminal, else ``LogLines``; also
    posted to ``board`` where ranks wait for this one (shown or not)."""
    if not show:
        shown: Any = Quiet()
    elif sys.stderr.isatty():
        shown = tqdm(desc=what, total=total, unit=f" {unit}", delay=DELAY, leave=False, dynamic_ncols=True)
    else:
        shown = LogLines(what, total, unit)
    return Posted(shown, what, total, board) if board is not None else shown


class Posted:
    """A meter whose updates also move a waiting rank's view of this phase (``core/waiting.py``'s ``Board``)."""

    def __init__(self, shown: Any, what: str, total: int | None, posted_to: Any) -> None:
        self.shown, self.what, self.total, self.board = shown, what, total, posted_to

    def update(self, count: int = 1) -> None:
        self.shown.update(count)
        self.board.moved(self.what, count, self.total)

    def close(self) -> None:
        self.shown.close()


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


def duration(seconds: float) -> str:
    """``45 s``, ``2 min 20 s``, ``1 h 05 min``, ``2 d 3 h``: a time a person reads at a glance."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


class Totals(Protocol):
    """What ``TrainingProgress`` reads of an epoch's running sums (training/engine.py, ``EpochTotals``)."""

    batches: int  # trained so far in this epoch

    def mean_loss(self) -> float: ...  # a host sync


@dataclass(frozen=True)
class PaceChange:
    """An epoch from which a batch takes another time (the backbone starts training: its backward pass too). The
    estimate made before it says so, and is measured again from there."""

    epoch: int
    ahead: str  # what happens, said before: "the backbone starts training"
    behind: str  # and after: "the backbone started training"


Advice = Callable[[float, float], str]  # (seconds an epoch, seconds left) -> a line to add to the estimate, or ""


class TrainingProgress:
    """An epoch's batches, shown as they train: a tqdm bar with the loss on a terminal, a line every ``LINE_EVERY``
    seconds in a log; and after the run's first batches, how long an epoch and the rest of the run take, measured
    again after each ``PaceChange``.

    The loss is a host sync (P5): the bar reads it every ``train.log_every``
    optimizer steps, a log once a line. Nothing is read or printed where
    ``show`` is off (another process than the main one, ``train.progress=false``).
    ``advice``: a line the first long estimate adds (how to shorten a quick start).
    """

    def __init__(
        self,
        train: TrainConfig,
        show: bool,
        per_epoch: int,
        changes: Sequence[PaceChange] = (),
        advice: Advice | None = None,
    ) -> None:
        self.show, self.epochs, self.per_epoch = show and train.progress, train.epochs, per_epoch
        self.every = train.log_every * train.accumulate_steps  # batches between two reads of the loss for a bar
        self.bars = self.show and sys.stderr.isatty()
        self.changes, self.advice = sorted(changes, key=lambda change: change.epoch), advice
        self.estimated = False  # the estimate of the current pace: said once
        self.again = ""  # the change the pace is measured again after, once its estimate was said
        self.timed_from: tuple[float, int] | None = None  # (when, batches trained then): after the pace's first batch
        self.trained = 0  # batches trained by this process, all epochs

    def epoch(self, batches: Iterable[Any], epoch: int, totals: Totals, lr: Callable[[], float]) -> Iterator[Any]:
        """``batches``, one by one; after each has trained (when the loop asks for the next), the bar, line or
        estimate that is due. A resumed epoch starts after the ``totals.batches`` it trained before."""
        if not self.show:
            yield from batches
            return
        self.pace_changes_at(epoch)
        loss, done = totals.mean_loss, totals.batches
        shown = bar(batches, f"epoch {epoch}", self.bars)
        started = last_line = time.monotonic()
        paced_from: tuple[float, int] | None = None  # the epoch's pace, from the end of its first batch
        try:
            for index, item in enumerate(shown, start=done + 1):
                yield item
                self.trained += 1
                now = time.monotonic()
                if self.timed_from is None:
                    self.timed_from = (now, self.trained)  # the first batch (compilation, workers starting) untimed
                if paced_from is None:
                    paced_from = (now, index)  # the epoch's first batch (its loader starting) untimed
                if isinstance(shown, tqdm) and index % self.every == 0:
                    shown.set_postfix(loss=f"{loss():.4f}", lr=f"{lr():.2e}")
                if not self.bars and now - last_line >= LINE_EVERY:
                    pace = (now - paced_from[0]) / max(index - paced_from[1], 1)
                    left = (self.per_epoch - index) * (pace if index > paced_from[1] else self.pace(now))
                    print(
                        f"epoch {epoch}/{self.epochs}  batch {index}/{self.per_epoch}  loss {loss():.4f}  "
                        f"lr {lr():.2e}  {duration(now - started)} in, about {duration(left)} left",
                        file=sys.stderr,
                        flush=True,
                    )
                    last_line = now
                timed, since = self.trained - self.timed_from[1], now - self.timed_from[0]
                if not self.estimated and timed >= ESTIMATE_AFTER[0] and since >= ESTIMATE_AFTER[1]:
                    self.estimate(epoch, index, loss)
            if not self.estimated and epoch < self.epochs:  # a short epoch: the estimate at its end
                self.estimate(epoch, self.per_epoch, loss)
        finally:
            if isinstance(shown, tqdm):
                shown.close()

    def pace_changes_at(self, epoch: int) -> None:
        """From an epoch whose batches take another time, the pace is timed afresh and the estimate said again;
        a run resumed there has measured nothing before, and says its first estimate as any run does."""
        change = next((change for change in self.changes if change.epoch == epoch), None)
        if change is not None and self.estimated:
            self.timed_from, self.estimated, self.again = None, False, change.behind

    def pace(self, now: float) -> float:
        """Seconds a batch, since the end of the pace's first batch (between epochs, validation included)."""
        assert self.timed_from is not None
        return (now - self.timed_from[0]) / max(self.trained - self.timed_from[1], 1)

    def estimate(self, epoch: int, index: int, loss: Callable[[], float]) -> None:
        """One line: an epoch's batches and the rest of the run, at the pace so far (validation not counted); what
        it was measured again after, or the change ahead that will make it wrong."""
        if self.timed_from is None or self.trained <= self.timed_from[1]:
            return  # only the first batch, untimed: no pace to tell yet
        self.estimated = True
        loss()  # a host sync, once: the pace of what the device has done, not of what was queued for it
        pace = self.pace(time.monotonic())
        left = ((self.per_epoch - index) + (self.epochs - epoch) * self.per_epoch) * pace
        end = time.strftime("%a %H:%M" if left >= 86400 else "%H:%M", time.localtime(time.time() + left))
        line = (
            f"estimate: about {duration(pace * self.per_epoch)} an epoch, {duration(left)} for the rest of the "
            f"run (done about {end}), validation not counted"
        )
        if self.again:
            line += f", measured again after {self.again}"
        ahead = next((change for change in self.changes if epoch < change.epoch <= self.epochs), None)
        if ahead is not None:
            line += f"; measured again at epoch {ahead.epoch}, where {ahead.ahead}"
        self.say(line)
        advice = self.advice(pace * self.per_epoch, left) if self.advice is not None else ""
        if advice:
            self.say(advice)
            self.advice = None  # once a run

    def say(self, line: str) -> None:
        if self.bars:
            tqdm.write(line, file=sys.stderr)  # above the bar, which stays
        else:
            print(line, file=sys.stderr, flush=True)
