"""One optimizer step, one evaluation pass, and the running sums of an epoch.

Loss and accuracy are summed on the device; the host waits for the device
(``.item()``) only at the logging interval and at the epoch's end (P5).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

from ..core.config import TrainConfig
from ..core.device import Compute
from ..core.distributed import World, gather_objects, sum_across
from ..core.progress import bar
from ..outputs.confusion import DENSE_CELLS, Confusion
from .metrics import added_metrics, computed, update_metrics


@dataclass
class Optimization:
    """What an optimizer step updates besides the weights; a checkpoint saves each one's state."""

    optimizer: torch.optim.Optimizer
    scheduler: LRScheduler
    scaler: torch.amp.GradScaler
    criterion: nn.Module


def train_step(
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor,
    parts: Optimization,
    compute: Compute,
    cfg: TrainConfig,
    update: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward under autocast, backward through the scaler; with ``update``, clip and take the optimizer step.

    With ``train.accumulate_steps`` N, gradients of N batches add up (each
    loss divided by N) and only the last one updates; DDP skips its
    all-reduce on the others (``no_sync``). Returns the loss and logits,
    detached; nothing here waits for the device (P5).
    """
    with contextlib.nullcontext() if update or not hasattr(model, "no_sync") else model.no_sync():
        with compute.autocast():
            logits = model(images)
            loss = parts.criterion(logits, targets)
        scaled = loss / cfg.accumulate_steps if cfg.accumulate_steps > 1 else loss
        parts.scaler.scale(scaled).backward()  # fp16: scaled so that small gradients survive; else unchanged
    if update:
        optimizer_step(model, parts, cfg.grad_clip_norm)
    return loss.detach(), logits.detach()


def optimizer_step(model: nn.Module, parts: Optimization, grad_clip_norm: float) -> None:
    """Clip, step, advance the schedule, and clear the gradients for the next batches."""
    if grad_clip_norm > 0:
        parts.scaler.unscale_(parts.optimizer)  # clip the true gradients, not the scaled ones
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip_norm)
    parts.scaler.step(parts.optimizer)  # fp16: skipped when a gradient overflowed
    parts.scaler.update()
    if parts.scaler.is_enabled():
        with warnings.catch_warnings():
            # The schedule counts steps taken or skipped alike (fp16's first steps often overflow while the
            # scale settles); asking whether this one was skipped would cost a host sync every step (P5).
            warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step\\(\\)` before `optimizer.step")
            parts.scheduler.step()
    else:
        parts.scheduler.step()  # P12: the schedule advances per optimizer step
    parts.optimizer.zero_grad(set_to_none=True)


@dataclass
class EpochTotals:
    """Running sums of the epoch so far, kept on the device; each process keeps its own.

    They are part of a mid-epoch checkpoint, so that the resumed epoch reports
    the same train_loss and train_acc as an uninterrupted one.
    """

    loss_sum: torch.Tensor
    correct: torch.Tensor
    seen: int = 0
    batches: int = 0  # this process's position in the epoch: the resumed sampler skips this many batches

    @classmethod
    def zeros(cls, device: torch.device) -> EpochTotals:
        return cls(torch.zeros((), device=device), torch.zeros((), device=device, dtype=torch.long))

    def add(self, loss: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor) -> None:
        batch = targets.shape[0]
        self.loss_sum += loss * batch  # P5: stays on the device, no host sync
        self.correct += (logits.argmax(1) == targets).sum()
        self.seen += batch
        self.batches += 1

    def mean_loss(self) -> float:
        """A host sync: for the progress bar at the logging interval only."""
        return self.loss_sum.item() / max(self.seen, 1)

    def means(self) -> dict[str, float]:
        """train_loss and train_acc of the epoch so far (a host sync: call once, at the epoch's end)."""
        seen = max(self.seen, 1)
        return {"train_loss": self.loss_sum.item() / seen, "train_acc": self.correct.item() / seen}

    def state_dict(self) -> dict[str, Any]:
        sums = {"loss_sum": self.loss_sum.cpu(), "correct": self.correct.cpu()}
        return {**sums, "seen": self.seen, "batches": self.batches}

    @classmethod
    def from_state(cls, state: dict[str, Any], device: torch.device) -> EpochTotals:
        batches = state["batches"] if "batches" in state else state["steps"]  # "steps" in files of template 1.x
        return cls(state["loss_sum"].to(device), state["correct"].to(device), state["seen"], batches)

    def packed(self) -> torch.Tensor:
        """loss_sum, correct, seen as one float64 tensor: one collective moves all three."""
        seen = torch.tensor(float(self.seen), dtype=torch.float64, device=self.loss_sum.device)
        return torch.stack([self.loss_sum.double(), self.correct.double(), seen])

    def gathered(self, world: World) -> list[dict[str, Any]]:
        """Every process's sums, in rank order: a mid-epoch checkpoint holds them all."""
        if not world.distributed:
            return [self.state_dict()]
        parts = [torch.empty_like(self.packed()) for _ in range(world.size)]
        dist.all_gather(parts, self.packed())
        return [
            {
                "loss_sum": torch.tensor(loss_sum, dtype=self.loss_sum.dtype),  # float32 -> 64 -> 32: exact
                "correct": torch.tensor(int(correct), dtype=self.correct.dtype),
                "seen": int(seen),
                "batches": self.batches,  # the same on every process: DistributedSampler pads the shards
            }
            for loss_sum, correct, seen in (part.tolist() for part in parts)
        ]

    def summed(self, world: World) -> EpochTotals:
        """The sums over every process (a copy; each process's running totals stay its own)."""
        if not world.distributed:
            return self
        loss_sum, correct, seen = sum_across(self.packed(), world).tolist()
        device = self.loss_sum.device
        return EpochTotals(
            torch.tensor(loss_sum, dtype=self.loss_sum.dtype, device=device),
            torch.tensor(int(correct), dtype=self.correct.dtype, device=device),
            int(seen),
            self.batches,
        )


def evaluate(
    model: nn.Module,
    loader: Iterable[tuple[torch.Tensor, torch.Tensor]],
    compute: Compute,
    num_classes: int,
    world: World | None = None,
    extra_metrics: bool = True,
    progress: bool = False,
    per_sample: bool = False,
) -> dict[str, Any]:
    """Loss, top-1 accuracy, per-class accuracy, the confusion counts (``outputs/confusion.py``) and the metrics
    you add (``metrics``).

    Pass the plain model under DDP: the wrapper's forward would wait for the
    other processes, which may hold a different number of evaluation batches.
    ``per_sample`` (the evaluate command, not training's validation) also keeps each sample's loss, predicted
    class and that class's probability, in loader order (``samples``): where the model fails, file by file.
    ``metrics``: each of ``models/extensions.py``'s ``extra_metrics`` by name (with ``extra_metrics``, which
    ``train.extra_metrics`` sets), made fresh for this pass and computed over every process's batches (torchmetrics
    adds up their states): a number or one per class.
    """
    distributed = world is not None and world.distributed
    # Fresh for this pass: nothing carries over between passes, so nothing of them is in a checkpoint.
    metrics = added_metrics(num_classes, compute.device, distributed) if extra_metrics else {}
    model.eval()  # P11: dropout off, batch-norm statistics frozen
    loss_sum = torch.zeros((), device=compute.device)
    # Each prediction as one code, true class * C + predicted class, kept on the device and counted once at the
    # end: bincount on CUDA reads its input's range with a host sync, so once per pass, not once per batch.
    codes = [torch.zeros(0, device=compute.device, dtype=torch.long)]
    kept: list[torch.Tensor] = []  # per_sample: one (loss, predicted, probability) row per sample, on the device
    with torch.inference_mode():  # P11: no graph is built
        for batch in bar(loader, "eval", progress):
            images, targets = compute.batch(*batch)
            with compute.autocast():
                logits = model(images)
            loss_sum += F.cross_entropy(logits.float(), targets) * targets.shape[0]
            codes.append(targets * num_classes + logits.argmax(1))
            update_metrics(metrics, logits.float(), targets)
            if per_sample:
                kept.append(sample_results(logits, targets))
    if world is not None:
        sum_across(loss_sum, world)
    confusion = count_confusion(torch.cat(codes), num_classes, world)
    total, hits = confusion.total, confusion.hits()
    result = {
        "val_loss": loss_sum.item() / max(total, 1),
        "val_acc": float(hits.sum()) / max(total, 1),
        "per_class_acc": (hits / confusion.support().clamp(min=1)).tolist(),
        "confusion": confusion,
        "count": total,
        "metrics": computed(metrics, num_classes),  # every process computes them: each compute is a collective
    }
    if per_sample:
        rows = torch.cat(kept).cpu() if kept else torch.zeros(0, 3)
        result["samples"] = {"loss": rows[:, 0], "predicted": rows[:, 1].long(), "probability": rows[:, 2]}
    return result


def count_confusion(codes: torch.Tensor, num_classes: int, world: World | None = None) -> Confusion:
    """The (true, predicted) pairs of every process, counted. Up to ``DENSE_CELLS`` cells: one bincount, summed with
    one all_reduce. Beyond (2,048 classes): the codes themselves are gathered (one int64 an image) and only the pairs
    that occur are counted, where a dense count would take 3.2 GB of device memory at 20,000 classes."""
    if num_classes**2 <= DENSE_CELLS:
        dense = torch.bincount(codes, minlength=num_classes**2)  # a normal tensor: summed in place below
        if world is not None:  # every process saw its own shard: add them up
            sum_across(dense, world)
        return Confusion.from_dense(dense.view(num_classes, num_classes))  # rows: true class, columns: predicted
    if world is not None:  # shards of unequal length: gathered as objects, on the host
        codes = torch.cat(gather_objects(codes.cpu(), world))
    return Confusion.from_codes(codes, num_classes)


def sample_results(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each sample's cross-entropy, predicted class and that class's probability, as rows of one float tensor."""
    logits = logits.float()
    probability, predicted = logits.softmax(1).max(1)
    return torch.stack([F.cross_entropy(logits, targets, reduction="none"), predicted.float(), probability], 1)
