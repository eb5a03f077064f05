"""Small data: which learning rate and warmup train a model from scratch on 40 images per class.

The small-data advice of the generated docs/training.md comes from this run. It generates
a project from this checkout, writes the offline shapes data with 40 training
and 10 validation images per class (160 and 40: the size of a first try on
one's own photos), trains each setting for 15 epochs with the project's own
``train`` command, and prints the best and last validation accuracy and the
largest validation loss (a spike means the lr was too high).

    .venv/bin/python benchmarks/small_data.py [--models simple_cnn,resnet18] [--out .bench/small_data.json]

``--quick`` (the first setting, one epoch, simple_cnn) only checks that the
benchmark still runs; the test suite calls it so.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

from generated import import_generated  # a sibling script: benchmarks/ is on the path of a script run from it

REPO = Path(__file__).resolve().parents[1]
SETTINGS = [  # (optimizer, lr, warmup epochs)
    ("sgd", 0.1, 1.0),
    ("sgd", 0.1, 5.0),
    ("sgd", 0.03, 1.0),
    ("sgd", 0.01, 1.0),
    ("sgd", 0.01, 3.0),
    ("adamw", 0.002, 1.0),
    ("adamw", 0.001, 3.0),
]


def run_setting(
    package: Any, data: Path, out: Path, model: str, setting: tuple[str, float, float], epochs: int = 15
) -> dict[str, Any]:
    optimizer, lr, warmup = setting
    overrides = [
        f"data.root={data}", "data.batch_size=32", f"train.epochs={epochs}", "train.progress=false",
        f"model.name={model}",
        f"optim.name={optimizer}", f"optim.lr={lr}", f"optim.warmup_epochs={warmup}",
        f"optim.weight_decay={0.0005 if optimizer == 'sgd' else 0.05}", f"train.out_dir={out}",
    ]  # fmt: skip
    args = ["train", "--config", "", *[a for kv in overrides for a in ("--set", kv)]]
    with contextlib.redirect_stdout(io.StringIO()):
        assert package.cli.main(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {
        "model": model, "optimizer": optimizer, "lr": lr, "warmup_epochs": warmup,
        "best_val_acc": max(r["val_acc"] for r in rows), "last_val_acc": rows[-1]["val_acc"],
        "max_val_loss": max(r["val_loss"] for r in rows),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="simple_cnn,resnet18")
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "small_data.json")
    parser.add_argument("--quick", action="store_true", help="one setting, one epoch: checks that it runs")
    args = parser.parse_args()
    settings, epochs = (SETTINGS[:1], 1) if args.quick else (SETTINGS, 15)
    if args.quick:
        args.models = "simple_cnn"
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        package = import_generated(Path(tmp) / "project", "Small", "small_pkg")
        from small_pkg.data.files.sample_data import write_sample_data

        root = write_sample_data(Path(tmp) / "data", train_per_class=40, val_per_class=10, image_size=64, seed=1)
        for model in args.models.split(","):
            for number, setting in enumerate(settings):
                result = run_setting(package, root, Path(tmp) / f"run-{model}-{number}", model, setting, epochs)
                results.append(result)
                print(
                    f"{model:<11} {result['optimizer']:<6} lr {result['lr']:<6} warmup {result['warmup_epochs']:<4} "
                    f"best val_acc {100 * result['best_val_acc']:5.1f}%  last {100 * result['last_val_acc']:5.1f}%  "
                    f"max val_loss {result['max_val_loss']:.2f}",
                    flush=True,
                )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
