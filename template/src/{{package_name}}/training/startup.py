"""The start-up lines: what a run is about to do, said before its first epoch (which can take minutes).

Data, device, precision, loaders and the resume point are otherwise only
known from the first epoch's line, or from reading the config and the code.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.config import Config
from ..core.device import bf16_slower_on_cpu, cpu_has_native_bf16
from ..core.progress import Advice, TrainingProgress, duration
from ..data import CLASSES
from .freezing import pace_changes
from .pretrained import model_line
from .run_length import run_length_warnings

SHOWN_CLASSES = 6  # more than this many class names are cut, the count stays whole
# The README's quick start (sample-data, then train) takes 34 s with the template's default answers (simple_cnn,
# 64 px) on a 2-core CPU. Other answers can make it 20 times as long (EfficientNet at 160 px: 11 minutes): past
# QUICK_START_S, the run's estimate adds how to bring it back to about QUICK_FIRST_LOOK_S.
QUICK_START_S = 120.0
QUICK_FIRST_LOOK_S = 60.0
SMALL_SIZE = 64  # the default answers' image size


@dataclasses.dataclass
class RunStart:
    """What the start-up line reports, as plain values."""

    classes: list[str]
    train_images: int
    val_images: int
    device: str
    precision: str
    workers: int  # loader workers per process
    batch_path: bool  # data.pipeline: crop and flip of whole batches on the device, or per sample
    epoch: int  # epochs already trained
    epochs: int
    step: int = 0  # optimizer steps already taken
    mid_epoch: bool = False  # resumed from a checkpoint written inside an epoch
    processes: int = 1


def class_names(classes: list[str]) -> str:
    shown = ", ".join(classes[:SHOWN_CLASSES])
    return shown + (f" and {len(classes) - SHOWN_CLASSES} more" if len(classes) > SHOWN_CLASSES else "")


def resume_point(run: RunStart) -> str:
    if run.epoch >= run.epochs:
        return f"all {run.epochs} epochs already trained"
    if run.mid_epoch:
        return f"resuming inside epoch {run.epoch + 1} of {run.epochs} (global step {run.step})"
    if run.epoch:
        return f"resuming at epoch {run.epoch + 1} of {run.epochs} (global step {run.step})"
    return f"starting at epoch 1 of {run.epochs}"


def startup_line(run: RunStart) -> str:
    """One line: classes and images per split, where and how it computes, the path images take, where it starts."""
    path = "batch path (crop and flip of whole batches on the device)" if run.batch_path else "per-sample path"
    on = f"{run.device} x{run.processes}" if run.processes > 1 else run.device
    return (
        f"start: {len(run.classes)} classes ({class_names(run.classes)}); "
        f"{run.train_images} train / {run.val_images} val images; "
        f"{on}, {run.precision}, {run.workers} loader workers per process, {path}; {resume_point(run)}"
    )


def precision_said(setting: str, model_name: str, compute: Any) -> str:
    """The precision, and why where train.precision ``auto`` chose fp32 on a CPU with native bf16 (core/device.py)."""
    chose = setting == "auto" and compute.device.type == "cpu" and compute.precision == "fp32"
    if chose and cpu_has_native_bf16() and bf16_slower_on_cpu(model_name):
        return f"fp32 (auto: {model_name} trains slower in bf16 on CPUs)"
    return compute.precision


def describe(trainer: Any, progress: Any) -> str:
    """``startup_line`` for a built and restored ``Trainer`` (trainer.train calls it before ``fit``)."""
    return startup_line(
        RunStart(
            classes=trainer.classes,
            train_images=trainer.batches.images,
            val_images=len(trainer.val_loader.dataset),
            device=str(trainer.compute.device),
            precision=precision_said(trainer.cfg.train.precision, trainer.cfg.model.name, trainer.compute),
            workers=trainer.batches.workers,
            batch_path=trainer.batches.batch_path,
            epoch=progress.epoch,
            epochs=trainer.cfg.train.epochs,
            step=progress.step,
            mid_epoch=progress.totals is not None,
            processes=trainer.world.size,
        )
    )


def start_lines(trainer: Any, progress: Any) -> list[str]:
    """What a built and restored ``Trainer`` says before ``fit``: the settings this run is too short for (an EMA
    horizon or a warmup longer than the run), then the start-up line and the model's (weights, what trains,
    preprocessing). Asked after restore: only the checkpoint tells a fresh run from a resumed one, which said its
    warnings when it started and does not repeat them on each resume."""
    warnings = [] if progress.resumed else run_length_warnings(trainer.cfg, trainer.steps_per_epoch)
    said = [f"warning: {warning}" for warning in warnings]
    return [*said, describe(trainer, progress), model_line(trainer.start, trainer.model)]


def training_progress(cfg: Config, show: bool, per_epoch: int, classes: list[str]) -> TrainingProgress:
    """The epochs' bars and lines, and the run's estimate: measured again when the backbone starts training, with
    how to shorten the quick start on the sample data where these settings make it long."""
    return TrainingProgress(cfg.train, show, per_epoch, pace_changes(cfg.model), quick_start_advice(cfg, classes))


def quick_start_advice(cfg: Config, classes: list[str]) -> Advice | None:
    """For a run on the sample data (its four shape classes), the line that a long estimate adds: how long these
    settings make the quick start, and the ``--set`` that shortens it. The time of an epoch is taken to follow
    the image's pixels (a convolutional network's cost does), so a smaller size is said as "about"."""
    if sorted(classes) != sorted(CLASSES):
        return None  # your own data: its run takes what it takes

    def advice(epoch_s: float, left_s: float) -> str:
        if left_s <= QUICK_START_S:
            return ""
        size, ways = cfg.data.image_size, []
        epochs = max(1, int(QUICK_FIRST_LOOK_S // max(epoch_s, 1e-9)))  # the epochs that fit a first look
        if epochs < cfg.train.epochs:
            ways.append(f"--set train.epochs={epochs} (about {duration(epochs * epoch_s)})")
        if size > SMALL_SIZE:
            ways.append(f"--set data.image_size={SMALL_SIZE} (about {duration(left_s * (SMALL_SIZE / size) ** 2)})")
        if not ways:
            return ""
        return (
            f"quick start: {cfg.model.name} at {size} px makes this run on the sample data about {duration(left_s)} "
            f"here (the README's 34 s is simple_cnn at 64 px); for a first look, {' or '.join(ways)}"
        )

    return advice
