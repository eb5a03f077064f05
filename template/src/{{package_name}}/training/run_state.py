"""What a run checkpoint holds, written down once; saving and restoring it, side by side; best.pt and keep_last.

``core/checkpoint.py`` does the file work (atomic writes, safe reads, wrapper
prefixes, random generators); this module decides what goes into the file.
Every key ``RunState.state_dict`` writes, in the order it writes them:

=================  ==========================================================  ============================
key                holds                                                       restored into
=================  ==========================================================  ============================
format_version     ``FORMAT_VERSION`` (1): a newer file is refused by name     ``read_checkpoint`` checks it
model              the plain model's state_dict: no ``module.``/``_orig_mod.``  ``RunParts.model``
optimizer          the optimizer's state_dict (moments, param groups' lr)      ``Optimization.optimizer``
scheduler          the schedule's position (a function of the step)            ``Optimization.scheduler``
scaler             fp16's gradient scaler (empty without fp16)                 ``Optimization.scaler``
epoch              completed epochs                                            ``Progress.epoch``
global_step        optimizer steps since the run began                         ``Progress.step``
best_metric        the best value of train.best_metric so far: best.pt's       ``Progress.best_metric``
                   (None before the first epoch ends)
best_val_loss      best.pt's val_loss: a tie on best_metric goes to the lower  ``Progress.best_loss``
bad_epochs         epochs without improvement (early stopping)                 ``Progress.bad_epochs``
best_by            the column and direction that chose best_metric, e.g.       ``Progress.best_by``; another
                   ``val_acc max`` (train.best_metric, train.best_mode)        choice starts the best over
epoch_totals       mid-epoch only: every process's running sums and the        ``Progress.totals`` (this
                   layout they mean something in; None at an epoch's end       process's share)
model_ema          ``train.ema_decay``: the weights' average, else None        ``RunParts.ema``
model_ema_updates  how many updates the average holds                          ``RunParts.ema``
criterion          the loss's state_dict (class weights are a buffer, P9)      ``Optimization.criterion``
rng                every random generator the run draws from                   ``set_rng_state``, last
classes            the class names, in label order                             checked: must be the same
config             the run's config as a dict                                  compared: the lr schedule
provenance         template, git, libraries, data fingerprint, the decoder     compared: a note if data or the
                   of the training images (nvjpeg or cpu)                      decoder changed
job                torchrun's ``TORCHELASTIC_RUN_ID`` (None without it)        read by ``resume_after_restart``
tracker_run_ids    each tracker's run (``{"mlflow": id}``; {} without one)      ``Outputs.start``
=================  ==========================================================  ============================

A new checkpoint field is one line in ``state_dict``, one in ``load_state_dict``
and one row above; an older file without it must still load (``state.get``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from ..core.checkpoint import (
    FORMAT_VERSION,
    cuda_rng_by_rank,
    find_resume_state,
    link_atomically,
    load_matching,
    load_model_state,
    load_scaler_state,
    rng_state,
    save_run_checkpoint,
    set_rng_state,
    torch_rng_by_rank,
)
from ..core.config import Config
from ..core.distributed import World
from ..core.errors import UserError
from ..core.provenance import data_changes, lists_changed
from .ema import WeightAverage
from .engine import EpochTotals, Optimization
from .metrics import check_best_metric
from .run_lock import holds_a_run, holds_another_run

DEFAULT_BEST = "val_acc max"  # train.best_metric and train.best_mode's defaults, and what files before them chose by


@dataclass
class Progress:
    """Where a run stands. ``RunState.restore`` returns it, ``Trainer.fit`` advances it, checkpoints save it."""

    epoch: int = 0  # completed epochs
    step: int = 0  # optimizer steps since the run began: the one step counter
    best_metric: float | None = None  # the best value of train.best_metric so far, the one best.pt holds
    best_loss: float = float("inf")  # best.pt's val_loss: it breaks a tie on best_metric (a saturated validation set)
    bad_epochs: int = 0  # epochs since best_metric last improved by more than train.early_stopping_min_delta
    best_by: str = DEFAULT_BEST  # "<train.best_metric> <train.best_mode>": what best_metric is the best of
    totals: EpochTotals | None = None  # the running sums of an unfinished epoch (None between epochs)

    @property
    def resumed(self) -> bool:
        """Restored from a checkpoint: any completed epoch or step, or an unfinished epoch's sums."""
        return bool(self.epoch or self.step or self.totals is not None)

    def state_dict(self) -> dict[str, Any]:
        """The counters (``epoch_totals`` is gathered from every process by ``RunState``)."""
        return {
            "epoch": self.epoch,
            "global_step": self.step,
            "best_metric": self.best_metric,
            "best_val_loss": self.best_loss,
            "bad_epochs": self.bad_epochs,
            "best_by": self.best_by,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.step, self.best_metric = state["epoch"], state["global_step"], state["best_metric"]
        self.bad_epochs = state.get("bad_epochs", 0)  # files from before early stopping have none
        self.best_loss = state.get("best_val_loss", float("inf"))  # files from before 0.8.0: any tie was not the best
        self.best_by = state.get("best_by", DEFAULT_BEST)  # files from before train.best_metric: val_acc's (-1: none)

    def choose_best_by(self, best_by: str) -> str | None:
        """Choose by ``best_by`` from here; another than the checkpoint's starts the best and the count over."""
        if best_by == self.best_by:
            return None
        before, self.best_by = self.best_by, best_by
        self.best_metric, self.best_loss, self.bad_epochs = None, float("inf"), 0
        return f"best.pt was chosen by {before}, from here by {best_by}: the best so far starts over"

    def record(self, value: float, val_loss: float, min_delta: float) -> bool:
        """Count an epoch's train.best_metric (``best_by``: which, and whether higher is better) for best.pt and
        early stopping; True when it is the best so far. Among equal values the lowest val_loss wins: on a
        validation set saturated early (100% from the first epoch of a fine-tuning run), accuracy alone would keep
        the first, least confident epoch. Early stopping counts the value alone: a lower loss is no rise."""
        best, higher = self.best_metric, self.best_by.endswith(" max")
        if best is None:  # the first epoch of the run (or of this choice of metric)
            is_best = improved = not math.isnan(value)
        elif higher:
            is_best = value > best or (value == best and val_loss < self.best_loss)
            improved = value > best + min_delta
        else:
            is_best = value < best or (value == best and val_loss < self.best_loss)
            improved = value < best - min_delta
        self.bad_epochs = 0 if improved else self.bad_epochs + 1
        if is_best:
            self.best_metric, self.best_loss = value, val_loss
        return is_best

    def early_stop_reason(self, patience: int, min_delta: float) -> str | None:
        if not patience or self.bad_epochs < patience:
            return None
        metric, mode = self.best_by.split()
        moved = "risen" if mode == "max" else "fallen"
        return f"early stopping: {metric} has not {moved} by more than {min_delta} for {patience} epochs"


def tracker_run_ids(state: dict[str, Any]) -> dict[str, str]:
    """Each tracker's run id in a checkpoint; files from before v0.3.0 held MLflow's alone, as ``mlflow_run_id``."""
    if "tracker_run_ids" in state:
        return dict(state["tracker_run_ids"] or {})
    return {"mlflow": state["mlflow_run_id"]} if state.get("mlflow_run_id") else {}


class TrackingRun(Protocol):
    """What the checkpoint asks of the outputs: each tracker's run id (MLflow's, yours) to continue after a resume."""

    @property
    def run_ids(self) -> dict[str, str]: ...

    def start(self, resumed_at: float | None, run_ids: dict[str, str], completed: int = 0) -> None: ...


@dataclass(kw_only=True)
class RunParts:
    """The live objects a checkpoint saves and restores, and what identifies the run's data."""

    model: nn.Module  # the plain module: never the compiled, DDP or DataParallel wrapper
    ema: WeightAverage | None
    optimization: Optimization
    device: torch.device
    cuda_ids: list[int]  # the GPUs whose generators the run draws from (each DataParallel replica's dropout)
    classes: list[str]
    provenance: dict[str, Any]
    batches_per_epoch: int  # where inside an epoch a mid-epoch checkpoint falls, for the resume mark


def sync_lr_to_schedule(scheduler: torch.optim.lr_scheduler.LambdaLR, saved_config: dict[str, Any], epochs: int) -> str:
    """After a resume with another ``train.epochs`` (or optim settings), take this step's lr from the new curve.

    Returns what to add to the resume line when the lr jumps (the user asked for more epochs, not a jump), else "".
    """
    step = scheduler.last_epoch
    curve = [base * factor(step) for base, factor in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)]
    before = [group["lr"] for group in scheduler.optimizer.param_groups]
    if curve == before:
        return ""
    # Step back one and forward one: the scheduler recomputes this step's lr from the new lambdas.
    scheduler.last_epoch -= 1
    scheduler.step()
    old_epochs = saved_config.get("train", {}).get("epochs")
    why = f"train.epochs {old_epochs} -> {epochs}" if old_epochs != epochs else "optim settings"
    after = scheduler.get_last_lr()[-1]
    return f"; the learning-rate schedule was reshaped ({why}): lr {before[-1]:.2e} -> {after:.2e} from here"


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any], path: Path) -> None:
    """The optimizer's state; other parameter groups (what trains changed since the checkpoint) in one line."""
    try:
        optimizer.load_state_dict(state["optimizer"])
    except ValueError as exc:
        saved = state.get("config", {}).get("model", {})
        raise UserError(
            f"{path}'s optimizer does not fit this run ({exc}): it was trained with model.freeze_backbone "
            f"{saved.get('freeze_backbone')} and model.unfreeze_at_epoch {saved.get('unfreeze_at_epoch') or 0}; "
            "resume with those, or start a new run from it with model.init_from"
        ) from None


