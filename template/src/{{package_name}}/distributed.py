"""Device, precision, backend flags, and several GPUs or processes (P3, P6, P14)."""

from __future__ import annotations

import contextlib
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


def select_device(name: str = "auto", world: World | None = None) -> torch.device:
    """P6: one device, chosen once at start; everything else uses it.

    Under torchrun each process takes the GPU of its local rank.
    """
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", world.local_rank if world and world.distributed else 0)
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"train.device {name!r} is not a device: use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"train.device is {name!r} but CUDA is not available: use train.device=cpu or auto")
    return device


def configure_backends(device: torch.device, deterministic: bool) -> None:
    """P3: cuDNN autotuning for fixed shapes, or determinism when asked."""
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        torch.use_deterministic_algorithms(True)
    else:
        torch.backends.cudnn.benchmark = device.type == "cuda"
        torch.backends.cudnn.deterministic = False
        torch.use_deterministic_algorithms(False)


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX: there bf16 autocast trains about twice as fast as fp32 (benchmarks/throughput.py)."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu's own checks
    return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)


def resolve_precision(precision: str, device: torch.device) -> str:
    """``auto``: bf16 where the hardware has native bf16 math, fp16 on older GPUs, else fp32."""
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "bf16" if cpu_has_native_bf16() else "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise UserError("train.precision=fp16 needs CUDA: use bf16 or fp32 on the CPU")
    return precision


def memory_format(setting: str, device: torch.device) -> torch.memory_format:
    """``auto``: channels_last (NHWC), which cuDNN's tensor-core kernels and oneDNN's CPU kernels prefer.

    Measured on a 2-core AVX512-BF16 CPU (benchmarks/throughput.py): resnet18 trains 1.3x (fp32) to
    1.6x (bf16) faster than with contiguous NCHW tensors.
    """
    if setting in ("true", "auto"):
        return torch.channels_last
    return torch.contiguous_format


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


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
