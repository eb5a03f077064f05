"""Several GPUs or processes: process groups, DataParallel / DDP wrapping, collectives (P14).

Device, precision and backend flags are device.py's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from .errors import UserError


@dataclass(frozen=True)
class World:
    """This process's place among the processes that torchrun started (one, without torchrun)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Only the main process writes checkpoints, metrics and pictures."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def init_world(parallel: str) -> World:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1): gloo on CPU, nccl on CUDA."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size > 1 and parallel in ("none", "dp"):
        raise UserError(
            f"train.parallel={parallel} under torchrun would run {size} separate trainings into one out_dir: "
            "use train.parallel=auto or ddp"
        )
    if size == 1:
        if parallel == "ddp":
            raise UserError(
                "train.parallel=ddp needs several processes: launch with "
                "`torchrun --nproc_per_node=N -m <package> train ...`"
            )
        return World()
    world = World(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(world.local_rank)
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return world


def close_world(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()


def sum_across(tensor: torch.Tensor, world: World) -> torch.Tensor:
    """Sum a tensor over every process, in place (a no-op for one process)."""
    if world.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def sync_buffers(model: nn.Module, world: World) -> None:
    """Give every process rank 0's buffers (batch-norm statistics) before it evaluates.

    DDP broadcasts them at the start of each training forward, so after the
    epoch's last step each process still holds statistics of its own batches.
    """
    if world.distributed:
        for buffer in model.buffers():
            dist.broadcast(buffer, src=0)


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def wrap_model(
    model: nn.Module,
    device: torch.device,
    parallel: str,
    batch_size: int,
    gpu_count: int | None = None,
    world: World | None = None,
) -> nn.Module:
    """P14: DistributedDataParallel under torchrun; else ``nn.DataParallel`` over every visible GPU.

    Either way the real model stays at ``.module``.
    """
    if world is not None and world.distributed:
        return nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    gpus = torch.cuda.device_count() if gpu_count is None else gpu_count
    if device.type != "cuda" or parallel == "none" or gpus < 2:
        return model
    if batch_size < gpus:
        raise UserError(f"data.batch_size {batch_size} is smaller than the {gpus} GPUs: raise it to at least {gpus}")
    return nn.DataParallel(model, device_ids=list(range(gpus)))


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside DataParallel, DDP and torch.compile wrappers (P7)."""
    while True:
        if isinstance(model, nn.DataParallel | nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model
