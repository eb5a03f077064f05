"""The ``torch-scaffold`` command: new, update and status around copier.

Each subcommand lives in its own module; this one only parses arguments and
turns the errors a user can fix (ours, and copier's) into one line on stderr
and exit status 1. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

import copier
from copier.errors import CopierError

from . import __version__
from .project import ProjectError, UsageError

TEMPLATE_ROOT = Path(__file__).resolve().parents[1]
COPIER_ROOT = Path(copier.__file__).resolve().parent


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torch-scaffold",
        description="Generate and maintain PyTorch training projects from the torch-scaffold copier template.",
    )
    parser.add_argument("--version", action="version", version=f"torch-scaffold {__version__}")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("template-path", help="print where the copier template (copier.yml) lives")

    new = commands.add_parser("new", help="generate a project (copier copy)")
    new.add_argument("dest", type=Path)
    new.add_argument("-d", "--data", action="append", default=[], metavar="KEY=VALUE", help="answer a question")
    new.add_argument(
        "--defaults", action="store_true", help="defaults for unanswered questions (always so without a terminal)"
    )
    new.add_argument("--template", default=str(TEMPLATE_ROOT), help="template path or URL (default: this package's)")
    new.add_argument("--vcs-ref", help="template version (git tag or commit; default: the newest tag)")

    update = commands.add_parser("update", help="bring a project to the newest template version (copier update)")
    update.add_argument("dest", type=Path)
    update.add_argument("--vcs-ref", help="template version to update to (default: the newest tag)")
    update.add_argument(
        "-d", "--data", action="append", default=[], metavar="KEY=VALUE", help="change an answer: ci_workflow=false"
    )

    status = commands.add_parser(
        "status",
        help="each project's release, releases behind, answers, edited template files and conflicts",
        description="Exit status: 4 when a project has an unresolved conflict (unmerged files or conflict markers), "
        "else 3 when --check found practices findings, else 1 when a project is behind the newest release or "
        "cannot be read, else 0.",
    )
    status.add_argument("dests", nargs="+", type=Path, metavar="DEST", help="one project, or several (a table)")
    status.add_argument("--json", action="store_true", help="one JSON document, for a nightly job")
    status.add_argument("--check", action="store_true", help="run the practices check (torch-scaffold check) too")
    check = commands.add_parser("check", help="report the practices' anti-patterns (TSC) and torchfix's rules (TOR)")
    check.add_argument("paths", nargs="*", type=Path, default=[Path(".")], metavar="PATH", help="files or folders")
    return parser


def run(args: argparse.Namespace) -> int:
    if args.command == "template-path":
        print(TEMPLATE_ROOT)
        return 0
    if args.command == "new":
        from .create import create, parse_data

        if args.template == str(TEMPLATE_ROOT) and not (TEMPLATE_ROOT / "copier.yml").is_file():
            raise ProjectError(
                "this install of torch-scaffold has no template beside it (a wheel, not a clone): "
                "pass --template with the template's path or git URL, or install a clone with pip install -e"
            )
        defaults = args.defaults or not sys.stdin.isatty()
        return create(args.dest, args.template, parse_data(args.data), args.vcs_ref, defaults)
    if args.command == "update":
        from .create import parse_data
        from .upgrade import update

        return update(args.dest, args.vcs_ref, parse_data(args.data))
    if args.command == "status":
        from .fleet import run_status

        return run_status(args.dests, args.json, args.check)
    if args.command == "check":
        from .check import run_check

        return run_check(*args.paths)
    raise AssertionError(args.command)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return run(args)
    except (ProjectError, UsageError, CopierError, ValueError) as exc:
        if isinstance(exc, ValueError) and not isinstance(exc, CopierError) and not raised_by_copier(exc):
            raise  # our own bug: the traceback is what a maintainer needs
        message = " ".join(str(exc).split())
        print(f"torch-scaffold {args.command}: {message}", file=sys.stderr)
        return 1


def raised_by_copier(exc: BaseException) -> bool:
    """Whether copier's own code raised ``exc``.

    copier 9 reports a bad answer (a validator's message, a value outside
    ``choices``, a required question without an answer, a value that does not
    cast to the question's type) as a plain ``ValueError``, not a
    ``CopierError``; the innermost frame of the traceback tells it from a
    ``ValueError`` of ours, which must keep its traceback.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().is_relative_to(COPIER_ROOT)
