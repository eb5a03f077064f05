"""What a run leaves in its output folder besides checkpoints."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image, ImageDraw
from torchvision.transforms.v2 import functional as F
from torchvision.utils import make_grid

TILE_MIN = 96  # tiles are enlarged (nearest neighbour: the pixels stay those the model saw) until a label fits
PADDING = 2
LINE = 14  # pixels a label line takes, its black band included


class MetricsLog:
    """``metrics.jsonl``: one JSON object per epoch, appended as each ends."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def rows(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def truncate_after(self, epoch: int) -> None:
        """Drop rows of epochs a resumed run will train again."""
        rows = self.rows()
        kept = [row for row in rows if row["epoch"] <= epoch]
        if len(kept) != len(rows):
            tmp = self.path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(json.dumps(row) + "\n" for row in kept))
            os.replace(tmp, self.path)

    def append(self, row: dict[str, Any]) -> None:
        with self.path.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
            handle.flush()

    @property
    def resumes_path(self) -> Path:
        """Where runs were resumed, beside metrics.jsonl (whose rows stay those of an uninterrupted run)."""
        return self.path.with_name("resumes.jsonl")

    def resumes(self) -> list[float]:
        """The epochs (fractional inside an epoch) at which this run was resumed, for curves.png."""
        if not self.resumes_path.is_file():
            return []
        return [json.loads(line)["epoch"] for line in self.resumes_path.read_text().splitlines() if line.strip()]

    def mark_resume(self, epoch: float) -> None:
        """Record a resume at ``epoch``; marks beyond it belong to a history this run replaces."""
        kept = [mark for mark in self.resumes() if mark <= epoch] + [epoch]
        tmp = self.resumes_path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps({"epoch": mark}) + "\n" for mark in kept))
        os.replace(tmp, self.resumes_path)


def sample_grid(images: torch.Tensor, max_images: int = 64) -> torch.Tensor:
    """P15: a ``make_grid`` of a training batch, as the model receives it (after augmentation)."""
    batch = images[:max_images].detach().cpu()
    if not batch.is_floating_point():
        batch = batch.float().div(255)
    nrow = max(1, int(len(batch) ** 0.5))
    return make_grid(batch.clamp(0, 1), nrow=nrow, padding=2, pad_value=1.0)


def labelled_grid(images: torch.Tensor, labels: Sequence[str], max_images: int = 64) -> Image.Image:
    """The grid of ``sample_grid`` with each tile's class name on it, so that a user can check the labels."""
    batch = images[:max_images].detach().cpu()
    scale = max(1, -(-TILE_MIN // min(batch.shape[-2:])))  # ceil: small images are enlarged by a whole factor
    height, width = batch.shape[-2] * scale, batch.shape[-1] * scale
    batch = F.resize(batch, [height, width], interpolation=F.InterpolationMode.NEAREST)
    nrow = max(1, int(len(batch) ** 0.5))
    picture = F.to_pil_image(sample_grid(batch, max_images))
    draw = ImageDraw.Draw(picture)
    for index, label in enumerate(labels[: len(batch)]):
        left = PADDING + (index % nrow) * (width + PADDING)
        top = PADDING + (index // nrow) * (height + PADDING)
        lines = label.split("\n")  # a mixed image's classes, one a line
        draw.rectangle((left, top, left + width - 1, top + LINE * len(lines) - 1), fill=(0, 0, 0))
        for number, line in enumerate(lines):
            draw.text((left + 2, top + 1 + LINE * number), fitted(draw, line, width - 4), fill=(255, 255, 255))
    return picture


def target_labels(targets: torch.Tensor, classes: Sequence[str]) -> list[str]:
    """Each image's label for the grid: its class, or under MixUp/CutMix the classes it mixes, by share.

    Mixed targets are probabilities over the classes (one row per image): a tile half circle, half square
    reads "circle 0.55" over "square 0.45", not the one hard label it started from.
    """
    if targets.ndim == 1:
        return [classes[index] for index in targets.tolist()]
    labels = []
    for row in targets.detach().float().cpu().tolist():
        shares = sorted(((share, index) for index, share in enumerate(row) if share >= 0.005), reverse=True)
        labels.append("\n".join(f"{classes[index]} {share:.2f}" for share, index in shares))
    return labels


def fitted(draw: ImageDraw.ImageDraw, label: str, width: int) -> str:
    """The label, shortened with "..." when it is wider than its tile."""
    if draw.textlength(label) <= width:
        return label
    while label and draw.textlength(label + "...") > width:
        label = label[:-1]
    return label + "..."


def save_sample_grid(images: torch.Tensor, path: str | Path, labels: Sequence[str] | None = None) -> None:
    """P15: ``train_batch.png``; with ``labels``, each tile shows its class name."""
    picture = labelled_grid(images, labels) if labels else F.to_pil_image(sample_grid(images))
    picture.save(path)


def draw_curves(rows: list[dict[str, Any]], path: Path, resumed_at: Sequence[float] = ()) -> str | None:
    """``curves.png`` from the rows so far (``CurvesOutput`` says when); returns why not when matplotlib is missing."""
    from ..core.errors import UserError
    from .plots import plot_curves

    try:
        plot_curves(rows, path, resumed_at)
    except UserError as missing:
        return str(missing)
    return None
