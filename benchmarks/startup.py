"""Start-up time: from launch to the first training step, on a first start and on a second one.

For each file count N it writes N small PNG files (32 x 32) in 10 classes,
plus 10% for val/, and prints side by side:

  scan: torchvision's ``ImageFolder`` of train/ and val/, the listing alone
        (what any loader pays before it reads a file);
  cold: the generated trainer, from launch (a new Python process) to the
        start of its first training step, on a first start: no file index,
        no decoded cache;
  warm: the same again with a new ``train.out_dir``: what a second run, a
        restart or a sweep trial pays when index and cache are there.

The trainer runs with the project's defaults (``data.cache: auto``) at
``data.image_size`` 32 (``--image-size``), its caches in a temporary
``XDG_CACHE_HOME``. ``--template PATH`` (repeatable) measures other
checkouts too, e.g. ``--template /work/main`` for the figures before a
change: each gets its own cold and warm columns. The files are in the page
cache after being written (clearing it needs root): the cold column is the
work of a first start, not a cold disk's. Each start column is the fastest of
``--repeat`` starts (3), the templates taking turns: on a shared machine other
work only slows a start down.

    .venv/bin/python benchmarks/startup.py [--files 10000 100000] [--template PATH ...] [--data DIR]
        [--out .bench/startup.json]

``--quick`` (200 files, this checkout) only checks that it runs; the test suite calls it so.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from copier import run_copy
from PIL import Image
from torchvision import datasets

REPO = Path(__file__).resolve().parents[1]
CLASSES = 10
SIDE = 32  # pixels of each file
PROCESSES = 2  # writers of the PNG files: the machines this runs on have few cores, shared

# Run inside the trainer's process: times build_training_data, and at the first call of train_step prints the
# seconds since launch, the data's share of them and the process's peak memory (MB), then ends it.
FIRST_STEP = """
import os, resource, sys, time, importlib
launch = float(os.environ["STARTUP_LAUNCH"])
trainer = importlib.import_module(sys.argv[1] + ".training.trainer")
real_data, spent = trainer.build_training_data, []
def build_training_data(*args, **kwargs):
    started = time.time()
    try:
        return real_data(*args, **kwargs)
    finally:
        spent.append(time.time() - started)
def first_step(*args, **kwargs):
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"FIRST_STEP {time.time() - launch:.3f} {sum(spent):.3f} {peak:.1f}", flush=True)
    os._exit(0)
trainer.build_training_data, trainer.train_step = build_training_data, first_step
sys.exit(importlib.import_module(sys.argv[1] + ".cli").main(sys.argv[2:]))
"""


def write_files(job: tuple[Path, int, int]) -> None:
    """One class folder's PNG files (a pool's task): noise around a colour of the class's own."""
    folder, count, seed = job
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, 3)
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        pixels = np.clip(base + rng.integers(-40, 41, (SIDE, SIDE, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"{index:06d}.png")


def write_data(root: Path, files: int) -> Path:
    """``files`` training images and a tenth as many for val/, in CLASSES folders; kept if already written."""
    done = root / ".complete"
    if done.exists():
        return root
    per_class = files // CLASSES
    jobs = [
        (root / split / f"class_{label}", count, seed)
        for seed, (split, count, label) in enumerate(
            (split, count, label)
            for split, count in (("train", per_class), ("val", max(per_class // 10, 1)))
            for label in range(CLASSES)
        )
    ]
    with multiprocessing.get_context("fork").Pool(PROCESSES) as pool:
        pool.map(write_files, jobs)
    done.touch()
    return root


def scan_seconds(root: Path) -> float:
    started = time.perf_counter()
    for split in ("train", "val"):
        datasets.ImageFolder(str(root / split))
    return time.perf_counter() - started


def generate(template: Path, tmp: Path, index: int) -> tuple[Path, str]:
    """A project from ``template``'s committed HEAD; returns its folder and package."""
    package = f"startup_{index}"
    project = tmp / package
    answers = {"project_name": package, "package_name": package}
    run_copy(str(template), project, data=answers, defaults=True, unsafe=True, quiet=True, vcs_ref="HEAD")
    return project, package


def first_step_seconds(project: Path, package: str, data: Path, out_dir: Path, cache: Path, size: int) -> float:
    """Launch the trainer in a new process; the seconds until its first training step starts."""
    settings = [f"data.root={data}", f"data.image_size={size}", "train.epochs=1", f"train.out_dir={out_dir}"]
    args = ["train", "--config", "", *[a for kv in settings for a in ("--set", kv)]]
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "XDG_CACHE_HOME": str(cache)}
    env["STARTUP_LAUNCH"] = repr(time.time())
    run = subprocess.run(
        [sys.executable, "-c", FIRST_STEP, package, *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("FIRST_STEP ")]
    if not lines:
        raise SystemExit(
            f"the trainer of {project} never reached its first step:\n{run.stdout[-2000:]}{run.stderr[-3000:]}"
        )
    return float(lines[0].split()[1])


def commit_of(template: Path) -> str:
    run = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=template, capture_output=True, text=True)
    return run.stdout.strip() or "?"


def cpu_name() -> str:
    try:
        run = subprocess.run(["lscpu"], capture_output=True, text=True)
        names = [line.split(":", 1)[1].strip() for line in run.stdout.splitlines() if line.startswith("Model name")]
        return names[0] if names else platform.processor()
    except OSError:
        return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, nargs="+", default=[10_000], help="training files (val: a tenth more)")
    parser.add_argument("--template", type=Path, action="append", help="checkouts to measure (default: this one)")
    parser.add_argument("--image-size", type=int, default=SIDE, help="data.image_size of the trainer")
    parser.add_argument(
        "--data", type=Path, help="where to write (and keep) the data sets; default: a temporary folder"
    )
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "startup.json")
    parser.add_argument("--repeat", type=int, default=3, help="starts of each kind; the fastest is shown")
    parser.add_argument("--quick", action="store_true", help="200 files, one start of each kind: checks that it runs")
    args = parser.parse_args()
    templates = args.template or [REPO]
    counts = [200] if args.quick else args.files
    if args.quick:
        args.repeat = 1
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as temporary:
        tmp = Path(temporary)
        projects = [generate(template, tmp, index) for index, template in enumerate(templates)]
        names = [f"{template.name}@{commit_of(template)}" for template in templates]  # as generated
        for files in counts:
            data = write_data((args.data or tmp / "data") / f"files_{files}", files)
            row: dict[str, Any] = {"files": files, "scan_s": round(min(scan_seconds(data) for _ in range(3)), 3)}
            for repeat in range(args.repeat):  # the templates take turns: a busy spell slows each alike
                for (project, package), name in zip(projects, names, strict=True):
                    cache = tmp / f"cache_{package}_{files}_{repeat}"  # a first start: no index, no cache
                    for start in ("cold", "warm"):
                        out_dir = tmp / f"run_{package}_{files}_{repeat}_{start}"
                        seconds = first_step_seconds(project, package, data, out_dir, cache, args.image_size)
                        column = f"{name} {start}_s"
                        row[column] = round(min(seconds, row.get(column, seconds)), 2)
                    shutil.rmtree(cache, ignore_errors=True)
            rows.append(row)
            print(" | ".join(f"{key} {value}" for key, value in row.items()), flush=True)
    print(f"\n{cpu_name()}, {os.cpu_count()} CPU cores; files {SIDE}x{SIDE} PNG, data.image_size {args.image_size}")
    columns = list(rows[0])
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(str(row[column]) for column in columns))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
