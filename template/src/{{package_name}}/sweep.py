"""Hyperparameter sweeps with Optuna (the optional ``sweep`` extra).

``python -m <package> sweep --config configs/default.yaml --space configs/sweep.yaml --trials N``

``configs/sweep.yaml`` maps dotted config keys to Optuna distributions. Each
trial is a full training run in ``train.out_dir/trials/<number>`` that reports
the validation metric after every epoch, so ``MedianPruner`` can stop a poor
one early. A failed or pruned trial is recorded and the sweep goes on.

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
import csv
import dataclasses
import difflib
import json
import logging
import math
import shlex
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .config import Config, config_from_dict, load_config, set_dotted, yaml_problem
from .errors import UserError
from .optional import require
from .preemption import Preempted
from .reporting import MetricsLog

METRICS = {"val_acc": "maximize", "val_loss": "minimize"}  # what a trial reports and the study optimizes
SPACE_KEYS = ("metric", "heartbeat_seconds", "pruner", "params")
KINDS = ("float", "int", "categorical")


class TrialFailed(Exception):
    """A trial's own error: recorded on the trial (user attr ``error``), and the sweep goes on.

    A ``UserError`` is not one of these: bad input ends the sweep in one line.
    """


class OneLineLogs(logging.Filter):
    """Optuna logs a failed trial with its traceback; its message already names the error."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text = None, None
        return True


@dataclass
class Space:
    """The parsed ``sweep.yaml``: Optuna distributions by dotted config key, and how to run the study."""

    params: dict[str, Any]  # key -> optuna.distributions.BaseDistribution
    metric: str = "val_acc"
    heartbeat_seconds: int = 10  # a trial silent for twice this long is stale: failed, then retried
    startup_trials: int = 5  # MedianPruner prunes nothing until this many trials completed
    warmup_epochs: int = 1  # ... nor in a trial's first warmup_epochs epochs
    yaml_choices: set[str] = field(default_factory=set)  # categorical keys whose choices are lists (YAML text)

    @property
    def direction(self) -> str:
        return METRICS[self.metric]

    def decode(self, key: str, value: Any) -> Any:
        return yaml.safe_load(value) if key in self.yaml_choices else value


def config_keys(node: Any = None, prefix: str = "") -> list[str]:
    """Every dotted key a sweep may set: the leaves of the config dataclasses."""
    node = Config() if node is None else node
    keys = []
    for item in dataclasses.fields(node):
        value = getattr(node, item.name)
        if dataclasses.is_dataclass(value):
            keys += config_keys(value, f"{prefix}{item.name}.")
        elif item.name != "version":
            keys.append(f"{prefix}{item.name}")
    return keys


def number(where: str, value: Any, integer: bool = False) -> float | int:
    """A bound from YAML (which reads ``1e-3`` as text), or a one-line error."""
    try:
        parsed = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        parsed = math.nan
    if not math.isfinite(parsed) or (integer and parsed != int(parsed)):
        kind = "a whole number" if integer else "a number"
        raise UserError(f"{where} must be {kind}, got {value!r}")
    return int(parsed) if integer else parsed


