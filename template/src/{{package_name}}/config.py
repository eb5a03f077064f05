"""Typed configuration: YAML file, then ``--set key=value`` overrides, then checks.

Every key has a type and a default here; the YAML file and the command line
may only change values. A typo or a wrong type is refused with the nearest
valid key, never silently ignored. (Written by hand rather than with OmegaConf
so that every error is one line that names the fix.)
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import UserError

CONFIG_VERSION = 1


@dataclass
class DataConfig:
    root: str = "data/sample"  # holds train/ and val/ in ImageFolder layout
    format: str = "image"  # image (ImageFolder) | npy (DatasetFolder of .npy arrays)
    image_size: int = 64
    batch_size: int = 32
    num_workers: int | str = "auto"  # loader processes; 0 loads in the main process; auto: by CPU count
    augment: bool = True  # random resized crop + horizontal flip for training
    flip: bool = True  # the horizontal flip of augment; false for text, digits, anything with a handedness
    crop_scale_min: float = 0.5  # smallest area fraction kept by the random crop
    eval_crop_ratio: float = 0.875  # evaluation resizes to image_size / ratio, then center-crops
    cache: str = "auto"  # auto: memory when it takes at most a quarter of it | none | memory: decode once, keep
    pipeline: str = "auto"  # auto | batch: crop and flip whole batches on the device | sample: per image
    on_bad_file: str = "error"  # error: stop and name an unreadable file | skip: leave such files out, listed
    auto_augment: str = "none"  # none | trivialaugment | randaugment | autoaugment, after crop and flip
    random_erasing: float = 0.0  # probability of erasing a random rectangle of each training image
    sampler: str = "uniform"  # uniform: each image once per epoch | balanced: classes drawn equally often


@dataclass
class ModelConfig:
    name: str = "simple_cnn"  # simple_cnn or a torchvision classifier (resnet18, ...)
    widths: list[int] = field(default_factory=lambda: [32, 64, 128])  # simple_cnn stages
    blocks_per_stage: int = 2  # simple_cnn conv blocks per stage
    dropout: float = 0.2  # before the classification head
    pretrained_weights: str | None = None  # local state_dict file; never downloaded
    init_from: str | None = None  # a checkpoint to fine-tune from: matching tensors only
    freeze_backbone: bool = False
    mean: list[float] = field(default_factory=lambda: [0.485, 0.456, 0.406])
    std: list[float] = field(default_factory=lambda: [0.229, 0.224, 0.225])


@dataclass
class OptimConfig:
    name: str = "sgd"  # sgd | adamw
    lr: float = 0.1
    momentum: float = 0.9  # sgd only
    weight_decay: float = 5e-4  # never applied to biases and norm parameters
    backbone_lr_scale: float = 1.0  # backbone lr = lr * scale; the head gets lr
    scheduler: str = "cosine"  # cosine | step
    warmup_epochs: float = 1.0  # linear warmup, counted in optimizer steps
    warmup_start_factor: float = 0.1
    min_lr_ratio: float = 0.0  # cosine ends at lr * ratio
    step_epochs: int = 5  # step: multiply by gamma every step_epochs
    gamma: float = 0.1
    label_smoothing: float = 0.0
    class_weights: str = "none"  # none | balanced: the loss weighs each class by its inverse frequency


@dataclass
class TrainConfig:
    epochs: int = 15
    seed: int = 0
    deterministic: bool = False
    precision: str = "auto"  # auto | fp32 | bf16 | fp16
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    parallel: str = "auto"  # auto (ddp under torchrun, else dp on several GPUs) | none | dp | ddp
    channels_last: str = "auto"  # auto (on) | true | false: NHWC memory layout for convolutions
    compile: bool = False  # torch.compile the model (before DDP wrapping); checkpoints stay unprefixed
    out_dir: str = "runs/default"
    log_every: int = 20  # optimizer steps between host syncs for the progress bar
    progress: bool = True  # tqdm bars (always off when stderr is not a terminal)
    grad_clip_norm: float = 0.0  # 0 turns clipping off
    tensorboard: bool = False  # also log to out_dir/tensorboard (the tensorboard extra)
    mlflow: bool = False  # also log to MLflow: sqlite:///mlflow.db, or MLFLOW_TRACKING_URI (the mlflow extra)
    checkpoint_every_steps: int = 0  # also write last.pt every K optimizer steps; 0: at epoch ends only
    keep_last: int = 0  # older checkpoints kept beside last.pt, for a fallback if it is damaged
    mixup_alpha: float = 0.0  # MixUp's Beta(alpha, alpha); 0 turns it off
    cutmix_alpha: float = 0.0  # CutMix's Beta(alpha, alpha); 0 turns it off (both on: one of them per batch)
    ema_decay: float = 0.0  # exponential moving average of the weights, evaluated and saved; 0 turns it off
    accumulate_steps: int = 1  # batches whose gradients add up before one optimizer step
    early_stopping_patience: int = 0  # stop after this many epochs without val_acc improving; 0 never stops
    early_stopping_min_delta: float = 0.0  # the least rise of val_acc that counts as improving
    sync_batchnorm: bool = False  # under DDP on GPUs: batch-norm statistics over every process's batch
    collective_timeout: float = 300.0  # seconds a process waits for the others at a collective before it gives up


@dataclass
class Config:
    version: int = CONFIG_VERSION
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain types only, so that checkpoints load with ``weights_only=True``."""
        return dataclasses.asdict(self)


