"""Stop cleanly on SIGTERM, SIGUSR1 or Ctrl-C: checkpoint at the next step boundary, then exit.

Clusters send SIGTERM before they preempt a job, and Slurm sends the signal a
job asks for (``--signal=USR1@300``) before its time limit; the trainer then
saves a mid-epoch checkpoint and ends with ``EXIT_PREEMPTED``, and ``--resume
auto`` continues exactly where it stopped. A second Ctrl-C stops at once. The
handler only sets a flag: the signal may arrive inside a collective or while
a batch loads, and the stop is agreed by every process at a step boundary.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # cli.py imports this module, and answers --help without torch (core.distributed imports it)
    import torch

    from ..core.distributed import World

EXIT_PREEMPTED = 75  # EX_TEMPFAIL in sysexits.h: "try again later", i.e. resume


class Preempted(Exception):
    """Raised at a step boundary after the checkpoint is written."""

    def __init__(self, signal_name: str, checkpoint: Path, epoch: int, step: int) -> None:
        super().__init__(
            f"stopped by {signal_name} in epoch {epoch} after step {step}; "
            f"saved {checkpoint}: continue with --resume auto"
        )
        self.checkpoint = checkpoint
        self.note = f"{signal_name}: saved step {step} of epoch {epoch} in {checkpoint}"

    def report(self, environ: Mapping[str, str] = os.environ) -> None:
        """The stop's one line, once for the run (every process stops at the same step and says the same).

        Under slurm/train.sbatch (``STOP_NOTE``) it goes to the note the batch
        script reads: the script says it in its own one line, with what comes
        next (the job requeued, or ended), which only it knows.
        """
        if environ.get("STOP_NOTE"):
            if environ.get("LOCAL_RANK", "0") == "0":  # one process a node: each node's torchrun reads its own
                Path(environ["STOP_NOTE"]).write_text(self.note + "\n")
        elif environ.get("RANK", "0") == "0":
            print(self, file=sys.stderr)


class GracefulStop:
    """Turns SIGTERM, SIGUSR1 and SIGINT into a request that the training loop honours."""

    # SIGUSR1: what slurm/train.sbatch asks Slurm to send before the time limit (its default action would kill).
    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        self.signal_name = signal.Signals(signum).name

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]


class AgreedStop:
    """The stop request as the training loop asks it: all processes must stop at the same step, or the others
    would wait forever at their next collective.

    Under DDP agreeing is a collective and a host sync, so inside an epoch
    (``step`` given) it is asked every ``every`` optimizer steps only
    (``train.log_every``, P5); one process reads its own flag at every step.
    """

    def __init__(self, stop: GracefulStop, world: World, device: torch.device, every: int) -> None:
        self.stop, self.world, self.device, self.every = stop, world, device, every

    def __call__(self, step: int | None = None) -> bool:
        if not self.world.distributed:
            return self.stop.requested
        if step is not None and step % self.every:
            return False
        from ..core.distributed import agreed  # here, not at the top: see TYPE_CHECKING above

        return agreed(self.stop.requested, self.world, self.device)

    def preempted(self, checkpoint: Path, epoch: int, step: int) -> Preempted:
        """What the loop raises once ``checkpoint`` holds the run after ``step`` batches of ``epoch``."""
        from ..core.distributed import barrier

        barrier(self.world)  # the others wait until the main process has written the checkpoint
        return Preempted(self.stop.signal_name or "a stop request", checkpoint, epoch, step)


def hold_stop_signals() -> None:
    """SIGTERM and SIGUSR1 no longer end this process, which is ending already: its closing and its error line first.

    Called once a process has lost the others (a collective failed). torchrun's agent then sends SIGTERM to every
    process still running, and one that was closing its outputs (rank 0 draws curves.png) died of it before it
    said why: on a busy 2-core machine, in one make test of several. The agent still ends a process that outstays
    its grace period (SIGKILL); Ctrl-C still interrupts.
    """
    if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
        for signum in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(signum, signal.SIG_IGN)
