"""MLflow tracking, when ``train.mlflow: true`` or ``MLFLOW_TRACKING_URI`` is set (the optional ``mlflow`` extra).

One MLflow run per training run, written by the main process only: the
flattened config as params, the template version and copier answers as tags,
each epoch's metrics row with step = epoch, and the run's files as artifacts
at the end. The store is a SQLite database in the project (``mlflow.db``,
browse it with ``mlflow ui --backend-store-uri sqlite:///mlflow.db``) unless
``MLFLOW_TRACKING_URI`` names another one, e.g. a team's server.

The training run talks to MLflow through ``MlflowOutput``, below,, whose run
id goes into the checkpoint, so ``--resume`` continues the same MLflow run; a
row is logged once, when its epoch ends (after its checkpoint), so a resumed
run never logs a step twice; a resumed run first logs the checkpointed rows
of metrics.jsonl its MLflow run lacks (a kill came between the two, or MLflow
was turned on at the resume). The client API is used rather than
``mlflow.start_run``: no global "active run", so a sweep can hold its own run
while each trial logs to one nested under it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import UserError
from ..core.optional import distribution_name, require
from ..core.provenance import git_commit, template_answers
from .reporting import MetricsLog
from .writers import Output

if TYPE_CHECKING:
    from ..core.config import TrainConfig

DEFAULT_URI = "sqlite:///mlflow.db"
PROBE_SECONDS = 5  # an unreachable server fails this fast, before any training
# Under torchrun the other ranks wait at the next collective while rank 0 logs an epoch: a slow server may
# hold them this long, never train.collective_timeout (which would end the job).
EPOCH_SECONDS = 5
# The run's files worth keeping with it; globs, relative to train.out_dir.
ARTIFACTS = (
    "config.yaml",
    "metrics.jsonl",
    "curves.png",
    "train_batch.png",
    "confusion_matrix*.png",
    "confusion_*_test.csv",  # the test split's confusion counts (training/holdout.py)
    "test*.json",
)

_CLIENTS: dict[str, Any] = {}  # by URI: probed once per process
# Set by a sweep around each trial: new runs are nested under this run, with this name.
_PARENT: ContextVar[tuple[str, str] | None] = ContextVar("mlflow_parent", default=None)


def enabled(train_mlflow: bool) -> bool:
    """``train.mlflow: true``, or a tracking server named in the environment (as MLflow's own tools read it)."""
    return train_mlflow or bool(os.environ.get("MLFLOW_TRACKING_URI"))


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI


@contextlib.contextmanager
def nested_under(parent_run_id: str, run_name: str) -> Iterator[None]:
    """Runs started inside this block are children of ``parent_run_id`` (MLflow's ``mlflow.parentRunId`` tag)."""
    token = _PARENT.set((parent_run_id, run_name))
    try:
        yield
    finally:
        _PARENT.reset(token)


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"optim": {"lr": 0.1}}`` -> ``{"optim.lr": "0.1"}``: the dotted keys of ``--set``, as MLflow params."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = str(value)
    return flat


def template_tags(answers: dict[str, Any], git: dict[str, Any]) -> dict[str, str]:
    """The template version (copier's ``_commit``), the answers and the project's git commit, as MLflow tags."""
    tags = {f"template.{k}": str(v) for k, v in answers.items() if not k.startswith("_")}
    if answers:
        tags["template.version"] = str(answers.get("_commit", "unknown"))
    if answers.get("_src_path"):
        tags["template.source"] = str(answers["_src_path"])
    if git.get("commit"):
        tags["mlflow.source.git.commit"] = git["commit"]  # the tag MLflow's UI shows as the source version
    return tags


