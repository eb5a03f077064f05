"""The metrics ``models/extensions.py`` adds (``extra_metrics``): made, checked, computed, and named as columns.

They are torchmetrics objects: torchmetrics keeps each metric's state on the
device, and under DDP adds up the processes' states when the value is asked
for (its ``sync``), so every process reports the value one process over the
whole validation set would. A fresh set is made for every evaluation pass:
nothing of them lives across epochs, so a resumed run computes them exactly as
an uninterrupted one, and no checkpoint holds them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..core.config import TrainConfig
from ..core.errors import UserError
from ..core.optional import install_hint, require
from ..models import extensions

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*$")  # a column name in metrics.jsonl, a key in MLflow and TensorBoard
BUILT_IN = ("loss", "acc")  # val_loss and val_acc are the template's own columns


def added_metrics(num_classes: int, device: torch.device, distributed: bool) -> dict[str, Any]:
    """``extensions.extra_metrics`` on ``device``; each one syncs across processes exactly when ``distributed``.

    ``distributed`` is this pass's, not the process group's: the test split's pass runs on the main process
    alone while the group still exists, and a sync there would wait forever for the others.
    """
    # An extensions.py made before the hook existed has none (copier update never touches that file): no metrics.
    hook = getattr(extensions, "extra_metrics", None)
    try:
        metrics = hook(num_classes) if hook is not None else {}
    except ModuleNotFoundError as exc:
        if exc.name != "torchmetrics":
            raise
        raise UserError(
            f"extensions.extra_metrics needs torchmetrics, which is not installed: {install_hint('metrics')}"
        ) from None
    if not metrics:
        return {}
    check_metrics(metrics)
    for metric in metrics.values():
        metric.distributed_available_fn = synced_when(distributed)  # torchmetrics asks it at every compute()
    return {name: metric.to(device) for name, metric in metrics.items()}


def synced_when(distributed: bool) -> Callable[[], bool]:
    """What torchmetrics asks before adding up the processes' states; its default asks the process group."""

    def available() -> bool:
        return distributed

    return available


def check_metrics(metrics: Any) -> None:
    """The hook's contract: a dict of torchmetrics ``Metric`` objects under names that can be columns."""
    Metric = require("torchmetrics", "metrics", "extensions.extra_metrics").Metric

    if not isinstance(metrics, dict):
        raise UserError(f"extensions.extra_metrics returned a {type(metrics).__name__}: return a dict of name: metric")
    for name, metric in metrics.items():
        if not isinstance(name, str) or not NAME.match(name) or name in BUILT_IN:
            raise UserError(
                f"extensions.extra_metrics names a metric {name!r}: use letters, digits and _, starting with a "
                f"letter, other than {' or '.join(BUILT_IN)} (val_loss and val_acc are the template's)"
            )
        if not isinstance(metric, Metric):
            raise UserError(
                f"extensions.extra_metrics gives {name!r} a {type(metric).__name__}: give a torchmetrics Metric, "
                "e.g. torchmetrics.classification.MulticlassF1Score(num_classes)"
            )


def update_metrics(metrics: dict[str, Any], logits: torch.Tensor, targets: torch.Tensor) -> None:
    """One batch into every metric, on the device: no host sync (P5)."""
    for metric in metrics.values():
        metric.update(logits, targets)


def computed(metrics: dict[str, Any], num_classes: int) -> dict[str, float | list[float]]:
    """Each metric's value over every process's batches: a number, or one number per class."""
    values: dict[str, float | list[float]] = {}
    for name, metric in metrics.items():  # the same order on every process: each compute() is a collective
        value = torch.as_tensor(metric.compute()).detach().float().cpu()
        if value.numel() == 1:
            values[name] = value.item()
        elif value.dim() == 1 and value.numel() == num_classes:
            values[name] = value.tolist()
        else:
            raise UserError(
                f"extensions.extra_metrics' {name!r} gives a value of shape {tuple(value.shape)}: give a metric "
                f"whose value is a number or one number per class ({num_classes})"
            )
    return values


def validation_columns(val: dict[str, Any], classes: Sequence[str]) -> dict[str, float]:
    """An evaluation's part of an epoch's row: val_loss, val_acc, then the added metrics (an evaluate that a test
    replaced may leave out ``metrics``)."""
    added = metric_columns(val.get("metrics", {}), "val", classes)
    return {"val_loss": val["val_loss"], "val_acc": val["val_acc"], **added}


def metric_columns(values: dict[str, float | list[float]], split: str, classes: Sequence[str]) -> dict[str, float]:
    """The added metrics as columns of a row: ``<split>_<name>``, or ``<split>_<name>/<class>`` for per-class values."""
    columns: dict[str, float] = {}
    for name, value in values.items():
        if isinstance(value, list):
            columns.update({f"{split}_{name}/{label}": number for label, number in zip(classes, value, strict=True)})
        else:
            columns[f"{split}_{name}"] = value
    return columns


def format_metrics(values: dict[str, float | list[float]], classes: Sequence[str]) -> str:
    """One line for ``evaluate``'s report and the test split's; empty without added metrics."""
    parts = []
    for name, value in values.items():
        if isinstance(value, list):
            parts.append(
                f"{name} " + " ".join(f"{label} {number:.4f}" for label, number in zip(classes, value, strict=True))
            )
        else:
            parts.append(f"{name} {value:.4f}")
    return "metrics: " + "  ".join(parts) if parts else ""


def check_best_metric(train: TrainConfig, classes: Sequence[str]) -> None:
    """At a run's start: train.best_metric names a column the run will write (and the hook keeps its contract)."""
    best_metric = train.best_metric
    if best_metric in ("val_acc", "val_loss"):
        return
    names = added_metrics(len(classes), torch.device("cpu"), distributed=False) if train.extra_metrics else {}
    columns = [f"val_{name}" for name in names] + [f"val_{name}/{label}" for name in names for label in classes]
    if best_metric not in columns:
        yours = f", or one of your metrics: val_{', val_'.join(names)}" if names else ""
        raise UserError(
            f"train.best_metric is {best_metric}, which no validation computes: choose val_acc or val_loss{yours} "
            "(models/extensions.py's extra_metrics adds metrics; train.extra_metrics: false turns them off)"
        )


def best_value(row: dict[str, Any], best_metric: str) -> float:
    """The epoch's train.best_metric; a metric that gave a number where a class was named (or the reverse) ends here."""
    if best_metric not in row:
        columns = ", ".join(key for key in row if key.startswith("val_"))
        raise UserError(
            f"train.best_metric is {best_metric}, which this epoch's row lacks (it has {columns}): choose one of those"
        )
    return float(row[best_metric])
