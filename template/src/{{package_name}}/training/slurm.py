"""On a Slurm cluster: what ``slurm/train.sbatch`` runs in Python, before torchrun and as torchrun.

    python -m <package>.training.slurm preflight [--config FILE ...] [--set KEY=VALUE ...] [--resume auto|PATH]

prints the number of processes each node runs (one per GPU, or ``NPROC_PER_NODE``
CPU processes where there is no GPU), or ends with one line and exit status 2
where the job would fail later, less clearly: a script run outside a Slurm job,
fewer GPUs than the job asks for, a config that does not load, a
``train.out_dir`` that another run holds.

    python -m <package>.training.slurm torchrun [torchrun's arguments] -m <package> train ...

is torchrun whose stop by a signal is quiet (``torchrun`` below). The batch
script relays Slurm's signals, requeues the job and says so in one line; the
trainer resumes a requeued job by itself, keyed by the Slurm job id
(``torchrun --rdzv-id=$SLURM_JOB_ID``, see ``training/run_lock.py``,
``resume_after_restart``).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

from ..core import PACKAGE
from ..core.arguments import DEFAULT_CONFIG, add_train_options, parse_arguments
from ..core.config import load_config
from ..core.errors import UserError
from .preemption import EXIT_PREEMPTED
from .run_lock import RunLock

SUBMIT = "sbatch slurm/train.sbatch [--config FILE] [--set KEY=VALUE ...]"
PROGRAM = f"python -m {__package__}.slurm"  # what the batch script runs


def job_id(environ: Mapping[str, str]) -> str:
    """The Slurm job this process belongs to; a one-line error when the script was not submitted with sbatch."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        raise UserError(
            f"not inside a Slurm job (no SLURM_JOB_ID): submit the script with `{SUBMIT}`, "
            f"or train without Slurm with `python -m {PACKAGE} train`"
        )
    return job


def whole_number(environ: Mapping[str, str], name: str) -> int | None:
    text = environ.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise UserError(f"{name}={text!r} is not a positive whole number: set it to the processes per node, e.g. 2")
    return int(text)


def gpus_allocated(environ: Mapping[str, str]) -> int:
    """The GPUs Slurm gave this job on this node: SLURM_GPUS_ON_NODE, set with --gpus-per-node or --gres=gpu:N."""
    text = environ.get("SLURM_GPUS_ON_NODE", "").strip()
    return int(text) if text.isdigit() else 0


def processes_per_node(environ: Mapping[str, str], visible_gpus: int, device: str) -> int:
    """One process per GPU the job has on this node; ``NPROC_PER_NODE`` CPU processes (default 1) without one.

    ``visible_gpus`` is what CUDA sees here (``torch.cuda.device_count()``): under
    Slurm's GPU binding that is the allocation, so asking for more processes
    than it shows would put two processes on one GPU, or fail at its first use.
    """
    job, host = environ.get("SLURM_JOB_ID", "?"), environ.get("SLURMD_NODENAME") or socket.gethostname()
    asked = whole_number(environ, "NPROC_PER_NODE")
    allocated = gpus_allocated(environ)
    on_gpu = device.startswith("cuda") or (device == "auto" and visible_gpus > 0)
    if not on_gpu:
        return asked or 1
    if visible_gpus == 0:
        raise UserError(
            f"train.device={device} but job {job} has no GPU on {host}: ask for GPUs with "
            "#SBATCH --gpus-per-node=N, or train on CPUs with --set train.device=cpu"
        )
    wanted = asked or allocated or visible_gpus
    if wanted > visible_gpus:
        source = "NPROC_PER_NODE" if asked else "--gpus-per-node"
        raise UserError(
            f"job {job} asks for {wanted} GPUs per node ({source}) but {host} shows {visible_gpus} "
            f"(CUDA_VISIBLE_DEVICES={environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): ask for as many GPUs as "
            "processes (#SBATCH --gpus-per-node=N), or set NPROC_PER_NODE to at most the GPUs a node has"
        )
    return wanted


