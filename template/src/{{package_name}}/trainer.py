"""The ``train`` command: build everything from the config, resume, loop over epochs.

A checkpoint holds everything a run's future depends on (weights, optimizer,
scheduler, scaler, step counters, the epoch's running sums, every random
generator); with the data order and augmentation derived from (seed, epoch,
index), a resumed run continues bit for bit where the interrupted one was.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import yaml
from torch import nn

from .checkpoint import (
    FORMAT_VERSION,
    find_resume_state,
    link_atomically,
    load_matching,
    load_model_state,
    model_state,
    rng_state,
    save_run_checkpoint,
    set_rng_state,
)
from .config import Config
from .data import build_datasets, build_loader
from .distributed import (
    World,
    barrier,
    close_world,
    configure_backends,
    init_world,
    memory_format,
    resolve_precision,
    select_device,
    sum_across,
    sync_buffers,
    unwrap,
    wrap_model,
)
from .engine import EpochTotals, evaluate, train_one_epoch
from .errors import UserError
from .model import build_model
from .optim import build_optimizer, build_scheduler
from .preemption import GracefulStop, Preempted
from .reporting import MetricsLog, draw_curves, save_sample_grid
from .tensorboard_log import TensorBoardLog


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - user code may draw from NumPy's global generator
    torch.manual_seed(seed)


def prepare_out_dir(out_dir: Path) -> None:
    """Check that the folder can be written; drop temporary files of writes a crash cut short."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
        for stale in out_dir.glob(".*.pt.*tmp"):
            stale.unlink()
    except OSError as exc:
        raise UserError(f"train.out_dir {out_dir} cannot be written ({exc.strerror}): choose another folder") from None


def sync_lr_to_schedule(scheduler: torch.optim.lr_scheduler.LambdaLR) -> None:
    """After a resume with another ``train.epochs`` (or optim settings), take this step's lr from the new curve."""
    step = scheduler.last_epoch
    curve = [base * factor(step) for base, factor in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)]
    if curve != [group["lr"] for group in scheduler.optimizer.param_groups]:
        scheduler.last_epoch -= 1
        scheduler.step()


