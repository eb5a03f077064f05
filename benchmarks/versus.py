"""The default config's training speed at two git refs of this repository, side by side in one run.

Generates a project from each ref, trains both on the same sample data, and
interleaves the runs (A, B, A, B, ...) so that a busy machine slows both
alike; prints each run's images per second (epochs after the first) and the
median ratio. Use it to check that a change keeps the default recipe as fast.

    .venv/bin/python benchmarks/versus.py OLD_REF [NEW_REF] [--rounds 3] [--epochs 3]

``--quick`` (one round, two epochs of a tiny model on 40 images a class)
only checks that the benchmark still runs; the test suite calls it so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from copier import run_copy

REPO = Path(__file__).resolve().parents[1]


QUICK = ["data.image_size=32", "model.widths=[8,16]", "model.blocks_per_stage=1"]  # --quick: seconds, not a figure


def images_per_second(project: Path, package: str, data: Path, out: Path, epochs: int, extra: list[str]) -> float:
    sets = [f"data.root={data}", f"train.out_dir={out}", f"train.epochs={epochs}", "train.progress=false", *extra]
    command = [sys.executable, "-m", package, "train", "--config", "configs/default.yaml"]
    command += [a for kv in sets for a in ("--set", kv)]
    env = {**os.environ, "PYTHONPATH": str(project / "src")}
    subprocess.run(command, cwd=project, env=env, check=True, capture_output=True)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return statistics.mean(row["images_per_second"] for row in rows[1:])  # the first epoch warms up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new", nargs="?", default="HEAD")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round of a tiny run: checks that it runs")
    parser.add_argument("--out", type=Path, help="also write the rates and ratios as JSON here")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.epochs = 1, 2
    sample = ["--train-per-class", "40", "--val-per-class", "10"] if args.quick else []
    with tempfile.TemporaryDirectory() as tmp:
        projects = {}
        for name, ref in (("old", args.old), ("new", args.new)):
            package = f"versus_{name}"
            projects[name] = (Path(tmp) / package, package)
            run_copy(str(REPO), projects[name][0], data={"project_name": package, "package_name": package},
                     defaults=True, unsafe=True, quiet=True, vcs_ref=ref)  # fmt: skip
        project, package = projects["old"]
        data = Path(tmp) / "data"
        subprocess.run([sys.executable, "-m", package, "sample-data", str(data), *sample], cwd=project, check=True,
                       env={**os.environ, "PYTHONPATH": str(project / "src")}, capture_output=True)  # fmt: skip
        rates: dict[str, list[float]] = {"old": [], "new": []}
        for round_ in range(args.rounds):
            for name, (project, package) in projects.items():
                out = Path(tmp) / f"run-{name}-{round_}"
                extra = QUICK if args.quick else []
                rates[name].append(images_per_second(project, package, data, out, args.epochs, extra))
                print(f"round {round_ + 1} {name} ({getattr(args, name)}): {rates[name][-1]:.1f} img/s", flush=True)
    ratios = [new / old for old, new in zip(rates["old"], rates["new"], strict=True)]
    print(f"new/old images per second: median {statistics.median(ratios):.3f} (each round: "
          + ", ".join(f"{r:.3f}" for r in ratios) + ")")  # fmt: skip
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rates": rates, "ratios": ratios}, indent=2) + "\n")


if __name__ == "__main__":
    main()