def preflight(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    """The checks before torchrun starts, on ``train``'s own options; returns the processes per node."""
    job = job_id(environ)
    parser = argparse.ArgumentParser(prog=f"{PROGRAM} preflight", description="the job's checks before torchrun")
    add_train_options(parser)
    args = parse_arguments(parser, argv)
    cfg = load_config(args.config or [DEFAULT_CONFIG], args.overrides)
    holder = RunLock(Path(cfg.train.out_dir)).holder()
    if holder is not None:
        raise UserError(
            f"train.out_dir {cfg.train.out_dir} is in use by another run ({holder}), so job {job} would stop at "
            "once: wait for that run to end or cancel it, or give this job another --set train.out_dir=DIR"
        )
    import torch

    return processes_per_node(environ, torch.cuda.device_count(), cfg.train.device)


# torchrun stops its processes on these: its own four, and USR1, which the batch script relays before the time limit
# (Slurm's `--signal`).
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1")


class QuietStop(logging.Filter):
    """torchrun's stop on a signal, said by no one but the batch script.

    torchrun's agent turns a signal into ``SignalException``, stops its
    processes (they checkpoint at their next step) and raises it again: a
    30-line traceback in the job log after every requeue, and two warnings,
    which ``filter`` drops once a stop began. ``handle`` stops the agent once:
    a second signal (Slurm's SIGTERM after the batch script's USR1, say) would
    cut short its wait for the checkpoint.
    """

    def __init__(self) -> None:
        super().__init__()
        self.stopping = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        from torch.distributed.elastic.multiprocessing.api import SignalException

        for name in STOP_SIGNALS:  # the stop is under way: later ones change nothing (a handler, not SIG_IGN,
            signal.signal(getattr(signal, name), self.ignore)  # which Python refuses for one already arriving)
        self.stopping = True
        raise SignalException(f"Process {os.getpid()} got signal: {signum}", sigval=signal.Signals(signum))

    def ignore(self, signum: int, frame: FrameType | None) -> None:
        pass

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (self.stopping and ("death signal" in message or "closing signal" in message))


def torchrun(argv: Sequence[str]) -> int:
    """torchrun (``torch.distributed.run``) on one node of the job, quiet when a signal stops it.

    Ends with 0 when this node's processes stopped after their checkpoint
    (their note, ``STOP_NOTE``, is there: the batch script reads it and says
    the one line), 75 when a signal stopped them before one, and torchrun's own
    way otherwise: a process that fails still ends it with torchrun's report and
    traceback. The node that runs the batch script writes the note where the
    script asked; any other node into a folder of its own, removed here.
    """
    from torch.distributed.elastic.multiprocessing import api as elastic
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as run_torchrun

    own, asked = None, os.environ.get("STOP_NOTE")
    note = Path(asked or ".")
    if not asked or not note.parent.is_dir():  # not the batch script's node, or no batch script
        own = Path(tempfile.mkdtemp(prefix="stop-note-"))
        note = own / "stop"
        os.environ["STOP_NOTE"] = str(note)  # the processes torchrun starts inherit it
    quiet = QuietStop()
    elastic._terminate_process_handler = quiet.handle  # what torchrun installs for its four as it starts them
    signal.signal(signal.SIGUSR1, quiet.handle)  # not among them (its default action would end torchrun at once)
    for name in ("torch.distributed.elastic.agent.server.api", "torch.distributed.elastic.multiprocessing.api"):
        logging.getLogger(name).addFilter(quiet)
    try:
        run_torchrun(list(argv))
    except SignalException:
        return 0 if note.is_file() else EXIT_PREEMPTED
    finally:
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["torchrun"]:
        return torchrun(args[1:])
    if not args or args[0] != "preflight":
        usage = f"usage: {PROGRAM} preflight|torchrun ..."
        print(usage, file=sys.stderr)
        return 2
    try:
        print(preflight(args[1:], os.environ))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