def parse_param(key: str, spec: Any, where: str, base: dict[str, Any]) -> tuple[Any, bool]:
    """One entry of ``params:`` as an Optuna distribution; True when its choices are lists kept as YAML text."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    where = f"{where}: {key}"
    if not isinstance(spec, dict) or spec.get("type") not in KINDS:
        example = "{type: float, low: 0.001, high: 0.1}"
        raise UserError(f"{where} needs type: float, int or categorical, e.g. {example}")
    kind = spec["type"]
    allowed = {"type", "choices"} if kind == "categorical" else {"type", "low", "high", "log", "step"}
    if unknown := sorted(set(spec) - allowed):
        raise UserError(f"{where} has unknown field {unknown[0]}: a {kind} takes {', '.join(sorted(allowed))}")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise UserError(f"{where} has no choices: give a non-empty list, e.g. choices: [sgd, adamw]")
        check_values(key, choices, where, base)
        as_yaml = any(isinstance(c, list | dict) for c in choices)  # Optuna stores scalars only
        if as_yaml:
            choices = [format_value(c) for c in choices]  # JSON is YAML: decode() reads it back
        return CategoricalDistribution(choices), as_yaml
    if "low" not in spec or "high" not in spec:
        raise UserError(f"{where} needs low and high, e.g. type: {kind}, low: 1, high: 10")
    low = number(f"{where} low", spec["low"], integer=kind == "int")
    high = number(f"{where} high", spec["high"], integer=kind == "int")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise UserError(f"{where} log must be true or false, got {log!r}")
    if low >= high:
        raise UserError(f"{where} low ({low}) must be less than high ({high})")
    if log and low <= 0:
        raise UserError(f"{where} has log: true with low {low}: a log scale needs low > 0")
    step = spec.get("step")
    if step is not None:
        step = number(f"{where} step", step, integer=kind == "int")
        if step <= 0 or log:
            raise UserError(f"{where} step must be > 0 and cannot be combined with log: true")
    check_values(key, [low, high], where, base)
    if kind == "int":
        return IntDistribution(int(low), int(high), log=log, step=int(step or 1)), False
    return FloatDistribution(low, high, log=log, step=step), False


def check_values(key: str, values: list[Any], where: str, base: dict[str, Any]) -> None:
    """Each bound or choice must make a valid config, or every trial would fail the same way."""
    for value in values:
        raw = json.loads(json.dumps(base))
        set_dotted(raw, key, value)
        try:
            config_from_dict(raw)
        except UserError as error:
            raise UserError(f"{where}: {value!r} is not a valid value ({error})") from None


def load_space(path: str | Path, base: dict[str, Any]) -> Space:
    """Read and check ``sweep.yaml`` against the config the trials start from."""
    require("optuna", "sweep", "the sweep command")
    path = Path(path)
    if not path.is_file():
        raise UserError(f"search space {path} not found: pass --space with a file like configs/sweep.yaml")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"search space {yaml_problem(path, exc)}: fix its syntax") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("params"), dict) or not raw["params"]:
        raise UserError(f"search space {path} needs a params: mapping of dotted config keys, e.g. optim.lr")
    if unknown := sorted(set(raw) - set(SPACE_KEYS)):
        raise UserError(f"search space {path} has unknown section {unknown[0]}: use {', '.join(SPACE_KEYS)}")
    metric = raw.get("metric", "val_acc")
    if metric not in METRICS:
        raise UserError(f"{path}: metric is {metric!r}: choose one of {', '.join(METRICS)}")
    pruner = raw.get("pruner") or {}
    if not isinstance(pruner, dict) or set(pruner) - {"startup_trials", "warmup_epochs"}:
        raise UserError(f"{path}: pruner takes startup_trials and warmup_epochs, e.g. startup_trials: 5")
    keys = config_keys()
    params: dict[str, Any] = {}
    yaml_choices = set()
    for key, spec in raw["params"].items():
        if key not in keys:
            close = difflib.get_close_matches(str(key), keys, n=1)
            hint = f"did you mean {close[0]}?" if close else "use a dotted key of configs/default.yaml, e.g. optim.lr"
            raise UserError(f"{path}: unknown config key {key}: {hint}")
        if key == "train.out_dir":
            raise UserError(f"{path}: train.out_dir cannot be searched: each trial gets out_dir/trials/<number>")
        params[key], as_yaml = parse_param(key, spec, str(path), base)
        if as_yaml:
            yaml_choices.add(key)
    heartbeat = number(f"{path}: heartbeat_seconds", raw.get("heartbeat_seconds", 10), integer=True)
    startup = number(f"{path}: pruner startup_trials", pruner.get("startup_trials", 5), integer=True)
    warmup = number(f"{path}: pruner warmup_epochs", pruner.get("warmup_epochs", 1), integer=True)
    if heartbeat < 1 or startup < 0 or warmup < 0:
        raise UserError(f"{path}: heartbeat_seconds must be >= 1, pruner values >= 0")
    return Space(params, metric, int(heartbeat), int(startup), int(warmup), yaml_choices)


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


def format_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


class Sweep:
    """One process's part in a study: run trials until the study holds ``trials`` of them, then report."""

    def __init__(
        self,
        base: Config,
        space: Space,
        trials: int,
        storage: str | None = None,
        study_name: str = "sweep",
        command: tuple[str, list[str], list[str]] = (f"python -m {__package__}", [], []),
    ) -> None:
        self.base = base.to_dict()
        self.space = space
        self.trials = trials
        self.dir = Path(base.train.out_dir)
        self.storage = storage or f"sqlite:///{self.dir / 'optuna.db'}"
        self.study = open_study(self.storage, study_name, space)
        self.command = command  # program, --config, --set: how the summary tells to train with the best params
        self.tracker: Any = None  # the sweep's MLflow run, with train.mlflow

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

        from .trainer import train

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

        def epoch_end(row: dict[str, Any]) -> bool:
            """Report the epoch; True (stop training) when the pruner says so before the last epoch."""
            trial.report(row[metric], row["epoch"])
            if row["epoch"] < cfg.train.epochs and trial.should_prune():
                pruned_at.append(row["epoch"])
            return bool(pruned_at)

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
        from .tracking import nested_under

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
                time.sleep(self.space.heartbeat_seconds)
                continue
            self.study.optimize(self.objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=True)

    def start_tracking(self) -> None:
        """The sweep's own MLflow run, one per study (its id kept in the study), parent of every trial's run."""
        from .tracking import MlflowRun

        run_id = self.study.user_attrs.get("mlflow_run_id")
        space = {f"space.{k}": repr(v) for k, v in self.space.params.items()}
        self.tracker = MlflowRun.start({**self.base, **space}, run_id, name=f"sweep {self.study.study_name}")
        if run_id is None:
            self.study.set_user_attr("mlflow_run_id", self.tracker.run_id)

    def results(self) -> list[dict[str, Any]]:
        trials = self.study.get_trials(deepcopy=False)
        continued = {n: t.number for t in trials for n in t.system_attrs.get("retry_history", [])}
        rows = []
        for t in trials:
            rows.append(
                {
                    "number": t.number,
                    "state": t.state.name,
                    "value": "" if t.value is None else t.value,
                    **{f"params.{k}": format_value(v) for k, v in t.params.items()},
                    "epochs": t.user_attrs.get("epochs", len(t.intermediate_values)),
                    "seconds": round(t.duration.total_seconds(), 1) if t.duration else "",
                    "out_dir": t.user_attrs.get("out_dir", ""),
                    "note": f"stopped; continued as trial {continued[t.number]}" if t.number in continued else note(t),
                }
            )
        return rows

    def write_outputs(self) -> list[Path]:
        """sweep_results.csv, best_config.yaml and the plots, in the sweep's folder."""
        self.dir.mkdir(parents=True, exist_ok=True)
        rows = self.results()
        columns = list(dict.fromkeys(k for row in rows for k in ("number", "state", "value", *row)))
        csv_path = self.dir / "sweep_results.csv"
        with csv_path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        written = [csv_path]
        if self.best() is not None:
            best = self.config_for(self.best().params, self.dir / "best")
            path = self.dir / "best_config.yaml"
            path.write_text(yaml.safe_dump(best.to_dict(), sort_keys=False))
            written.append(path)
        written += self.plots()
        return written

    def best(self) -> Any:
        from optuna.trial import TrialState

        complete = [t for t in self.study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
        return self.study.best_trial if complete else None

    def plots(self) -> list[Path]:
        """Optuna's own matplotlib plots; without matplotlib, or with too few trials, a note instead."""
        if self.best() is None:
            return []
        try:
            require("matplotlib", "plots", "the sweep's plots")
            import matplotlib

            if "matplotlib.pyplot" not in sys.modules:
                matplotlib.use("Agg")  # files only, never a window
            import matplotlib.pyplot as plt
            from optuna.importance import PedAnovaImportanceEvaluator
            from optuna.visualization import matplotlib as optuna_plots
        except UserError as missing:
            print(f"note: no plots: {missing}")
            return []
        written = []
        drawings = {
            "optimization_history.png": lambda: optuna_plots.plot_optimization_history(self.study),
            # PED-ANOVA needs only NumPy (the default, fANOVA, needs scikit-learn)
            "param_importances.png": lambda: optuna_plots.plot_param_importances(
                self.study, evaluator=PedAnovaImportanceEvaluator()
            ),
        }
        for name, draw in drawings.items():
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # "importances will be equal" with few trials
                    axes = draw()
            except (ValueError, RuntimeError) as reason:  # e.g. importances of fewer than two complete trials
                print(f"note: no {name}: {' '.join(str(reason).split())}")
                continue
            axes.figure.set_size_inches(8, 5)
            axes.figure.savefig(self.dir / name, dpi=120, bbox_inches="tight")
            plt.close(axes.figure)
            written.append(self.dir / name)
        return written

    def summary(self, written: list[Path]) -> str:
        states = [t.state.name.lower() for t in counted(self.study.get_trials(deepcopy=False))]
        counts = ", ".join(f"{states.count(s)} {s}" for s in ("complete", "pruned", "fail") if states.count(s))
        lines = [f"study {self.study.study_name} in {self.storage}: {len(states)} trials ({counts})"]
        best = self.best()
        if best is None:
            lines.append("no trial completed: see the errors in sweep_results.csv")
        else:
            where = best.user_attrs["out_dir"]
            lines.append(f"best: trial {best.number}, {self.space.metric} {best.value:.4f}, in {where}")
            program, configs, overrides = self.command
            best_sets = [f"{k}={format_value(self.space.decode(k, v))}" for k, v in best.params.items()]
            best_sets.append(f"train.out_dir={self.dir / 'best'}")
            replaced = {item.partition("=")[0] for item in best_sets}
            kept = [item for item in overrides if item.partition("=")[0].strip() not in replaced]
            words = [program, "train", *[part for path in configs for part in ("--config", shlex.quote(path))]]
            words += [part for item in [*kept, *best_sets] for part in ("--set", shlex.quote(item))]
            lines.append(f"train with the best params: {' '.join(words)}")
            lines.append(f"  or: {program} train --config {self.dir / 'best_config.yaml'}")
        lines.append("wrote " + ", ".join(str(p) for p in written))
        return "\n".join(lines)


def note(trial: Any) -> str:
    if trial.user_attrs.get("surplus"):
        return "surplus: the study was full when this process asked for a trial"
    if trial.user_attrs.get("error"):
        return trial.user_attrs["error"]
    if trial.system_attrs.get("failed_trial") is not None:
        return f"resumed trial {trial.system_attrs['failed_trial']} after its process stopped"
    return ""


def run_sweep(
    configs: list[str],
    overrides: list[str],
    space_path: str,
    trials: int,
    storage: str | None,
    study_name: str,
    program: str,
) -> str:
    """The ``sweep`` command; returns the summary to print."""
    require("optuna", "sweep", "the sweep command")
    import optuna

    from .tracking import enabled

    base = load_config(configs, overrides)
    for handler in optuna.logging.get_logger("optuna").handlers:
        handler.addFilter(OneLineLogs())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeat, retries, plots
        space = load_space(space_path, base.to_dict())
        sweep = Sweep(base, space, trials, storage, study_name, (program, configs, overrides))
        if enabled(base.train.mlflow):
            sweep.start_tracking()
        try:
            sweep.run()
        except BaseException:
            if sweep.tracker is not None:
                sweep.tracker.finish("KILLED")
            raise
        written = sweep.write_outputs()
        if sweep.tracker is not None:
            best = sweep.best()
            if best is not None:
                sweep.tracker.log_metrics({f"best_{space.metric}": best.value})
            for path in written:
                sweep.tracker.client.log_artifact(sweep.tracker.run_id, str(path))
            sweep.tracker.finish()
        return sweep.summary(written)
