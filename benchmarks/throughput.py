"""Training throughput, side by side in one run: compute bound, generated trainer, naive loop.

For each model it generates a project from this checkout, writes an
ImageFolder of PNG files, and measures images per second of:

  (a) compute-only bound: the model's training step on synthetic uint8 tensors
      already in memory, in the fastest of fp32/bf16 x contiguous/channels_last
      for this hardware, timed in windows of one epoch's steps;
  (b) the generated trainer's steady-state epochs (after its first) on the PNG files,
      with the default ``auto`` settings (``data.pipeline: auto`` takes the
      batch path: uint8 squares, crops and flips per batch on the device), and
      the share of that epoch spent loading data (one epoch of the same loader
      and batch augmentation, timed alone);
  (c) a naive loop in the style of the reference imagenet example: ToTensor +
      Normalize in a default DataLoader, fp32, contiguous memory, ``.item()``
      every step, one epoch at a time.

Each column is the fastest of ``ROUNDS`` equal windows (one epoch of steps):
on a shared machine other processes can only slow a window down, so the
fastest is the closest to the machine's own speed, for all three alike.

    .venv/bin/python benchmarks/throughput.py [--quick] [--out .bench/throughput.json]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from copier import run_copy
from torch import nn
from torch.utils.data import DataLoader
from torchvision import datasets, models, transforms

REPO = Path(__file__).resolve().parents[1]
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


ROUNDS = 3  # every column is the best of this many windows of one epoch's steps: other load only slows a window


def timed_steps(step: Callable[[], None], warmup: int, steps: int, rounds: int = 1) -> float:
    """Seconds per step after ``warmup`` steps: the fastest of ``rounds`` windows of ``steps`` steps."""
    for _ in range(warmup):
        step()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - start) / steps)
    return best


def training_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, targets: torch.Tensor, cast: Any
) -> Callable[[], None]:
    def step() -> None:
        with cast:
            loss = nn.functional.cross_entropy(model(x), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def compute_bound(package: str, cfg: Any, classes: int, steps: int) -> tuple[float, str]:
    """(a): the best precision and memory format, on tensors already in memory.

    Each setting is timed over one window; the fastest is then timed over ``ROUNDS`` more.
    """
    model_module = importlib.import_module(f"{package}.model")
    batch, size = cfg.data.batch_size, cfg.data.image_size
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8)
    targets = torch.randint(0, classes, (batch,))
    best: tuple[float, str, Callable[[], None] | None] = (0.0, "", None)
    for precision in ("fp32", "bf16"):
        for layout in (torch.contiguous_format, torch.channels_last):
            torch.manual_seed(0)
            model = model_module.build_model(cfg.model, classes).to(memory_format=layout).train()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            x = images.contiguous(memory_format=layout)
            cast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
            step = training_step(model, optimizer, x, targets, cast)
            rate = batch / timed_steps(step, 2, steps)
            name = f"{precision}, {'channels_last' if layout == torch.channels_last else 'contiguous'}"
            print(f"    (a) {name}: {rate:.1f} img/s", flush=True)
            if rate > best[0]:
                best = (rate, name, step)
    rate, name, step = best
    assert step is not None
    rate = max(rate, batch / timed_steps(step, 0, steps, ROUNDS))
    print(f"    (a) {name}, best of {ROUNDS + 1} windows: {rate:.1f} img/s", flush=True)
    return rate, name


def generated_trainer(package: str, cfg: Any) -> tuple[float, float]:
    """(b): the fastest epoch after the first (workers warm), as metrics.jsonl reports it, and its seconds."""
    trainer = importlib.import_module(f"{package}.trainer")
    trainer.train(cfg)
    rows = [json.loads(line) for line in (Path(cfg.train.out_dir) / "metrics.jsonl").read_text().splitlines()]
    best = max(rows[1:], key=lambda row: row["images_per_second"])
    return best["images_per_second"], best["epoch_seconds"]


def loading_seconds(package: str, cfg: Any) -> float:
    """One training epoch of the trainer's own loader (and batch augmentation), without the model."""
    data = importlib.import_module(f"{package}.data")
    pipeline = importlib.import_module(f"{package}.pipeline")
    batch_augment = importlib.import_module(f"{package}.augment").BatchAugment
    augment = batch_augment(cfg.data, cfg.train.seed, 0, torch.channels_last)
    loader = data.build_loader(data.build_datasets(cfg)[0], cfg, torch.device("cpu"), train=True)
    batched = pipeline.batch_path(cfg.data)
    loader.sampler.set_epoch(2)
    start = time.perf_counter()
    for index, (images, _) in enumerate(loader):
        if batched:
            augment(images, 2, index)
    return time.perf_counter() - start