class RunState:
    """The one owner of a run checkpoint: ``save`` and ``restore``, built on ``state_dict`` / ``load_state_dict``.

    Under torchrun every process restores from the same file; only the main
    process writes one, after every process has handed in its running sums.
    """

    def __init__(
        self, cfg: Config, world: World, parts: RunParts, tracking: TrackingRun, say: Callable[[str], None]
    ) -> None:
        self.cfg, self.world, self.parts, self.tracking, self.say = cfg, world, parts, tracking, say
        self.out_dir = Path(cfg.train.out_dir)
        self.best_by = f"{cfg.train.best_metric} {cfg.train.best_mode}"  # what best.pt is chosen by, as Progress says

    def state_dict(
        self,
        progress: Progress,
        per_process: list[dict[str, Any]] | None,
        cuda_by_rank: list[list[torch.Tensor]] | None = None,
        torch_by_rank: list[torch.Tensor] | None = None,
    ) -> dict[str, Any]:
        """Every key of the table above, in its order."""
        model, ema, optimization = self.parts.model, self.parts.ema, self.parts.optimization
        return {
            "format_version": FORMAT_VERSION,
            "model": model.state_dict(),  # the plain model: no module. or _orig_mod. prefix (P7)
            "optimizer": optimization.optimizer.state_dict(),
            "scheduler": optimization.scheduler.state_dict(),
            "scaler": optimization.scaler.state_dict(),
            **progress.state_dict(),  # epoch, global_step, best_metric, best_val_loss, bad_epochs, best_by
            "epoch_totals": {"per_process": per_process, "layout": self.layout_of_epoch()} if per_process else None,
            # model_ema and model_ema_updates: the average's weights and how many updates it holds (its warm-up).
            **(ema.state_dict() if ema is not None else {"model_ema": None, "model_ema_updates": 0}),
            "criterion": optimization.criterion.state_dict(),
            "rng": rng_state(self.parts.cuda_ids, cuda_by_rank, torch_by_rank),
            "classes": self.parts.classes,
            "config": self.cfg.to_dict(),
            "provenance": self.parts.provenance,
            # torchrun's job: after a restart, resume_after_restart continues only this job's own files.
            "job": os.environ.get("TORCHELASTIC_RUN_ID"),
            "tracker_run_ids": self.tracking.run_ids,
        }

    def load_state_dict(self, state: dict[str, Any], path: Path) -> Progress:
        """The same keys, loaded into this run's objects; returns the progress. Notes are printed."""
        optimization = self.parts.optimization
        saved_model = state.get("config", {}).get("model")  # a mismatch then names both models
        load_model_state(self.parts.model, state["model"], path, models=(saved_model, self.cfg.model))
        load_optimizer_state(optimization.optimizer, state, path)
        optimization.scheduler.load_state_dict(state["scheduler"])
        reshaped = sync_lr_to_schedule(optimization.scheduler, state.get("config", {}), self.cfg.train.epochs)
        if state.get("criterion"):  # files from before class weights have none
            optimization.criterion.load_state_dict(state["criterion"])
        scaler_note = load_scaler_state(optimization.scaler, state["scaler"])
        progress = Progress(totals=self.unfinished_epoch(path, state))
        progress.load_state_dict(state)
        best = progress.choose_best_by(self.best_by)  # a note when train.best_metric changed since the checkpoint
        for note in (scaler_note, self.load_average(state), self.data_note(state), self.decoder_note(state), best):
            if note:
                self.say(f"note: {note}")
        # Last: nothing after this may draw a random number before fit, or the resumed run would diverge.
        # Under DDP each rank takes its own generators back (rng["torch_by_rank"], ["cuda_by_rank"]), not rank 0's.
        set_rng_state(state["rng"], self.parts.cuda_ids, self.world.rank if self.world.distributed else None)
        within = f", step {progress.totals.batches} of epoch {progress.epoch + 1}" if progress.totals else ""
        self.say(f"resumed from {path} after epoch {progress.epoch}{within} (global step {progress.step}){reshaped}")
        return progress

    def save(self, progress: Progress, is_best: bool = False) -> Path:
        """Every process takes part (a mid-epoch file holds each one's running sums); the main process writes."""
        per_process = progress.totals.gathered(self.world) if progress.totals is not None else None
        # Collectives too: every rank's generators (DDP: each draws its own dropout), for each to take its own back.
        cuda_by_rank = cuda_rng_by_rank(self.parts.cuda_ids, self.world)
        torch_by_rank = torch_rng_by_rank(self.world)
        last = self.out_dir / "last.pt"
        if not self.world.is_main:
            return last
        try:
            state = self.state_dict(progress, per_process, cuda_by_rank, torch_by_rank)
            save_run_checkpoint(state, self.out_dir, self.cfg.train.keep_last)
            if is_best:
                link_atomically(last, self.out_dir / "best.pt")  # a hard link: best.pt costs no second write
        except OSError as exc:
            raise UserError(
                f"could not write a checkpoint in {self.out_dir} ({exc.strerror}); the previous one is intact: "
                "free some space (or set train.keep_last lower) and continue with --resume auto"
            ) from None
        return last

    def restore(self, resume: str | None) -> Progress:
        """Load the checkpoint that ``--resume`` names into this run's objects; returns where the run stands."""
        check_best_metric(self.cfg.train, self.parts.classes)  # a column no validation computes: refused now
        found = find_resume_state(resume, self.out_dir)
        if found is None:
            self.start_fresh(resume)
            self.tracking.start(None, {})
            return Progress(best_by=self.best_by)
        path, state = found
        self.check_resumable(path, state, resume)
        progress = self.load_state_dict(state, path)
        totals, epochs = progress.totals, self.cfg.train.epochs
        fraction = totals.batches / self.parts.batches_per_epoch if totals else 0.0
        # The outputs continue: metrics.jsonl marks where the run resumed, MLflow continues the same run.
        resumed_at = progress.epoch + fraction if progress.epoch < epochs else None  # None: nothing left to train
        self.tracking.start(resumed_at, tracker_run_ids(state), completed=progress.epoch)
        return progress

    def load_average(self, state: dict[str, Any]) -> str | None:
        """The weights' average (train.ema_decay); a note when it starts fresh."""
        ema = self.parts.ema
        if ema is None:
            return None
        if state.get("model_ema") is None:
            return "the checkpoint has no average of the weights: train.ema_decay starts it from these weights"
        ema.load_state_dict(state)  # the weights and the update count: the warm-up goes on where it was
        return None

    def data_note(self, state: dict[str, Any]) -> str | None:
        """Exact resume needs the same files: say what changed since the checkpoint (a warning, not a refusal)."""
        saved = state.get("provenance", {})
        changed = data_changes(saved.get("data", {}), self.parts.provenance["data"])
        # data.exclude / data.relabel written again: the files may be the same, the choice is not.
        lists = lists_changed(saved.get("lists", {}), self.parts.provenance.get("lists", {}))
        said = "; ".join(part for part in (changed, lists) if part)
        return f"the data changed since the checkpoint ({said}): the run goes on, no longer exactly" if said else None

    def decoder_note(self, state: dict[str, Any]) -> str | None:
        """The training images decoded by another decoder than the checkpoint's run used (``placement.py`` keeps
        it where it can run: it could not here), or with nvJPEG after a checkpoint that does not say which decoder
        its run used: one line, since their pixels differ by a few levels."""
        saved, now = state.get("provenance", {}).get("decoder"), self.parts.provenance.get("decoder")
        names = {"nvjpeg": "with nvJPEG on the GPU", "cpu": "on the CPU"}
        if saved is None and now == "nvjpeg":  # written before the decoder was recorded: its run's is a guess
            return (
                "the checkpoint does not record which decoder made its run's training images (it is older than "
                "that record); this run decodes them with nvJPEG on the GPU, as runs chose then wherever nvJPEG "
                "ran: if its run decoded them on the CPU, resume with --set data.decoder=cpu to keep its pixels"
            )
        if saved is None or saved == now:
            return None
        return (
            f"the checkpoint's run decoded its training images {names.get(saved, saved)}, this one decodes them "
            f"{names.get(now, now)} (the data: line says why): their pixels differ by a few levels, so the run "
            "goes on, no longer exactly"
        )

    def start_fresh(self, resume: str | None) -> None:
        if (self.out_dir / "last.pt").exists() and resume != "auto":
            raise holds_a_run(self.out_dir)
        if resume == "auto":
            self.say(f"no checkpoint in {self.out_dir}: starting a new run")
        if self.cfg.model.init_from:
            self.say(load_matching(self.parts.model, self.cfg.model.init_from, self.cfg.model.name))

    def check_resumable(self, path: Path, state: dict[str, Any], resume: str | None) -> None:
        last = self.out_dir / "last.pt"
        if resume != "auto" and last.exists() and not os.path.samefile(path, last):
            raise holds_another_run(self.out_dir, path)
        if list(state["classes"]) != self.parts.classes:
            raise UserError(
                f"{path} was trained on classes {state['classes']} but {self.cfg.data.root} has "
                f"{self.parts.classes}: resume with the same data, or fine-tune from it with model.init_from "
                "in a new train.out_dir"
            )

    def unfinished_epoch(self, path: Path, state: dict[str, Any]) -> EpochTotals | None:
        """This process's running sums from a mid-epoch checkpoint; None when it was written at an epoch's end."""
        if not state.get("epoch_totals"):
            return None
        # Files of template 1.x did not record accumulate_steps: they were written with 1.
        layout, here = {"accumulate_steps": 1, **state["epoch_totals"].get("layout", {})}, self.layout_of_epoch()
        if layout != here:
            raise UserError(
                f"{path} stopped inside an epoch with {layout}, this run has {here}: resume with the same "
                "data.batch_size and number of processes, or from a checkpoint written at an epoch's end"
            )
        return EpochTotals.from_state(state["epoch_totals"]["per_process"][self.world.rank], self.parts.device)

    def layout_of_epoch(self) -> dict[str, int]:
        """What a mid-epoch position means: batches of this size, in shards for this many processes, N to a step."""
        return {
            "batch_size": self.cfg.data.batch_size,
            "processes": self.world.size,
            "accumulate_steps": self.cfg.train.accumulate_steps,
        }
