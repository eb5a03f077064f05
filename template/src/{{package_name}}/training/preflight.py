"""What a run can be told before it reads any data: the whole config, judged against the code and this hardware.

Checking and decoding a data set takes minutes on a large one. A setting that
cannot work (a model that cannot take the image size, a weights file that is
not there or a weights name that none are known by, a weights file of another architecture, fp16 on a CPU, the
extras the config needs, a ``train.out_dir`` that holds a run) used to be found after that, and left a run folder
holding only ``.lock``; a setting that
costs much (bf16 where the hardware only emulates it: 11-16x slower) was not
said at all. ``check_before_data`` is the one place for such checks: the
trainer calls it before the data is read, and a new check belongs here.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import warnings
from pathlib import Path

import torch
from torch import nn

from ..core.config import Config, ModelConfig
from ..core.device import emulated_bf16, resolve_precision
from ..core.distributed import World, data_parallel_ids, data_parallel_warning, sync_batchnorm
from ..core.errors import UserError
from ..core.optional import install_hint
from ..models.classifier import build_model
from ..models.timm_backbone import is_timm
from ..models.weight_files import LocalFile
from ..models.weights import resolve_weights
from ..outputs.writers import mlflow_wanted
from .run_lock import RunLock, holds_a_run, holds_another_run, in_use

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
    check_extras(cfg)  # every extra the config needs, named at once: pip installs them in one go
    resolve_precision(cfg.train.precision, device)  # fp16 without CUDA: refused in its own words
    check_files(cfg.model, resume, world)
    if world.is_main:
        check_out_dir(Path(cfg.train.out_dir), resume)
    check_model(cfg.model, cfg.data.image_size)
    replicas = data_parallel_ids(device, cfg.train, cfg.data.batch_size, world)  # its refusals: compile, batch
    if cfg.train.sync_batchnorm:
        sync_batchnorm(nn.Module(), world, device)  # refused off CUDA under torchrun; an empty module costs nothing
    if mlflow_wanted(cfg.train.mlflow):  # the mlflow part, where the project holds it and the run asks
        from ..outputs.tracking import preflight as check_tracking

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


def needed_extras(cfg: Config) -> list[tuple[str, str, str]]:
    """(module, extra, the setting that needs it) for each optional part the config turns on."""
    needed = [
        ("tensorboard", "tensorboard", "train.tensorboard", cfg.train.tensorboard),
        ("mlflow", "mlflow", "train.mlflow", mlflow_wanted(cfg.train.mlflow)),  # or MLFLOW_TRACKING_URI set
        ("timm", "timm", f"model.name {cfg.model.name}", is_timm(cfg.model.name)),
        ("torchcodec", "decode", "data.decoder=nvjpeg", cfg.data.decoder == "nvjpeg"),  # TorchCodec decodes on GPUs
    ]
    return [(module, extra, setting) for module, extra, setting, wanted in needed if wanted]


def check_extras(cfg: Config) -> None:
    """The extras the config needs, found without importing them; the missing ones in one line and one command."""
    missing = [(module, extra, setting) for module, extra, setting in needed_extras(cfg) if not installed(module)]
    if not missing:
        return
    needs = " and ".join(f"{setting} needs {module}" for module, _, setting in missing)
    which = "which is" if len(missing) == 1 else "which are"
    extras = ",".join(dict.fromkeys(extra for _, extra, _ in missing))
    raise UserError(f"{needs}, {which} not installed: {install_hint(extras)}")


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails to import, or a module without a spec
        return False


def check_out_dir(out_dir: Path, resume: str | None) -> None:
    """A folder that holds a run is refused now, as the run's start would refuse it after the data (run_state.py);
    so is one a run in progress writes into (its lock, probed without taking it: run_lock.py)."""
    holder = RunLock(out_dir).holder()
    if holder is not None:
        raise in_use(out_dir, holder)
    last = out_dir / "last.pt"
    if not last.exists() or resume == "auto":
        return
    if resume is None:
        raise holds_a_run(out_dir)
    if Path(resume).is_file() and not os.path.samefile(resume, last):
        raise holds_another_run(out_dir, Path(resume))


def check_model(cfg: ModelConfig, image_size: int) -> None:
    """Build the model on the meta device (shapes only: no memory, well under a second), with a local weights file.

    An unknown ``model.name``, an image size its architecture cannot take, or
    a weights file of another architecture ends here, in build_model's own
    words: the file is read (its tensors' names and shapes are compared, its
    values go nowhere). Published weights by name are the architecture's own:
    not read. Anything else a meta build raises (a builder that initializes
    from data) is left for the real build to say.
    """
    weights = resolve_weights(cfg)
    local = weights is not None and isinstance(weights.file, LocalFile)
    # check_files saw the others: init_from's tensors are matched by name against the model with the data's classes.
    model = dataclasses.replace(cfg, pretrained_weights=cfg.pretrained_weights if local else None, init_from=None)
    try:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns, tensor by tensor, that a copy into meta tensors does nothing
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
