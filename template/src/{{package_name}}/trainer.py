"""The ``train`` command: build the run, resume it, and the epoch and batch loops (``Trainer.fit``).

A checkpoint holds everything a run's future depends on (weights, optimizer,
scheduler, scaler, step counters, the epoch's running sums, every random
generator); with the data order and augmentation derived from (seed, epoch,
index), a resumed run continues bit for bit where the interrupted one was.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torch import nn
from tqdm import tqdm

from .augment import BatchAugment
from .checkpoint import (
    FORMAT_VERSION,
    find_resume_state,
    link_atomically,
    load_matching,
    load_model_state,
    load_scaler_state,
    read_checkpoint,
    rng_state,
    save_run_checkpoint,
    set_rng_state,
)
from .config import Config
from .data import balanced_class_weights, build_datasets, build_loader, stop_workers
from .device import Compute, configure_backends, memory_format, nondeterminism_error, resolve_precision, select_device
from .distributed import (
    World,
    agreed,
    barrier,
    close_world,
    collective_failure,
    data_parallel_ids,
    init_world,
    sync_batchnorm,
    sync_buffers,
    wrap_model,
)
from .ema import WeightAverage  # EMA hook 1 of 6 (with run_length below): the moving average of the weights
from .engine import EpochTotals, Optimization, evaluate, train_step
from .errors import UserError
from .holdout import evaluate_test_split
from .mixing import BatchMixer
from .model import build_model
from .optim import build_optimizer, build_scheduler
from .pipeline import batch_path
from .preemption import GracefulStop, Preempted
from .provenance import data_changes, provenance
from .reporting import MetricsLog, draw_curves, save_sample_grid
from .run_length import run_length_warnings
from .run_lock import RunLock
from .tensorboard_log import TensorBoardLog
from .tracking import MlflowRun, preflight, track

CURVES_EVERY = 30.0  # seconds between drawings of curves.png; the first and last epochs always draw
EpochEnd = Callable[[dict[str, Any]], bool]  # sees each epoch's metrics row; True ends training there


@dataclass
class Progress:
    """Where a run stands. ``restore()`` returns it, ``fit()`` advances it, checkpoints save it."""

    epoch: int = 0  # completed epochs
    step: int = 0  # optimizer steps since the run began: the one step counter
    best_metric: float = -1.0  # the best val_acc so far, the one best.pt holds
    bad_epochs: int = 0  # epochs since val_acc last rose by more than train.early_stopping_min_delta
    totals: EpochTotals | None = None  # the running sums of an unfinished epoch (None between epochs)
    mlflow_run_id: str | None = None  # with train.mlflow: the MLflow run a resumed run continues


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


def sync_lr_to_schedule(scheduler: torch.optim.lr_scheduler.LambdaLR, saved_config: dict[str, Any], cfg: Config) -> str:
    """After a resume with another ``train.epochs`` (or optim settings), take this step's lr from the new curve.

    Returns what to add to the resume line when the lr jumps (the user asked for more epochs, not a jump), else "".
    """
    step = scheduler.last_epoch
    curve = [base * factor(step) for base, factor in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)]
    before = [group["lr"] for group in scheduler.optimizer.param_groups]
    if curve == before:
        return ""
    scheduler.last_epoch -= 1
    scheduler.step()
    old_epochs = saved_config.get("train", {}).get("epochs")
    why = f"train.epochs {old_epochs} -> {cfg.train.epochs}" if old_epochs != cfg.train.epochs else "optim settings"
    after = scheduler.get_last_lr()[-1]
    return f"; the learning-rate schedule was reshaped ({why}): lr {before[-1]:.2e} -> {after:.2e} from here"


class Trainer:
    """One run: its objects, how to save and restore them, and its loops.

    Under torchrun every process builds the same run and resumes from the same
    checkpoint; only the main process writes files and prints.
    """

    def __init__(self, cfg: Config, world: World | None = None) -> None:
        self.cfg = cfg
        self.world = world or World()
        self.out_dir = Path(cfg.train.out_dir)
        seed_everything(cfg.train.seed)
        device = select_device(cfg.train.device, self.world.local_rank)
        configure_backends(device, cfg.train.deterministic)
        precision = resolve_precision(cfg.train.precision, device)
        self.compute = Compute(device, precision, memory_format(cfg.train.channels_last, device))
        self.device = device
        self.progress_bars = cfg.train.progress and sys.stderr.isatty() and self.world.is_main

        train_set, val_set = build_datasets(cfg, self.progress_bars)
        self.lock = RunLock(self.out_dir)
        if self.world.is_main:  # after the data is checked: bad data leaves no empty run folder behind
            prepare_out_dir(self.out_dir)
            self.lock.acquire()  # one run per out_dir, released by the kernel however this process ends
        self.provenance = provenance(train_set, val_set)
        self.classes = list(train_set.classes)
        # Persistent workers live across epochs; close() ends them on every way out of the run.
        self.train_loader = build_loader(train_set, cfg, device, train=True, world=self.world, persistent=True)
        self.val_loader = build_loader(val_set, cfg, device, train=False, world=self.world, persistent=True)
        self.batches_per_epoch = len(self.train_loader)
        # data.pipeline: batch: random crops and flips of whole batches, on the training device (augment.py).
        self.augment = BatchAugment(cfg, self.world.rank, self.compute.layout) if batch_path(cfg.data) else None
        self.steps_per_epoch = math.ceil(self.batches_per_epoch / cfg.train.accumulate_steps)  # optimizer steps
        for warning in run_length_warnings(cfg, self.steps_per_epoch):  # EMA hook 6 of 6: settings too long for the run
            self.say(f"warning: {warning}")
        self.assemble(train_set)
        self.metrics = MetricsLog(self.out_dir / "metrics.jsonl")
        logs_to_board = cfg.train.tensorboard and self.world.is_main
        self.board = TensorBoardLog(self.out_dir, cfg.to_dict()) if logs_to_board else None
        self.grid_pending = self.world.is_main and not (self.out_dir / "train_batch.png").exists()
        self.curves_note: str | None = None
        self.tracker: MlflowRun | None = None  # MLflow, set by train() on the main process with train.mlflow
        self.curves_drawn, self.curves_stale = -math.inf, False  # when curves.png was last drawn; never yet

    def assemble(self, train_set: Any) -> None:
        """The model, its wrappers and average, and what an optimizer step needs (P9, P12, P14)."""
        cfg, device = self.cfg, self.compute.device
        model = build_model(cfg.model, len(self.classes))
        if cfg.train.sync_batchnorm:
            model = sync_batchnorm(model, self.world, device)  # before DDP wraps it, as its docs ask
        # Two names for two roles: ``model`` is the plain module that is saved, restored and evaluated;
        # ``wrapped`` is what the batch loop calls: the model itself, or torch.compile (before DDP, as the
        # DDP docs advise) and then DDP or DataParallel around it. Both share the same parameters.
        self.model: nn.Module = model.to(device, memory_format=self.compute.layout)
        compiled = torch.compile(self.model) if cfg.train.compile else self.model
        replicas = data_parallel_ids(device, cfg.train, cfg.data.batch_size)
        self.wrapped = wrap_model(compiled, device, replicas, self.compute.autocast_dtype, self.world)
        # The GPUs whose random generators the run draws from (dropout in each DataParallel replica).
        self.cuda_ids = replicas or ([device.index or 0] if device.type == "cuda" else [])
        # EMA hook 2 of 6 - train.ema_decay: a moving average of the weights, buffers included, updated on the
        # device after each optimizer step (ema.py).
        self.ema = WeightAverage(self.model, cfg.train.ema_decay) if cfg.train.ema_decay else None
        self.mixer = BatchMixer(cfg.train, len(self.classes)) if BatchMixer.wanted(cfg.train) else None
        weights = balanced_class_weights(train_set) if cfg.optim.class_weights == "balanced" else None
        optimizer = build_optimizer(self.model, cfg.optim)
        self.parts = Optimization(
            optimizer,
            build_scheduler(optimizer, cfg.optim, self.steps_per_epoch, cfg.train.epochs),
            torch.amp.GradScaler(device.type, enabled=self.compute.precision == "fp16"),
            # P9: the class weights are a buffer of the loss: moved by .to(), saved in its state_dict.
            nn.CrossEntropyLoss(weight=weights, label_smoothing=cfg.optim.label_smoothing).to(device),
        )

    @property
    def evaluated(self) -> nn.Module:
        """What validation measures, best.pt is chosen by and inference uses: the average when there is one."""
        return self.ema.module if self.ema is not None else self.model

    def say(self, message: str) -> None:
        if self.world.is_main:
            print(message, flush=True)

    def restore(self, resume: str | None) -> Progress:
        """Load the checkpoint that ``--resume`` names into this run's objects; returns where the run stands."""
        found = find_resume_state(resume, self.out_dir)
        if found is None:
            self.start_fresh(resume)
            return Progress()
        path, state = found
        self.check_resumable(path, state, resume)
        load_model_state(self.model, state["model"], path)
        self.parts.optimizer.load_state_dict(state["optimizer"])
        self.parts.scheduler.load_state_dict(state["scheduler"])
        reshaped = sync_lr_to_schedule(self.parts.scheduler, state.get("config", {}), self.cfg)
        notes = (
            load_scaler_state(self.parts.scaler, state["scaler"]),
            self.restore_extras(state),
            self.data_note(state),
        )
        for note in notes:
            if note:
                self.say(f"note: {note}")
        totals = self.unfinished_epoch(path, state)
        progress = Progress(
            epoch=state["epoch"],
            step=state["global_step"],
            best_metric=state["best_metric"],
            bad_epochs=state.get("bad_epochs", 0),
            totals=totals,
            mlflow_run_id=state.get("mlflow_run_id"),  # with train.mlflow: continue that MLflow run
        )
        set_rng_state(state["rng"], self.cuda_ids)  # last: nothing after this may draw a random number before fit
        within = f", step {totals.batches} of epoch {progress.epoch + 1}" if totals else ""
        self.say(f"resumed from {path} after epoch {progress.epoch}{within} (global step {progress.step}){reshaped}")
        if self.world.is_main and progress.epoch < self.cfg.train.epochs:
            self.metrics.mark_resume(progress.epoch + (totals.batches / self.batches_per_epoch if totals else 0.0))
        return progress

    def restore_extras(self, state: dict[str, Any]) -> str | None:
        """The weights' average and the loss's class weights; a note when the average starts fresh."""
        if state.get("criterion"):
            self.parts.criterion.load_state_dict(state["criterion"])
        if self.ema is None:
            return None
        if state.get("model_ema") is None:
            return "the checkpoint has no average of the weights: train.ema_decay starts it from these weights"
        self.ema.load_state_dict(state)  # EMA hook 3 of 6: model_ema and model_ema_updates (its warm-up's position)
        return None

    def data_note(self, state: dict[str, Any]) -> str | None:
        """Exact resume needs the same files: say what changed since the checkpoint (a warning, not a refusal)."""
        changed = data_changes(state.get("provenance", {}).get("data", {}), self.provenance["data"])
        return (
            f"the data changed since the checkpoint ({changed}): the run goes on, no longer exactly"
            if changed
            else None
        )

    def start_fresh(self, resume: str | None) -> None:
        if (self.out_dir / "last.pt").exists() and resume != "auto":
            raise UserError(
                f"{self.out_dir} already holds a run (last.pt): continue it with --resume auto, "
                "or start a new one with another --set train.out_dir=DIR"
            )
        if resume == "auto":
            self.say(f"no checkpoint in {self.out_dir}: starting a new run")
        if self.cfg.model.init_from:
            self.say(load_matching(self.model, self.cfg.model.init_from))

    def check_resumable(self, path: Path, state: dict[str, Any], resume: str | None) -> None:
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

    def unfinished_epoch(self, path: Path, state: dict[str, Any]) -> EpochTotals | None:
        """This process's running sums from a mid-epoch checkpoint; None when it was written at an epoch's end."""
        if not state.get("epoch_totals"):
            return None
        layout, here = {"accumulate_steps": 1, **state["epoch_totals"].get("layout", {})}, self.layout_of_epoch()
        if layout != here:
            raise UserError(
                f"{path} stopped inside an epoch with {layout}, this run has {here}: resume with the same "
                "data.batch_size and number of processes, or from a checkpoint written at an epoch's end"
            )
        return EpochTotals.from_state(state["epoch_totals"]["per_process"][self.world.rank], self.device)

    def layout_of_epoch(self) -> dict[str, int]:
        """What a mid-epoch position means: batches of this size, in shards for this many processes, N to a step."""
        return {
            "batch_size": self.cfg.data.batch_size,
            "processes": self.world.size,
            "accumulate_steps": self.cfg.train.accumulate_steps,
        }

    def save(self, progress: Progress, is_best: bool = False) -> Path:
        """Every process takes part (a mid-epoch file holds each one's running sums); the main process writes."""
        per_process = progress.totals.gathered(self.world) if progress.totals is not None else None
        last = self.out_dir / "last.pt"
        if not self.world.is_main:
            return last
        state = {
            "format_version": FORMAT_VERSION,
            "model": self.model.state_dict(),  # the plain model: no module. or _orig_mod. prefix (P7)
            "optimizer": self.parts.optimizer.state_dict(),
            "scheduler": self.parts.scheduler.state_dict(),
            "scaler": self.parts.scaler.state_dict(),
            "epoch": progress.epoch,
            "global_step": progress.step,
            "epoch_totals": {"per_process": per_process, "layout": self.layout_of_epoch()} if per_process else None,
            "best_metric": progress.best_metric,
            "bad_epochs": progress.bad_epochs,
            # EMA hook 4 of 6: the average's keys, None and 0 without one.
            **(self.ema.state_dict() if self.ema is not None else {"model_ema": None, "model_ema_updates": 0}),
            "criterion": self.parts.criterion.state_dict(),
            "rng": rng_state(self.cuda_ids),
            "classes": self.classes,
            "config": self.cfg.to_dict(),
            "provenance": self.provenance,
            "job": os.environ.get("TORCHELASTIC_RUN_ID"),  # torchrun's job: a restart resumes only its own files
            "mlflow_run_id": progress.mlflow_run_id,
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

    def stop_agreed(self, stop: GracefulStop, step: int | None = None) -> bool:
        """All processes must stop at the same step, or the others would wait forever.

        Under DDP agreeing is a collective and a host sync, so inside an epoch
        (``step`` given) it is asked at the logging interval only (P5); one
        process reads its own flag at every step.
        """
        if not self.world.distributed:
            return stop.requested
        if step is not None and step % self.cfg.train.log_every:
            return False
        return agreed(stop.requested, self.world, self.device)

    def stopped(self, stop: GracefulStop, path: Path, progress: Progress) -> Preempted:
        barrier(self.world)  # the others wait until the main process has written the checkpoint
        within = progress.totals.batches if progress.totals is not None else self.batches_per_epoch
        epoch = progress.epoch + 1 if progress.totals is not None else progress.epoch
        return Preempted(stop.signal_name or "a stop request", path, epoch, within)

    def fit(self, progress: Progress, stop: GracefulStop, epoch_end: EpochEnd | None = None) -> dict[str, Any]:
        """Train until ``train.epochs``; checkpoints and stops are decided here, at optimizer-step boundaries."""
        cfg, row = self.cfg, {}
        every, accumulate = cfg.train.checkpoint_every_steps, cfg.train.accumulate_steps
        if self.begin_run(progress):
            return row
        while progress.epoch < cfg.train.epochs:
            epoch, totals = progress.epoch + 1, progress.totals or EpochTotals.zeros(self.device)
            progress.totals = totals
            # A resumed epoch skips, in this process's shard, the batches trained before the interruption.
            self.train_loader.sampler.set_epoch(epoch, start=totals.batches * cfg.data.batch_size)  # type: ignore[attr-defined]
            self.wrapped.train()  # P11
            started, seen_before = time.perf_counter(), totals.seen
            bar = tqdm(self.train_loader, f"epoch {epoch}", disable=not self.progress_bars, leave=False)
            for images, targets in bar:
                images, targets = self.compute.batch(images, targets)
                images = self.augment(images, epoch, totals.batches) if self.augment else images  # data.pipeline
                inputs, labels = self.mixer(images, targets, epoch, totals.batches) if self.mixer else (images, targets)
                last = totals.batches + 1 == self.batches_per_epoch
                update = last or (totals.batches + 1) % accumulate == 0  # the optimizer steps after N batches
                loss, logits = train_step(self.wrapped, inputs, labels, self.parts, self.compute, cfg.train, update)
                totals.add(loss, logits, targets)  # accuracy against the hard labels, also when mixing
                if not update:
                    continue  # gradients add up; checkpoints and stops wait for the optimizer step
                progress.step += 1
                if self.ema is not None:
                    self.ema.update(self.model)  # EMA hook 5 of 6: after each optimizer step, no host sync
                if self.grid_pending:
                    self.save_grid(inputs, targets)  # what the model sees (mixed, when mixing), hard labels
                if self.progress_bars and progress.step % cfg.train.log_every == 0:  # P5: a host sync, now and then
                    bar.set_postfix(loss=f"{totals.mean_loss():.4f}", lr=f"{self.last_lr():.2e}")
                if not last and self.stop_agreed(stop, progress.step):  # the epoch's end decides after its last
                    raise self.stopped(stop, self.save(progress), progress)
                if not last and every and progress.step % every == 0:
                    self.save(progress)
            progress.epoch, progress.totals = epoch, None
            row = self.end_epoch(progress, totals, time.perf_counter() - started, totals.seen - seen_before)
            if "stop_reason" in row or (epoch_end is not None and epoch_end(row)):
                break
            if progress.epoch < cfg.train.epochs and self.stop_agreed(stop):
                raise self.stopped(stop, self.out_dir / "last.pt", progress)
        barrier(self.world)
        return row

    def last_lr(self) -> float:
        return self.parts.scheduler.get_last_lr()[-1]  # the head's group: the lr that optim.lr sets

    def begin_run(self, progress: Progress) -> bool:
        """True when there is nothing to train: the run is finished, or early stopping ended it."""
        ended = self.early_stop_reason(progress)
        if ended or progress.epoch >= self.cfg.train.epochs:
            why = f"already stopped: {ended}" if ended else f"already finished {progress.epoch} epochs"
            self.say(f"nothing to do: {self.out_dir / 'last.pt'} {why}")
            return True
        if self.world.is_main:
            self.metrics.truncate_after(progress.epoch)  # rows of epochs this run will train again
            (self.out_dir / "config.yaml").write_text(yaml.safe_dump(self.cfg.to_dict(), sort_keys=False))
        return False

    def early_stop_reason(self, progress: Progress) -> str | None:
        patience, delta = self.cfg.train.early_stopping_patience, self.cfg.train.early_stopping_min_delta
        if not patience or progress.bad_epochs < patience:
            return None
        return f"early stopping: val_acc has not risen by more than {delta} for {patience} epochs"

    def save_grid(self, images: torch.Tensor, targets: torch.Tensor) -> None:
        """P15: the first batch as the model sees it, each image labelled with its class, once per run folder."""
        save_sample_grid(images, self.out_dir / "train_batch.png", [self.classes[t] for t in targets.tolist()])
        if self.board is not None:
            self.board.batch(images)
        self.grid_pending = False

    def end_epoch(self, progress: Progress, totals: EpochTotals, seconds: float, seen: int) -> dict[str, Any]:
        """Validate, then write the checkpoint, the metrics row and the pictures; returns the row."""
        sync_buffers(self.evaluated, self.world)  # rank 0's batch-norm statistics: what the checkpoint will hold
        val = evaluate(self.evaluated, self.val_loader, self.compute, len(self.classes), world=self.world)
        row = {
            "epoch": progress.epoch,
            "global_step": progress.step,
            **totals.summed(self.world).means(),
            "val_loss": val["val_loss"],
            "val_acc": val["val_acc"],
            "lr": self.last_lr(),
            "images_per_second": seen / seconds * self.world.size if seconds > 0 else 0.0,
            "epoch_seconds": seconds,
        }
        is_best = val["val_acc"] > progress.best_metric
        improved = val["val_acc"] > progress.best_metric + self.cfg.train.early_stopping_min_delta
        progress.bad_epochs = 0 if improved else progress.bad_epochs + 1
        progress.best_metric = max(progress.best_metric, val["val_acc"])
        reason = self.early_stop_reason(progress)
        if reason:
            row["stop_reason"] = reason
        self.save(progress, is_best=is_best)
        if self.world.is_main:
            self.report(row)
        self.say(
            f"epoch {progress.epoch}/{self.cfg.train.epochs}  train_loss {row['train_loss']:.4f}  "
            f"val_loss {row['val_loss']:.4f}  val_acc {100 * row['val_acc']:.1f}%  lr {row['lr']:.2e}  "
            f"{row['images_per_second']:.0f} img/s" + ("  (best)" if is_best else "")
        )
        return row

    def report(self, row: dict[str, Any]) -> None:
        """metrics.jsonl, curves.png, TensorBoard and MLflow, from the main process."""
        self.metrics.append(row)
        if self.board is not None:
            self.board.epoch(row, {g["name"]: g["lr"] for g in self.parts.optimizer.param_groups})
        if self.tracker is not None:
            self.tracker.epoch(row)  # once per epoch, at its end: a resumed run never logs a step twice
        self.curves_stale = True
        last = row["epoch"] == self.cfg.train.epochs or "stop_reason" in row  # before MLflow takes the files
        if last or time.perf_counter() - self.curves_drawn >= CURVES_EVERY:  # a drawing costs 0.2 s: not every epoch
            self.draw_curves()

    def draw_curves(self) -> None:
        self.curves_drawn, self.curves_stale = time.perf_counter(), False
        note = draw_curves(self.metrics.rows(), self.out_dir / "curves.png", self.metrics.resumes())
        if note and not self.curves_note:
            self.curves_note = note
            self.say(f"note: no curves.png: {note}")

    def close(self) -> None:
        """However the run ends (finished, stopped, failed): curves.png shows every epoch it finished, and
        the loader workers end (they ignore SIGTERM, so the interpreter's exit would wait for them forever)."""
        try:
            if self.curves_stale:
                self.draw_curves()
            if self.board is not None:
                self.board.close()
        finally:
            stop_workers(self.train_loader)
            stop_workers(self.val_loader)
            self.lock.release()


def resume_after_restart(resume: str | None, out_dir: Path, world: World) -> str | None:
    """Under ``torchrun --max-restarts``, restarted workers continue this job's newest checkpoint by themselves.

    Only a checkpoint this job wrote (its ``TORCHELASTIC_RUN_ID``): another run's
    last.pt in the folder is refused as on a first start.
    """
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if resume is not None or not restarts or not (out_dir / "last.pt").is_file():
        return resume
    try:
        ours = read_checkpoint(out_dir / "last.pt").get("job") == os.environ.get("TORCHELASTIC_RUN_ID")
    except UserError:
        ours = True  # damaged by the failure: --resume auto falls back to an older intact checkpoint
    if ours and world.is_main:
        print(f"torchrun restarted the workers (restart {restarts}): resuming from {out_dir}", flush=True)
    return "auto" if ours else None


def train(cfg: Config, resume: str | None = None, epoch_end: EpochEnd | None = None) -> dict[str, Any]:
    """Train for ``train.epochs`` epochs; returns the last epoch's metrics row.

    ``epoch_end`` sees each epoch's row after its checkpoint is written, on
    every process (it must answer the same on each); True ends the run there,
    resumable later. Raises ``Preempted`` after checkpointing when SIGTERM or
    SIGINT arrives.
    """
    world = init_world(cfg.train.parallel, cfg.train.device, cfg.train.collective_timeout)
    trainer: Trainer | None = None
    resume = resume_after_restart(resume, Path(cfg.train.out_dir), world)
    try:
        preflight(cfg, world.is_main)  # an unreachable MLflow server fails now, before the data is loaded
        trainer = Trainer(cfg, world)
        progress = trainer.restore(resume)
        with track(cfg, progress, world.is_main) as trainer.tracker:  # MLflow: artifacts and status at the end
            with GracefulStop() as stop:
                row = trainer.fit(progress, stop, epoch_end)
            finished = row and (row["epoch"] == cfg.train.epochs or "stop_reason" in row)
            if finished and world.is_main:
                evaluate_test_split(cfg.data.root, trainer.out_dir)  # test/, if there, with best.pt's weights
        return row
    except RuntimeError as error:
        # An op with no deterministic kernel in deterministic mode, or another process lost: one line each.
        explained = nondeterminism_error(error) or collective_failure(error, world)
        if explained is None:
            raise
        raise explained from None
    finally:
        if trainer is not None:
            trainer.close()
        close_world(world)
