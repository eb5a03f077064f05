"""The ``torch-scaffold`` command."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from . import __version__

TEMPLATE_ROOT = Path(__file__).resolve().parents[1]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torch-scaffold",
        description="Generate and maintain PyTorch training projects from the torch-scaffold copier template.",
    )
    parser.add_argument("--version", action="version", version=f"torch-scaffold {__version__}")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("template-path", help="print where the copier template (copier.yml) lives")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "template-path":
        print(TEMPLATE_ROOT)
        return 0
    parser.print_help()
    return 0
