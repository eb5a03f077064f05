"""What a run starts from: the pretrained weights (found before the data is read) and the model line that says so.

``prepare_weights`` resolves ``model.pretrained_weights`` (an unknown name
stops the run in one line), fetches the file once per node (the node's other
processes find it in the cache when they build the model, after
``distributed.started``), and fills the config's null preprocessing keys from
the weights. ``model_line`` is printed beside the start-up line: which weights
(name or path and a digest of the file), how many parameters train, until when
the backbone is frozen, and which preprocessing came from the weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from ..core.config import FINE_TUNING, Config
from ..core.distributed import World
from ..models.preprocessing import Filled, with_preprocessing
from ..models.weight_files import short_digest
from ..models.weights import Weights, resolve_weights
from .freezing import parameter_counts


@dataclass(frozen=True)
class StartingWeights:
    weights: Weights | None  # None: the model starts from its random initialisation
    path: Path | None  # the local file, on the process that fetched it (each node's first)
    filled: Filled  # the config with its preprocessing keys filled, and what came from the weights

    @property
    def config(self) -> Config:
        return self.filled.config

    def record(self) -> dict[str, Any]:
        """For the checkpoint's provenance: what the weights were called, and which file they came from."""
        if self.weights is None:
            return {}
        found = self.path or self.weights.file.find()
        return {
            "setting": self.weights.setting,
            "label": self.weights.label,
            "file": found.name if found else None,
            "sha256": short_digest(found) if found else None,
            "preprocessing_from_weights": self.filled.taken,
        }


def prepare_weights(cfg: Config, world: World) -> StartingWeights:
    """Before any data is read: a missing file or an unknown name ends the run here, in one line."""
    weights = resolve_weights(cfg.model)
    path = weights.fetch() if weights is not None and world.local_rank == 0 else None
    filled = with_preprocessing(cfg, weights.expected if weights is not None else None)
    return StartingWeights(weights, path, filled)


def model_line(start: StartingWeights, model: nn.Module) -> str:
    """``model: NAME, weights ...; N parameters: T trainable, F frozen (...); preprocessing ...``."""
    cfg = start.config.model
    weights = start.weights
    origin = "no pretrained weights (random start)"
    if weights is not None:
        origin = f"weights {weights.described(start.path)}" if start.path else f"weights {weights.label}"
    trainable, frozen = parameter_counts(model)
    counts = f"{trainable + frozen:,} parameters: {trainable:,} trainable, {frozen:,} frozen"
    if frozen:
        until = f" until epoch {cfg.unfreeze_at_epoch}" if cfg.unfreeze_at_epoch else ""
        counts += f" (the backbone, in eval mode{until})"  # its batch norm keeps the weights' statistics
    line = f"model: {cfg.name}, {origin}; {counts}; {preprocessing_said(start)}"
    started_from = cfg.pretrained_weights is not None or cfg.init_from is not None
    return line + ("\n" + fine_tuning_said(start.config) + image_size_said(start) if started_from else "")


def fine_tuning_said(cfg: Config) -> str:
    """``fine-tuning: ...``: which epochs train what, at which rate, with which batch norm, and where that came from
    (the recipe that ``auto`` gives with pretrained weights, core/config.py's FINE_TUNING, or the config's own)."""
    model, scale = cfg.model, cfg.optim.backbone_lr_scale
    if model.freeze_backbone and not model.unfreeze_at_epoch:
        phases = "the head alone, on the backbone frozen all run (in eval mode)"
    elif model.freeze_backbone:
        unfreeze = model.unfreeze_at_epoch
        head = "epoch 1" if unfreeze == 2 else f"epochs 1-{unfreeze - 1}"
        phases = f"the head alone for {head} on the frozen backbone, then every layer from epoch {unfreeze}"
    else:
        phases = "every layer from epoch 1"
    if not model.freeze_backbone or model.unfreeze_at_epoch:
        norm = "frozen (the weights' statistics)" if model.freeze_batchnorm else "updated by each batch"
        phases += f", the backbone at lr x {scale:g} with its batch norm {norm}"
    recipe = (
        model.pretrained_weights is not None
        and model.freeze_backbone
        and model.unfreeze_at_epoch == FINE_TUNING["unfreeze_at_epoch"]
        and scale == FINE_TUNING["backbone_lr_scale"][cfg.optim.name]
    )
    keys = "model.freeze_backbone, model.unfreeze_at_epoch, optim.backbone_lr_scale, model.freeze_batchnorm"
    source = "the recipe for pretrained weights (auto)" if recipe else "as the config sets it"
    return f"fine-tuning: {phases}; {source}: {keys} change it"


def image_size_said(start: StartingWeights) -> str:
    """Where the weights were trained at another size than ``data.image_size``: which one this run trains at.
    The project keeps the config's (README, "Image size": the weights' size costs time with its pixels)."""
    expected = start.weights.expected if start.weights is not None else None
    trained, size = (expected.trained_size if expected else None), start.config.data.image_size
    if not trained or trained == size:
        return ""
    return f"; images at {size} px (data.image_size), not the weights' {trained} px (README: Image size)"


def preprocessing_said(start: StartingWeights) -> str:
    """Which of the four preprocessing keys came from the weights and which from the config, with their values."""
    data, model = start.config.data, start.config.model
    values = {
        "model.mean": model.mean,
        "model.std": model.std,
        "data.eval_crop_ratio": round(data.eval_crop_ratio, 4),
        "data.interpolation": data.interpolation,
    }
    expected = start.weights.expected if start.weights is not None else None
    if expected is None:  # no weights, or a file without metadata: the config's values, or the plain ones
        return "preprocessing (no weights' metadata): " + ", ".join(f"{k} {v}" for k, v in values.items())
    taken = ", ".join(f"{key} {values[key]}" for key in start.filled.taken) or "nothing"
    size = f" (trained at {expected.trained_size} px)" if expected.trained_size else ""
    kept = ", ".join(f"{key} {value}" for key, value in values.items() if key not in start.filled.taken)
    return f"preprocessing from the weights: {taken}{size}" + (f"; from the config: {kept}" if kept else "")
