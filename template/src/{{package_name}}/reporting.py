"""What a run leaves in its output folder besides checkpoints."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torchvision.utils import make_grid, save_image


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


def sample_grid(images: torch.Tensor, max_images: int = 64) -> torch.Tensor:
    """P15: a ``make_grid`` of a training batch, as the model receives it (after augmentation)."""
    batch = images[:max_images].detach().cpu()
    if not batch.is_floating_point():
        batch = batch.float().div(255)
    nrow = max(1, int(len(batch) ** 0.5))
    return make_grid(batch.clamp(0, 1), nrow=nrow, padding=2, pad_value=1.0)


def save_sample_grid(images: torch.Tensor, path: str | Path) -> None:
    save_image(sample_grid(images), str(path))


def draw_curves(rows: list[dict[str, Any]], path: Path) -> str | None:
    """``curves.png`` after every epoch; returns why not, once, when matplotlib is missing."""
    from .errors import UserError
    from .plots import plot_curves

    try:
        plot_curves(rows, path)
    except UserError as missing:
        return str(missing)
    return None
