"""Validation and test accuracy of the default config against ``configs/recipes/strong.yaml``, same epochs.

Two offline data sets: the generated project's sample shapes, and scikit-learn's
handwritten digits (1,797 real 8x8 scans shipped inside the package, written
here as 32x32 PNGs in train/val/test folders). Needs ``pip install
scikit-learn`` beside the dev environment; nothing is downloaded.

    .venv/bin/python benchmarks/recipe_accuracy.py [--epochs 15] [--data digits] [--recipe strong]
        [--out .bench/recipe_accuracy.json]

``--quick`` (one epoch on 40 shapes a class, digits only where scikit-learn
is installed) only checks that the benchmark still runs; the test suite
calls it so.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from copier import run_copy
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "bench_recipe"


def write_digits(root: Path) -> Path:
    """sklearn's digits as an ImageFolder: 60% train, 20% val, 20% test, split by a fixed permutation."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    cut = [int(len(order) * 0.6), int(len(order) * 0.8)]
    for split, indices in zip(("train", "val", "test"), np.split(order, cut), strict=True):
        for index in indices:
            folder = root / split / str(digits.target[index])
            folder.mkdir(parents=True, exist_ok=True)
            pixels = (digits.images[index] * (255 / 16)).astype(np.uint8)  # 0..16 grey levels
            Image.fromarray(pixels).resize((32, 32), Image.Resampling.BILINEAR).save(folder / f"{index}.png")
    return root


def run(project: Path, root: Path, recipe: str | None, epochs: int, out: Path, image_size: int) -> dict[str, Any]:
    config = importlib.import_module(f"{PACKAGE}.config")
    trainer = importlib.import_module(f"{PACKAGE}.trainer")
    files = [project / "configs" / "default.yaml"] + ([project / "configs" / "recipes" / recipe] if recipe else [])
    settings = [f"data.root={root}", f"train.epochs={epochs}", f"train.out_dir={out}", "train.progress=false"]
    cfg = config.load_config(files, [*settings, f"data.image_size={image_size}"])
    start = time.perf_counter()
    trainer.train(cfg)
    seconds = time.perf_counter() - start
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    test = out / "test_metrics.json"
    return {
        "recipe": recipe or "default",
        "final_val_acc": rows[-1]["val_acc"],
        "best_val_acc": max(row["val_acc"] for row in rows),
        "test_acc": json.loads(test.read_text())["test_acc"] if test.is_file() else None,
        "seconds_per_epoch": round(sum(row["epoch_seconds"] for row in rows) / len(rows), 2),
        "wall_seconds": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "recipe_accuracy.json")
    parser.add_argument("--quick", action="store_true", help="one epoch on little data: checks that it runs")
    parser.add_argument("--data", nargs="+", choices=("shapes", "digits"), default=["shapes", "digits"])
    parser.add_argument("--recipe", nargs="+", choices=("default", "strong"), default=["default", "strong"])
    args = parser.parse_args()
    epochs = 1 if args.quick else args.epochs
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / PACKAGE
        run_copy(
            str(REPO),
            project,
            data={"project_name": PACKAGE, "package_name": PACKAGE},
            defaults=True,
            unsafe=True,
            quiet=True,
            vcs_ref="HEAD",
        )
        sys.path.insert(0, str(project / "src"))
        sample = importlib.import_module(f"{PACKAGE}.sample_data")
        per_class = (40, 10) if args.quick else (200, 50)
        makers = {"shapes": (lambda: sample.write_sample_data(Path(tmp) / "shapes", *per_class), 64)}
        makers["digits"] = (lambda: write_digits(Path(tmp) / "digits"), 32)
        if args.quick and importlib.util.find_spec("sklearn") is None:
            args.data = [name for name in args.data if name != "digits"]  # digits need scikit-learn
        datasets = {name: (makers[name][0](), makers[name][1]) for name in args.data}
        for name, (root, size) in datasets.items():
            for recipe in [None if name == "default" else f"{name}.yaml" for name in args.recipe]:
                out = Path(tmp) / f"run-{name}-{recipe or 'default'}"
                result = {"data": name, **run(project, root, recipe, epochs, out, size)}
                print(json.dumps(result), flush=True)
                results.append(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print("\ndata | recipe | best val_acc | final val_acc | test_acc | s/epoch")
    for r in results:
        test = f"{100 * r['test_acc']:.1f}%" if r["test_acc"] is not None else "-"
        print(
            f"{r['data']} | {r['recipe']} | {100 * r['best_val_acc']:.1f}% | {100 * r['final_val_acc']:.1f}% | "
            f"{test} | {r['seconds_per_epoch']}"
        )


if __name__ == "__main__":
    main()
