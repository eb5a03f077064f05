"""What a sweep leaves behind: sweep_results.csv, best_config.yaml, Optuna's plots, and the summary it prints."""

from __future__ import annotations

import csv
import shlex
import sys
import warnings
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import UserError
from ..core.optional import require
from .space import format_value
from .study import Sweep, counted


def note(trial: Any) -> str:
    if trial.user_attrs.get("surplus"):
        return "surplus: the study was full when this process asked for a trial"
    if trial.user_attrs.get("error"):
        return trial.user_attrs["error"]
    if trial.system_attrs.get("failed_trial") is not None:
        return f"resumed trial {trial.system_attrs['failed_trial']} after its process stopped"
    return ""


def results(sweep: Sweep) -> list[dict[str, Any]]:
    """One row per trial of the study, this process's or another's."""
    trials = sweep.study.get_trials(deepcopy=False)
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


def write_outputs(sweep: Sweep) -> list[Path]:
    """sweep_results.csv, best_config.yaml and the plots, in the sweep's folder."""
    sweep.dir.mkdir(parents=True, exist_ok=True)
    rows = results(sweep)
    columns = list(dict.fromkeys(k for row in rows for k in ("number", "state", "value", *row)))
    csv_path = sweep.dir / "sweep_results.csv"
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    written = [csv_path]
    if sweep.best() is not None:
        best = sweep.config_for(sweep.best().params, sweep.dir / "best")
        path = sweep.dir / "best_config.yaml"
        path.write_text(yaml.safe_dump(best.to_dict(), sort_keys=False))
        written.append(path)
    written += plots(sweep)
    return written


def plots(sweep: Sweep) -> list[Path]:
    """Optuna's own matplotlib plots; without matplotlib, or with too few trials, a note instead; none with
    ``train.pictures: false`` (no matplotlib import either)."""
    if sweep.best() is None or not sweep.base["train"]["pictures"]:
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
        "optimization_history.png": lambda: optuna_plots.plot_optimization_history(sweep.study),
        # PED-ANOVA needs only NumPy (the default, fANOVA, needs scikit-learn)
        "param_importances.png": lambda: optuna_plots.plot_param_importances(
            sweep.study, evaluator=PedAnovaImportanceEvaluator()
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
        axes.figure.savefig(sweep.dir / name, dpi=120, bbox_inches="tight")
        plt.close(axes.figure)
        written.append(sweep.dir / name)
    return written


def trial_counts(sweep: Sweep) -> str:
    """E.g. ``3 trials (2 complete, 1 pruned)``: the trials that count toward ``--trials``."""
    states = [t.state.name.lower() for t in counted(sweep.study.get_trials(deepcopy=False))]
    counts = ", ".join(f"{states.count(s)} {s}" for s in ("complete", "pruned", "fail") if states.count(s))
    return f"{len(states)} trials ({counts})"


def summary(sweep: Sweep, written: list[Path], command: tuple[str, list[str], list[str]]) -> str:
    """The study's counts, the best trial and a ready command line to train with its params.

    ``command`` is the program, its ``--config`` files and ``--set`` items, as the sweep was started.
    """
    lines = [f"study {sweep.study.study_name} in {sweep.storage}: {trial_counts(sweep)}"]
    best = sweep.best()
    if best is not None:
        where = best.user_attrs["out_dir"]
        lines.append(f"best: trial {best.number}, {sweep.space.metric} {best.value:.4f}, in {where}")
        program, configs, overrides = command
        best_sets = [f"{k}={format_value(sweep.space.decode(k, v))}" for k, v in best.params.items()]
        best_sets.append(f"train.out_dir={sweep.dir / 'best'}")
        replaced = {item.partition("=")[0] for item in best_sets}
        kept = [item for item in overrides if item.partition("=")[0].strip() not in replaced]
        words = [program, "train", *[part for path in configs for part in ("--config", shlex.quote(path))]]
        words += [part for item in [*kept, *best_sets] for part in ("--set", shlex.quote(item))]
        lines.append(f"train with the best params: {' '.join(words)}")
        lines.append(f"  or: {program} train --config {sweep.dir / 'best_config.yaml'}")
    lines.append("wrote " + ", ".join(str(p) for p in written))
    return "\n".join(lines)
