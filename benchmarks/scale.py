"""At the shape users grow into: 1,000 classes and many files, every step timed with its peak memory.

It writes an ImageNet-shaped data set offline (``--classes`` classes of
``--side`` px JPEGs, six train files a class for each val one, and planted
defects: ``--copies`` val files copied into train), generates a project from
this checkout, and runs each step the way a user does, as its own process.
Each file is its own picture (``picture``: shapes drawn from ``--seed``, the
class and the index, in the class's colours), as in a photo data set: the
planted copies are the only near copies, and the audit's pixel check gets the
candidates a real data set gives it (with a class's files near-identical it
checked some 2 pairs a file and listed 2,053 copies at 70,000 files).

  first start   launch to the first training step, no file index and no cache
  second start  the same with the index and the cache there (a new out_dir)
  one epoch     ``train`` for one epoch, start included (``data.image_size`` = ``--side``)
  evaluate      ``evaluate --checkpoint best.pt`` on val
  audit         ``audit --checkpoint best.pt``, the trained model's embeddings: every stage it prints

For each size of ``--files`` (7,000 and 70,000 by default: 10x steps) it prints
one row a step: seconds, seconds per 1,000 files, peak resident memory (the
largest process of the step, from ``wait4``), and the time per file against the
smallest size's, which must stay within 1.5x (issue 57: cost grows with the
data, not faster). A second table fits each step as a fixed part plus a cost a
file through the smallest and largest sizes, and estimates, marked as such,
ImageNet's 1.33 million files on a 32-core, 8-GPU server (``estimate``). Each
step's CPU seconds (its processes', workers included) are kept beside: on a
shared machine they compare the sizes where the wall seconds depend on what
else ran. The data sets, and with them each size's run folder (its best.pt,
for a later ``--steps audit``), stay in ``--data`` (default: a temporary
folder) for another run; ``--checkpoint`` audits and evaluates with another
run's best.pt (the same classes: a smaller size's), without training again.

    .venv/bin/python benchmarks/scale.py [--files 7000 70000] [--classes 1000] [--side 32] [--steps ...]
        [--data DIR] [--out .bench/scale.json]

``--features-only 1280000`` runs the audit's stages after embedding on that many synthetic 1,280-wide
embeddings in ``--classes`` classes instead (``audit_scale.py --features-only``, which owns that mode).

``--quick`` (700 files of 100 classes) only checks that it runs; the test suite calls it so.
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
from PIL import Image, ImageDraw
from startup import FIRST_STEP  # a script beside this one: the trainer's launch to its first step

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "scale_pkg"
VAL_SHARE = 7  # one val file for every six train files: ImageNet's 1,281 / 50 is steeper, the point is the shape
STEPS = ("first start", "second start", "one epoch", "evaluate", "audit")
WRITERS = 2  # processes writing the JPEG files: this runs on machines of few cores
DATA_KIND = "shapes"  # each file its own picture (``picture``); before: a class's files were near-identical


SPLIT_CODES = {"train": 0, "val": 1}  # a file's seed is (seed, class, split, index)
SHAPES = 12  # shapes drawn over each file's background


def picture(seed: int, label: int, split: str, index: int, side: int) -> Image.Image:
    """One file's own picture: a shaded background and ``SHAPES`` ellipses, boxes and lines at places, sizes and
    in shades of the class's three colours drawn from (``seed``, class, split, index). Like photos in this one
    respect: no two files of a class show the same picture (the audit's pixel check finds only the planted
    copies), while the colours keep the classes learnable."""
    palette = np.random.default_rng([seed, label]).integers(0, 256, (3, 3))  # the class's own colours
    rng = np.random.default_rng([seed, label, SPLIT_CODES[split], index])
    ramp = np.linspace(-1, 1, side)
    slope = rng.uniform(-40, 40, 2)  # a light from its own side: a gradient over the class's first colour
    shade = slope[0] * ramp[None, :, None] + slope[1] * ramp[:, None, None]
    background = palette[0] + shade + rng.normal(0, 12, (side, side, 3))
    image = Image.fromarray(np.clip(background, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(SHAPES):
        colour = tuple(int(c) for c in np.clip(palette[rng.integers(3)] + rng.integers(-60, 61, 3), 0, 255))
        x0, y0 = rng.integers(-side // 4, side, 2)
        width, height = rng.integers(side // 8, side // 2, 2)
        box = [int(x0), int(y0), int(x0 + width), int(y0 + height)]
        kind = rng.integers(3)
        if kind == 0:
            draw.ellipse(box, fill=colour)
        elif kind == 1:
            draw.rectangle(box, fill=colour)
        else:
            draw.line(box, fill=colour, width=int(rng.integers(1, 4)))
    return image


def write_class(job: tuple[Path, int, int, int, int, int]) -> None:
    """One class's files in train/ and val/ (a pool's task), each its own ``picture``."""
    root, label, train, val, side, seed = job
    for split, count in (("train", train), ("val", val)):
        folder = root / split / f"c{label:05d}"
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(count):
            picture(seed, label, split, index, side).save(folder / f"{index:05d}.jpg", quality=90)


def write_data(root: Path, files: int, classes: int, side: int, copies: int, seed: int = 0) -> Path:
    """``files`` files in ``classes`` classes (train and val), ``copies`` val files copied into train; kept when
    already written with the same shape (``DATA_KIND``: the data of an older scale.py is written again)."""
    shape = {"files": files, "classes": classes, "side": side, "copies": copies, "seed": seed, "kind": DATA_KIND}
    done = root / "shape.json"
    if done.exists() and json.loads(done.read_text()) == shape:
        return root
    shutil.rmtree(root, ignore_errors=True)
    per_class = max(files // classes, VAL_SHARE)
    val = max(per_class // VAL_SHARE, 1)
    jobs = [(root, label, per_class - val, val, side, seed) for label in range(classes)]
    with multiprocessing.get_context("fork").Pool(WRITERS) as pool:
        pool.map(write_class, jobs, chunksize=16)
    for index in range(copies):  # planted defects: a val file in train, under another name, in its own class
        label = index * classes // max(copies, 1)
        shutil.copyfile(root / "val" / f"c{label:05d}" / "00000.jpg", root / "train" / f"c{label:05d}" / "copy.jpg")
    done.write_text(json.dumps(shape))
    return root


def generate(dest: Path) -> Path:
    """A project from this checkout (its uncommitted changes too), as ``make demo REF=HEAD`` makes it."""
    answers = {"project_name": PACKAGE, "package_name": PACKAGE}
    run_copy(str(REPO), dest, data=answers, defaults=True, unsafe=True, quiet=True, vcs_ref="HEAD")
    return dest


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[dict[str, float], str]:
    """Run ``argv``; its row ({seconds, peak_mb: its largest process's peak resident MB, cpu_s}) and its output.
    A failure stops the benchmark, naming the step's last lines. ``cpu_s`` counts its own CPU seconds and its reaped
    children's (the loader workers, the check's processes): on a shared machine they compare sizes where the wall
    seconds depend on what else ran."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = child.stdout.read() if child.stdout else ""  # type: ignore[union-attr]
    _, status, usage = os.wait4(child.pid, 0)  # the child's own rusage: its peak, not the parent's
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:6])}... failed ({child.returncode}):\n{output[-3000:]}")
    row = {"seconds": seconds, "peak_mb": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}
    return row, output  # ru_maxrss: kB on Linux


