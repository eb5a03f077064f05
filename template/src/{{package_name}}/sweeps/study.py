"""The study and the trial loop: storage, asking Optuna for trials, training each one.

The study lives in a database (default: SQLite in ``train.out_dir``), not in
this process: a sweep that was killed continues with the same command, and
several processes or machines pointed at one ``--storage`` share the study.
Every running trial beats a heartbeat into the database; a trial whose process
died (SIGKILL, a lost machine) goes stale, is marked failed and queued again
with the same parameters (Optuna's ``RetryHeartbeatStaleTrialCallback``), and
the retry resumes that trial's folder from its checkpoint. SIGTERM does the
same at once: the trial checkpoints and is queued again before the process
exits. SQLite rather than Optuna's journal file because the journal storage
has no heartbeat, so a killed trial would stay "running" forever; and the
same code then works with PostgreSQL or MySQL for several machines.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from ..core.config import Config, config_from_dict
from ..core.config_files import set_dotted
from ..core.errors import UserError
from ..outputs.reporting import MetricsLog
from ..training.preemption import Preempted
from .cleanup import free_memory, sticky_cuda_error
from .ranks import Ranks
from .space import Space

# Seconds between two looks at the study while the last trials run in other processes: their end is seen within a
# second, not a heartbeat (a long heartbeat, which a busy machine's trials need, then costs no wait).
WAIT_S = 1.0


class TrialFailed(Exception):
    """A trial's own error: recorded on the trial (user attr ``error``), and the sweep goes on.

    A ``UserError`` is not one of these: bad input ends the sweep in one line.
    """


def open_storage(url: str, heartbeat_seconds: int) -> Any:
    """Optuna's RDB storage with a heartbeat: a trial whose process died goes stale and is queued again."""
    import sqlalchemy
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)

    def connect() -> Any:
        return RDBStorage(
            url,
            engine_kwargs={"connect_args": {"timeout": 60}} if url.startswith("sqlite") else None,  # wait for locks
            heartbeat_interval=heartbeat_seconds,
            grace_period=2 * heartbeat_seconds,
            heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(inherit_intermediate_values=True),
        )

    for pause in (1, 2):
        try:
            return connect()
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError):  # processes started together
            # race to create the tables and to stamp their version; the loser finds them made
            time.sleep(pause)
    return connect()


def open_study(storage_url: str, study_name: str, space: Space) -> Any:
    """Create the study, or load it to continue or to share it; a storage that cannot be opened is one line."""
    import optuna

    try:
        study = optuna.create_study(
            storage=open_storage(storage_url, space.heartbeat_seconds),
            study_name=study_name,
            direction=space.direction,
            # Steps are epochs from 1; Optuna prunes from step n_warmup_steps on.
            pruner=optuna.pruners.MedianPruner(space.startup_trials, space.warmup_epochs + 1),
            load_if_exists=True,
        )
    except Exception as exc:  # a folder that cannot be made; SQLAlchemy: bad URL, missing driver, server down
        reason = " ".join(str(exc).split())[:200]
        raise UserError(
            f"cannot open the study storage {storage_url} ({reason}): pass --storage with a database URL "
            "such as sqlite:///runs/sweep.db or postgresql://user@host/db"
        ) from None
    if study.direction.name.lower() != space.direction:
        raise UserError(
            f"study {study_name} in {storage_url} was made to {study.direction.name.lower()}, the space's metric "
            f"{space.metric} must {space.direction}: use another --study name"
        )
    return study


def counted(trials: list[Any]) -> list[Any]:
    """The trials that count toward ``--trials``: not replaced by a retry, not surplus."""
    from optuna.storages import RetryHeartbeatStaleTrialCallback as Retry

    replaced = {n for t in trials for n in Retry.retry_history(t)}
    return [t for t in trials if t.number not in replaced and not t.user_attrs.get("surplus")]


def trial_dir(sweep_dir: Path, frozen: Any) -> Path:
    """A retry continues its original trial's folder (and so its checkpoint)."""
    from optuna.storages import RetryHeartbeatStaleTrialCallback as Retry

    original = Retry.retried_trial_number(frozen)
    return sweep_dir / "trials" / str(frozen.number if original is None else original)


def suggest(trial: Any, key: str, distribution: Any) -> Any:
    """Optuna's public ``suggest_*`` for the distribution; a retried trial gets its original values back."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(key, distribution.choices)
    low, high, step, log = distribution.low, distribution.high, distribution.step, distribution.log
    if isinstance(distribution, IntDistribution):
        return trial.suggest_int(key, low, high, step=step, log=log)
    return trial.suggest_float(key, low, high, step=step, log=log)


def end_on_sticky_cuda_error(number: int, error: Exception) -> None:
    """A CUDA error that breaks this process's GPU would fail every later trial: end the sweep in one line."""
    sticky = sticky_cuda_error(error)
    if sticky is not None:
        raise UserError(
            f"trial {number} hit a CUDA error that leaves this process's GPU unusable ({sticky}): the sweep stops; "
            "run the same command again to continue with the remaining trials"
        ) from None


