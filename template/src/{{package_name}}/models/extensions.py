"""Your own backbones, training transforms and metrics: this file belongs to you.

The template created it once; ``copier update`` never overwrites it (copier.yml
lists it in ``_skip_if_exists``), so code added here survives every template
update, while the other modules keep receiving the template's improvements.
Keep project-specific code here or in new modules of your own, rather than in
the template's files, and updates stay free of merge conflicts.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torchvision.transforms import v2


def custom_backbone(name: str) -> tuple[nn.Module, int] | None:
    """A feature extractor and its output width for a ``model.name`` you define; None for all other names.

    For example::

        if name == "tiny_mlp":
            return nn.Sequential(nn.Flatten(), nn.LazyLinear(128), nn.ReLU()), 128
    """
    return None


def extra_train_transforms() -> list[v2.Transform]:
    """Augmentations to run after the template's training transforms, e.g. ``[v2.RandomRotation(10)]``.

    They must pickle (no lambdas): under torchrun, loader workers receive the dataset by pickle.
    """
    return []


def extra_metrics(num_classes: int) -> dict[str, Any]:
    """Metrics to compute at every validation, by ``evaluate`` and on the test split: torchmetrics objects by name.

    For example (the ``metrics`` extra installs torchmetrics)::

        from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score, MulticlassRecall

        return {
            "top5": MulticlassAccuracy(num_classes, top_k=min(5, num_classes)),
            "macro_f1": MulticlassF1Score(num_classes, average="macro"),
            "recall": MulticlassRecall(num_classes, average=None),  # one value per class
        }

    Each is made fresh for every pass and fed ``(logits, targets)`` batch by batch; torchmetrics adds up the
    processes' states under DDP. A number becomes ``val_<name>`` in metrics.jsonl, TensorBoard and MLflow (one
    value per class: ``val_<name>/<class>``), and ``train.best_metric`` can choose best.pt by it.
    """
    return {}
