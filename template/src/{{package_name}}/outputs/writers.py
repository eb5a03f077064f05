"""Where a run's numbers and pictures go: metrics.jsonl, curves.png, train_batch.png, TensorBoard, MLflow.

Each destination is an ``Output`` with the same few methods, and
``build_outputs`` makes the list from the config; the trainer calls the list
and names no backend. A new logger is one class here and one line in
``build_outputs``. Only the main process writes: on the others the list is empty.

The calls, in the order a run makes them: ``start`` once after the
checkpoint is restored (or a fresh run begins), ``begin`` once the run knows
where it stands, ``images`` with the first step's batch, ``record`` before
each epoch's checkpoint and ``epoch`` after it, ``close`` on every way out
(``FINISHED``, ``KILLED`` when stopped to be resumed, ``FAILED``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..core.config import Config
from ..core.parts import present
from .reporting import MetricsLog, draw_curves, save_sample_grid, target_labels
from .tensorboard_log import TensorBoardLog

# Seconds between drawings of curves.png, counted from when the run's outputs are set up (once its data is): the
# last epoch always draws. A drawing costs
# 0.2 to 0.3 CPU-seconds (a third of a test-sized run), spent on rank 0 while the other ranks wait at the next
# collective; a curve of one point after the first quick epoch would say little.
CURVES_EVERY = 30.0


class Output:
    """One destination; each method does nothing unless a destination needs it."""

    # A tracker (MLflow, or yours) names itself here: its run id is saved in checkpoints under that name
    # (``tracker_run_ids``) and handed back to ``start`` on a resume, so that it continues its own run.
    tracker: str | None = None
    run_id: str | None = None

    def start(self, resumed_at: float | None, run_id: str | None, completed: int = 0) -> None:
        """The run starts: fresh, or resumed at ``resumed_at`` epochs (fractional inside an epoch; None for a
        run with nothing left to train), from a checkpoint of ``completed`` epochs; ``run_id`` is the one this
        output's ``tracker`` saved in that checkpoint (None for a fresh run or an output that tracks nothing)."""

    def begin(self, epoch: int) -> None:
        """The run goes on after ``epoch`` completed epochs (or ends there, with nothing left to train): rows of
        later epochs are not the run's, and those it trains will be written again."""

    def record(self, row: dict[str, Any]) -> None:
        """An epoch's metrics row, before its checkpoint is written: for records a resume truncates (``begin``).

        A crash between the two then leaves a row past the checkpoint, which the resumed run drops and writes
        again; the other order would leave a checkpoint whose row is never written."""

    def epoch(self, row: dict[str, Any], learning_rates: dict[str, float]) -> None:
        """An epoch's metrics row, after its checkpoint is written (logged once: never for an epoch trained
        again); the lr of each parameter group."""

    def images(self, images: torch.Tensor, targets: torch.Tensor) -> None:
        """A batch as the model sees it (mixed, when mixing), with its labels (soft, when mixing)."""

    def close(self, status: str) -> None:
        """The run ends; ``status`` is FINISHED, KILLED or FAILED."""


class MetricsOutput(Output):
    """``metrics.jsonl``, one row per epoch, and ``resumes.jsonl``: where the run was resumed."""

    def __init__(self, log: MetricsLog) -> None:
        self.log = log

    def start(self, resumed_at: float | None, run_id: str | None, completed: int = 0) -> None:
        if resumed_at is not None:
            self.log.mark_resume(resumed_at)

    def begin(self, epoch: int) -> None:
        self.log.truncate_after(epoch)  # rows of epochs this run will train again (and one a crash left ahead)

    def record(self, row: dict[str, Any]) -> None:
        self.log.append(row)


class CurvesOutput(Output):
    """``curves.png``: at most every ``CURVES_EVERY`` seconds from when it is made (the run's outputs, once its data
    is set up), at the last epoch and at the end; it then shows every epoch the run finished, however it ended. A
    run of quick epochs draws once."""

    def __init__(self, log: MetricsLog, path: Path, epochs: int) -> None:
        self.log, self.path, self.epochs = log, path, epochs
        # When it was last drawn (made now: the first drawing waits too), and whether rows came since.
        self.drawn, self.stale = time.perf_counter(), False
        self.note: str | None = None

    def start(self, resumed_at: float | None, run_id: str | None, completed: int = 0) -> None:
        # A resumed run draws at its end, even with nothing to train: a kill may have come before the last drawing.
        self.stale = completed > 0

    def epoch(self, row: dict[str, Any], learning_rates: dict[str, float]) -> None:
        self.stale = True
        last = row["epoch"] == self.epochs or "stop_reason" in row  # drawn before MLflow takes the files
        if last or time.perf_counter() - self.drawn >= CURVES_EVERY:
            self.draw()

    def close(self, status: str) -> None:
        if self.stale:
            self.draw()

    def draw(self) -> None:
        self.drawn, self.stale = time.perf_counter(), False
        note = draw_curves(self.log.rows(), self.path, self.log.resumes())
        if note and not self.note:  # said once: matplotlib is missing
            self.note = note
            print(f"note: no curves.png: {note}", flush=True)


