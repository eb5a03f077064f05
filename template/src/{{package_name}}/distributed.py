"""Device, precision, backend flags and multi-GPU wrapping."""

from __future__ import annotations

import contextlib
import os

import torch
from torch import nn

from .errors import UserError


def select_device(name: str = "auto") -> torch.device:
    """P6: one device, chosen once at start; everything else uses it."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
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


def resolve_precision(precision: str, device: torch.device) -> str:
    """``auto``: bf16 on GPUs that support it, else fp16 on CUDA, fp32 on the CPU."""
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise UserError("train.precision=fp16 needs CUDA: use bf16 or fp32 on the CPU")
    return precision


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def wrap_model(
    model: nn.Module, device: torch.device, parallel: str, batch_size: int, gpu_count: int | None = None
) -> nn.Module:
    """P14: ``nn.DataParallel`` over every visible GPU; the real model stays at ``.module``."""
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