@contextlib.contextmanager
def _short_http_timeouts(seconds: float = PROBE_SECONDS) -> Iterator[None]:
    """MLflow reads these at each request; by default it retries for minutes before giving up."""
    saved = {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    os.environ.update({"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(seconds)})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def preflight(cfg: TrainConfig, is_main: bool) -> None:
    """Before the data is loaded: a missing extra or an unreachable store fails in seconds, not after an epoch."""
    if is_main and enabled(cfg.mlflow):
        connect(tracking_uri())


def connect(uri: str) -> Any:
    """An ``MlflowClient`` whose store has answered: a wrong URI or a server that is down fails now, in one line."""
    require("mlflow", "mlflow", "train.mlflow")
    if uri in _CLIENTS:
        return _CLIENTS[uri]
    from mlflow import MlflowClient

    try:
        with _short_http_timeouts():
            client = MlflowClient(tracking_uri=uri)
            client.search_experiments(max_results=1)
    except Exception as exc:  # MLflow raises many kinds: connection, HTTP status, SQL, bad URI
        reason = " ".join(str(exc).split())
        reason = reason if len(reason) < 160 else reason[:157] + "..."
        raise UserError(
            f"MLflow tracking store {uri} cannot be reached ({reason}): start the server or fix "
            "MLFLOW_TRACKING_URI, or turn tracking off with --set train.mlflow=false"
        ) from None
    _CLIENTS[uri] = client
    return client


def experiment_id(client: Any) -> str:
    """MLflow's ``MLFLOW_EXPERIMENT_NAME`` if set, else this project's name; created on first use."""
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or distribution_name()
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # another process created it first
        return client.get_experiment_by_name(name).experiment_id


class MlflowRun:
    """One MLflow run, held by the main process; ``epoch(row)`` after each epoch, ``finish()`` at the end."""

    def __init__(self, client: Any, run_id: str, last_step: int = 0) -> None:
        self.client = client
        self.run_id = run_id
        self.last_step = last_step  # epochs already logged: a resume logs only later ones
        self.pending: list[Any] = []  # metrics of epochs the server did not take in time: sent with the next

    @classmethod
    def start(cls, config: dict[str, Any], run_id: str | None = None, name: str | None = None) -> MlflowRun:
        """Continue ``run_id`` (from a checkpoint) when the store has it, else start a run; log params and tags."""
        client = connect(tracking_uri())
        params = flatten(config)
        if run_id is not None and (run := _find_run(client, run_id)) is not None:
            client.update_run(run_id, status="RUNNING")
            history = client.get_metric_history(run_id, "val_loss")
            tracker = cls(client, run_id, max((m.step for m in history), default=0))
            logged = run.to_dictionary()["data"]["params"]
            changed = sorted(k for k, v in params.items() if k in logged and logged[k] != v)
            if changed:  # MLflow params are write-once; the tag says what this resume changed
                client.set_tag(run_id, "resumed_with_changed_params", ", ".join(changed))
            tracker.log_params({k: v for k, v in params.items() if k not in logged})
            return tracker
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        tags = template_tags(template_answers(), git_commit())
        parent = _PARENT.get()
        if parent is not None:
            tags[MLFLOW_PARENT_RUN_ID], name = parent
        run = client.create_run(experiment_id(client), run_name=name, tags=tags)
        tracker = cls(client, run.info.run_id)
        tracker.log_params(params)
        return tracker

    def where(self, continued: bool = False) -> str:
        """One line: the run id, its experiment and the tracking URI, so the run can be found in the UI."""
        experiment = self.client.get_experiment(self.client.get_run(self.run_id).info.experiment_id)
        how = "continues run" if continued else "run"
        return f"mlflow: {how} {self.run_id} in experiment {experiment.name!r} at {tracking_uri()}"

    def log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(key, value) for key, value in params.items()]
        for start in range(0, len(items), 100):  # MLflow takes at most 100 params per call
            self.client.log_batch(self.run_id, params=items[start : start + 100])

    def epoch(self, row: dict[str, Any]) -> None:
        """Every number of the epoch's metrics row, at step = epoch; an epoch already logged is skipped.

        With a short timeout and no retries (EPOCH_SECONDS): the other ranks
        wait meanwhile. A server that does not answer costs a warning, and the
        row is sent again with the next epoch's; metrics.jsonl has it anyway.
        """
        self.epochs([row])

    def epochs(self, rows: list[dict[str, Any]]) -> None:
        """Several rows, in order, sent together (``epoch``); those already logged are skipped."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        for row in rows:
            step = int(row["epoch"])
            if step <= self.last_step:
                continue
            numbers = {k: v for k, v in row.items() if k != "epoch" and isinstance(v, int | float)}
            self.pending += [Metric(k, float(v), now, step) for k, v in numbers.items()]
            self.last_step = step
        if not self.pending:
            return
        try:
            with _short_http_timeouts(EPOCH_SECONDS):
                while self.pending:
                    self.client.log_batch(self.run_id, metrics=self.pending[:1000])  # MLflow's limit per call
                    del self.pending[:1000]
        except Exception as exc:  # MLflow raises many kinds: connection, HTTP status, SQL
            reason = " ".join(str(exc).split())[:160]
            print(f"warning: MLflow did not take epoch {self.last_step}'s metrics in {EPOCH_SECONDS} s ({reason}): "
                  "training goes on, they are sent again after the next epoch", flush=True)  # fmt: skip

    def log_metrics(self, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, 0) for k, v in values.items()])

    def log_files(self, folder: Path, patterns: tuple[str, ...] = ARTIFACTS) -> None:
        for pattern in patterns:
            for path in sorted(folder.glob(pattern)):
                self.client.log_artifact(self.run_id, str(path))

    def finish(self, status: str = "FINISHED") -> None:
        """FINISHED, FAILED, or KILLED for a run that stopped to be resumed."""
        self.client.set_terminated(self.run_id, status=status)


def _find_run(client: Any, run_id: str) -> Any:
    """The run, or None when this store does not hold it (e.g. the checkpoint came from another machine)."""
    try:
        run = client.get_run(run_id)
    except Exception:
        return None
    return run if run.info.lifecycle_stage == "active" else None


class MlflowOutput(Output):
    """``train.mlflow``: one MLflow run per training run; each row once, at its epoch's end; the files at the end.

    A checkpoint's run id continues that run (a resumed run never logs an
    epoch twice); otherwise a new run starts, and its id goes into every
    checkpoint from then on (``run_id``, asked by ``RunState.save``).
    """

    tracker = "mlflow"

    def __init__(self, config: dict[str, Any], name: str, out_dir: Path, log: MetricsLog) -> None:
        self.config, self.name, self.out_dir, self.log = config, name, out_dir, log
        self.run: MlflowRun | None = None

    @property  # type: ignore[override]
    def run_id(self) -> str | None:
        return self.run.run_id if self.run is not None else None

    def start(self, resumed_at: float | None, run_id: str | None, completed: int = 0) -> None:
        self.run = MlflowRun.start(self.config, run_id, name=self.name)
        # Where to look, before the first epoch: the run id, its experiment and the tracking URI.
        print(self.run.where(continued=run_id == self.run.run_id), flush=True)
        # A kill between an epoch's checkpoint and its row here left the row in metrics.jsonl alone: the
        # checkpointed epochs the run lacks are logged now, in one batch (those it has are skipped, a row ahead
        # of the checkpoint waits). MLflow turned on at a resume gets the run's earlier epochs so too.
        self.run.epochs([row for row in self.log.rows() if row["epoch"] <= completed])

    def epoch(self, row: dict[str, Any], learning_rates: dict[str, float]) -> None:
        if self.run is not None:
            self.run.epoch(row)

    def close(self, status: str) -> None:
        if self.run is not None:
            self.run.log_files(self.out_dir)
            self.run.finish(status)
