"""What a mid-epoch checkpoint costs: time per checkpoint against time per step and per epoch.

Generates a project from this checkout, makes its sample data, and for each
model times one training epoch and the trainer's own ``save`` of a mid-epoch
checkpoint (median of several), side by side in one run. Prints a table and
writes it as JSON.

    .venv/bin/python benchmarks/checkpoint_cost.py [--models simple_cnn resnet18] [--out .bench/checkpoint_cost.json]

``--quick`` only checks that the benchmark still runs; the test suite calls it so.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from copier import run_copy

REPO = Path(__file__).resolve().parents[1]


def generate(dest: Path) -> None:
    run_copy(str(REPO), dest, data={"project_name": "Bench", "package_name": "bench_pkg"}, defaults=True,
             unsafe=True, quiet=True, vcs_ref="HEAD")  # fmt: skip


def measure(package: str, data: Path, out: Path, model: str, repeats: int) -> dict[str, float | int | str]:
    config = importlib.import_module(f"{package}.core.config")
    trainer_module = importlib.import_module(f"{package}.training.trainer")
    engine = importlib.import_module(f"{package}.training.engine")
    cfg = config.load_config(None, [f"data.root={data}", f"model.name={model}", f"train.out_dir={out / model}",
                                    "train.epochs=1", "train.progress=false", "train.keep_last=0"])  # fmt: skip
    trainer = trainer_module.Trainer(cfg)
    progress = trainer.state.restore(None)
    trainer.batches.set_epoch(1)
    start = time.perf_counter()
    totals = progress.totals = engine.EpochTotals.zeros(trainer.compute.device)  # a mid-epoch checkpoint holds the sums
    trainer.wrapped.train()
    for inputs, labels, targets in trainer.batches:  # the batch loop of Trainer.fit, without its decisions
        loss, logits = engine.train_step(trainer.wrapped, inputs, labels, trainer.parts, trainer.compute, cfg.train)
        totals.add(loss, logits, targets)
    epoch_seconds = time.perf_counter() - start
    saves = []
    for _ in range(repeats):
        start = time.perf_counter()
        path = trainer.state.save(progress)
        saves.append(time.perf_counter() - start)
    trainer.close("FINISHED")
    save_seconds = statistics.median(saves)
    step_seconds = epoch_seconds / trainer.steps_per_epoch
    return {
        "model": model,
        "checkpoint_mb": round(path.stat().st_size / 2**20, 2),
        "steps_per_epoch": trainer.steps_per_epoch,
        "epoch_s": round(epoch_seconds, 3),
        "step_s": round(step_seconds, 4),
        "checkpoint_s": round(save_seconds, 4),
        "checkpoint_per_step": round(save_seconds / step_seconds, 3),
        "checkpoint_per_epoch": round(save_seconds / epoch_seconds, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["simple_cnn", "resnet18"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "checkpoint_cost.json")
    parser.add_argument("--quick", action="store_true", help="simple_cnn on 40 images a class, 2 saves: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.models, args.repeats = ["simple_cnn"], 2
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "bench"
        generate(project)
        sys.path.insert(0, str(project / "src"))
        sample = importlib.import_module("bench_pkg.data.files.sample_data")
        per_class = (40, 10) if args.quick else (200, 50)
        data = sample.write_sample_data(Path(tmp) / "data", *per_class)
        rows = [measure("bench_pkg", data, Path(tmp) / "runs", model, args.repeats) for model in args.models]
    columns = list(rows[0])
    print("  ".join(f"{c:>20}" for c in columns))
    for row in rows:
        print("  ".join(f"{row[c]!s:>20}" for c in columns))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
