"""Precision and memory layout on this CPU, per model family: which of the four combinations trains fastest.

``train.precision: auto`` and ``train.channels_last: auto`` were measured on
resnet18 alone. The families users fine-tune are others: EfficientNet and
MobileNet (depthwise convolutions), ConvNeXt (depthwise 7 x 7 and LayerNorm),
ViT (matrix products, no convolution after its first). For each model and
size this times a training step (forward, backward, SGD) of the generated
project's network on a batch in memory, in fp32 and bf16 autocast, NCHW and
NHWC (channels_last): the fastest of ``--rounds`` windows of ``--steps`` steps
(other work on a shared machine only slows a window down). It prints one
table, the project's ``auto`` choice beside the fastest, and writes ``--out``.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/layouts.py [--sizes 96 224] [--batch 16] [--only MODEL ...]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from generated import import_generated  # sibling scripts: benchmarks/ is on the path of a script run from it
from startup import cpu_name
from throughput import LAYOUT_NAMES, timed_steps, training_step

REPO = Path(__file__).resolve().parents[1]
MODELS = (
    "resnet18",
    "timm/efficientnet_lite0",
    "timm/mobilenetv3_large_100",
    "timm/convnext_atto",
    "timm/vit_tiny_patch16_224",
)
COMBINATIONS = [(precision, layout) for precision in ("fp32", "bf16") for layout in LAYOUT_NAMES]


def step_seconds(
    package: str, model_name: str, size: int, batch: int, precision: str, layout: torch.memory_format, args: Any
) -> float:
    """Seconds per training step of ``model_name`` at ``size`` px in one combination (the fastest window)."""
    classifier = importlib.import_module(f"{package}.models.classifier")
    config = importlib.import_module(f"{package}.core.config")
    cfg = config.load_config(None, [f"model.name={model_name}", f"data.image_size={size}"])
    torch.manual_seed(0)
    model = classifier.build_model(cfg.model, 10, size).to(memory_format=layout).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8).contiguous(memory_format=layout)
    targets = torch.randint(0, 10, (batch,))
    cast = contextlib.nullcontext() if precision == "fp32" else torch.autocast("cpu", dtype=torch.bfloat16)
    step = training_step(model, optimizer, images, targets, cast, torch.amp.GradScaler("cpu", enabled=False))
    return timed_steps(step, args.warmup, args.steps, args.rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[96, 224])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--only", nargs="*", default=[], help="models to measure (default: all)")
    parser.add_argument("--steps", type=int, default=5, help="steps a window")
    parser.add_argument("--rounds", type=int, default=3, help="windows a combination: the fastest counts")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "layouts.json")
    parser.add_argument("--quick", action="store_true", help="one small model, one window: that it runs")
    args = parser.parse_args()
    models = args.only or list(MODELS)
    if args.quick:
        models, args.sizes, args.steps, args.rounds, args.warmup = ["timm/efficientnet_lite0"], [32], 1, 1, 1
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="layouts-") as tmp:
        package = import_generated(Path(tmp) / "project", "Layouts Bench", "layouts_bench").__name__
        decide = importlib.import_module(f"{package}.core.device")
        print(f"{cpu_name()}, {torch.get_num_threads()} threads, batch {args.batch}", flush=True)
        for model_name in models:
            for size in args.sizes:
                row: dict[str, Any] = {"model": model_name, "size": size, "images_per_second": {}}
                for precision, layout in COMBINATIONS:
                    seconds = step_seconds(package, model_name, size, args.batch, precision, layout, args)
                    name = f"{precision}, {LAYOUT_NAMES[layout]}"
                    row["images_per_second"][name] = args.batch / seconds
                    print(f"  {model_name} {size} px  {name}: {args.batch / seconds:.1f} img/s", flush=True)
                cpu = torch.device("cpu")
                auto = decide.resolve_precision("auto", cpu, model_name), decide.memory_format("auto", cpu)
                row["auto"] = f"{auto[0]}, {LAYOUT_NAMES[auto[1]]}"
                row["fastest"] = max(row["images_per_second"], key=row["images_per_second"].get)
                rows.append(row)
    names = [f"{p}, {LAYOUT_NAMES[layout]}" for p, layout in COMBINATIONS]
    print("\n| model | px | " + " | ".join(names) + " | auto picks |")
    print("|---|---:|" + "---:|" * len(names) + "---|")
    for row in rows:
        rates = " | ".join(
            f"**{row['images_per_second'][n]:.1f}**" if n == row["fastest"] else f"{row['images_per_second'][n]:.1f}"
            for n in names
        )
        print(f"| {row['model']} | {row['size']} | {rates} | {row['auto']} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    machine = {"cpu": cpu_name(), "threads": torch.get_num_threads(), "load_average": os.getloadavg()}
    args.out.write_text(json.dumps({"machine": machine, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
