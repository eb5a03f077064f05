"""How long ``torch-scaffold check`` takes on a generated project, and where the time goes.

It generates the default project from this checkout (HEAD and its
uncommitted changes), then prints:

  side by side: ``torch-scaffold check PROJECT`` as users run it (a new
      process: start-up, flake8's file discovery, its worker processes), for
      this checkout and for each ``--template PATH`` (another checkout whose
      ``generator/`` is imported instead, e.g. one at v0.12.2 for the figures
      before a change), taking turns; wall and CPU seconds, the fastest of
      ``--repeat`` runs (3) and their median: on a shared machine other work
      only slows a run down;
  where the time goes: each part in one process over the same files, one
      after the other: parsing (``ast``), the TSC rules, torchfix on every
      file, torchfix on the files the gate lets through, and what flake8's
      default plugins (pyflakes, pycodestyle) cost, which the check no longer runs.

    .venv/bin/python benchmarks/lint_speed.py [--template PATH ...] [--repeat 3] [--out .bench/lint_speed.json]

``--quick`` runs each once, on this checkout alone; the test suite calls it so.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from copier import run_copy

REPO = Path(__file__).resolve().parents[1]
CHECK = "import sys; from torch_scaffold.cli import main; sys.exit(main())"


def timed_check(project: Path, template: Path | None) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the process and its workers, exit status) of one check."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as shim:
        if template is not None:  # import torch_scaffold from that checkout: its folder is generator/
            (Path(shim) / "torch_scaffold").symlink_to(template.resolve() / "generator")
            env["PYTHONPATH"] = os.pathsep.join([shim, env.get("PYTHONPATH", "")])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-c", CHECK, "check", str(project)], capture_output=True, env=env)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, result.returncode


def parts(project: Path) -> dict[str, float]:
    """Seconds of each part of a check, in this process, serially over the project's files."""
    import pycodestyle
    from pyflakes.checker import Checker as Pyflakes
    from torchfix.torchfix import TorchChecker

    from torch_scaffold.check import TOR_CODES
    from torch_scaffold.lint import check
    from torch_scaffold.lint.gate import needs

    files = sorted(path for path in project.rglob("*.py") if ".venv" not in path.parts)
    sources = [path.read_text() for path in files]
    seconds: dict[str, float] = {}

    def clock(name: str, work: Any) -> Any:
        start = time.perf_counter()
        result = work()
        seconds[name] = time.perf_counter() - start
        return result

    trees = clock("parse (ast)", lambda: [ast.parse(source) for source in sources])
    clock("TSC rules", lambda: [check(tree) for tree in trees])
    gate = needs(frozenset(TOR_CODES))
    passed = clock("the gate", lambda: [gate.met_by(tree) for tree in trees])
    pairs = list(zip(trees, sources, strict=True))
    clock("torchfix, every file", lambda: [list(TorchChecker(t, s.splitlines(True)).run()) for t, s in pairs])
    through = [pair for pair, ok in zip(pairs, passed, strict=True) if ok]
    clock("torchfix, the gate's files", lambda: [list(TorchChecker(t, s.splitlines(True)).run()) for t, s in through])
    clock("pyflakes (not run now)", lambda: [Pyflakes(tree) for tree in trees])
    style = pycodestyle.StyleGuide(quiet=True, max_line_length=120)
    clock("pycodestyle (not run now)", lambda: style.check_files([str(path) for path in files]))
    seconds["files"] = len(files)
    seconds["files through the gate"] = sum(passed)
    return seconds


def cpu_model() -> str:
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", type=Path, action="append", default=[], help="another checkout to time")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one run, this checkout alone")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    templates: list[tuple[str, Path | None]] = [("this checkout", None)]
    templates += [] if args.quick else [(str(path), path) for path in args.template]
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "lint-speed"
        data = {"project_name": "Lint Speed", "package_name": "lint_speed"}
        run_copy(str(REPO), project, data=data, defaults=True, unsafe=True, quiet=True, vcs_ref="HEAD")
        print(f"{cpu_model()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start")
        runs: dict[str, list[tuple[float, float, int]]] = {label: [] for label, _ in templates}
        for _ in range(repeat):  # the checkouts take turns
            for label, template in templates:
                runs[label].append(timed_check(project, template))
        print("\n| check of the default project | wall s (fastest) | wall s (median) | CPU s (fastest) | exit |")
        print("|---|---:|---:|---:|---:|")
        for label, timings in runs.items():
            walls, cpus = [t[0] for t in timings], [t[1] for t in timings]
            print(
                f"| {label} | {min(walls):.1f} | {statistics.median(walls):.1f} | {min(cpus):.1f} | {timings[0][2]} |"
            )
        split = parts(project)
        print(f"\nwhere the time goes (this checkout, one process, {split['files']:.0f} files):")
        for name, value in split.items():
            print(f"  {name}: {value:.0f}" if name.startswith("files") else f"  {name}: {value:.2f} s")
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"runs": runs, "parts": split, "cpu": cpu_model()}, indent=2))


if __name__ == "__main__":
    main()
