"""Training throughput, side by side in one run: compute bound, generated trainer, naive loop.

For each model it generates a project from this checkout, writes an
ImageFolder of PNG files, and measures images per second of:

  (a) compute-only bound: the model's training step on synthetic uint8 tensors
      already in memory, in the fastest of fp32/bf16 x contiguous/channels_last
      for this hardware;
  (b) the generated trainer's steady-state epoch (its second) on the PNG files,
      with the default ``auto`` settings (``data.pipeline: auto`` takes the
      batch path: uint8 squares, crops and flips per batch on the device), and
      the share of that epoch spent loading data (one epoch of the same loader
      and batch augmentation, timed alone);
  (c) a naive loop in the style of the reference imagenet example: ToTensor +
      Normalize in a default DataLoader, fp32, contiguous memory, ``.item()``
      every step.

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


def timed_steps(step: Callable[[], None], warmup: int, steps: int) -> float:
    """Seconds per step after ``warmup`` steps."""
    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


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
    """(a): the best precision and memory format, on tensors already in memory."""
    model_module = importlib.import_module(f"{package}.model")
    batch, size = cfg.data.batch_size, cfg.data.image_size
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8)
    targets = torch.randint(0, classes, (batch,))
    best = (0.0, "")
    for precision in ("fp32", "bf16"):
        for layout in (torch.contiguous_format, torch.channels_last):
            torch.manual_seed(0)
            model = model_module.build_model(cfg.model, classes).to(memory_format=layout).train()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            x = images.contiguous(memory_format=layout)
            cast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()

            rate = batch / timed_steps(training_step(model, optimizer, x, targets, cast), warmup=2, steps=steps)
            name = f"{precision}, {'channels_last' if layout == torch.channels_last else 'contiguous'}"
            print(f"    (a) {name}: {rate:.1f} img/s", flush=True)
            best = max(best, (rate, name))
    return best


def generated_trainer(package: str, cfg: Any) -> tuple[float, float]:
    """(b): the second epoch of the real trainer (workers warm), as metrics.jsonl reports it, and its seconds."""
    trainer = importlib.import_module(f"{package}.trainer")
    trainer.train(cfg)
    rows = [json.loads(line) for line in (Path(cfg.train.out_dir) / "metrics.jsonl").read_text().splitlines()]
    return rows[-1]["images_per_second"], rows[-1]["epoch_seconds"]


def loading_seconds(package: str, cfg: Any) -> float:
    """One training epoch of the trainer's own loader (and batch augmentation), without the model."""
    data = importlib.import_module(f"{package}.data")
    pipeline = importlib.import_module(f"{package}.pipeline")
    augment = importlib.import_module(f"{package}.augment").BatchAugment(cfg, 0, torch.channels_last)
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
    warmup = min(2, len(loader) // 3)  # steps left out of the timing
    seen, start = 0, time.perf_counter()
    for index, (images, targets) in enumerate(loader):
        if index == warmup:
            seen, start = 0, time.perf_counter()
        loss = nn.functional.cross_entropy(model(images), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss.item()  # a host sync every step, as the reference example's meters do
        seen += len(targets)
    return seen / (time.perf_counter() - start)


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
        [f"data.root={root}", "train.epochs=2", f"train.out_dir={tmp / ('run_' + package)}", "train.progress=false"],
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
    cases = [
        ("resnet18", 224, 16 if args.quick else 64),
        ("resnet18", 64, 32 if args.quick else 200),  # a real backbone on small images: loading matters
        ("simple_cnn", 64, 32 if args.quick else 200),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(name, size, per_class, Path(tmp), 2 if args.quick else 5) for name, size, per_class in cases]
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