def naive_loop(root: Path, cfg: Any, classes: int, model_name: str, package: str) -> float:
    """(c): the reference imagenet example's loop, one epoch, its first steps left out of the timing."""
    size = cfg.data.image_size
    dataset = datasets.ImageFolder(
        str(root / "train"),
        transforms.Compose(
            [
                transforms.RandomResizedCrop(size),
                transforms.RandomHorizontalFlip(),
                transforms.ToTensor(),
                transforms.Normalize(MEAN, STD),
            ]
        ),
    )
    loader = DataLoader(dataset, batch_size=cfg.data.batch_size, shuffle=True)
    if model_name == "simple_cnn":
        model = importlib.import_module(f"{package}.model").build_model(cfg.model, classes)
    else:
        model = getattr(models, model_name)(num_classes=classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    best = 0.0
    for _ in range(ROUNDS):  # one epoch each, timed whole: loading included
        seen, start = 0, time.perf_counter()
        for images, targets in loader:
            loss = nn.functional.cross_entropy(model(images), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss.item()  # a host sync every step, as the reference example's meters do
            seen += len(targets)
        best = max(best, seen / (time.perf_counter() - start))
    return best


def measure(model_name: str, size: int, per_class: int, tmp: Path, steps: int) -> dict[str, Any]:
    package = f"bench_{model_name}_{size}"  # one package per row: importlib keeps each one it imported
    project = tmp / package
    answers = {"project_name": package, "package_name": package, "model": model_name, "image_size": size}
    run_copy(str(REPO), project, data=answers, defaults=True, unsafe=True, quiet=True, vcs_ref="HEAD")
    sys.path.insert(0, str(project / "src"))
    sample = importlib.import_module(f"{package}.sample_data")
    root = sample.write_sample_data(tmp / f"data_{package}", per_class, 4, image_size=size)
    config = importlib.import_module(f"{package}.config")
    cfg = config.load_config(
        project / "configs" / "default.yaml",
        [
            f"data.root={root}",
            f"train.epochs={ROUNDS + 1}",  # the first epoch warms up; the fastest of the others counts
            f"train.out_dir={tmp / ('run_' + package)}",
            "train.progress=false",
        ],
    )
    print(f"{model_name} at {size}x{size}, batch {cfg.data.batch_size}, {4 * per_class} training PNGs", flush=True)
    a, best = compute_bound(package, cfg, 4, steps)
    b, epoch_seconds = generated_trainer(package, cfg)
    share = loading_seconds(package, cfg) / epoch_seconds
    print(f"    (b) generated trainer: {b:.1f} img/s, data loading {100 * share:.0f}% of its epoch", flush=True)
    c = naive_loop(root, cfg, 4, model_name, package)
    print(f"    (c) naive loop: {c:.1f} img/s", flush=True)
    return {
        "model": model_name,
        "image_size": size,
        "batch_size": cfg.data.batch_size,
        "a_compute_bound": round(a, 2),
        "a_best_setting": best,
        "b_generated_trainer": round(b, 2),
        "c_naive_loop": round(c, 2),
        "b_loading_share": round(share, 3),
        "b_over_a": round(b / a, 3),
        "b_over_c": round(b / c, 3),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer images and steps, for a smoke test")
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "throughput.json")
    args = parser.parse_args()
    # (model, size, training images per class, steps of a window: one epoch's, as (b) and (c) are timed).
    cases = [
        ("resnet18", 224, 16 if args.quick else 64, 2 if args.quick else 8),
        ("resnet18", 64, 32 if args.quick else 200, 2 if args.quick else 25),  # a real backbone on small images
        ("simple_cnn", 64, 32 if args.quick else 200, 2 if args.quick else 25),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(name, size, per_class, Path(tmp), steps) for name, size, per_class, steps in cases]
    columns = [
        "model",
        "image_size",
        "a_compute_bound",
        "b_generated_trainer",
        "c_naive_loop",
        "b_over_a",
        "b_over_c",
        "b_loading_share",
    ]
    print("\n" + " | ".join(columns))
    for row in rows:
        print(" | ".join(str(row[c]) for c in columns) + f"   (a: {row['a_best_setting']})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