def stage_lines(output: str) -> list[str]:
    """The audit's stage lines worth keeping: each stage's last (", done"), and the last 12 lines of any kind."""
    lines = [line.strip() for line in output.splitlines() if " s" in line and ":" in line]
    last = lines[-12:]
    return [line for line in lines[:-12] if line.endswith(", done")] + last


def settings(data: Path, out: Path, side: int) -> list[str]:
    sets = [f"data.root={data}", f"data.image_size={side}", f"train.out_dir={out}", "train.epochs=1"]
    return [a for kv in sets for a in ("--set", kv)]


def run_steps(
    project: Path, data: Path, side: int, steps: tuple[str, ...], work: Path, trained: Path | None = None
) -> dict[str, dict[str, Any]]:
    """Each step of ``steps`` on ``data``: {step: {seconds, peak_mb, ...}}; the audit's own stage lines kept.
    ``trained``: the checkpoint that ``evaluate`` and the audit read (default: the one-epoch step's best.pt)."""
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "XDG_CACHE_HOME": str(work / "cache")}
    if "first start" in steps:
        shutil.rmtree(work / "cache", ignore_errors=True)  # a first start: no file index, no cache
    module = [sys.executable, "-m", PACKAGE]
    rows: dict[str, dict[str, Any]] = {}

    def first_step(out: str) -> dict[str, float]:
        """The start's row, its seconds those to the first training step (its CPU seconds: the whole process)."""
        launch = {**env, "STARTUP_LAUNCH": repr(time.time())}
        argv = [sys.executable, "-c", FIRST_STEP, PACKAGE, "train", "--config", "", *settings(data, work / out, side)]
        row, output = timed(argv, project, launch)
        line = next((line for line in output.splitlines() if line.startswith("FIRST_STEP ")), None)
        if line is None:
            raise SystemExit(f"the trainer never reached its first step:\n{output[-3000:]}")
        return {**row, "seconds": float(line.split()[1])}

    checkpoint = str(trained or work / "run" / "best.pt")
    for step in steps:
        if step in ("first start", "second start"):
            rows[step] = first_step(step.replace(" ", "_"))
        elif step == "one epoch":
            rows[step], _ = timed([*module, "train", "--config", "", *settings(data, work / "run", side)], project, env)
        elif step == "evaluate":
            rows[step], _ = timed([*module, "evaluate", "--checkpoint", checkpoint], project, env)
        elif step == "audit":
            # data.root: this size's files, whichever size's run trained the checkpoint (same classes)
            where = ["--set", f"data.root={data}"]
            argv = [*module, "audit", "--checkpoint", checkpoint, *where, "--out", str(work / "audit")]
            rows[step], output = timed(argv, project, env)
            rows[step]["stages"] = stage_lines(output)
    return rows


