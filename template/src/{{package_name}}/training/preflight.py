"""What a run can be told before it reads any data: the whole config, judged against the code and this hardware.

Checking and decoding a data set takes minutes on a large one. A setting that
cannot work (a model that cannot take the image size, a weights file that is
not there or a weights name that none are known by, fp16 on a CPU, an extra that is not installed) used to be found
after that, and left a run folder holding only ``.lock``; a setting that
costs much (bf16 where the hardware only emulates it: 11-16x slower) was not
said at all. ``check_before_data`` is the one place for such checks: the
trainer calls it before the data is read, and a new check belongs here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import nn

from ..core.config import Config, ModelConfig
from ..core.device import emulated_bf16, resolve_precision
from ..core.distributed import World, data_parallel_ids, data_parallel_warning, sync_batchnorm
from ..core.errors import UserError
from ..core.optional import require
from ..models.classifier import build_model
from ..models.weights import resolve_weights
from ..outputs.tracking import preflight as check_tracking

# Emulated bf16 against fp32 on x86 CPUs without native bf16 math, by torch.backends.cpu.get_cpu_capability():
# training steps of mobilenet_v3_small at 96 px, batch 32, channels_last, torch 2.14.1, on a 2-core AMD EPYC
# whose oneDNN and ATen were held to each instruction set (ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2:
# 192 against 12.3 img/s, and 11-12x on a busy machine; ONEDNN_MAX_CPU_ISA=AVX512_CORE: 2-3x). The CPU of the
# report that asked for this warning (AVX2) measured 12x: 0.6-0.9 against 9-11 img/s.
EMULATED_BF16_SLOWDOWN = {"AVX512": "2-3x", "AVX2": "11-16x"}


def check_before_data(cfg: Config, world: World, resume: str | None = None) -> list[str]:
    """Refuse (``UserError``) a setting that cannot work; return a warning line for each one that costs much.

    ``world.device`` is the training device, already chosen. Nothing is read
    from the data and nothing is written, so a refusal leaves nothing behind.
    """
    device = world.device or torch.device("cpu")
    resolve_precision(cfg.train.precision, device)  # fp16 without CUDA: refused in its own words
    check_files(cfg.model, resume, world)
    check_model(cfg.model, cfg.data.image_size)
    replicas = data_parallel_ids(device, cfg.train, cfg.data.batch_size, world)  # its refusals: compile, batch
    if cfg.train.sync_batchnorm:
        sync_batchnorm(nn.Module(), world, device)  # refused off CUDA under torchrun; an empty module costs nothing
    if cfg.train.tensorboard:
        require("tensorboard", "tensorboard", "train.tensorboard")
    check_tracking(cfg.train, world.is_main)  # an unreachable MLflow store
    warnings = [precision_warning(cfg.train.precision, device), data_parallel_warning(replicas, cfg.data.batch_size)]
    return [warning for warning in warnings if warning]


def check_files(cfg: ModelConfig, resume: str | None, world: World) -> None:
    """The files the config and ``--resume`` name exist (their contents are judged where they are loaded).

    ``model.pretrained_weights``: a name it does not know, or a timm model without the timm extra, is one line
    (models/weights.py); its file is found, or downloaded now by each node's first process (torch.hub's or the
    Hugging Face cache), or one line says which file to fetch and where to put it.
    """
    weights = resolve_weights(cfg)
    if weights is not None and world.local_rank == 0:
        weights.fetch()
    if cfg.init_from and not Path(cfg.init_from).exists():
        raise UserError(f"model.init_from {cfg.init_from} not found: give the path of a checkpoint to start from")
    if resume not in (None, "auto") and not Path(str(resume)).exists():
        # The same line as core/checkpoint.py's find_resume_state.
        raise UserError(f"--resume {resume}: no such checkpoint; use --resume auto or the path of a .pt file")


def check_model(cfg: ModelConfig, image_size: int) -> None:
    """Build the model on the meta device (shapes only: no memory, no weights read, well under a second).

    An unknown ``model.name`` or an image size its architecture cannot take
    ends here, in build_model's own words. Anything else a meta build raises
    (a builder that initializes from data) is left for the real build to say.
    """
    model = dataclasses.replace(cfg, pretrained_weights=None, init_from=None)  # check_files saw those
    try:
        with torch.device("meta"):
            build_model(model, 2, image_size)  # the class count is the data's: any will do here
    except UserError:
        raise
    except Exception:  # not a verdict on the config: the real build meets it and says what it is
        return


def precision_warning(precision: str, device: torch.device) -> str | None:
    """One line for ``bf16`` asked for where the hardware only emulates it; ``auto`` never picks it there."""
    if precision != "bf16" or not emulated_bf16(device):
        return None
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return (
            f"train.precision=bf16 on {torch.cuda.get_device_name(device)} (compute capability {major}.{minor}), "
            "which has no bf16 tensor cores: torch emulates bf16 there, while fp16 uses them; "
            "set train.precision=auto (fp16 with a gradient scaler here)"
        )
    capability = "AVX512" if torch.backends.cpu.get_cpu_capability() == "AVX512" else "AVX2"
    return (
        "train.precision=bf16, but this CPU has no native bf16 math (AVX512-BF16 or AMX) and torch emulates it: "
        f"measured {EMULATED_BF16_SLOWDOWN[capability]} slower than fp32 on an {capability} CPU "
        "(mobilenet_v3_small, 96 px); set train.precision=auto (fp32 here) or fp32"
    )
