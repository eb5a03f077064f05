"""The start-up's long wait under torchrun: the ranks wait for the file checks while those make progress.

Each node's local rank 0 checks the data's files (``data/files/bad_files.py``) and
rank 0 also finds the duplicates; the other ranks wait for them
(``StartChecks.wait``, at the end of ``data/folders.checked_splits``) before
their first collective on the start-up group. A checker posts what it is
doing and how far in the job's store (torchrun's TCPStore, which every rank
reaches without a collective), at most once a second: every progress meter
it runs feeds the post (``core/progress.py``'s ``board``). A waiting rank
reads the posts, says which rank it waits for and why (one line after
``SAY_AFTER`` seconds, then one every ``SAY_EVERY``: one rank a node speaks),
and waits as long as the count moves, however long a check of a million
files takes. ``data.check_patience`` seconds without a move end the wait in
one line (0, the default: a wait without limit, whose lines say how long
nothing moved). A checker that stops on an error posts it: the others stop
waiting for it and meet its absence at their next collective, as before.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from . import PACKAGE, progress
from .distributed import World
from .errors import UserError
from .progress import duration

POST_EVERY = 1.0  # seconds between two posts of a checker (each one a round trip to the store)
POLL = 0.25  # seconds between two reads of the posts by a waiting rank
SAY_AFTER = progress.DELAY  # a wait shorter than this says nothing, as a short start-up phase
SAY_EVERY = 60.0  # seconds between two lines of a waiting rank
RUNNING, DONE, ENDED = "running", "done", "ended"  # a post's state: checking, finished, stopped on an error

rounds = itertools.count()  # the checks of this process so far: a sweep's trials check again in one process group


@dataclass
class Board:
    """One checker's post in the store: what it is doing (a progress meter's name), how far, and its state."""

    store: Any
    key: str
    doing: str = "starting"
    done: int = 0
    total: int | None = None
    posted: float = field(default=-1e9)  # when it was last posted (time.monotonic)

    def moved(self, doing: str, count: int, total: int | None) -> None:
        """A meter's ``update(count)``: the count of ``doing`` moves; posted at most once every ``POST_EVERY``."""
        if doing != self.doing:
            self.doing, self.done = doing, 0
        self.done += count
        self.total = total
        now = time.monotonic()
        if now - self.posted >= POST_EVERY:  # the first move at once: the "starting" post does not count
            self.post(RUNNING)
            self.posted = now

    def post(self, state: str) -> None:
        text = json.dumps({"doing": self.doing, "done": self.done, "total": self.total, "state": state})
        self.store.set(self.key, text)


class StartChecks:
    """Who checks and who waits, for one start's checks (``checked_splits``): ``posting`` around the checks of a
    checker (each node's local rank 0), ``wait`` on every rank for the others' checkers and rank 0."""

    def __init__(self, world: World, patience: float) -> None:
        self.world, self.patience = world, patience
        # Only where the ranks share a store (torchrun's, init_world): a world without one has nothing to wait on.
        self.shared = world.distributed and world.store is not None and world.startup is not None
        self.round = next(rounds) if self.shared else 0  # the same on every rank: each start checks once
        node = int(os.environ.get("LOCAL_WORLD_SIZE", world.size))  # torchrun's processes a node, alike on each
        self.node = max(node, 1)
        self.checkers = list(range(0, world.size, self.node))  # each node's local rank 0 (torchrun numbers by node)

    def key(self, rank: int) -> str:
        return f"{PACKAGE}/start-checks/{self.round}/{rank}"

    @contextlib.contextmanager
    def posting(self) -> Iterator[None]:
        """A checker's checks: every progress meter posts to its board; DONE at the end, ENDED on an error."""
        if not self.shared or self.world.rank not in self.checkers:
            yield
            return
        board = Board(self.world.store, self.key(self.world.rank))
        board.post(RUNNING)
        progress.board = board
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):  # the store gone too: the others meet the loss at a collective
                board.post(ENDED)
            raise
        finally:
            progress.board = None
        board.post(DONE)

    def wait(self) -> None:
        """Wait until every other checker has posted DONE (or ENDED), as long as each one's count moves; say why."""
        if not self.shared:
            return
        awaited = [rank for rank in self.checkers if rank != self.world.rank]
        Waiting(self, awaited).run()


@dataclass
class Waiting:
    """One rank's wait for ``awaited`` checkers: their last posts, and when each last moved."""

    checks: StartChecks
    awaited: list[int]
    seen: dict[int, Any] = field(default_factory=dict)  # rank -> its last post (None: none yet)
    moved: dict[int, float] = field(default_factory=dict)  # rank -> when its post last changed

    def run(self) -> None:
        world, store = self.checks.world, self.checks.world.store
        started = time.monotonic()
        next_line = started + SAY_AFTER
        speaks = world.local_rank == 1 or (world.local_rank == 0 and self.checks.node == 1)  # one a node
        while True:
            now = time.monotonic()
            pending = []
            for rank in self.awaited:
                key = self.checks.key(rank)
                post = json.loads(store.get(key)) if store.check([key]) else None
                if post is not None and post["state"] != RUNNING:
                    continue  # done, or stopped on an error (said by that rank; its absence ends the next collective)
                if rank not in self.seen or post != self.seen[rank]:
                    self.seen[rank], self.moved[rank] = post, now
                pending.append(rank)
            if not pending:
                return
            rank = max(pending, key=lambda r: now - self.moved[r])  # the one that moved least lately
            still = now - self.moved[rank]
            if self.checks.patience and still > self.checks.patience:
                raise UserError(self.stalled(rank, still))
            if speaks and now >= next_line:
                print(self.line(rank, now - started, still), file=sys.stderr, flush=True)
                next_line = now + SAY_EVERY
            time.sleep(POLL)

    def doing(self, rank: int) -> str:
        """What ``rank`` posted it is doing, and how far: e.g. ``checking data/train: 41,200/70,000 files``."""
        post = self.seen.get(rank)
        if post is None:
            return "not started yet"
        of = f"/{post['total']:,}" if post["total"] is not None else ""
        return f"{post['doing']}: {post['done']:,}{of} files" if post["done"] else post["doing"]

    def line(self, rank: int, waited: float, still: float) -> str:
        """Why this rank waits: whose checks, what they are doing, and since when nothing moved (a minute or more)."""
        quiet = f"; no progress for {duration(still)}" if still >= SAY_EVERY else ""
        return (
            f"rank {self.checks.world.rank}: waiting for rank {rank}'s data checks ({self.doing(rank)}), "
            f"{duration(waited)} so far{quiet}"
        )

    def stalled(self, rank: int, still: float) -> str:
        patience = self.checks.patience
        return (
            f"rank {rank}'s data checks made no progress for {duration(still)} ({self.doing(rank)}), more than "
            f"data.check_patience={patience:g} s: see what rank {rank} says (a file system that hangs?); raise "
            "data.check_patience, or set it to 0 to wait as long as the checks take"
        )