SERVER_CORES = 32  # the server of issue 57's users: 32 cores, 8 GPUs
IMAGENET_FILES = 1_331_167  # ImageNet-1k's train and val files


SERIAL = {"second start"}  # steps whose per-file part (reading the file index) one process does: no core helps


def fit(results: dict[int, dict[str, dict[str, Any]]], step: str) -> tuple[float, float, str] | None:
    """A step's cost as ``fixed + per_file * files`` through its smallest and largest measured sizes: in CPU
    seconds where both sizes have them (what else ran on the machine does not move them), else in wall seconds;
    (fixed, per file, which). None with fewer than two sizes."""
    sizes = [files for files in sorted(results) if step in results[files]]
    if len(sizes) < 2:
        return None
    small, large = results[sizes[0]][step], results[sizes[-1]][step]
    key = "cpu_s" if "cpu_s" in small and "cpu_s" in large else "seconds"
    per_file = (large[key] - small[key]) / (sizes[-1] - sizes[0])
    return max(small[key] - per_file * sizes[0], 0.0), max(per_file, 0.0), key


def estimate(line: tuple[float, float, str], step: str, cores: int) -> float:
    """An estimate, not a measurement: the step's fixed part as measured, its per-file part (decoding, checking,
    embedding: work the loader workers and the check's processes spread over every core) over the server's cores,
    from CPU seconds, or from this machine's wall seconds times its cores; a serial step's per-file part as
    measured. A GPU does the model's share faster still; the CPU's decoding bounds it."""
    fixed, per_file, key = line
    if step in SERIAL:
        return fixed + per_file * IMAGENET_FILES
    spread = 1 / SERVER_CORES if key == "cpu_s" else cores / SERVER_CORES
    return fixed + per_file * IMAGENET_FILES * spread