class GridOutput(Output):
    """P15: ``train_batch.png``, the first batch as the model sees it, each image labelled with its class."""

    def __init__(self, path: Path, classes: Sequence[str]) -> None:
        self.path, self.classes = path, classes

    def images(self, images: torch.Tensor, targets: torch.Tensor) -> None:
        save_sample_grid(images, self.path, target_labels(targets, self.classes))  # soft labels: both classes


class TensorBoardOutput(Output):
    """``train.tensorboard``: scalars per epoch, the batch picture and the config, in ``out_dir/tensorboard``.

    A kill in the instant between an epoch's checkpoint and its scalars loses that epoch's point here (the
    events hold no learning rates per group to rebuild it from); metrics.jsonl and MLflow keep it."""

    def __init__(self, out_dir: Path, config: dict[str, Any]) -> None:
        self.board = TensorBoardLog(out_dir, config)

    def epoch(self, row: dict[str, Any], learning_rates: dict[str, float]) -> None:
        self.board.epoch(row, learning_rates)

    def images(self, images: torch.Tensor, targets: torch.Tensor) -> None:
        self.board.batch(images)

    def close(self, status: str) -> None:
        self.board.close()


class Outputs:
    """The list the trainer talks to: each call goes to every output, in order."""

    def __init__(self, outputs: Sequence[Output], pictures_wanted: bool) -> None:
        self.outputs = list(outputs)
        self.pictures_wanted = pictures_wanted  # once per run folder: a resumed run keeps the first picture
        self.resumed_run_ids: dict[str, str] = {}

    @property
    def run_ids(self) -> dict[str, str]:
        """Each tracker's run, to save in checkpoints; a tracker off in this run keeps the id the checkpoint held."""
        live = {output.tracker: output.run_id for output in self.outputs if output.tracker and output.run_id}
        return {**self.resumed_run_ids, **live}

    def start(self, resumed_at: float | None, run_ids: dict[str, str], completed: int = 0) -> None:
        self.resumed_run_ids = dict(run_ids)
        for output in self.outputs:
            output.start(resumed_at, run_ids.get(output.tracker) if output.tracker else None, completed)

    def begin(self, epoch: int) -> None:
        for output in self.outputs:
            output.begin(epoch)

    def record(self, row: dict[str, Any]) -> None:
        for output in self.outputs:
            output.record(row)

    def epoch(self, row: dict[str, Any], learning_rates: dict[str, float]) -> None:
        for output in self.outputs:
            output.epoch(row, learning_rates)

    def images(self, images: torch.Tensor, targets: torch.Tensor) -> None:
        """Called at every optimizer step; only the first one of a run folder makes pictures (cheap otherwise)."""
        if not self.pictures_wanted:
            return
        for output in self.outputs:
            output.images(images, targets)
        self.pictures_wanted = False

    def close(self, status: str) -> None:
        """Every output is closed, even when one fails (the first failure is raised after)."""
        failure: Exception | None = None
        for output in self.outputs:
            try:
                output.close(status)
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure


def build_outputs(cfg: Config, is_main: bool, classes: Sequence[str]) -> Outputs:
    """The outputs the config asks for, in the order they are called; none on the processes that do not write."""
    if not is_main:
        return Outputs([], pictures_wanted=False)
    out_dir = Path(cfg.train.out_dir)
    log = MetricsLog(out_dir / "metrics.jsonl")
    outputs: list[Output] = [MetricsOutput(log)]
    if cfg.train.pictures:  # off: no drawing, and no matplotlib import (some 1.5 CPU-seconds a run)
        # curves.png comes before MLflow, whose close takes the run's files as they are then.
        outputs.append(CurvesOutput(log, out_dir / "curves.png", cfg.train.epochs))
        outputs.append(GridOutput(out_dir / "train_batch.png", classes))
    if cfg.train.tensorboard:
        outputs.append(TensorBoardOutput(out_dir, cfg.to_dict()))
    if mlflow_wanted(cfg.train.mlflow):
        from .tracking import MlflowOutput  # the mlflow part, imported where the run asks for it

        outputs.append(MlflowOutput(cfg.to_dict(), cfg.train.out_dir, out_dir, log))
    return Outputs(outputs, pictures_wanted=not (out_dir / "train_batch.png").exists())


def mlflow_wanted(train_mlflow: bool) -> bool:
    """``train.mlflow`` or ``MLFLOW_TRACKING_URI``, in a project that holds the mlflow part (core/parts.py)."""
    if not present("mlflow"):
        return False  # without the part, MLflow's environment is none of this project's business
    from .tracking import enabled

    return enabled(train_mlflow)