CHOICES: dict[str, tuple[str, ...]] = {
    "data.format": ("image", "npy"),
    "data.on_bad_file": ("error", "skip"),
    "data.cache": ("auto", "none", "memory"),
    "data.pipeline": ("auto", "batch", "sample"),
    "data.auto_augment": ("none", "trivialaugment", "randaugment", "autoaugment"),
    "data.sampler": ("uniform", "balanced"),
    "optim.class_weights": ("none", "balanced"),
    "optim.name": ("sgd", "adamw"),
    "optim.scheduler": ("cosine", "step"),
    "train.precision": ("auto", "fp32", "bf16", "fp16"),
    "train.parallel": ("auto", "none", "dp", "ddp"),
    "train.channels_last": ("auto", "true", "false"),
}
POSITIVE = (
    "data.image_size",
    "data.batch_size",
    "optim.lr",
    "optim.step_epochs",
    "optim.gamma",
    "train.epochs",
    "train.log_every",
    "train.accumulate_steps",
    "train.collective_timeout",
)
NON_NEGATIVE = (
    "optim.momentum",
    "optim.weight_decay",
    "optim.backbone_lr_scale",
    "optim.warmup_epochs",
    "optim.min_lr_ratio",
    "train.grad_clip_norm",
    "train.checkpoint_every_steps",
    "train.keep_last",
    "train.mixup_alpha",
    "train.cutmix_alpha",
    "train.early_stopping_patience",
    "train.early_stopping_min_delta",
)


def load_config(
    paths: str | Path | Sequence[str | Path] | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    base: dict[str, Any] | None = None,
) -> Config:
    """Defaults, then ``base`` (e.g. a checkpoint's config), then each YAML file, later ones overriding
    earlier ones key by key (a recipe over default.yaml), then ``--set`` overrides, then checks."""
    raw: dict[str, Any] = copy.deepcopy(base) if base is not None else {}
    files = [paths] if isinstance(paths, str | Path) else list(paths or [])
    for path in [Path(p) for p in files if str(p)]:  # "" stands for "no file": the defaults
        merge(raw, read_yaml(path))
    for item in overrides:
        key, value = parse_override(item)
        set_dotted(raw, key, value)
    return config_from_dict(raw)


def read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"config file {path} not found: pass --config with an existing YAML file")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"config file {path} is not valid YAML ({exc.__class__.__name__}): fix its syntax") from None
    if not isinstance(raw, dict):
        raise UserError(f"config file {path} must hold a mapping of sections (data:, model:, ...)")
    return raw


def merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    """Key by key: a later file changes the keys it names and keeps the others."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def config_from_dict(raw: dict[str, Any]) -> Config:
    config = _build(Config, raw, prefix="")
    if config.version > CONFIG_VERSION:
        raise UserError(
            f"config version {config.version} is newer than this code understands ({CONFIG_VERSION}): "
            "update the project with `copier update`"
        )
    validate(config)
    return config


def parse_override(item: str) -> tuple[str, Any]:
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set {item!r} is malformed: use KEY=VALUE, e.g. --set optim.lr=0.01")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    return key.strip(), value


def set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    node = raw
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise UserError(f"--set {key}: {part!r} is a value, not a section")
        node = child
    node[leaf] = value


def _build(cls: type, raw: Any, prefix: str) -> Any:
    where = prefix.rstrip(".") or "the config"
    if not isinstance(raw, dict):
        raise UserError(f"{where} must be a mapping of keys, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    values = {}
    for key, value in raw.items():
        if key not in hints:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"did you mean {prefix}{close[0]}?" if close else f"valid keys: {', '.join(names)}"
            raise UserError(f"unknown config key {prefix}{key}: {hint}")
        kind = hints[key]
        if dataclasses.is_dataclass(kind):
            values[key] = _build(kind, value, f"{prefix}{key}.")
        else:
            values[key] = _coerce(value, kind, f"{prefix}{key}")
    return cls(**values)


def _coerce(value: Any, kind: Any, key: str) -> Any:
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) == 1:
            return _coerce(value, kinds[0], key)
        matching = [kind for kind in kinds if isinstance(value, kind) and not isinstance(value, bool)]
        if not matching:
            names = " or ".join(kind.__name__ for kind in kinds)
            raise UserError(f"{key} must be {names}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list | tuple):
            raise UserError(f"{key} must be a list, got {value!r}: write e.g. {key}=[1,2,3]")
        return [_coerce(v, args[0], key) for v in value]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is float and isinstance(value, str):
        try:
            return float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string
        except ValueError:
            pass
    if kind is str and isinstance(value, bool):
        return "true" if value else "false"  # YAML reads an unquoted true/false as a bool
    if kind is str and isinstance(value, int | float):
        return str(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UserError(f"{key} must be {kind.__name__}, got {value!r}")
    return value


def validate(config: Config) -> None:
    for key, allowed in CHOICES.items():
        if get_dotted(config, key) not in allowed:
            raise UserError(f"{key} is {get_dotted(config, key)!r}: choose one of {', '.join(allowed)}")
    for key in POSITIVE:
        if get_dotted(config, key) <= 0:
            raise UserError(f"{key} must be greater than 0, got {get_dotted(config, key)}")
    for key in NON_NEGATIVE:
        if get_dotted(config, key) < 0:
            raise UserError(f"{key} must not be negative, got {get_dotted(config, key)}")
    for key in ("model.dropout", "optim.label_smoothing", "train.ema_decay"):
        if not 0 <= get_dotted(config, key) < 1:
            raise UserError(f"{key} must be in [0, 1), got {get_dotted(config, key)}")
    if not 0 < config.optim.warmup_start_factor <= 1:
        raise UserError(f"optim.warmup_start_factor must be in (0, 1], got {config.optim.warmup_start_factor}")
    if not 0 <= config.data.random_erasing <= 1:
        raise UserError(f"data.random_erasing is a probability in [0, 1], got {config.data.random_erasing}")
    if not 0 < config.data.crop_scale_min <= 1 or not 0 < config.data.eval_crop_ratio <= 1:
        raise UserError("data.crop_scale_min and data.eval_crop_ratio must be in (0, 1]")
    workers = config.data.num_workers
    if workers != "auto" and not (isinstance(workers, int) and workers >= 0):
        raise UserError(f"data.num_workers must be auto or a whole number >= 0, got {workers!r}")
    if not config.model.widths or min(config.model.widths) <= 0 or config.model.blocks_per_stage <= 0:
        raise UserError("model.widths must be a non-empty list of positive ints and model.blocks_per_stage > 0")
    if not config.model.std or len(config.model.mean) != len(config.model.std) or min(config.model.std) <= 0:
        raise UserError("model.mean and model.std need one value per channel, std > 0")


def get_dotted(config: Any, key: str) -> Any:
    for part in key.split("."):
        config = getattr(config, part)
    return config
