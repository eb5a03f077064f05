"""On a Slurm cluster: what ``slurm/train.sbatch`` asks Python before it starts torchrun on every node.

    python -m <package>.slurm preflight [--config FILE ...] [--set KEY=VALUE ...] [--resume auto|PATH]

prints the number of processes each node runs (one per GPU, or ``NPROC_PER_NODE``
CPU processes where there is no GPU), or ends with one line and exit status 2
where the job would fail later, less clearly: a script run outside a Slurm job,
fewer GPUs than the job asks for, a config that does not load, a
``train.out_dir`` that another run holds. The batch script itself relays
Slurm's signals and requeues the job; the trainer resumes a requeued job by
itself, keyed by the Slurm job id (``torchrun --rdzv-id=$SLURM_JOB_ID``, see
``training/run_lock.py``, ``resume_after_restart``).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from .core.errors import UserError
from .training.run_lock import RunLock

SUBMIT = "sbatch slurm/train.sbatch [--config FILE] [--set KEY=VALUE ...]"


def job_id(environ: Mapping[str, str]) -> str:
    """The Slurm job this process belongs to; a one-line error when the script was not submitted with sbatch."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        raise UserError(
            f"not inside a Slurm job (no SLURM_JOB_ID): submit the script with `{SUBMIT}`, "
            f"or train without Slurm with `python -m {__package__} train`"
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
    """The checks before torchrun starts; returns the processes per node."""
    from .cli import DEFAULT_CONFIG, parse
    from .core.config import load_config

    job = job_id(environ)
    args = parse(["train", *argv])
    cfg = load_config(args.config or [DEFAULT_CONFIG], args.overrides)
    holder = RunLock(Path(cfg.train.out_dir)).holder()
    if holder is not None:
        raise UserError(
            f"train.out_dir {cfg.train.out_dir} is in use by another run ({holder}), so job {job} would stop at "
            "once: wait for that run to end or cancel it, or give this job another --set train.out_dir=DIR"
        )
    import torch

    return processes_per_node(environ, torch.cuda.device_count(), cfg.train.device)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "preflight":
        print(f"usage: python -m {__package__}.slurm preflight [--config FILE] [--set KEY=VALUE ...]", file=sys.stderr)
        return 2
    try:
        print(preflight(args[1:], os.environ))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
