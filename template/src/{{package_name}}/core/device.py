"""Where the numbers are computed: device, backend flags, precision, autocast, memory layout (P3, P6).

Every choice here is made once, at start, from the config and the hardware at
hand; the rest of the code receives the result (a ``Compute``) and never asks
``torch.cuda`` again.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator
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

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)

    def batch(self, images: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """P6: one device, asynchronous copies (from pinned memory, on CUDA), the model's memory layout."""
        images = images.to(self.device, non_blocking=True, memory_format=self.layout)
        return images, targets.to(self.device, non_blocking=True)


def select_device(name: str = "auto", local_rank: int = 0) -> torch.device:
    """P6: one device, chosen once at start; everything else uses it.

    Under torchrun each process takes the GPU of its local rank. A GPU is
    made this process's current CUDA device, in one process too (``cuda:1``):
    what asks for no device, such as the DataLoader's pin-memory thread,
    takes the current one, and would otherwise start a context on GPU 0
    (about 0.5 GB of another GPU's memory).
    """
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"train.device {name!r} is not a device: use auto, cpu, cuda or cuda:N") from None
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        raise UserError(f"train.device is {name!r} but CUDA is not available: use train.device=cpu or auto")
    device = torch.device("cuda", local_rank if device.index is None else device.index)
    count = torch.cuda.device_count()
    if device.index >= count:  # type: ignore[operator]
        raise UserError(
            f"{device} does not exist: this machine has {count} GPU(s). Use cuda:0 to cuda:{count - 1}, "
            f"or under torchrun at most --nproc_per_node={count}, or train.device=cpu"
        )
    torch.cuda.set_device(device.index)  # before NCCL starts under torchrun, before any loader pins memory
    return device


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch's intra-op threads set to one inside, as they were after: for work of many tiny operations (the
    audit's pixel check: a chunk's pairs of 32 x 32 pixels, calls of a millisecond), where threads wait for each
    other more than they share work: on a shared 2-core machine, two threads checked 8 times fewer pairs a second
    than one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def configure_backends(device: torch.device, deterministic: bool) -> None:
    """P3: cuDNN autotuning for fixed shapes, or determinism when asked."""
    if deterministic:
        workspace = os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", DETERMINISTIC_CUBLAS[0])
        if device.type == "cuda" and workspace not in DETERMINISTIC_CUBLAS:
            raise UserError(
                f"train.deterministic=true, but CUBLAS_WORKSPACE_CONFIG={workspace} lets cuBLAS vary from run to run: "
                f"unset it or set it to {' or '.join(DETERMINISTIC_CUBLAS)}"
            )
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


def emulated_bf16(device: torch.device) -> bool:
    """True where bf16 has no native math and torch emulates it: a GPU before compute capability 8.0 (Ampere), an
    x86 CPU without AVX512-BF16 or AMX. Other CPUs (Arm) are not judged: some have bf16 instructions, torch's
    probes cannot say which."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device) < (8, 0)
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686")
    return device.type == "cpu" and x86 and not cpu_has_native_bf16()


# Families built of depthwise convolutions with batch norm (MobileNet's inverted residuals), whose training step
# a CPU runs slower in bf16 autocast than in fp32 even with native bf16 math: on a 2-core AVX512-BF16 EPYC
# (benchmarks/layouts.py, channels_last, batch 16) timm's efficientnet_lite0 trained at 60 against 129 img/s at
# 96 px and 20 against 25 at 224, mobilenetv3_large_100 at 82 against 136 and 26 against 38. resnet18, ConvNeXt
# and ViT were as fast or faster in bf16 (resnet18 at 224: 30 against 16). Matched on the architecture's name.
FP32_ON_CPU = ("efficientnet", "tf_efficientnet", "mobilenet", "mnasnet")


def bf16_slower_on_cpu(model_name: str) -> bool:
    """Whether ``model.name`` is of a family that ``FP32_ON_CPU`` names (timm's and torchvision's spellings)."""
    return model_name.removeprefix("timm/").startswith(FP32_ON_CPU)


def resolve_precision(precision: str, device: torch.device, model_name: str = "") -> str:
    """``auto``: bf16 where the hardware has native bf16 math, fp16 (with a gradient scaler) on older GPUs, else fp32;
    on a CPU, fp32 for the families that train slower in bf16 there (``FP32_ON_CPU``).

    On CUDA that is compute capability 8.0 (Ampere) and later, asked of the
    training device itself. ``torch.cuda.is_bf16_supported()`` would also
    count emulated bf16 on a V100 or T4: slow, and without a scaler.
    """
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.get_device_capability(device) >= (8, 0) else "fp16"
        return "bf16" if cpu_has_native_bf16() and not bf16_slower_on_cpu(model_name) else "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise UserError("train.precision=fp16 needs CUDA: use bf16 or fp32 on the CPU")
    return precision


def memory_format(setting: str, device: torch.device) -> torch.memory_format:
    """``auto``: channels_last (NHWC), which cuDNN's tensor-core kernels and oneDNN's CPU kernels prefer.

    Measured on a 2-core AVX512-BF16 CPU (benchmarks/layouts.py, batch 16, at the precision auto picks): as fast
    or faster than contiguous NCHW for resnet18, EfficientNet, MobileNet, ConvNeXt and ViT at 96 and 224 px
    (efficientnet_lite0 in fp32: 129 against 76 img/s at 96 px, 25 against 13 at 224), slower for none by more
    than a tenth.
    """
    if setting in ("true", "auto"):
        return torch.channels_last
    return torch.contiguous_format


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)  # the dtype always: its default differs by device


def nondeterminism_error(error: RuntimeError) -> UserError | None:
    """The one-line form of PyTorch's refusal to run an op that has no deterministic kernel, else None."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if "does not have a deterministic implementation" not in first:
        return None
    op = first.split(" does not have", 1)[0]
    return UserError(
        f"train.deterministic=true, but this model uses {op}, which has no deterministic kernel on this device: "
        "set train.deterministic=false, or choose another model.name"
    )
