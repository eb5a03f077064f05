"""The command-line options that more than one program reads, and the parse that names argparse's one misreport.

``cli.py`` builds its commands from them; ``training/slurm.py``, what
``slurm/train.sbatch`` runs before torchrun, checks the job with ``train``'s
own options (``--config``, ``--set``, ``--resume``). Both read them here, so
that the Slurm program imports nothing above it (imports go one way: cli ->
commands -> sweeps -> training -> data, models, outputs -> core).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

DEFAULT_CONFIG = "configs/default.yaml"


def add_config_options(command: argparse.ArgumentParser, default: str) -> None:
    command.add_argument(
        "--config",
        action="append",
        metavar="FILE",
        help=f"YAML config file; repeat it to lay a recipe over a base, later files winning (default: {default})",
    )
    command.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key, e.g. --set optim.lr=0.01 (repeatable)",
    )


def add_train_options(train: argparse.ArgumentParser) -> None:
    """``train``'s options: the config, and the run to continue."""
    add_config_options(train, DEFAULT_CONFIG)
    train.add_argument("--resume", metavar="auto|PATH", help="continue from out_dir/last.pt (auto) or a checkpoint")


def parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """argparse, plus the one mistake it would misreport: ``--set train.epochs 3`` (a space, not ``=``)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        bare = [item for item in getattr(args, "overrides", []) if "=" not in item]
        if bare:
            parser.exit(2, f"error: --set {bare[0]} {extra[0]}: use KEY=VALUE, e.g. --set {bare[0]}={extra[0]}\n")
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args
