"""One training epoch and one evaluation pass.

Loss and accuracy are summed on the device; the host waits for the device
(``.item()``) only every ``log_every`` steps and at the end (P5).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from .distributed import World, autocast, sum_across


@dataclass
class EpochTotals:
    """Running sums of the epoch so far, kept on the device.

    They are part of a mid-epoch checkpoint, so that the resumed epoch reports
    the same train_loss and train_acc as an uninterrupted one.
    """

    loss_sum: torch.Tensor
    correct: torch.Tensor
    seen: int = 0
    steps: int = 0

    @classmethod
    def zeros(cls, device: torch.device) -> EpochTotals:
        return cls(torch.zeros((), device=device), torch.zeros((), device=device, dtype=torch.long))

    def state_dict(self) -> dict[str, Any]:
        return {"loss_sum": self.loss_sum.cpu(), "correct": self.correct.cpu(), "seen": self.seen, "steps": self.steps}

    @classmethod
    def from_state(cls, state: dict[str, Any], device: torch.device) -> EpochTotals:
        return cls(state["loss_sum"].to(device), state["correct"].to(device), state["seen"], state["steps"])

    def means(self) -> dict[str, float]:
        """train_loss and train_acc of the epoch so far (a host sync: call once, at the epoch's end)."""
        seen = max(self.seen, 1)
        return {"train_loss": self.loss_sum.item() / seen, "train_acc": self.correct.item() / seen}


def train_one_epoch(
    model: nn.Module,
    loader: DataLoader,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    scaler: torch.amp.GradScaler,
    criterion: nn.Module,
    device: torch.device,
    precision: str,
    *,
    epoch: int,
    totals: EpochTotals | None = None,
    log_every: int = 20,
    progress: bool = False,
    grad_clip_norm: float = 0.0,
    layout: torch.memory_format = torch.contiguous_format,
    on_step: Callable[[EpochTotals, torch.Tensor], None] | None = None,
) -> dict[str, Any]:
    """Train on every batch the loader gives; ``totals`` carries a resumed epoch's sums.

    ``on_step`` runs after each optimizer step (a step boundary: the place to
    checkpoint or stop). Returns the throughput; the epoch's loss and accuracy
    are ``totals.means()`` (summed over processes first, under DDP).
    """
    model.train()  # P11
    totals = totals if totals is not None else EpochTotals.zeros(device)
    seen_before = totals.seen
    start = time.perf_counter()
    bar = tqdm(loader, desc=f"epoch {epoch}", disable=not progress, leave=False, dynamic_ncols=True)
    for images, targets in bar:
        # P6: one device, asynchronous copies from pinned memory.
        images = images.to(device, non_blocking=True, memory_format=layout)
        targets = targets.to(device, non_blocking=True)
        with autocast(device, precision):
            logits = model(images)
            loss = criterion(logits, targets)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        if grad_clip_norm > 0:
            scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), grad_clip_norm)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()  # P12: the schedule advances per optimizer step
        batch = targets.shape[0]
        totals.loss_sum += loss.detach() * batch  # P5: detach, no host sync
        totals.correct += (logits.detach().argmax(1) == targets).sum()
        totals.seen += batch
        totals.steps += 1
        if totals.steps % log_every == 0:
            mean_loss = totals.loss_sum.item() / totals.seen
            bar.set_postfix(loss=f"{mean_loss:.4f}", lr=f"{optimizer.param_groups[-1]['lr']:.2e}")
        if on_step is not None:
            on_step(totals, images)
    bar.close()
    seconds = time.perf_counter() - start
    return {
        "images_per_second": (totals.seen - seen_before) / seconds if seconds > 0 else 0.0,
        "epoch_seconds": seconds,
    }


def evaluate(
    model: nn.Module,
    loader: DataLoader,
    criterion: nn.Module,
    device: torch.device,
    precision: str,
    num_classes: int,
    progress: bool = False,
    world: World | None = None,
    layout: torch.memory_format = torch.contiguous_format,
) -> dict[str, Any]:
    """Loss, top-1 accuracy, per-class accuracy and the confusion matrix.

    Pass the unwrapped model under DDP: its forward would wait for the other
    processes, which may hold a different number of evaluation batches.
    """
    model.eval()  # P11: dropout off, batch-norm statistics frozen
    loss_sum = torch.zeros((), device=device)
    confusion = torch.zeros(num_classes * num_classes, device=device, dtype=torch.long)
    with torch.inference_mode():  # P11: no graph is built
        for images, targets in tqdm(loader, desc="eval", disable=not progress, leave=False, dynamic_ncols=True):
            images = images.to(device, non_blocking=True, memory_format=layout)
            targets = targets.to(device, non_blocking=True)
            with autocast(device, precision):
                logits = model(images)
            loss_sum += criterion(logits.float(), targets) * targets.shape[0]
            confusion += torch.bincount(targets * num_classes + logits.argmax(1), minlength=num_classes**2)
    if world is not None:  # every process saw its own shard: add them up
        sum_across(loss_sum, world)
        sum_across(confusion, world)
    matrix = confusion.view(num_classes, num_classes).cpu()  # rows: true class, columns: predicted
    total = int(matrix.sum())
    per_class = matrix.diag() / matrix.sum(1).clamp(min=1)
    return {
        "val_loss": loss_sum.item() / max(total, 1),
        "val_acc": float(matrix.diag().sum()) / max(total, 1),
        "per_class_acc": per_class.tolist(),
        "confusion": matrix,
        "count": total,
    }
