"""One run per ``train.out_dir``: two runs writing into one folder would overwrite each other's checkpoints.

An exclusive ``fcntl.flock`` on ``out_dir/.lock``, held while the run lives:
the kernel drops it when the process ends in any way (SIGKILL and power cuts
included), so no stale lock ever blocks a later ``--resume auto``. The lock is
taken before anything else in the folder is touched (``claim_out_dir``): a run
that is refused changes nothing of the run that holds it. (On NFS, a lock held
by a node that died stays held until the server lets it go: see docs/resume.md.)

Which checkpoints in the folder a run continues after torchrun restarts it, or
Slurm requeues it, is decided here too (``resume_after_restart``): the job
that wrote ``last.pt`` owns it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
from pathlib import Path
from typing import IO

from ..core.checkpoint import read_checkpoint
from ..core.distributed import World
from ..core.errors import UserError

# flock's answers for "another process holds it" (EWOULDBLOCK is EAGAIN on Linux); any other error is the file system's.
HELD = {errno.EWOULDBLOCK, errno.EAGAIN}


def written_by(handle: IO[str]) -> str:
    """The line the lock's holder wrote (pid, host, Slurm job, start): whom to wait for."""
    handle.seek(0)
    return handle.read().strip() or "another process"


class RunLock:
    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / ".lock"
        self.handle: IO[str] | None = None

    def holder(self) -> str | None:
        """Who holds the lock now, or None when no run does; probes without taking or changing it.

        A lock left by a run that ended is free: the kernel released it with the
        process. Slurm's preflight asks this before the job starts torchrun.
        """
        try:
            handle = self.path.open()
        except OSError:
            return None  # no lock file: no run ever started there (or it cannot be read: acquire says so)
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: never blocks another probe
            except OSError as exc:
                # A file system without locks is acquire's to report, in its own words.
                return written_by(handle) if exc.errno in HELD else None
            fcntl.flock(handle, fcntl.LOCK_UN)
        return None

    def acquire(self) -> None:
        handle = self.path.open("a+")  # "a+": never truncates what the holder wrote
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = written_by(handle)
            handle.close()
            if exc.errno in HELD:
                raise in_use(self.path.parent, holder) from None
            # ENOLCK, ENOSYS, EOPNOTSUPP...: NFS mounted nolock, Lustre mounted without flock, some FUSE mounts.
            raise UserError(
                f"train.out_dir {self.path.parent} is on a file system that cannot lock files "
                f"(flock on {self.path.name}: {exc.strerror or exc}): mount it with locking "
                "(NFS without nolock, Lustre with -o flock) or choose a train.out_dir on a file system that has it"
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


def in_use(out_dir: Path, holder: str) -> UserError:
    """The folder's lock is held: another run is writing there now."""
    return UserError(
        f"train.out_dir {out_dir} is in use by a run in progress ({holder}): "
        "wait for it to end or stop it, or choose another train.out_dir"
    )


def claim_out_dir(out_dir: Path, lock: RunLock) -> None:
    """Create the folder, take its run lock, then check it can be written and drop crash leftovers.

    In this order: the stale temporary files deleted here could be a running
    run's checkpoint in flight, so only the lock's holder may delete them.
    """
    try:
        out_dir.mkdir(parents=True, exist_ok=True)  # creates, never changes, what is there
        lock.acquire()  # one run per out_dir, released by the kernel however this process ends
        probe = out_dir / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
        for stale in out_dir.glob(".*.pt.*tmp"):  # writes a crash of this run's earlier process cut short
            stale.unlink()
    except OSError as exc:
        raise UserError(f"train.out_dir {out_dir} cannot be written ({exc.strerror}): choose another folder") from None


def missing_folders(out_dir: Path) -> list[Path]:
    """The folders ``claim_out_dir`` would make for ``out_dir`` (it and its missing parents), deepest first."""
    missing = []
    for folder in [out_dir, *out_dir.parents]:
        if folder.exists():
            break
        missing.append(folder)
    return missing


def remove_unused(folders: list[Path]) -> None:
    """After a run that failed before writing anything: the folders it made go again, if its ``.lock`` is all
    they hold (a folder with anything else in it stays, and so do the ones above it)."""
    if not folders or not folders[0].is_dir():
        return
    if [entry.name for entry in folders[0].iterdir()] == [".lock"]:
        (folders[0] / ".lock").unlink()  # the kernel keeps this process's lock on it until it closes the handle
    for folder in folders:
        try:
            folder.rmdir()  # only ever an empty one
        except OSError:
            return


def resume_after_restart(resume: str | None, out_dir: Path, world: World) -> str | None:
    """Under torchrun, a job continues its own newest checkpoint by itself: after ``--max-restarts``, or a requeue.

    The rule every node agrees on: ``last.pt`` records the job that wrote it
    (``TORCHELASTIC_RUN_ID``, torchrun's ``--rdzv-id``), and a job resumes its
    own last.pt whatever the restart count (which each node's agent counts for
    its own workers only, so nodes disagree). A Slurm requeue keeps its job id,
    so ``--rdzv-id=$SLURM_JOB_ID`` continues too. Another job's last.pt is
    refused as on a first start. torchrun's default id ``none`` names no job:
    then only a restart on this node resumes.
    """
    job = os.environ.get("TORCHELASTIC_RUN_ID")
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if resume is not None or job is None or not (out_dir / "last.pt").is_file():
        return resume
    if job == "none" and not restarts:
        return resume
    try:
        ours = read_checkpoint(out_dir / "last.pt").get("job") == job
    except UserError:
        ours = True  # damaged by the failure: --resume auto falls back to an older intact checkpoint
    if ours and world.is_main:
        again = f"torchrun restarted the workers (restart {restarts})" if restarts else f"job {job} runs again"
        print(f"{again}: {out_dir / 'last.pt'} is this torchrun job's ({job}): resuming from it", flush=True)
    return "auto" if ours else None


def holds_a_run(out_dir: Path) -> UserError:
    """A new run (no ``--resume``) into a folder whose ``last.pt`` is another run's: refused, never overwritten."""
    return UserError(
        f"{out_dir} already holds a run (last.pt): continue it with --resume auto, "
        "or start a new one with another --set train.out_dir=DIR"
    )


def holds_another_run(out_dir: Path, path: Path) -> UserError:
    """``--resume PATH`` into a folder whose ``last.pt`` is not PATH: the folder's run would be overwritten."""
    return UserError(
        f"{out_dir} already holds another run (last.pt): to continue from {path}, set another train.out_dir"
    )