def table(results: dict[int, dict[str, dict[str, Any]]]) -> str:
    """One row a step and size: seconds, per 1,000 files, peak MB, and time per file against the smallest size's;
    then, from the two sizes' fit, the estimate for ImageNet's 1.33 million files on a 32-core, 8-GPU server."""
    sizes = sorted(results)
    cores = os.cpu_count() or 1
    lines = [
        "| step | files | seconds | s per 1,000 files | peak MB | per file vs smallest | CPU s | CPU per file vs "
        "smallest |",
        "|---|---|---|---|---|---|---|---|",
    ]
    estimates = []
    for step in STEPS:
        base = results[sizes[0]].get(step)
        for files in sizes:
            row = results[files].get(step)
            if row is None:
                continue
            per_k = 1000 * row["seconds"] / files
            ratio = per_k / (1000 * base["seconds"] / sizes[0]) if base else float("nan")
            cpu, cpu_ratio = "-", "-"  # a run before scale.py counted CPU seconds
            if "cpu_s" in row and base and "cpu_s" in base:
                cpu = f"{row['cpu_s']:.0f}"
                cpu_ratio = f"{(row['cpu_s'] / files) / (base['cpu_s'] / sizes[0]):.2f}x"
            lines.append(
                f"| {step} | {files:,} | {row['seconds']:.1f} | {per_k:.2f} | {row['peak_mb']:,.0f} | {ratio:.2f}x "
                f"| {cpu} | {cpu_ratio} |"
            )
        line = fit(results, step)
        if line is not None:
            minutes = estimate(line, step, cores) / 60
            fitted = "CPU s" if line[2] == "cpu_s" else "wall s"
            estimates.append(
                f"| {step} | {fitted} | {line[0]:.1f} | {1000 * line[1]:.2f} | {minutes:,.1f} (estimate) |"
            )
    if estimates:
        lines += [
            "",
            f"| step | fitted on | fixed s | s per 1,000 files | 1.33 M files, {SERVER_CORES} cores, 8 GPUs: minutes |",
            "|---|---|---|---|---|",
            *estimates,
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, nargs="+", default=[7000, 70000], help="data set sizes, train and val")
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--side", type=int, default=32, help="pixels of each file, and data.image_size")
    parser.add_argument("--copies", type=int, default=20, help="val files copied into train (planted defects)")
    parser.add_argument("--seed", type=int, default=0, help="the data's pictures: each from (seed, class, index)")
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    parser.add_argument("--data", type=Path, help="where the data sets are written and kept (default: temporary)")
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "scale.json")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        help="evaluate and audit with this best.pt (e.g. a smaller size's, same classes) instead of the epoch's",
    )
    parser.add_argument("--table-from", type=Path, help="print the tables of a results file, run nothing")
    parser.add_argument("--quick", action="store_true", help="700 files of 100 classes: that it runs")
    parser.add_argument(
        "--features-only",
        type=int,
        metavar="FILES",
        help="the audit's stages after embedding on FILES synthetic embeddings (audit_scale.py --features-only)",
    )
    args = parser.parse_args(argv)
    if args.table_from:  # benchmarks/results/scale.json: the README's table, made again
        saved = json.loads(args.table_from.read_text())["results"]
        print(table({int(files): rows for files, rows in saved.items()}))
        return 0
    if args.features_only:  # one owner for that mode: audit_scale.py, which also runs alone
        script = Path(__file__).with_name("audit_scale.py")
        files, classes = str(args.features_only), str(args.classes)
        return subprocess.call([sys.executable, str(script), "--features-only", "--files", files, "--classes", classes])
    if args.quick:
        args.files, args.classes, args.copies = [700], 100, 4
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        data_root = args.data or Path(tmp) / "data"
        project = generate(Path(tmp) / "project")
        results = {}
        for files in sorted(args.files):
            data = write_data(data_root / f"{files}", files, args.classes, args.side, args.copies, args.seed)
            # Beside the data where it is kept: a later run of --steps audit finds the epoch's best.pt there.
            work = (args.data or Path(tmp)) / f"work-{files}"
            print(f"{files:,} files in {args.classes:,} classes at {args.side} px ...", flush=True)
            results[files] = run_steps(project, data, args.side, tuple(args.steps), work, args.checkpoint)
            if not args.data:
                shutil.rmtree(work, ignore_errors=True)
    print(f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores\n")
    print(table(results))
    for files, rows in results.items():
        for line in rows.get("audit", {}).get("stages", []):
            print(f"  audit at {files:,}: {line}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"classes": args.classes, "side": args.side, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
