"""Validation and test accuracy of the default config against ``configs/recipes/strong.yaml``, same epochs.

Offline data sets: the generated project's sample shapes; scikit-learn's
handwritten digits (1,797 real 8x8 scans shipped inside the package, written
here as 32x32 PNGs in train/val/test folders, trained with ``data.flip=false``
as the docs say for digits); and ``patches``, four textures (brick, grass,
gravel, moon) cut from photographs bundled in scikit-image's wheel as
grayscale JPEGs of mixed sizes, 60/20/20 a class, like a user's first few
hundred photos; and ``photos``, ten colour photographs that ship in
matplotlib, scikit-learn and scikit-image, 50 camera-written JPEG crops a
class to train and 40 from other regions to validate (``real_photos.py``,
the fine-tuning benchmark's set). scikit-learn and scikit-image are in the
dev environment; nothing is downloaded.

    .venv/bin/python benchmarks/recipe_accuracy.py [--epochs 15] [--data digits patches] [--recipe strong]
        [--seeds 0 1 2] [--set optim.lr=0.05 ...] [--out benchmarks/results/recipe_accuracy.json]

``--seeds``: one run per ``train.seed`` (initial weights, augmentation and
order; the data split stays the same), so a difference can be told from
the spread between seeds: on 80 validation images one image is 1.25 points.

``benchmarks/results/recipe_accuracy.json`` holds the rows the "Training
recipe" tables of a generated project's docs/training.md show (tests/test_docs.py checks they
agree; ``--tables`` says which table a row belongs to). ``--quick`` (one
epoch, 40 shapes a class, digits and patches where their package is
installed) only checks that the benchmark still runs; the test suite calls
it so.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from copier import run_copy
from PIL import Image
from real_photos import make_set  # sibling scripts: benchmarks/ is on the path of a script run from it
from startup import cpu_name

REPO = Path(__file__).resolve().parents[1]
# The template commit the project is generated from (its HEAD): a row can be measured again from it.
TEMPLATE_COMMIT = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
PACKAGE = "bench_recipe"
PATCH_CLASSES = ("brick", "grass", "gravel", "moon")


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


def write_patches(root: Path, seed: int = 0) -> Path:
    """Four textures cut from scikit-image's bundled photographs as grayscale JPEGs of mixed sizes.

    Each photograph is split in horizontal bands (top 60% train, next 20% val,
    last 20% test) so that no two splits share a pixel; from its band each
    split gets 60 / 20 / 20 patches, each 40 to 96 pixels wide and high,
    at a place and size drawn from ``seed``.
    """
    import skimage.data

    rng = np.random.default_rng(seed)
    bands = {"train": (0.0, 0.6, 60), "val": (0.6, 0.8, 20), "test": (0.8, 1.0, 20)}
    for name in PATCH_CLASSES:
        photo = getattr(skimage.data, name)()  # 512 x 512 uint8, shipped in the wheel: no download
        for split, (top, bottom, count) in bands.items():
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            rows = (int(top * photo.shape[0]), int(bottom * photo.shape[0]))
            for index in range(count):
                height = int(rng.integers(40, min(97, rows[1] - rows[0] + 1)))
                width = int(rng.integers(40, 97))
                y = int(rng.integers(rows[0], rows[1] - height + 1))
                x = int(rng.integers(0, photo.shape[1] - width + 1))
                Image.fromarray(photo[y : y + height, x : x + width]).save(folder / f"{index}.jpg", quality=90)
    return root


def run(project: Path, root: Path, recipe: str | None, epochs: int, out: Path, settings: list[str]) -> dict[str, Any]:
    config = importlib.import_module(f"{PACKAGE}.core.config")
    trainer = importlib.import_module(f"{PACKAGE}.training.trainer")
    files = [project / "configs" / "default.yaml"] + ([project / "configs" / "recipes" / recipe] if recipe else [])
    common = [f"data.root={root}", f"train.epochs={epochs}", f"train.out_dir={out}", "train.progress=false"]
    cfg = config.load_config(files, [*common, *settings])
    start = time.perf_counter()
    trainer.train(cfg)
    seconds = time.perf_counter() - start
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    test = out / "test_metrics.json"
    return {
        "recipe": recipe or "default",
        "lr": cfg.optim.lr,
        "batch_size": cfg.data.batch_size,
        "final_val_acc": rows[-1]["val_acc"],
        "best_val_acc": max(row["val_acc"] for row in rows),
        "test_acc": json.loads(test.read_text())["test_acc"] if test.is_file() else None,
        "seconds_per_epoch": round(sum(row["epoch_seconds"] for row in rows) / len(rows), 2),
        "wall_seconds": round(seconds, 1),
        "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
        "commit": TEMPLATE_COMMIT,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "recipe_accuracy.json")
    parser.add_argument("--quick", action="store_true", help="one epoch on little data: checks that it runs")
    parser.add_argument("--data", nargs="+", choices=("shapes", "digits", "patches", "photos"))
    parser.add_argument(
        "--set", nargs="*", default=[], help="extra KEY=VALUE settings for every run, e.g. optim.lr=0.05"
    )
    parser.add_argument("--recipe", nargs="+", choices=("default", "strong"), default=["default", "strong"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="one run per train.seed")
    parser.add_argument(
        "--tables", nargs="*", choices=("recipe", "sweep", "ablation"), default=["recipe"],
        help="the generated docs/training.md's tables these rows belong to, once in benchmarks/results",
    )  # fmt: skip
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
        sample = importlib.import_module(f"{PACKAGE}.data.files.sample_data")
        per_class = (40, 10) if args.quick else (200, 50)
        photos = (4, 2) if args.quick else (50, 40)  # training and validation photos a class
        # data set -> (writer, settings both recipes get); digits must not be mirrored, as the docs tell users
        makers: dict[str, tuple[Callable[[], Path], list[str]]] = {
            "shapes": (lambda: sample.write_sample_data(Path(tmp) / "shapes", *per_class), ["data.image_size=64"]),
            "digits": (lambda: write_digits(Path(tmp) / "digits"), ["data.image_size=32", "data.flip=false"]),
            "patches": (lambda: write_patches(Path(tmp) / "patches"), ["data.image_size=64"]),
            "photos": (lambda: make_set(Path(tmp) / "photos", *photos), ["data.image_size=64"]),
        }
        if args.data is None and args.quick:
            # digits and patches need scikit-learn and scikit-image: quick runs those that are installed
            needs = {"digits": "sklearn", "patches": "skimage", "photos": "skimage"}
            args.data = [name for name in makers if importlib.util.find_spec(needs.get(name, "numpy"))]
        for name in args.data or ["digits", "patches"]:
            write, settings = makers[name]
            root = write()
            for recipe in [None if r == "default" else f"{r}.yaml" for r in args.recipe]:
                for seed in args.seeds:
                    out = Path(tmp) / f"run-{name}-{recipe or 'default'}-{seed}"
                    result = {
                        "data": name,
                        "epochs": epochs,
                        "seed": seed,
                        **run(project, root, recipe, epochs, out, [*settings, f"train.seed={seed}", *args.set]),
                    }
                    result.update(settings=args.set, tables=args.tables)
                    print(json.dumps(result), flush=True)
                    results.append(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print("\ndata | recipe | seed | best val_acc | final val_acc | test_acc | s/epoch")
    for r in results:
        test = f"{100 * r['test_acc']:.1f}%" if r["test_acc"] is not None else "-"
        print(
            f"{r['data']} | {r['recipe']} | {r['seed']} | {100 * r['best_val_acc']:.1f}% | "
            f"{100 * r['final_val_acc']:.1f}% | {test} | {r['seconds_per_epoch']}"
        )


if __name__ == "__main__":
    main()
