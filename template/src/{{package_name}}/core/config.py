"""Typed configuration: YAML file, then ``--set key=value`` overrides, then checks.

Every key is written once, below: its type, its default, its allowed values and bounds (``option(...)``), and a line
of help. The YAML file and the command line may only change values, and one generic check (``validate``, with
``config_rules.py``) applies every key's choices and bounds. A typo or a wrong type is refused with the nearest valid
key, never silently ignored. (Written by hand rather than with OmegaConf so that every error is one line that names
the fix.)

The defaults that copier answers set (model, image size, optimizer and its
learning rate, scheduler, precision) come from ``core/project_defaults.yaml``,
rendered beside this file from the same answers as ``configs/default.yaml``.
So the built-in defaults equal the generated ``configs/default.yaml``, and a
partial ``--config`` file gets the project's defaults for the keys it leaves out.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from . import PACKAGE
from .config_files import merge, parse_override, read_yaml, set_dotted, upgrade
from .config_rules import build_dataclass, config_error, option, rules, value_problems, without_absent_keys
from .errors import UserError

CONFIG_VERSION = 1

INTERPOLATIONS = ("bilinear", "bicubic", "nearest")  # torchvision's InterpolationMode values that weights name
# What the preprocessing keys (null by default) become without published weights to take them from: ImageNet's
# statistics and the classic 224-of-256 evaluation crop, as torchvision's first weights had them.
PLAIN_PREPROCESSING: dict[str, Any] = {
    "mean": [0.485, 0.456, 0.406],
    "std": [0.229, 0.224, 0.225],
    "eval_crop_ratio": 0.875,
    "interpolation": "bilinear",
}

# The fine-tuning recipe: what the keys left at ``auto`` become when ``model.pretrained_weights`` is set (a random
# start keeps every layer training at optim.lr from the first step). A linear probe first, then fine-tuning (LP-FT,
# Kumar et al., ICLR 2022): the head trains alone on the frozen backbone for two epochs, so that it fits the
# weights' features before any gradient reaches them; then every layer trains, the backbone at a fraction of the
# head's rate. The fraction is the optimizer's: SGD's step follows the gradient's size, AdamW's does not (it
# normalises it), so AdamW's backbone needs a larger share (EfficientNet-Lite0, 10 photos a class at 96 px, 3 seeds:
# 0.80 at 0.02, 0.85 at 0.1; SGD 0.81 at 0.02, 0.805 at 0.1 with batch norm training). The backbone's batch norm
# (``model.freeze_batchnorm: auto``, resolved by models/preprocessing.py, which knows the weights' size) keeps the
# weights' statistics below the size the weights were trained at, and learns this data's at that size or above
# (3 seeds each, 96 and 224 px with 224-px weights: frozen 0.831 against 0.777 learnt at 10 photos a class and 96 px,
# 0.890 against 0.853 at 50 and 96 px; learnt 0.922 against 0.899 at 50 and 224 px, 0.885 against 0.899 at 10 and
# 224 px; our reading: below the weights' size a batch of 16 gives each channel of the last stages few values, 3 x 3
# maps at 96 px against 7 x 7 at 224, too few for statistics). Measured on real photos with real ImageNet weights:
# README, "Fine-tuning" (benchmarks/finetune.py).
FINE_TUNING: dict[str, Any] = {"unfreeze_at_epoch": 3, "backbone_lr_scale": {"sgd": 0.02, "adamw": 0.1}}


def _answered_defaults() -> dict[str, dict[str, Any]]:
    """The copier answers' defaults, read from the package (so an installed wheel has them too)."""
    text = resources.files(PACKAGE).joinpath("core").joinpath("project_defaults.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


ANSWERED = _answered_defaults()


@dataclass
class DataConfig:
    root: str = option("data/sample", "holds train/ and val/ in ImageFolder layout")
    format: str = option("image", "image (ImageFolder) | npy (DatasetFolder of .npy arrays)", choices=("image", "npy"))
    image_size: int = option(ANSWERED["data"]["image_size"], "square size the model sees", bounds="(0, inf)")
    batch_size: int = option(32, "images per optimizer step", bounds="(0, inf)")
    num_workers: int | str = option(
        "auto",
        "loader processes; 0 loads in the main process; auto: by CPU count",
        choices=("auto",),
        bounds="[0, inf)",
    )
    augment: bool = option(True, "random resized crop + horizontal flip for training")
    flip: bool = option(True, "the horizontal flip of augment; false for text, digits, anything with a handedness")
    crop_scale_min: float = option(0.5, "smallest area fraction kept by the random crop", bounds="(0, 1]")
    eval_crop_ratio: float | None = option(
        None,
        "evaluation resizes to image_size / ratio, then center-crops; null: the weights' own, else 0.875",
        bounds="(0, 1]",
    )
    interpolation: str | None = option(
        None,
        "the evaluation resize's interpolation; null: the weights' own, else bilinear",
        choices=INTERPOLATIONS,
    )
    cache: str = option(
        "auto",
        "auto: device or memory where they fit (data/loading/placement.py) | none | memory: decode once, keep | device",
        choices=("auto", "none", "memory", "device"),
    )
    decoder: str = option(
        "auto",
        "where streamed JPEG files decode: auto (nvJPEG if clearly faster at start; a resume keeps its run's; "
        "CPU under train.deterministic) | nvjpeg | cpu",
        choices=("auto", "nvjpeg", "cpu"),
        choice_parts={"nvjpeg": "gpu_decode"},  # nvJPEG decodes with the gpu_decode part (core/parts.py)
    )
    cache_dir: str = option(
        "auto",
        "where the file checks and decoded images are kept between runs: auto (~/.cache/<package>) | none | a folder",
    )
    pipeline: str = option(
        "auto",
        "auto | batch: crop and flip whole batches on the device | sample: per image",
        choices=("auto", "batch", "sample"),
    )
    on_bad_file: str = option(
        "error",
        "error: stop and name an unreadable file | skip: leave such files out, listed",
        choices=("error", "skip"),
    )
    check_patience: float = option(0.0, "torchrun: seconds to wait for stalled file checks; 0: none", bounds="[0, inf)")
    duplicates: str = option(
        "warn",
        "files with the same bytes or pixels in train/, val/, test/: warn | drop: keep one of each group | error",
        choices=("warn", "drop", "error"),
    )
    exclude: str | None = option(
        None,
        "a list of files to leave out (one path a line, relative to root: audit's exclude.txt); none is moved",
    )
    relabel: str | None = option(
        None,
        "a CSV of path,suggested_class: those files are read under that class of train/ (audit's relabel.csv)",
    )
    auto_augment: str = option(
        "none",
        "an augmentation policy after crop and flip",
        choices=("none", "trivialaugment", "randaugment", "autoaugment"),
    )
    random_erasing: float = option(
        0.0, "probability of erasing a random rectangle of each training image", bounds="[0, 1]"
    )
    extra_train_transforms: bool = option(True, "models/extensions.py's extra_train_transforms(); false: none of them")
    sampler: str = option(
        "uniform",
        "uniform: each image once per epoch | balanced: classes drawn equally often",
        choices=("uniform", "balanced"),
    )
    mixup_alpha: float = option(
        0.0, "MixUp's Beta(alpha, alpha) on each training batch; 0 turns it off", bounds="[0, inf)"
    )
    cutmix_alpha: float = option(
        0.0, "CutMix's Beta(alpha, alpha); 0 turns it off (both on: one of them per batch)", bounds="[0, inf)"
    )


@dataclass
class ModelConfig:
    name: str = option(
        ANSWERED["model"]["name"], "simple_cnn, a torchvision classifier (resnet18, ...) or timm/<name> (timm extra)"
    )
    widths: list[int] = field(
        default_factory=lambda: [32, 64, 128],
        metadata=rules("simple_cnn: channels of each stage", bounds="(0, inf)", nonempty=True),
    )
    blocks_per_stage: int = option(2, "simple_cnn: conv blocks per stage", bounds="(0, inf)")
    dropout: float = option(0.2, "dropout before the classification head", bounds="[0, 1)")
    pretrained_weights: str | None = option(
        None, "published weights by name (DEFAULT, IMAGENET1K_V1, ...: models/weights.py) or a local file"
    )
    init_from: str | None = option(None, "a checkpoint to fine-tune from: matching tensors only")
    freeze_backbone: bool | str = option(
        "auto",
        "train the head only (the backbone in eval mode); auto: with pretrained_weights, until unfreeze_at_epoch",
        choices=("auto",),
    )
    unfreeze_at_epoch: int | str = option(
        "auto",
        "with freeze_backbone: every layer trains from this epoch on; 0: never; "
        f"auto: {FINE_TUNING['unfreeze_at_epoch']} with pretrained_weights and freeze_backbone auto, else 0",
        choices=("auto",),
        bounds="[0, inf)",
    )
    freeze_batchnorm: bool | str = option(
        "auto",
        "the backbone's batch norm normalizes with the weights' statistics and keeps them (its scale and shift still "
        "train); auto: with pretrained_weights where data.image_size is below the size they were trained at (or that "
        "is unknown), else false",
        choices=("auto",),
    )
    mean: list[float] | None = field(
        default=None, metadata=rules("normalization mean, one value per channel; null: the weights' own")
    )
    std: list[float] | None = field(
        default=None,
        metadata=rules("normalization std, one value per channel; null: the weights' own", bounds="(0, inf)"),
    )

    def __post_init__(self) -> None:
        """The fine-tuning keys left at ``auto`` take the recipe's values with pretrained weights, else the plain
        ones (``FINE_TUNING``). ``unfreeze_at_epoch: auto`` follows ``freeze_backbone``: a backbone frozen on purpose
        stays frozen all run, as before ``auto`` existed."""
        recipe = self.pretrained_weights is not None
        if self.unfreeze_at_epoch == "auto":
            phased = recipe and self.freeze_backbone == "auto"
            self.unfreeze_at_epoch = FINE_TUNING["unfreeze_at_epoch"] if phased else 0
        if self.freeze_backbone == "auto":
            self.freeze_backbone = recipe
        if self.freeze_batchnorm == "auto" and not recipe:
            self.freeze_batchnorm = False  # with weights: models/preprocessing.py resolves it by the weights' size


@dataclass
class OptimConfig:
    name: str = option(ANSWERED["optim"]["name"], "sgd (Nesterov momentum) | adamw", choices=("sgd", "adamw"))
    lr: float = option(ANSWERED["optim"]["lr"], "peak learning rate of the head", bounds="(0, inf)")
    momentum: float = option(0.9, "sgd only", bounds="[0, inf)")
    weight_decay: float = option(
        ANSWERED["optim"]["weight_decay"], "never applied to biases and norm parameters", bounds="[0, inf)"
    )
    backbone_lr_scale: float | str = option(
        "auto",
        "backbone lr = lr * scale, the head's lr; "
        "auto: "
        + ", ".join(f"{scale} ({name})" for name, scale in FINE_TUNING["backbone_lr_scale"].items())
        + " with pretrained_weights, else 1",
        choices=("auto",),
        bounds="[0, inf)",
    )
    scheduler: str = option(ANSWERED["optim"]["scheduler"], "after warmup: cosine | step", choices=("cosine", "step"))
    warmup_epochs: float = option(1.0, "linear warmup, counted in optimizer steps", bounds="[0, inf)")
    warmup_start_factor: float = option(0.1, "warmup starts at lr * factor", bounds="(0, 1]")
    min_lr_ratio: float = option(0.0, "cosine ends at lr * ratio", bounds="[0, inf)")
    step_epochs: int = option(5, "step: multiply by gamma every step_epochs", bounds="(0, inf)")
    gamma: float = option(0.1, "step: the factor", bounds="(0, inf)")
    label_smoothing: float = option(0.0, "cross-entropy label smoothing in training", bounds="[0, 1)")
    class_weights: str = option(
        "none", "none | balanced: the loss weighs each class by its inverse frequency", choices=("none", "balanced")
    )


@dataclass
class TrainConfig:
    epochs: int = option(15, "epochs to train (the schedule spans them)", bounds="(0, inf)")
    seed: int = option(0, "seeds the data order, augmentation, initialization and workers")
    deterministic: bool = option(False, "deterministic algorithms, no cuDNN autotuning")
    precision: str = option(
        ANSWERED["train"]["precision"], "auto | fp32 | bf16 | fp16", choices=("auto", "fp32", "bf16", "fp16")
    )
    device: str = option("auto", "auto | cpu | cuda | cuda:N")
    parallel: str = option(
        "auto",
        "auto (ddp under torchrun, else dp on several GPUs) | none | dp | ddp",
        choices=("auto", "none", "dp", "ddp"),
    )
    channels_last: str = option(
        "auto", "auto (on) | true | false: NHWC memory layout for convolutions", choices=("auto", "true", "false")
    )
    compile: bool = option(False, "torch.compile the model, DDP included (PyTorch's order); checkpoints unprefixed")
    out_dir: str = option("runs/default", "where checkpoints, metrics and pictures go")
    log_every: int = option(20, "optimizer steps between host syncs for the progress bar", bounds="(0, inf)")
    progress: bool = option(True, "tqdm bars in a terminal; in a log, lines (start-up, every 30 s of an epoch); an ETA")
    grad_clip_norm: float = option(0.0, "clip the gradient norm; 0 turns clipping off", bounds="[0, inf)")
    pictures: bool = option(True, "curves.png, train_batch.png, evaluate's and a sweep's pictures; false: none")
    tensorboard: bool = option(False, "also log to out_dir/tensorboard (the tensorboard extra)")
    mlflow: bool = option(False, "also log to MLflow: sqlite:///mlflow.db, or MLFLOW_TRACKING_URI", part="mlflow")
    checkpoint_every_steps: int = option(
        0, "also write last.pt every K optimizer steps; 0: at epoch ends only", bounds="[0, inf)"
    )
    keep_last: int = option(
        0, "older checkpoints kept beside last.pt, for a fallback if it is damaged", bounds="[0, inf)"
    )
    ema_decay: float = option(
        0.0, "exponential moving average of the weights, evaluated and saved; 0 turns it off", bounds="[0, 1)"
    )
    accumulate_steps: int = option(1, "batches whose gradients add up before one optimizer step", bounds="(0, inf)")
    early_stopping_patience: int = option(
        0, "stop after this many epochs without train.best_metric improving; 0 never stops", bounds="[0, inf)"
    )
    early_stopping_min_delta: float = option(
        0.0, "the least change of train.best_metric that counts as improving", bounds="[0, inf)"
    )
    extra_metrics: bool = option(True, "models/extensions.py's extra_metrics() at every validation; false: none")
    best_metric: str = option("val_acc", "the metrics.jsonl column that chooses best.pt: val_acc, val_loss, val_<name>")
    best_mode: str = option(
        "max", "max | min: whether a higher or a lower best_metric is better", choices=("max", "min")
    )
    sync_batchnorm: bool = option(False, "under DDP on GPUs: batch-norm statistics over every process's batch")
    collective_timeout: float = option(
        300.0, "seconds a process waits for the others at a collective before it gives up", bounds="(0, inf)"
    )


@dataclass
class Config:
    version: int = option(CONFIG_VERSION, "config format version")
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        """``optim.backbone_lr_scale: auto`` needs the model section: the recipe's scale with pretrained weights."""
        if self.optim.backbone_lr_scale == "auto":
            recipe = self.model.pretrained_weights is not None
            self.optim.backbone_lr_scale = FINE_TUNING["backbone_lr_scale"][self.optim.name] if recipe else 1.0

    def to_dict(self) -> dict[str, Any]:
        """Plain types (checkpoints load with ``weights_only=True``), less the keys of the parts the project lacks."""
        return without_absent_keys(dataclasses.asdict(self), self)


def load_config(
    paths: str | Path | Sequence[str | Path] | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    base: dict[str, Any] | None = None,
) -> Config:
    """Defaults, then ``base`` (e.g. a checkpoint's config), then each YAML file, later ones overriding
    earlier ones key by key (a recipe over default.yaml), then ``--set`` overrides, then checks."""
    # A checkpoint's config may predate a key's move: read its keys at their new places.
    raw: dict[str, Any] = upgrade(copy.deepcopy(base)) if base is not None else {}
    files = [paths] if isinstance(paths, str | Path) else list(paths or [])
    for path in [Path(p) for p in files if str(p)]:  # "" stands for "no file": the defaults
        merge(raw, read_yaml(path))
    for item in overrides:
        key, value = parse_override(item)
        set_dotted(raw, key, value)
    return config_from_dict(raw)


def config_from_dict(raw: dict[str, Any]) -> Config:
    """Type and check ``raw``: every unknown key and bad value is named in one error, not the first alone."""
    problems: list[str] = []  # each a sentence naming a key and its fix; raised together below
    config = build_dataclass(Config, raw, prefix="", problems=problems)
    if config.version > CONFIG_VERSION:
        raise UserError(
            f"config version {config.version} is newer than this code understands ({CONFIG_VERSION}): "
            "update the project with `copier update`"
        )
    if config.model.pretrained_weights is None:
        fill_plain_preprocessing(config)  # before the checks: a mean of one value needs a std of one too
    if problems:  # a key left out above stays at its default: the checks below judge only the values given
        problems += value_problems(config)
        raise config_error(problems)
    validate(config)
    return config


def fill_plain_preprocessing(config: Config) -> None:
    """The preprocessing keys left null take ``PLAIN_PREPROCESSING``'s values (in place).

    With ``model.pretrained_weights`` set they stay null here: ``models/preprocessing.py`` fills them from the
    weights' metadata when a run or a checkpoint's command starts, which needs the models' registries.
    """
    for section in (config.model, config.data):
        for key, value in PLAIN_PREPROCESSING.items():
            if hasattr(section, key) and getattr(section, key) is None:
                setattr(section, key, copy.copy(value))


def validate(config: Config) -> None:
    """Each key's own rules (its field's choices and bounds), then the few rules that tie keys together: every
    broken one named in one error."""
    problems = value_problems(config) + joint_problems(config)
    if problems:
        raise config_error(problems)


def joint_problems(config: Config) -> list[str]:
    """The rules that tie keys together."""
    problems = []
    model, data = config.model, config.data
    for key in ("exclude", "relabel"):
        if getattr(data, key) is not None and not str(getattr(data, key)).strip():
            problems.append(f"data.{key} is empty: name the list file (audit writes one), or set it to null")
    if data.exclude is not None and data.exclude == data.relabel:
        problems.append(
            f"data.exclude and data.relabel both name {data.exclude}: the first is a list of paths, the second a CSV "
            "of path,suggested_class (audit writes exclude.txt and relabel.csv)"
        )
    if model.mean is not None and model.std is not None and (len(model.mean) != len(model.std) or not model.std):
        problems.append("model.mean and model.std need one value per channel, std > 0")
    if model.freeze_backbone and model.pretrained_weights is None and model.init_from is None:
        problems.append(
            "model.freeze_backbone: true without model.pretrained_weights (or model.init_from) would train a head on "
            "a random backbone that never learns: set model.pretrained_weights, or model.freeze_backbone: auto"
        )
    if model.unfreeze_at_epoch and not model.freeze_backbone:
        problems.append(
            f"model.unfreeze_at_epoch {model.unfreeze_at_epoch} unfreezes a backbone that is not frozen: "
            "set model.freeze_backbone: true (frozen until then), or model.unfreeze_at_epoch: 0"
        )
    metric, mode = config.train.best_metric, config.train.best_mode
    if not metric.startswith("val_") or (metric, mode) in (("val_loss", "max"), ("val_acc", "min")):
        problems.append(
            f"train.best_metric {metric} with train.best_mode {mode} cannot choose best.pt: name a validation column "
            "in its better direction (val_acc max, val_loss min, or val_<name> of your extra_metrics)"
        )
    return problems
