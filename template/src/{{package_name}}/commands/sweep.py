"""The ``sweep`` command: load the config and the space, run this process's part of the study, report.

The parts live in the ``sweeps`` package: the space, the study and its trial
loop, the ranks under torchrun, the cleanup between trials, the report.
"""

from __future__ import annotations

import logging
import warnings

from ..core.config import Config, load_config
from ..core.errors import UserError
from ..core.optional import require
from ..sweeps.ranks import END, Ranks, follow
from ..sweeps.report import summary, trial_counts, write_outputs
from ..sweeps.space import Space, load_space
from ..sweeps.study import Sweep

__all__ = ["Space", "Sweep", "load_space", "run_sweep"]


class OneLineLogs(logging.Filter):
    """Optuna logs a failed trial with its traceback; its message already names the error."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text = None, None
        return True


def run_sweep(
    configs: list[str],
    overrides: list[str],
    space_path: str,
    trials: int,
    storage: str | None,
    study_name: str,
    program: str,
) -> str:
    """The ``sweep`` command; returns the summary to print.

    Under torchrun every rank runs this: rank 0 leads the study, the others train each of its trials with it.
    """
    require("optuna", "sweep", "the sweep command")
    import optuna

    base = load_config(configs, overrides)
    for handler in optuna.logging.get_logger("optuna").handlers:
        handler.addFilter(OneLineLogs())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeat, retries, plots
        space = load_space(space_path, base.to_dict())  # on every rank: a bad space is one line on each
        ranks = Ranks.join(base.train)
        try:
            if not ranks.world.is_main:
                return f"rank {ranks.world.rank}: trained {follow(ranks)} trials with rank 0"
            sweep = lead(base, space, trials, (storage, study_name), ranks)
            return report(sweep, (program, configs, overrides))
        finally:
            ranks.close()


def lead(base: Config, space: Space, trials: int, study: tuple[str | None, str], ranks: Ranks) -> Sweep:
    """Rank 0 (or the only process): open the study, run trials until it is full, then tell the others to end."""
    from ..outputs.writers import mlflow_wanted

    try:
        sweep = Sweep(base, space, trials, *study, ranks=ranks)
        if mlflow_wanted(base.train.mlflow):
            sweep.start_tracking()
    except BaseException:
        ranks.send(END)  # the other ranks wait for a first trial: end them too
        raise
    try:
        sweep.run()
    except BaseException:
        # A trial's error or a stop signal: the other ranks met the same in that trial, or torchrun ends them.
        if sweep.tracker is not None:
            sweep.tracker.finish("KILLED")
        raise
    ranks.send(END)
    return sweep


def report(sweep: Sweep, command: tuple[str, list[str], list[str]]) -> str:
    """Write the outputs (also into the sweep's MLflow run); a study with no complete trial is an error."""
    written = write_outputs(sweep)
    best = sweep.best()
    if sweep.tracker is not None:
        if best is not None:
            sweep.tracker.log_metrics({f"best_{sweep.space.metric}": best.value})
        for path in written:
            sweep.tracker.client.log_artifact(sweep.tracker.run_id, str(path))
        sweep.tracker.finish()
    text = summary(sweep, written, command)
    if best is None:
        print(text)
        raise UserError(
            f"no trial completed of {trial_counts(sweep)}: see the errors in {sweep.dir / 'sweep_results.csv'}"
        )
    return text
