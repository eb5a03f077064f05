"""The search space: ``configs/sweep.yaml`` read, checked and turned into Optuna distributions.

Every bound and choice is checked against the config the trials start from,
so a space that would make every trial fail the same way is one line before
anything trains.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..core.config import Config, config_from_dict
from ..core.config_files import set_dotted, yaml_problem
from ..core.errors import UserError
from ..core.optional import require

METRICS = {"val_acc": "maximize", "val_loss": "minimize"}  # what a trial reports and the study optimizes
SPACE_KEYS = ("metric", "heartbeat_seconds", "pruner", "params")
KINDS = ("float", "int", "categorical")


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


def format_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
