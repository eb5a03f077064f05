"""Shards versus the folder: packing time, launch to the first step, and epoch throughput, side by side.

The generated docs/data.md's advice on when to pack a folder comes from this run. It
generates a project from this checkout, writes an ImageFolder of small PNG
files (32 x 32, 10 classes; 100,000 to train and 10,000 to validate by
default) with at most two processes, packs it with the project's own
``pack-shards`` command, then runs ``train`` (simple_cnn, one epoch) from the
folder and from the shards, with 0 and 2 loader workers, and measures:

  - packing: the wall time of ``pack-shards`` (listing, per-file checks, writing);
  - launch to the start line, and to the first step: ``train`` is started,
    and stopped with SIGTERM when it prints its start-up line (it then
    checkpoints after the next step and exits 75): the setup that the folder
    and the shards do differently (listing, checks, reading every image for
    ``data.cache: auto``);
  - epoch throughput: the training epoch's ``images_per_second`` in
    metrics.jsonl, with ``data.cache: none`` (every image read and decoded in
    the loader, from its file or from its shard: the path that differs);
  - disk: the bytes each takes on disk (blocks allocated) and their apparent size.

Every process runs with OMP_NUM_THREADS=1 (a shared 2-core machine). The
files are in the page cache for both (written just before): on a network file
system the folder's listing and opens cost more, the shards' less.

    .venv/bin/python benchmarks/shards.py [--quick] [--images 100000] [--out .bench/shards.json]

``--quick`` (200 images, the `data.cache: none` starts only) checks that the benchmark still runs; the test suite
calls it so.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
CLASSES = 10
SIZE = 32


def generated_project(tmp: Path) -> tuple[Path, str]:
    from copier import run_copy

    package = "bench_shards"
    answers = {"project_name": package, "package_name": package, "model": "simple_cnn", "image_size": SIZE}
    run_copy(str(REPO), tmp / package, data=answers, defaults=True, unsafe=True, quiet=True, vcs_ref="HEAD")
    return tmp / package, package


def draw_class(job: tuple[Path, int, int, int]) -> None:
    """One class folder (a pool's task): a class colour plus noise, so that the classes can be learned."""
    folder, label, count, seed = job
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    colour = np.array([(label * 37) % 256, (label * 91) % 256, (label * 173) % 256], dtype=np.int16)
    for index in range(count):
        noise = rng.integers(-40, 41, size=(SIZE, SIZE, 3), dtype=np.int16)
        Image.fromarray(np.clip(colour + noise, 0, 255).astype(np.uint8)).save(folder / f"{index:06d}.png")


def write_data(root: Path, train: int, val: int) -> float:
    """Returns the seconds it took (two processes at most: a shared machine)."""
    started = time.perf_counter()
    jobs = [
        (root / split / f"class_{label}", label, count // CLASSES, seed)
        for seed, (split, count, label) in enumerate(
            (split, count, label) for split, count in (("train", train), ("val", val)) for label in range(CLASSES)
        )
    ]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(draw_class, jobs)
    return time.perf_counter() - started


def disk(root: Path) -> dict[str, int]:
    """Blocks allocated (what the disk gives up) and the files' own sizes."""
    allocated = apparent = files = 0
    for folder, _, names in os.walk(root):
        for name in names:
            info = os.stat(os.path.join(folder, name))
            allocated, apparent, files = allocated + info.st_blocks * 512, apparent + info.st_size, files + 1
    return {"allocated_bytes": allocated, "apparent_bytes": apparent, "files": files}


def environment(project: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(project / "src"), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def command(package: str, *args: str) -> list[str]:
    return [sys.executable, "-m", package, *args]


def pack(project: Path, package: str, data: Path, out: Path) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run(
        command(package, "pack-shards", str(data), str(out)), env=environment(project), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return time.perf_counter() - started, result.stdout.strip().splitlines()[-1]


def train_args(root: Path, out: Path, workers: int, cache: str, epochs: int = 1) -> list[str]:
    overrides = [
        f"data.root={root}", f"train.out_dir={out}", f"data.num_workers={workers}", f"data.cache={cache}",
        "model.name=simple_cnn", f"data.image_size={SIZE}", "data.batch_size=128", f"train.epochs={epochs}",
        "train.progress=false", "train.device=cpu",
    ]  # fmt: skip
    return ["train", "--config", "", *[a for kv in overrides for a in ("--set", kv)]]


def first_step(project: Path, package: str, root: Path, out: Path, workers: int, cache: str) -> dict[str, float]:
    """Launch to the start-up line, and to the exit after a SIGTERM sent then (a checkpoint after the next step)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command(package, *train_args(root, out, workers, cache)),
        env=environment(project),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    start_line = None
    for line in process.stdout:  # type: ignore[union-attr]
        if line.startswith("start: "):  # training.startup: said just before the first epoch
            start_line = time.perf_counter() - started
            time.sleep(0.2)  # the stop handler is installed just after the start line is printed
            process.send_signal(signal.SIGTERM)
            break
    process.communicate()
    stopped = time.perf_counter() - started
    # 75: stopped after the first step(s); 0: a run so short (--quick) that it ended first.
    assert start_line is not None and process.returncode in (0, 75), f"exit {process.returncode}"
    return {"start_line_s": round(start_line, 2), "first_step_s": round(stopped, 2)}


def epoch(project: Path, package: str, root: Path, out: Path, workers: int) -> dict[str, float]:
    """One epoch streamed from the files or the shards (data.cache=none): its training images per second."""
    started = time.perf_counter()
    result = subprocess.run(
        command(package, *train_args(root, out, workers, "none")),
        env=environment(project),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    return {
        "images_per_second": round(row["images_per_second"], 1),
        "epoch_seconds": round(row["epoch_seconds"], 1),
        "run_seconds": round(time.perf_counter() - started, 1),
    }


def cpu() -> dict[str, Any]:
    """The CPU's model name and whether it has the bf16 / AMX instructions (lscpu's flags)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return {"model": "unknown"}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    flags = fields.get("Flags", "").split()
    return {
        "model": fields.get("Model name", "unknown").strip(),
        "avx512_bf16": "avx512_bf16" in flags,
        "amx": any(flag.startswith("amx") for flag in flags),
        "cores": len(os.sched_getaffinity(0)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 images: checks that the script runs")
    parser.add_argument("--images", type=int, default=100_000, help="training images (val: a tenth as many)")
    parser.add_argument("--workers", default="0,2", help="loader workers to measure, comma-separated")
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "shards.json")
    args = parser.parse_args()
    images = 200 if args.quick else args.images
    workers = [0] if args.quick else [int(w) for w in args.workers.split(",")]
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        project, package = generated_project(tmp)
        data, packed = tmp / "data", tmp / "packed"
        result: dict[str, Any] = {"cpu": cpu(), "train_images": images, "val_images": images // 10}
        result["write_seconds"] = round(write_data(data, images, images // 10), 1)
        result["pack_seconds"], result["pack_line"] = pack(project, package, data, packed)
        result["pack_seconds"] = round(result["pack_seconds"], 1)
        result["disk"] = {"folder": disk(data), "shards": disk(packed)}
        rows = []
        for source, root in (("folder", data), ("shards", packed)):
            for count in workers:
                row: dict[str, Any] = {"source": source, "workers": count}
                # auto decodes every image first: timed once per source (not in --quick, which only checks a run)
                caches = ("auto", "none") if count == workers[0] and not args.quick else ("none",)
                for cache in caches:
                    timing = first_step(project, package, root, tmp / f"first-{source}-{count}-{cache}", count, cache)
                    row.update({f"{key}_cache_{cache}": value for key, value in timing.items()})
                row.update(epoch(project, package, root, tmp / f"epoch-{source}-{count}", count))
                rows.append(row)
                print(json.dumps(row), flush=True)
        result["runs"] = rows
    print(json.dumps({key: value for key, value in result.items() if key != "runs"}, indent=2))
    columns = list(dict.fromkeys(column for row in rows for column in row))
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(str(row.get(column, "")) for column in columns))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
