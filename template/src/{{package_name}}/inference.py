"""The ``evaluate`` and ``predict`` commands: a trained checkpoint put to use."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from PIL import UnidentifiedImageError
from torchvision.datasets.folder import default_loader

from .checkpoint import load_model_state, read_checkpoint
from .config import Config, load_config
from .data import align_classes, build_loader, build_transform, folder_dataset, load_npy
from .device import Compute, configure_backends, resolve_precision, select_device
from .engine import evaluate
from .errors import UserError
from .model import ImageClassifier, build_model


@dataclasses.dataclass
class Loaded:
    model: ImageClassifier
    config: Config
    classes: list[str]
    device: torch.device
    precision: str


def load_trained(checkpoint: str | Path, config: str | Path | None = None, overrides: tuple[str, ...] = ()) -> Loaded:
    """The checkpoint's model in eval mode, on the configured device.

    Without ``--config`` the config stored in the checkpoint is used, with
    any ``--set`` overrides on top.
    """
    state = read_checkpoint(checkpoint)
    cfg = load_config(config, overrides, base=None if config else state.get("config", {}))
    classes = list(state["classes"])
    device = select_device(cfg.train.device)
    configure_backends(device, cfg.train.deterministic)
    # The weights come from the checkpoint; a pretrained file need not exist any more.
    model = build_model(dataclasses.replace(cfg.model, pretrained_weights=None, freeze_backbone=False), len(classes))
    load_model_state(model, state["model"], checkpoint)
    model.to(device).eval()
    return Loaded(model, cfg, classes, device, resolve_precision(cfg.train.precision, device))


def run_evaluate(loaded: Loaded, split: str = "val", progress: bool = False) -> dict[str, Any]:
    cfg = loaded.config
    root = Path(cfg.data.root) / split
    if not root.is_dir():
        raise UserError(f"{root} not found: set data.root to the folder holding {split}/ (--set data.root=DIR)")
    dataset = folder_dataset(root, cfg.data, train=False, allow_empty=True)
    align_classes(dataset, {name: index for index, name in enumerate(loaded.classes)})
    loader = build_loader(dataset, cfg, loaded.device, train=False)
    compute = Compute(loaded.device, loaded.precision)
    return evaluate(loaded.model, loader, compute, len(loaded.classes), progress=progress)


def format_report(result: dict[str, Any], classes: list[str]) -> str:
    lines = [
        f"images {result['count']}  loss {result['val_loss']:.4f}  top-1 {100 * result['val_acc']:.2f}%",
        "per-class accuracy:",
    ]
    width = max(len(name) for name in classes)
    counts = result["confusion"].sum(1).tolist()
    for name, accuracy, count in zip(classes, result["per_class_acc"], counts, strict=True):
        lines.append(f"  {name:<{width}}  {100 * accuracy:6.2f}%  ({count} images)")
    return "\n".join(lines)


def read_input(path: Path, data_format: str) -> Any:
    if not path.is_file():
        raise UserError(f"{path} not found: give the path of an existing file")
    try:
        return load_npy(str(path)) if data_format == "npy" else default_loader(str(path))
    except (UnidentifiedImageError, ValueError, OSError) as exc:
        reason = exc.__class__.__name__
        raise UserError(f"{path} is not a readable {data_format} file ({reason}): skip or replace it") from None


def predict_file(loaded: Loaded, path: str | Path, topk: int = 3) -> list[tuple[str, float]]:
    """The ``topk`` most likely classes of one file, with their probabilities."""
    cfg = loaded.config
    image = build_transform(cfg.data, train=False)(read_input(Path(path), cfg.data.format))
    batch = image.unsqueeze(0).to(loaded.device)  # P16: the model takes batches, so one image becomes a batch of one
    with torch.inference_mode():
        probabilities = loaded.model(batch).float().softmax(1)[0]
    values, indices = probabilities.topk(min(topk, len(loaded.classes)))
    return [(loaded.classes[i], p) for i, p in zip(indices.tolist(), values.tolist(), strict=True)]