class Sweep:
    """One process's part in a study: run trials until the study holds ``trials`` of them.

    Under torchrun this is rank 0: it alone talks to Optuna, and ``ranks`` sends
    each trial's config and each pruning decision to the other ranks.
    """

    def __init__(
        self,
        base: Config,
        space: Space,
        trials: int,
        storage: str | None = None,
        study_name: str = "sweep",
        ranks: Ranks | None = None,
    ) -> None:
        self.base = base.to_dict()
        self.space = space
        self.trials = trials
        self.dir = Path(base.train.out_dir)
        self.storage = storage or f"sqlite:///{self.dir / 'optuna.db'}"
        self.study = open_study(self.storage, study_name, space)
        self.ranks = ranks or Ranks.alone()
        self.tracker: Any = None  # the sweep's MLflow run, with train.mlflow
        self.trial_config: Config | None = None  # the last trial's config: what to free after it

    def config_for(self, params: dict[str, Any], out_dir: Path | str) -> Config:
        raw = json.loads(json.dumps(self.base))
        for key, value in params.items():
            set_dotted(raw, key, self.space.decode(key, value))
        set_dotted(raw, "train.out_dir", str(out_dir))
        return config_from_dict(raw)

    def frozen(self, number: int) -> Any:
        return next(t for t in self.study.get_trials(deepcopy=False) if t.number == number)

    def objective(self, trial: Any) -> float:
        import optuna
        from optuna.storages import RetryHeartbeatStaleTrialCallback as Retry

        from ..training.trainer import train

        frozen = self.frozen(trial.number)
        if Retry.retried_trial_number(frozen) is None:
            earlier = [t for t in counted(self.study.get_trials(deepcopy=False)) if t.number < trial.number]
            if len(earlier) >= self.trials:  # another process filled the study while this one asked for a trial
                trial.set_user_attr("surplus", True)
                raise optuna.TrialPruned("surplus: the study already holds its trials")
        params = {key: suggest(trial, key, dist) for key, dist in self.space.params.items()}
        out_dir = trial_dir(self.dir, frozen)
        trial.set_user_attr("out_dir", str(out_dir))
        metric, cfg, pruned_at = self.space.metric, self.config_for(params, out_dir), []
        self.trial_config = cfg
        # Under torchrun the other ranks train this same config with rank 0, as one DDP job.
        self.ranks.send(cfg.to_dict())

        def epoch_end(row: dict[str, Any]) -> bool:
            """Report the epoch; True (stop training) when the pruner says so before the last epoch."""
            trial.report(row[metric], row["epoch"])
            if row["epoch"] < cfg.train.epochs and trial.should_prune():
                pruned_at.append(row["epoch"])
            # Every rank must stop at the same epoch, or the others would wait at a collective forever.
            return bool(self.ranks.send(bool(pruned_at)))

        try:
            with self.nested(trial.number):
                train(cfg, resume="auto", epoch_end=epoch_end)
        except Preempted:
            Retry(inherit_intermediate_values=True)(self.study, self.frozen(trial.number))  # resumed next time
            raise
        except UserError:  # bad input (data.root, a file...): every other trial would fail the same way
            raise
        except Exception as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__
            trial.set_user_attr("error", message)
            end_on_sticky_cuda_error(trial.number, exc)
            raise TrialFailed(message) from None
        rows = MetricsLog(out_dir / "metrics.jsonl").rows()
        trial.set_user_attr("epochs", len(rows))
        if pruned_at:
            raise optuna.TrialPruned(f"pruned after epoch {pruned_at[0]}")
        values = [row[metric] for row in rows]
        return max(values) if self.space.direction == "maximize" else min(values)

    def nested(self, number: int) -> Any:
        """With MLflow on, the trial's training run is a child of the sweep's run."""
        if self.tracker is None:
            return contextlib.nullcontext()
        from ..outputs.tracking import nested_under

        return nested_under(self.tracker.run_id, f"trial {number}")

    def run(self) -> None:
        """Ask for trials one at a time until the study is full, then wait for other processes' running ones."""
        from optuna.storages import fail_stale_trials
        from optuna.trial import TrialState

        waiting_said = False
        while True:
            fail_stale_trials(self.study)  # trials of dead processes are queued again (WAITING)
            trials = self.study.get_trials(deepcopy=False)
            queued = any(t.state == TrialState.WAITING for t in trials)
            if len(counted(trials)) >= self.trials and not queued:
                running = [t.number for t in counted(trials) if t.state == TrialState.RUNNING]
                if not running:
                    return
                if not waiting_said:
                    print(f"waiting for running trials {running} (other processes, or stale ones to take over)")
                    waiting_said = True
                time.sleep(min(self.space.heartbeat_seconds, WAIT_S))
                continue
            self.trial_config = None
            self.study.optimize(self.objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=True)
            if self.trial_config is not None:
                free_memory(self.trial_config.train)  # the next trial starts with the memory this one held

    def start_tracking(self) -> None:
        """The sweep's own MLflow run, one per study (its id kept in the study), parent of every trial's run."""
        from ..outputs.tracking import MlflowRun

        run_id = self.study.user_attrs.get("mlflow_run_id")
        space = {f"space.{k}": repr(v) for k, v in self.space.params.items()}
        self.tracker = MlflowRun.start({**self.base, **space}, run_id, name=f"sweep {self.study.study_name}")
        if run_id is None:
            self.study.set_user_attr("mlflow_run_id", self.tracker.run_id)

    def best(self) -> Any:
        from optuna.trial import TrialState

        complete = [t for t in self.study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
        return self.study.best_trial if complete else None
