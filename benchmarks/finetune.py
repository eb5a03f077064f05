"""Fine-tuning against training from scratch, head-only against full, on photos that ship with matplotlib.

No weights can be downloaded where this runs, so the nearest thing to published
weights is a checkpoint of another task on the same kind of images. From
matplotlib's ``sample_data/grace_hopper.jpg`` (a 512 x 600 photo) it makes two
tasks of 8 classes each, on a 4 x 4 grid of the photo's regions: a source task
(the even cells; ``--source-per-class`` images each, 100, and 20 to
validate) and a target task (the odd cells, ``--target-train`` images each,
4 and 16, and 16 to validate: a first try on one's own photos). Every image is a random crop of its
cell (30 to 100 % of its area), flipped half the time, its brightness,
contrast, saturation and hue changed at random, saved as a 64 px JPEG.

It generates a project from this checkout, trains the source task from
scratch (torchvision's resnet18, the project's ``train`` command), then the
target task four ways, each with ``model.pretrained_weights`` set to the source
run's ``best.pt`` (its backbone, the head left fresh) or not:

  scratch:   no weights, every layer trains (AdamW 0.002, the README's best from scratch);
  head only: the backbone frozen (``model.freeze_backbone``), in eval mode;
  full:      every layer trains, the backbone at a tenth of the head's lr (``optim.backbone_lr_scale``);
  head, then full: frozen until epoch 6 (``model.unfreeze_at_epoch``), then as full.

It prints, for each way and target size, the validation accuracy after the
first and third epochs (how fast it gets there), the best and the last, and
the fastest epoch's seconds, averaged over ``--seeds``, and writes them (each
run's curve too) to ``--out``.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/finetune.py [--seeds 0 1] [--epochs 15] [--source-epochs 10]
        [--out benchmarks/results/finetune.json]

One thread, as ``make test`` runs: on a shared 2-core machine two threads spun against the other jobs' processes
and took 2 to 4 times longer (resnet18 at 64 px: 18 against 5 images/s at a load average of 10).

``--quick`` (a few images, one epoch) only checks that it runs; the test suite calls it so.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from generated import import_generated  # sibling scripts: benchmarks/ is on the path of a script run from it
from PIL import Image, ImageEnhance
from startup import cpu_name

REPO = Path(__file__).resolve().parents[1]
PHOTO = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
GRID = 4  # the photo's regions: GRID x GRID cells
SIZE = 64  # pixels of each saved image
COMMON = [
    "model.name=resnet18", "optim.name=adamw", "optim.lr=0.002", "optim.weight_decay=0.05",
    f"data.image_size={SIZE}", "data.batch_size=32", "train.progress=false",
]  # fmt: skip
WAYS = {  # the target task's settings beside COMMON; "weights": start from the source run's best.pt
    "scratch": {"weights": False, "sets": []},
    "head only": {"weights": True, "sets": ["model.freeze_backbone=true"]},
    "full": {"weights": True, "sets": ["optim.backbone_lr_scale=0.1"]},
    "head, then full": {
        "weights": True,
        "sets": ["model.freeze_backbone=true", "model.unfreeze_at_epoch=6", "optim.backbone_lr_scale=0.1"],
    },
}


def cells(photo: Image.Image) -> list[tuple[int, int, int, int]]:
    """The GRID x GRID boxes (left, top, right, bottom) of the photo, row by row."""
    width, height = photo.size
    return [
        (col * width // GRID, row * height // GRID, (col + 1) * width // GRID, (row + 1) * height // GRID)
        for row in range(GRID)
        for col in range(GRID)
    ]


def variant(photo: Image.Image, box: tuple[int, int, int, int], rng: np.random.Generator) -> Image.Image:
    """A random crop of ``box`` (30-100 % of its area, its own aspect), flipped or not, its colours changed."""
    left, top, right, bottom = box
    scale = np.sqrt(rng.uniform(0.3, 1.0))
    width, height = max(8, int((right - left) * scale)), max(8, int((bottom - top) * scale))
    x, y = int(rng.integers(left, right - width + 1)), int(rng.integers(top, bottom - height + 1))
    image = photo.crop((x, y, x + width, y + height)).resize((SIZE, SIZE), Image.Resampling.BILINEAR)
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    for enhance in (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color):
        image = enhance(image).enhance(rng.uniform(0.6, 1.4))
    hue, saturation, value = image.convert("HSV").split()
    shift = int(rng.integers(-20, 21))  # of 256: about +-28 degrees
    hue = hue.point(lambda h: (h + shift) % 256)
    return Image.merge("HSV", (hue, saturation, value)).convert("RGB")


def write_task(root: Path, photo: Image.Image, classes: list[int], per_class: tuple[int, int], seed: int) -> Path:
    """``root/train`` and ``root/val``, one folder per cell in ``classes``, JPEG files."""
    rng = np.random.default_rng(seed)
    boxes = cells(photo)
    for split, count in zip(("train", "val"), per_class, strict=True):
        for cell in classes:
            folder = root / split / f"cell{cell:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(count):
                variant(photo, boxes[cell], rng).save(folder / f"{index:04d}.jpg", quality=90)
    return root


def train(package: Any, data: Path, out: Path, sets: list[str]) -> dict[str, Any]:
    """The project's train command, in this process; its metrics and wall time."""
    overrides = [*COMMON, f"data.root={data}", f"train.out_dir={out}", *sets]
    args = ["train", "--config", "", *[a for kv in overrides for a in ("--set", kv)]]
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()) as said:
        assert package.cli.main(args) == 0, said.getvalue()[-2000:]
    seconds = time.perf_counter() - started
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    model_line = next((line for line in said.getvalue().splitlines() if line.startswith("model: ")), "")
    return {
        "best_val_acc": max(r["val_acc"] for r in rows),
        "last_val_acc": rows[-1]["val_acc"],
        "val_acc_by_epoch": [r["val_acc"] for r in rows],
        "seconds": seconds,
        # The fastest epoch: on a shared machine other work only slows an epoch down (as throughput.py's windows).
        "fastest_epoch_s": min(r["epoch_seconds"] for r in rows),
        "model_line": model_line,
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over the seeds; the accuracy after the first and third epochs says how fast each way gets there."""
    keys = ("best_val_acc", "last_val_acc", "seconds", "fastest_epoch_s")
    means = {key: statistics.mean(run[key] for run in runs) for key in keys}
    for epoch in (1, 3):
        means[f"val_acc_epoch_{epoch}"] = statistics.mean(
            run["val_acc_by_epoch"][min(epoch, len(run["val_acc_by_epoch"])) - 1] for run in runs
        )
    return means | {"runs": runs}


def machine() -> dict[str, Any]:
    """Where the figures come from: the CPU, its cores and threads, and how busy the machine was."""
    import torch

    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "load_average_at_start": os.getloadavg(),
        "torch": torch.__version__,
    }


def run(package: Any, tmp: Path, photo: Image.Image, args: argparse.Namespace) -> dict[str, Any]:
    source_classes, target_classes = list(range(0, GRID * GRID, 2)), list(range(1, GRID * GRID, 2))
    report: dict[str, Any] = {"machine": machine(), "settings": {k: v for k, v in vars(args).items() if k != "out"}}
    per_way: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for seed in args.seeds:
        source = write_task(tmp / f"source-{seed}", photo, source_classes, (args.source_per_class, 20), seed)
        epochs, seeded = f"train.epochs={args.epochs}", f"train.seed={seed}"
        pretrain = train(package, source, tmp / f"source-run-{seed}", [f"train.epochs={args.source_epochs}", seeded])
        report.setdefault("source", []).append(pretrain)
        print(f"seed {seed} source task: best val_acc {100 * pretrain['best_val_acc']:.1f}% "
              f"in {pretrain['seconds']:.0f} s", flush=True)  # fmt: skip
        for size in args.target_train:
            target = write_task(
                tmp / f"target-{seed}-{size}", photo, target_classes, (size, args.target_val), 100 + seed
            )
            for way, setting in WAYS.items():
                weights = [f"model.pretrained_weights={tmp / f'source-run-{seed}' / 'best.pt'}"] * setting["weights"]
                out = tmp / f"target-{seed}-{size}-{way.replace(' ', '_').replace(',', '')}"
                result = train(package, target, out, [epochs, seeded, *weights, *setting["sets"]])
                per_way.setdefault((size, way), []).append(result)
                print(f"seed {seed} {size:>3} a class  {way:<16} best val_acc {100 * result['best_val_acc']:5.1f}%  "
                      f"last {100 * result['last_val_acc']:5.1f}%  {result['seconds']:.0f} s", flush=True)  # fmt: skip
    report["ways"] = [{"train_per_class": size, "way": way, **summary(runs)} for (size, way), runs in per_way.items()]
    report["load_average_at_end"] = os.getloadavg()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--epochs", type=int, default=15, help="of each target run")
    parser.add_argument("--source-epochs", type=int, default=10)
    parser.add_argument("--source-per-class", type=int, default=100)
    parser.add_argument("--target-train", type=int, nargs="+", default=[4, 16], help="training images a class")
    parser.add_argument("--target-val", type=int, default=16, help="validation images a class")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "finetune.json")
    parser.add_argument("--quick", action="store_true", help="a few images, one epoch, one seed: checks that it runs")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.epochs, args.source_epochs, args.source_per_class = [0], 1, 1, 4
        args.target_train, args.target_val = [2], 2
    photo = Image.open(PHOTO).convert("RGB")
    with tempfile.TemporaryDirectory() as tmp:
        package = import_generated(Path(tmp) / "project", "Finetune", "finetune_pkg")
        report = run(package, Path(tmp), photo, args)
    print(f"\n{'a class':>7} {'way':<16} {'epoch 1':>8} {'epoch 3':>8} {'best':>8} {'last':>8} {'epoch s':>8}")
    for row in report["ways"]:
        accuracies = [row[key] for key in ("val_acc_epoch_1", "val_acc_epoch_3", "best_val_acc", "last_val_acc")]
        print(f"{row['train_per_class']:>7} {row['way']:<16} " + " ".join(f"{100 * a:7.1f}%" for a in accuracies)
              + f" {row['fastest_epoch_s']:8.2f}")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
