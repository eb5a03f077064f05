"""The parts of hyperparameter sweeps with Optuna (the optional ``sweep`` extra); ``commands/sweep.py`` is the command.

``python -m <package> sweep --config configs/default.yaml --space configs/sweep.yaml --trials N``

``configs/sweep.yaml`` maps dotted config keys to Optuna distributions. Each
trial is a full training run in ``train.out_dir/trials/<number>`` that reports
the validation metric after every epoch, so ``MedianPruner`` can stop a poor
one early. A failed or pruned trial is recorded and the sweep goes on.

One module per job:

- ``space.py``: the search space, read and checked against the config;
- ``study.py``: the study's storage and the trial loop (``Sweep``);
- ``ranks.py``: under torchrun, rank 0 leads and every rank trains each trial;
- ``cleanup.py``: what a trial leaves on the GPU, freed before the next;
- ``report.py``: sweep_results.csv, best_config.yaml, the plots and the summary;
- ``../sweep.py``: the ``sweep`` command that ties them together (a module beside this package, not in it,
  so that a project's edited ``commands/sweep.py`` of older template versions meets it in ``copier update`` as a
  conflict in the same file instead of being deleted).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Space", "Sweep", "load_space"]
_HOMES = {"Space": "space", "load_space": "space", "Sweep": "study"}  # each name's module in this package


def __getattr__(name: str) -> Any:
    """``from .sweeps import Sweep`` still works, loaded on first use (PEP 562): importing ``sweeps.space`` alone
    (a search space checked against a config) no longer imports the study's torch and Optuna, 3.5 CPU-seconds."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
