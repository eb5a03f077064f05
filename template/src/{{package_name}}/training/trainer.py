"""The ``train`` command: ``train()`` builds the run and resumes it; ``Trainer.fit`` holds the epoch and batch loops.

A checkpoint holds everything a run's future depends on (``run_state.py``:
weights, optimizer, scheduler, scaler, step counters, the epoch's running
sums, every random generator); with the data order and augmentation derived
from (seed, epoch, index), a resumed run continues bit for bit where the
interrupted one was. The batches come model-ready from ``data/batches.py``, and
what a run reports goes to the list of ``outputs/writers.py``.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from ..core.config import Config
from ..core.device import (
    Compute,
    configure_backends,
    memory_format,
    nondeterminism_error,
    resolve_precision,
    select_device,
)
from ..core.distributed import (
    World,
    barrier,
    close_world,
    collective_failure,
    data_parallel_ids,
    init_world,
    started,
    sync_batchnorm,
    sync_buffers,
    wrap_model,
)
from ..core.provenance import provenance
from ..core.seeding import seed_everything, seed_process
from ..data import TrainingBatches, balanced_class_weights, build_loader, build_training_data, stop_workers
from ..models.classifier import build_model
from ..outputs.writers import build_outputs
from .ema import WeightAverage
from .engine import EpochTotals, Optimization, evaluate, train_step
from .freezing import frozen_in, frozen_later, set_frozen, unfreezing_said
from .holdout import evaluate_when_done
from .metrics import best_value, validation_columns
from .optim import build_optimizer, build_scheduler
from .preemption import AgreedStop, GracefulStop, Preempted, hold_stop_signals
from .preflight import check_before_data
from .pretrained import prepare_weights
from .run_lock import RunLock, claim_out_dir, missing_folders, remove_unused, resume_after_restart
from .run_state import Progress, RunParts, RunState
from .startup import start_lines, training_progress

EpochEnd = Callable[[dict[str, Any]], bool]  # sees each epoch's metrics row; True ends training there


def train(cfg: Config, resume: str | None = None, epoch_end: EpochEnd | None = None) -> dict[str, Any]:
    """Train for ``train.epochs`` epochs; returns the last epoch's metrics row.

    ``epoch_end`` sees each epoch's row after its checkpoint is written, on
    every process (it must answer the same on each); True ends the run there,
    resumable later. Raises ``Preempted`` after checkpointing when SIGTERM or
    SIGINT arrives.
    """
    world = init_world(cfg.train.parallel, cfg.train.device, cfg.train.collective_timeout)
    trainer: Trainer | None = None
    status = "FAILED"  # what the outputs (MLflow) record, unless the run finishes or stops to be resumed
    resume = resume_after_restart(resume, Path(cfg.train.out_dir), world)
    made = missing_folders(Path(cfg.train.out_dir)) if world.is_main else []  # a failed start removes them again
    try:
        # The device once (init_world chose it under torchrun), then the whole config against it and the code,
        # before any data is read: an impossible setting ends in seconds, a costly one is said (preflight.py).
        world = replace(world, device=world.device or select_device(cfg.train.device, world.local_rank))
        for warning in check_before_data(cfg, world, resume):
            if world.is_main:
                print(f"warning: {warning}", flush=True)
        trainer = Trainer(cfg, world, resume)
        progress = trainer.state.restore(resume)
        for line in start_lines(trainer, progress):  # data, device, loaders, resume point, model: before epoch 1
            trainer.say(line)
        with GracefulStop() as stop:
            row = trainer.fit(progress, stop, epoch_end)
        if world.is_main:
            evaluate_when_done(row, cfg.train.epochs, cfg.data.root, trainer.out_dir)  # test/, with best.pt's weights
        status = "FINISHED"
        return row
    except (Preempted, KeyboardInterrupt):
        status = "KILLED"  # stopped to be resumed
        raise
    except RuntimeError as error:
        # An op with no deterministic kernel in deterministic mode, or another process lost: one line each.
        lost = collective_failure(error, world)
        explained = nondeterminism_error(error) or lost
        if explained is None:
            raise
        if lost is not None:
            hold_stop_signals()  # torchrun's SIGTERM to the survivors must not cut off the cleanup and this line
        raise explained from None
    finally:
        if trainer is not None:
            trainer.close(status)
        if status == "FAILED":
            remove_unused(made)  # a run folder holding only .lock helps no one
        close_world(world)


class Trainer:
    """One run: ``__init__`` and ``assemble`` build it, ``fit`` trains it; ``state`` saves and restores it.

    Under torchrun every process builds the same run and resumes from the same
    checkpoint; only the main process writes files and prints.
    """

    def __init__(self, cfg: Config, world: World | None = None, resume: str | None = None) -> None:
        """``resume``: what ``state.restore`` will continue (``--resume``): the data is decoded as that run's was."""
        world = world or World()
        # The device, chosen once for this process (init_world did under torchrun); the data reads it from the world.
        device = world.device or select_device(cfg.train.device, world.local_rank)
        self.world = replace(world, device=device)
        # Before the data: pretrained weights by name are found (downloaded once per node), and the preprocessing
        # keys the config leaves null take the weights' values; the filled config is the run's, in every checkpoint.
        self.start = prepare_weights(cfg, self.world)
        self.cfg = cfg = self.start.config
        warning = self.start.filled.warning(self.start.weights.label if self.start.weights else "")
        if warning:
            self.say(f"warning: {warning}")
        self.out_dir = Path(cfg.train.out_dir)
        seed_everything(cfg.train.seed)
        configure_backends(device, cfg.train.deterministic)
        precision = resolve_precision(cfg.train.precision, device, cfg.model.name)
        self.compute = Compute(device, precision, memory_format(cfg.train.channels_last, device))

        # The files checked once per node (local rank 0; the others wait at distributed.files_checked, all at started()
        # below), long phases shown by the main process (core/progress.py), what was found listed in the run folder.
        shown = cfg.train.progress and self.world.is_main
        data = build_training_data(cfg.data, cfg.train, shown, self.world, resume, lists=True)
        train_set, val_set = data.train, data.val
        self.lock = RunLock(self.out_dir)
        if self.world.is_main:  # after the data is checked: bad data leaves no empty run folder behind
            # The lock first, then the stale-file cleanup: a refused run touches nothing of the running one.
            claim_out_dir(self.out_dir, self.lock)
        # Where the run's code, data and pretrained weights came from: in every checkpoint.
        lists = {"exclude": cfg.data.exclude, "relabel": cfg.data.relabel}  # by digest: what was left out, relabelled
        record = {**provenance(train_set, val_set, lists), "weights": self.start.record()}
        # Every rank waits here (a long timeout, not collective_timeout) until all have set up their data: a
        # slow shared file system must not look like a dead rank. Before DDP wraps the model in assemble().
        started(self.world)
        self.classes = list(train_set.classes)
        self.batches = TrainingBatches.build(data, cfg.data, cfg.train.seed, self.world, self.compute)
        self.val_loader = build_loader(
            val_set, cfg.data, cfg.train.seed, device, train=False, world=self.world, persistent=True
        )
        self.steps_per_epoch = math.ceil(self.batches.per_epoch / cfg.train.accumulate_steps)  # optimizer steps
        self.shown = training_progress(cfg, self.world.is_main, self.batches.per_epoch, self.classes)  # estimates too
        self.assemble(train_set)
        seed_process(cfg.train.seed, self.world.rank)  # the same weights on every rank; from here, its own dropout
        self.outputs = build_outputs(cfg, self.world.is_main, self.classes)
        parts = RunParts(
            model=self.model,
            ema=self.ema,
            optimization=self.parts,
            device=device,
            cuda_ids=self.cuda_ids,
            classes=self.classes,
            provenance=record,
            batches_per_epoch=self.batches.per_epoch,
        )
        self.state = RunState(cfg, self.world, parts, self.outputs, self.say)

    def assemble(self, train_set: Any) -> None:
        """The model, its wrappers and average, and what an optimizer step needs (P9, P12, P14)."""
        cfg, device = self.cfg, self.compute.device
        model = build_model(cfg.model, len(self.classes), cfg.data.image_size)
        if cfg.train.sync_batchnorm:
            model = sync_batchnorm(model, self.world, device)  # before DDP wraps it, as its docs ask
        # Two names for two roles: ``model`` is the plain module that is saved, restored and evaluated;
        # ``wrapped`` is what the batch loop calls: the model itself, or DDP or DataParallel around it; with
        # train.compile, torch.compile around the model or around DDP (distributed.wrap_model: PyTorch's order;
        # DataParallel is never compiled, data_parallel_ids refuses the pair). Both share the same parameters.
        self.model: nn.Module = model.to(device, memory_format=self.compute.layout)
        self.replicas = data_parallel_ids(device, cfg.train, cfg.data.batch_size, self.world)
        self.wrap()
        # The GPUs whose random generators the run draws from (dropout in each DataParallel replica).
        self.cuda_ids = self.replicas or ([device.index or 0] if device.type == "cuda" else [])
        # train.ema_decay: a moving average of the weights, buffers included, updated on the device after each
        # optimizer step with no copy from the host (ema.py).
        self.ema = WeightAverage(self.model, cfg.train.ema_decay) if cfg.train.ema_decay else None
        weights = balanced_class_weights(train_set) if cfg.optim.class_weights == "balanced" else None
        optimizer = build_optimizer(self.model, cfg.optim, frozen_too=frozen_later(cfg.model))
        self.parts = Optimization(
            optimizer,
            build_scheduler(optimizer, cfg.optim, self.steps_per_epoch, cfg.train.epochs),
            torch.amp.GradScaler(device.type, enabled=self.compute.precision == "fp16"),
            # P9: the class weights are a buffer of the loss: moved by .to(), saved in its state_dict.
            nn.CrossEntropyLoss(weight=weights, label_smoothing=cfg.optim.label_smoothing).to(device),
        )

    def wrap(self) -> None:
        """``wrapped``: the model inside DDP or DataParallel, or itself (P14); with ``train.compile``, the model or
        its DDP compiled (DataParallel is refused with compile at start)."""
        device, dtype = self.compute.device, self.compute.autocast_dtype
        self.wrapped = wrap_model(self.model, device, self.replicas, dtype, self.world, self.cfg.train.compile)

    def freeze_for(self, epoch: int, resumed_inside: bool = False) -> None:
        """The backbone frozen or not as ``epoch`` asks (freezing.py); as that changes, DDP (which registers what trains
        when made) and a compiled graph (traced frozen: no gradient for it) are made again (distributed.wrap_model).
        ``resumed_inside``: the epoch resumes after batches it trained before."""
        frozen = frozen_in(self.cfg.model, epoch)
        if not set_frozen(self.model, frozen):
            return
        if not frozen:
            self.say(unfreezing_said(self.cfg.model, epoch, self.cfg.optim.backbone_lr_scale, resumed_inside))
        if self.world.distributed or self.cfg.train.compile:
            self.wrapped = self.model  # the old DDP's gradient hooks go with it, before the new one adds its own
            gc.collect()
            self.wrap()

    def fit(self, progress: Progress, stop: GracefulStop, epoch_end: EpochEnd | None = None) -> dict[str, Any]:
        """Train until ``train.epochs``; checkpoints and stops are decided here, at optimizer-step boundaries."""
        cfg, row = self.cfg, {}
        every, accumulate = cfg.train.checkpoint_every_steps, cfg.train.accumulate_steps
        stop_here = AgreedStop(stop, self.world, self.compute.device, cfg.train.log_every)  # all stop at one step
        if self.begin_run(progress):
            return row
        while progress.epoch < cfg.train.epochs:
            epoch, totals = progress.epoch + 1, progress.totals or EpochTotals.zeros(self.compute.device)
            progress.totals = totals
            # A resumed epoch starts at the batch after the last one trained: the same data, crops and mixing.
            self.batches.set_epoch(epoch, start=totals.batches)
            self.freeze_for(epoch, totals.batches > 0)  # model.freeze_backbone, until model.unfreeze_at_epoch
            # P11: dropout and batch-norm statistics need train mode; the last evaluation left eval mode.
            self.wrapped.train()
            started, seen_before = time.perf_counter(), totals.seen
            for inputs, labels, targets in self.shown.epoch(self.batches, epoch, totals, self.last_lr):
                last = totals.batches + 1 == self.batches.per_epoch
                update = last or (totals.batches + 1) % accumulate == 0  # the optimizer steps after N batches
                loss, logits = train_step(self.wrapped, inputs, labels, self.parts, self.compute, cfg.train, update)
                totals.add(loss, logits, targets)  # accuracy against the hard labels, also when mixing
                if not update:
                    continue  # gradients add up; checkpoints and stops wait for the optimizer step
                progress.step += 1
                if self.ema is not None:
                    self.ema.update(self.model)
                # The first step's batch as the model sees it, for train_batch.png: soft labels when mixing.
                self.outputs.images(inputs, labels)
                # The epoch's last step is decided at its end, after validation and its checkpoint.
                if not last and stop_here(progress.step):
                    raise stop_here.preempted(self.state.save(progress), epoch, totals.batches)
                if not last and every and progress.step % every == 0:
                    self.state.save(progress)
            progress.epoch, progress.totals = epoch, None
            row = self.end_epoch(progress, totals, time.perf_counter() - started, totals.seen - seen_before)
            if "stop_reason" in row or (epoch_end is not None and epoch_end(row)):
                break
            if progress.epoch < cfg.train.epochs and stop_here():
                raise stop_here.preempted(self.out_dir / "last.pt", epoch, self.batches.per_epoch)
        barrier(self.world)
        return row

    def end_epoch(self, progress: Progress, totals: EpochTotals, seconds: float, seen: int) -> dict[str, Any]:
        """Validate, then write the metrics row, the checkpoint, and the other outputs; returns the row."""
        train, model = self.cfg.train, self.evaluated
        sync_buffers(model, self.world)  # every process evaluates with rank 0's batch-norm statistics: best.pt's
        val = evaluate(model, self.val_loader, self.compute, len(self.classes), self.world, train.extra_metrics)
        row = {
            "epoch": progress.epoch,
            "global_step": progress.step,
            **totals.summed(self.world).means(),
            **validation_columns(val, self.classes),  # val_loss, val_acc, then models/extensions.py's extra_metrics
            "lr": self.last_lr(),
            "images_per_second": seen / seconds * self.world.size if seconds > 0 else 0.0,
            "epoch_seconds": seconds,
        }
        is_best = progress.record(best_value(row, train.best_metric), row["val_loss"], train.early_stopping_min_delta)
        reason = self.early_stop_reason(progress)
        if reason:
            row["stop_reason"] = reason
        # The row goes to metrics.jsonl before the checkpoint: a kill between the two leaves a row that the resume
        # drops and trains again, never a checkpoint whose row no run will write.
        self.outputs.record(row)
        self.state.save(progress, is_best=is_best)
        self.outputs.epoch(row, {group["name"]: group["lr"] for group in self.parts.optimizer.param_groups})
        self.say(
            f"epoch {progress.epoch}/{self.cfg.train.epochs}  train_loss {row['train_loss']:.4f}  "
            f"val_loss {row['val_loss']:.4f}  val_acc {100 * row['val_acc']:.1f}%  lr {row['lr']:.2e}  "
            f"{row['images_per_second']:.0f} img/s" + ("  (best)" if is_best else "")
        )
        return row

    def begin_run(self, progress: Progress) -> bool:
        """True when there is nothing to train: the run is finished, or early stopping ended it."""
        ended = self.early_stop_reason(progress)
        # Rows past the checkpoint go (a kill between a row and its checkpoint), whether or not there is more to do.
        self.outputs.begin(progress.epoch)
        if ended or progress.epoch >= self.cfg.train.epochs:
            why = f"already stopped: {ended}" if ended else f"already finished {progress.epoch} epochs"
            self.say(f"nothing to do: {self.out_dir / 'last.pt'} {why}")
            return True
        if self.world.is_main:
            (self.out_dir / "config.yaml").write_text(yaml.safe_dump(self.cfg.to_dict(), sort_keys=False))
        return False

    def early_stop_reason(self, progress: Progress) -> str | None:
        train = self.cfg.train
        return progress.early_stop_reason(train.early_stopping_patience, train.early_stopping_min_delta)

    @property
    def evaluated(self) -> nn.Module:
        """What validation measures, best.pt is chosen by and inference uses: the average when there is one."""
        return self.ema.module if self.ema is not None else self.model

    def last_lr(self) -> float:
        return self.parts.scheduler.get_last_lr()[-1]  # the head's group: the lr that optim.lr sets

    def say(self, message: str) -> None:
        if self.world.is_main:
            print(message, flush=True)

    def close(self, status: str = "FAILED") -> None:
        """However the run ends (finished, stopped, failed): the outputs close (curves.png shows every epoch it
        finished), and the loader workers end (they ignore SIGTERM: the interpreter's exit would wait forever)."""
        try:
            self.outputs.close(status)
        finally:
            self.batches.close()
            stop_workers(self.val_loader)
            self.lock.release()
