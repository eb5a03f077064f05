"""A first and a second start at ImageNet's shape: 1,000 classes of tiny files, with seconds and peak memory.

For each file count N it writes N small PNG files (32 x 32) in 1,000 class
folders, a seventh of them in val/ (6 train and 1 val file a class at 7,000
files; 60 and 10 at 70,000, as issue 57 measured), then launches the
generated trainer in a new process, twice, and reports for each start:

  first:  no file index, no decoded cache: every file read whole for the
          checks (on every core the process may use), then decoded into the cache;
  second: the same data again with a new ``train.out_dir``: what a restart, a
          requeue or a sweep trial pays when the index and the cache are there;
  data_s: the seconds inside ``build_training_data`` (the checks, the
          duplicates, the cache), of the seconds from launch to the first
          training step (``start_s``);
  rss_mb: the trainer's peak resident memory; ``tree_mb`` the largest of it
          and its loader processes (the check's workers among them).

``--template PATH`` (repeatable) measures other checkouts too (e.g. the
commit before a change), each its own columns. The files are in the page
cache after being written. ``first_and_second_start`` is the function a larger
benchmark (``scale.py``) calls for one data set.

    .venv/bin/python benchmarks/first_start.py [--files 7000 70000] [--template PATH ...] [--data DIR]
        [--out .bench/first_start.json]

``--quick`` (280 files in 40 classes, this checkout) only checks that it runs; the test suite calls it so.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# startup.FIRST_STEP runs inside the trainer's process: it times build_training_data, and at the first train_step
# prints the seconds since launch, the data's share and the process's peak memory, then ends it.
from startup import FIRST_STEP, commit_of, cpu_name, generate, write_files

REPO = Path(__file__).resolve().parents[1]
CLASSES = 1_000
PROCESSES = 2  # writers of the PNG files: the machines this runs on have few cores, shared


def write_data(root: Path, files: int, classes: int = CLASSES) -> Path:
    """``files`` PNG files in ``classes`` folders, a seventh of each class in val/; kept if already written."""
    done = root / ".complete"
    if done.exists():
        return root
    per_class = max(files // classes, 2)
    val = max(per_class // 7, 1)
    splits = (("train", per_class - val), ("val", val))
    folders = [(root / split / f"class_{label:04d}", count) for split, count in splits for label in range(classes)]
    jobs = [(folder, count, seed) for seed, (folder, count) in enumerate(folders)]
    with multiprocessing.get_context("fork").Pool(PROCESSES) as pool:
        pool.map(write_files, jobs, chunksize=16)
    done.touch()
    return root


def start(project: Path, package: str, data: Path, out_dir: Path, cache: Path, size: int) -> dict[str, float]:
    """Launch the trainer in a new process, until its first training step: seconds and peak memory."""
    settings = [f"data.root={data}", f"data.image_size={size}", "train.epochs=1", f"train.out_dir={out_dir}"]
    args = ["train", "--config", "", *[a for kv in settings for a in ("--set", kv)]]
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "XDG_CACHE_HOME": str(cache), "OMP_NUM_THREADS": "1"}
    env["STARTUP_LAUNCH"] = repr(time.time())
    logs = out_dir.parent / f"{out_dir.name}.log"
    with open(logs.with_suffix(".out"), "w+") as stdout, open(logs.with_suffix(".err"), "w+") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", FIRST_STEP, package, *args], cwd=project, env=env, stdout=stdout, stderr=stderr
        )
        # wait4: this start's own peak, and its waited-for children's (the check's workers), not an earlier start's
        _, _, usage = os.wait4(process.pid, 0)
        process.returncode = 0  # reaped here: Popen must not wait for it again
        stdout.seek(0)
        stderr.seek(0)
        out, err = stdout.read(), stderr.read()
    tree = usage.ru_maxrss / 1024
    lines = [line for line in out.splitlines() if line.startswith("FIRST_STEP ")]
    if not lines:
        raise SystemExit(f"the trainer of {project} never reached its first step:\n{out[-2000:]}{err[-3000:]}")
    seconds, data_seconds, peak = map(float, lines[0].split()[1:])
    return {
        "start_s": round(seconds, 2),
        "data_s": round(data_seconds, 2),
        "rss_mb": round(peak),
        "tree_mb": round(tree),
    }


def first_and_second_start(project: Path, package: str, data: Path, tmp: Path, size: int = 32) -> dict[str, Any]:
    """A first start (a cache folder of its own, empty) and a second one (the same cache, a new run folder)."""
    cache = tmp / f"cache_{package}_{time.time_ns()}"
    try:
        first = start(project, package, data, tmp / f"run_{package}_first", cache, size)
        second = start(project, package, data, tmp / f"run_{package}_second", cache, size)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        for run in ("first", "second"):
            shutil.rmtree(tmp / f"run_{package}_{run}", ignore_errors=True)
    return {"first": first, "second": second}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, nargs="+", default=[7_000, 70_000], help="files, val/ included")
    parser.add_argument("--template", type=Path, action="append", help="checkouts to measure (default: this one)")
    parser.add_argument("--image-size", type=int, default=32, help="data.image_size of the trainer")
    parser.add_argument("--data", type=Path, help="where to write (and keep) the data sets; default: a temporary one")
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "first_start.json")
    parser.add_argument("--quick", action="store_true", help="280 files in 40 classes: checks that it runs")
    args = parser.parse_args()
    templates = args.template or [REPO]
    counts, classes = ([280], 40) if args.quick else (args.files, CLASSES)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as temporary:
        tmp = Path(temporary)
        projects = [generate(template, tmp, index) for index, template in enumerate(templates)]
        names = [f"{template.name}@{commit_of(template)}" for template in templates]  # as generated
        for files in counts:
            data = write_data((args.data or tmp / "data") / f"files_{files}_{classes}", files, classes)
            row: dict[str, Any] = {"files": files, "classes": classes}
            for (project, package), name in zip(projects, names, strict=True):
                measured = first_and_second_start(project, package, data, tmp, args.image_size)
                for which, figures in measured.items():
                    row.update({f"{name} {which} {key}": value for key, value in figures.items()})
            rows.append(row)
            print(" | ".join(f"{key} {value}" for key, value in row.items()), flush=True)
    cores = len(os.sched_getaffinity(0))
    print(f"\n{cpu_name()}, {cores} CPU cores; files 32x32 PNG, data.image_size {args.image_size}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