class Trainer:
    """One run: its objects, its counters, and how to save and restore them.

    Under torchrun every process builds the same run and resumes from the same
    checkpoint; only the main process writes files and prints.
    """

    def __init__(self, cfg: Config, world: World | None = None) -> None:
        self.cfg = cfg
        self.world = world or World()
        self.out_dir = Path(cfg.train.out_dir)
        if self.world.is_main:
            prepare_out_dir(self.out_dir)
        seed_everything(cfg.train.seed)
        self.device = select_device(cfg.train.device, self.world)
        configure_backends(self.device, cfg.train.deterministic)
        self.precision = resolve_precision(cfg.train.precision, self.device)
        self.progress = cfg.train.progress and sys.stderr.isatty() and self.world.is_main

        train_set, val_set = build_datasets(cfg, self.progress)
        self.classes = list(train_set.classes)
        self.train_loader = build_loader(train_set, cfg, self.device, train=True, world=self.world)
        self.val_loader = build_loader(val_set, cfg, self.device, train=False, world=self.world)
        self.steps_per_epoch = len(self.train_loader)

        self.layout = memory_format(cfg.train.channels_last, self.device)
        self.model: nn.Module = build_model(cfg.model, len(self.classes)).to(self.device, memory_format=self.layout)
        self.optimizer = build_optimizer(self.model, cfg.optim)
        self.scheduler = build_scheduler(self.optimizer, cfg.optim, self.steps_per_epoch, cfg.train.epochs)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        self.criterion = nn.CrossEntropyLoss(label_smoothing=cfg.optim.label_smoothing)
        self.metrics = MetricsLog(self.out_dir / "metrics.jsonl")
        logs_to_board = cfg.train.tensorboard and self.world.is_main
        self.board = TensorBoardLog(self.out_dir, cfg.to_dict()) if logs_to_board else None
        self.curves_note: str | None = None

        self.epoch = 0  # completed epochs
        self.global_step = 0  # optimizer steps
        self.best_acc = -1.0
        self.totals: EpochTotals | None = None  # the unfinished epoch of a mid-epoch checkpoint

    def say(self, message: str) -> None:
        if self.world.is_main:
            print(message, flush=True)

    def restore(self, resume: str | None) -> None:
        found = find_resume_state(resume, self.out_dir)
        if found is None:
            if (self.out_dir / "last.pt").exists() and resume != "auto":
                raise UserError(
                    f"{self.out_dir} already holds a run (last.pt): continue it with --resume auto, "
                    "or start a new one with another --set train.out_dir=DIR"
                )
            if resume == "auto":
                self.say(f"no checkpoint in {self.out_dir}: starting a new run")
            if self.cfg.model.init_from:
                self.say(load_matching(self.model, self.cfg.model.init_from))
            return
        path, state = found
        last = self.out_dir / "last.pt"
        if resume != "auto" and last.exists() and not os.path.samefile(path, last):
            raise UserError(
                f"{self.out_dir} already holds another run (last.pt): to continue from {path}, "
                "set another train.out_dir"
            )
        if list(state["classes"]) != self.classes:
            raise UserError(
                f"{path} was trained on classes {state['classes']} but {self.cfg.data.root} has {self.classes}: "
                "resume with the same data, or fine-tune from it with model.init_from in a new train.out_dir"
            )
        load_model_state(self.model, state["model"], path)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        sync_lr_to_schedule(self.scheduler)
        self.scaler.load_state_dict(state["scaler"])
        self.epoch, self.global_step, self.best_acc = state["epoch"], state["global_step"], state["best_metric"]
        if state.get("epoch_totals"):
            layout = state["epoch_totals"].get("layout", {})
            here = self.layout_of_epoch()
            if layout != here:
                raise UserError(
                    f"{path} stopped inside an epoch with {layout}, this run has {here}: resume with the same "
                    "data.batch_size and number of processes, or from a checkpoint written at an epoch's end"
                )
            mine = state["epoch_totals"]["per_process"][self.world.rank]
            self.totals = EpochTotals.from_state(mine, self.device)
        set_rng_state(state["rng"], self.device)
        within = f", step {self.totals.steps} of epoch {self.epoch + 1}" if self.totals else ""
        self.say(f"resumed from {path} after epoch {self.epoch}{within} (global step {self.global_step})")

    def save(self, totals: EpochTotals | None = None, is_best: bool = False) -> Path:
        """``totals`` marks a mid-epoch checkpoint: ``epoch`` counts completed epochs only.

        Every process takes part (each one's running sums go into the file, so
        that each resumes its own and adds in the same order as before); the
        main process writes.
        """
        per_process = self.gather_totals(totals) if totals is not None else None
        last = self.out_dir / "last.pt"
        if not self.world.is_main:
            return last
        state = {
            "format_version": FORMAT_VERSION,
            "model": model_state(self.model),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "epoch": self.epoch,
            "global_step": self.global_step,
            "epoch_totals": {"per_process": per_process, "layout": self.layout_of_epoch()} if per_process else None,
            "best_metric": self.best_acc,
            "rng": rng_state(self.device),
            "classes": self.classes,
            "config": self.cfg.to_dict(),
        }
        try:
            save_run_checkpoint(state, self.out_dir, self.cfg.train.keep_last)
            if is_best:
                link_atomically(last, self.out_dir / "best.pt")
        except OSError as exc:
            raise UserError(
                f"could not write a checkpoint in {self.out_dir} ({exc.strerror}); the previous one is intact: "
                "free some space (or set train.keep_last lower) and continue with --resume auto"
            ) from None
        return last

    def layout_of_epoch(self) -> dict[str, int]:
        """What a mid-epoch position means: steps of this batch size, in shards for this many processes."""
        return {"batch_size": self.cfg.data.batch_size, "processes": self.world.size}

    def packed(self, totals: EpochTotals) -> torch.Tensor:
        """loss_sum, correct, seen as one float64 tensor on the device: one collective moves all three."""
        count = torch.tensor(float(totals.seen), dtype=torch.float64, device=self.device)
        return torch.stack([totals.loss_sum.double(), totals.correct.double(), count])

    def gather_totals(self, totals: EpochTotals) -> list[dict[str, Any]]:
        """Every process's running sums, in rank order."""
        if not self.world.distributed:
            return [totals.state_dict()]
        packed = self.packed(totals)
        parts = [torch.empty_like(packed) for _ in range(self.world.size)]
        dist.all_gather(parts, packed)
        return [
            {
                "loss_sum": torch.tensor(part[0].item(), dtype=totals.loss_sum.dtype),  # float32 -> 64 -> 32: exact
                "correct": torch.tensor(int(part[1].item()), dtype=totals.correct.dtype),
                "seen": int(part[2].item()),
                "steps": totals.steps,
            }
            for part in parts
        ]

    def sum_totals(self, totals: EpochTotals) -> EpochTotals:
        """The epoch's sums over every process (a copy; the running totals stay per process)."""
        if not self.world.distributed:
            return totals
        loss_sum, correct, seen = sum_across(self.packed(totals), self.world).tolist()
        return EpochTotals(
            torch.tensor(loss_sum, dtype=totals.loss_sum.dtype, device=self.device),
            torch.tensor(int(correct), dtype=totals.correct.dtype, device=self.device),
            int(seen),
            totals.steps,
        )

    def stop_requested(self, stop: GracefulStop) -> bool:
        """All processes must stop at the same step, or the others would wait forever."""
        if not self.world.distributed:
            return stop.requested
        flag = torch.tensor([1.0 if stop.requested else 0.0], device=self.device)
        return bool(sum_across(flag, self.world).item() > 0)

    def report(self, row: dict[str, Any]) -> None:
        """metrics.jsonl, curves.png and TensorBoard, from the main process."""
        self.metrics.append(row)
        if self.board is not None:
            self.board.epoch(row, {g["name"]: g["lr"] for g in self.optimizer.param_groups})
        note = draw_curves(self.metrics.rows(), self.out_dir / "curves.png")
        if note and not self.curves_note:
            self.curves_note = note
            self.say(f"note: no curves.png: {note}")

    def fit(self, stop: GracefulStop) -> dict[str, Any]:
        cfg = self.cfg
        if cfg.train.compile:
            self.model = torch.compile(self.model)  # before DDP, as the DDP docs advise; saves unwrap it
        self.model = wrap_model(self.model, self.device, cfg.train.parallel, cfg.data.batch_size, world=self.world)
        if self.world.is_main:
            self.metrics.truncate_after(self.epoch)
            (self.out_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        grid = self.out_dir / "train_batch.png"
        every = cfg.train.checkpoint_every_steps
        row: dict[str, Any] = {}

        def preempted(path: Path, epoch: int, step: int) -> Preempted:
            barrier(self.world)  # the others wait until the main process has written the checkpoint
            return Preempted(stop.signal_name or "a stop request", path, epoch, step)

        def at_step_boundary(totals: EpochTotals, images: torch.Tensor) -> None:
            self.global_step += 1
            if self.world.is_main and not grid.exists():
                save_sample_grid(images, grid)
                if self.board is not None:
                    self.board.batch(images)
            unfinished = totals.steps < self.steps_per_epoch
            stopping = unfinished and self.stop_requested(stop)  # on the last step, the epoch's end stops
            if stopping or (every and unfinished and self.global_step % every == 0):
                path = self.save(totals)
                if stopping:
                    raise preempted(path, self.epoch + 1, totals.steps)

        while self.epoch < cfg.train.epochs:
            totals, self.totals = self.totals or EpochTotals.zeros(self.device), None
            self.train_loader.sampler.set_epoch(self.epoch + 1, start=totals.steps * cfg.data.batch_size)  # type: ignore[attr-defined]
            stats = train_one_epoch(
                self.model,
                self.train_loader,
                self.optimizer,
                self.scheduler,
                self.scaler,
                self.criterion,
                self.device,
                self.precision,
                epoch=self.epoch + 1,
                totals=totals,
                log_every=cfg.train.log_every,
                progress=self.progress,
                grad_clip_norm=cfg.train.grad_clip_norm,
                layout=self.layout,
                on_step=at_step_boundary,
            )
            sync_buffers(unwrap(self.model), self.world)  # evaluate what the checkpoint will hold
            val = evaluate(
                unwrap(self.model),
                self.val_loader,
                nn.CrossEntropyLoss(),
                self.device,
                self.precision,
                len(self.classes),
                world=self.world,
                layout=self.layout,
            )
            self.epoch += 1
            row = {
                "epoch": self.epoch,
                "global_step": self.global_step,
                **self.sum_totals(totals).means(),
                "val_loss": val["val_loss"],
                "val_acc": val["val_acc"],
                "lr": self.scheduler.get_last_lr()[-1],
                "images_per_second": stats["images_per_second"] * self.world.size,
                "epoch_seconds": stats["epoch_seconds"],
            }
            is_best = val["val_acc"] > self.best_acc
            self.best_acc = max(self.best_acc, val["val_acc"])
            path = self.save(is_best=is_best)
            if self.world.is_main:
                self.report(row)
            self.say(
                f"epoch {self.epoch}/{cfg.train.epochs}  train_loss {row['train_loss']:.4f}  "
                f"val_loss {row['val_loss']:.4f}  val_acc {100 * row['val_acc']:.1f}%  lr {row['lr']:.2e}  "
                f"{row['images_per_second']:.0f} img/s" + ("  (best)" if is_best else "")
            )
            if self.stop_requested(stop) and self.epoch < cfg.train.epochs:
                raise preempted(path, self.epoch, self.steps_per_epoch)
        if not row:
            done = f"{self.epoch} of {cfg.train.epochs} epochs"
            self.say(f"nothing to do: {self.out_dir / 'last.pt'} already finished {done}")
        barrier(self.world)
        return row


def train(cfg: Config, resume: str | None = None) -> dict[str, Any]:
    """Train for ``train.epochs`` epochs; returns the last epoch's metrics row.

    Raises ``Preempted`` after checkpointing when SIGTERM or SIGINT arrives.
    """
    world = init_world(cfg.train.parallel)
    trainer: Trainer | None = None
    try:
        trainer = Trainer(cfg, world)
        trainer.restore(resume)
        with GracefulStop() as stop:
            return trainer.fit(stop)
    finally:
        if trainer is not None and trainer.board is not None:
            trainer.board.close()
        close_world(world)
