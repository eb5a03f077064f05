"""Where the numbers are computed: device, backend flags, precision, autocast, memory layout (P3, P6).

Every choice here is made once, at start, from the config and the hardware at
hand; the rest of the code receives the result (a ``Compute``) and never asks
``torch.cuda`` again.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

from .errors import UserError

# cuBLAS is deterministic only with one of these workspace settings (CUDA's docs on reproducibility).
DETERMINISTIC_CUBLAS = (":4096:8", ":16:8")


@dataclass(frozen=True)
class Compute:
    """The training device, the resolved precision and the memory layout, decided once (P6)."""

    device: torch.device
    precision: str = "fp32"  # fp32 | bf16 | fp16, never auto
    layout: torch.memory_format = torch.contiguous_format

    def autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.device, self.precision)

    def batch(self, images: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """P6: one device, asynchronous copies (from pinned memory, on CUDA), the model's memory layout."""
        images = images.to(self.device, non_blocking=True, memory_format=self.layout)
        return images, targets.to(self.device, non_blocking=True)


def select_device(name: str = "auto", local_rank: int = 0) -> torch.device:
    """P6: one device, chosen once at start; everything else uses it.

    Under torchrun each process takes the GPU of its local rank.
    """
    if name == "auto":
        return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"train.device {name!r} is not a device: use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"train.device is {name!r} but CUDA is not available: use train.device=cpu or auto")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
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
