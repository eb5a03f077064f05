"""TensorBoard logging, when ``train.tensorboard: true`` (the optional ``tensorboard`` extra).

Scalars per epoch (losses, accuracies, your metrics, the learning rate of every
parameter group, throughput), the sample-batch grid, and the run's config as text, in
``out_dir/tensorboard``: ``tensorboard --logdir runs``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import yaml

from ..core.optional import require
from .reporting import sample_grid


class TensorBoardLog:
    def __init__(self, out_dir: Path, config: dict[str, Any]) -> None:
        require("tensorboard", "tensorboard", "train.tensorboard")  # names the missing package, not torch
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(out_dir / "tensorboard"))
        text = yaml.safe_dump(config, sort_keys=False)
        self.writer.add_text("config", "\n".join(f"    {line}" for line in text.splitlines()))  # markdown code

    def epoch(self, row: dict[str, Any], learning_rates: dict[str, float]) -> None:
        step = row["epoch"]
        for split in ("train", "val"):
            self.writer.add_scalar(f"loss/{split}", row[f"{split}_loss"], step)
            self.writer.add_scalar(f"accuracy/{split}", row[f"{split}_acc"], step)
        for key, value in row.items():  # the metrics models/extensions.py adds: val_<name>, val_<name>/<class>
            if key.startswith("val_") and key not in ("val_loss", "val_acc"):
                self.writer.add_scalar(f"metrics/{key}", value, step)
        for group, lr in learning_rates.items():
            self.writer.add_scalar(f"lr/{group}", lr, step)
        self.writer.add_scalar("throughput/images_per_second", row["images_per_second"], step)
        self.writer.flush()

    def batch(self, images: torch.Tensor) -> None:
        self.writer.add_image("train_batch", sample_grid(images), 0)

    def close(self) -> None:
        self.writer.close()
