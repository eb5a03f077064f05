"""One run per ``train.out_dir``: two runs writing into one folder would overwrite each other's checkpoints.

An exclusive ``fcntl.flock`` on ``out_dir/.lock``, held while the run lives:
the kernel drops it when the process ends in any way (SIGKILL and power cuts
included), so no stale lock ever blocks a later ``--resume auto``. (flock is
per machine: on a network file system shared by several machines, give each
run its own out_dir.)
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path
from typing import IO

from .errors import UserError


class RunLock:
    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / ".lock"
        self.handle: IO[str] | None = None

    def acquire(self) -> None:
        handle = self.path.open("a+")  # "a+": never truncates what the holder wrote
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise UserError(
                f"train.out_dir {self.path.parent} is in use by a run in progress ({holder}): "
                "wait for it to end or stop it, or choose another train.out_dir"
            ) from None
        handle.seek(0)
        handle.truncate()
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        job = f", Slurm job {os.environ['SLURM_JOB_ID']}" if os.environ.get("SLURM_JOB_ID") else ""  # who to wait for
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}{job}, started {started}\n")
        handle.flush()
        self.handle = handle

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None
