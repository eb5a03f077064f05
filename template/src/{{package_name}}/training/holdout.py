"""The test split: ``data.root/test/``, evaluated once at the end of training with best.pt's weights.

Validation chose the best checkpoint, so its accuracy is optimistic; a split
that played no part in any choice gives the number to report. The weights are
the ones validation measured: the moving average when ``train.ema_decay`` is on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..data import has_split
from ..outputs.evaluation_report import (
    format_confused,
    format_table,
    matrix_name,
    save_top_losses,
    table_rows,
    table_title,
    write_matrix,
)
from .inference import load_trained, run_evaluate
from .metrics import format_metrics, metric_columns


def evaluate_test_split(data_root: str | Path, out_dir: Path) -> dict[str, Any] | None:
    """Write ``out_dir/test_metrics.json`` and the confusion counts (``confusion_matrix_test.csv``, or
    ``confusion_pairs_test.csv`` above 256 classes), and print the report (the table's worst rows where there are
    many classes: every row is in the JSON); None when there is no test/ folder."""
    best = out_dir / "best.pt"
    if not has_split(Path(data_root), "test") or not best.is_file():
        return None
    loaded = load_trained(best, overrides=(f"data.root={data_root}",))
    drawn = loaded.config.train.pictures  # the top-losses picture, which alone needs each image's loss
    result = run_evaluate(loaded, "test", per_sample=drawn)
    if not result["count"]:  # every file unreadable and skipped, or left out as a copy: no figure to report
        print(f"test: {Path(data_root) / 'test'} holds no images to evaluate: no test_metrics.json")
        return None
    confusion = result["confusion"]
    report = {
        "split": "test",
        "checkpoint": str(best),
        "weights": "moving average" if loaded.weights_note else "trained",
        "count": result["count"],
        "test_loss": result["val_loss"],
        "test_acc": result["val_acc"],
        **metric_columns(result["metrics"], "test", loaded.classes),  # yours: models/extensions.py's extra_metrics
        "per_class": [
            {"class": name, "precision": precision, "recall": recall, "f1": f1, "support": int(support)}
            for name, precision, recall, f1, support in table_rows(confusion, loaded.classes)
        ],
    }
    (out_dir / "test_metrics.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"test: {report['count']} images  loss {report['test_loss']:.4f}  top-1 {100 * report['test_acc']:.2f}%")
    added = format_metrics(result["metrics"], loaded.classes)
    if added:
        print(added)
    print(table_title(len(loaded.classes)))
    print(format_table(confusion, loaded.classes, " in test_metrics.json"))
    counts = write_matrix(confusion, loaded.classes, out_dir / f"{matrix_name(len(loaded.classes))}_test.csv")
    print(f"confusion counts: {counts}")
    print(format_confused(confusion, loaded.classes))
    if drawn:  # the only picture, last: one that cannot be drawn is one line
        print(save_top_losses(result, loaded.classes, out_dir / "top_losses_test.png"))  # as `evaluate --split test`
    return report


def evaluate_when_done(row: dict[str, Any], epochs: int, data_root: str | Path, out_dir: Path) -> dict[str, Any] | None:
    """``evaluate_test_split`` once the run is done: after its last epoch or its early stop (``row``, the last
    epoch's), not after a stop that is resumed later. No row: nothing was left to train, and the report is made
    only if none is there (a kill after the last checkpoint and before the report)."""
    finished = row and (row["epoch"] == epochs or "stop_reason" in row)
    unreported = not row and not (out_dir / "test_metrics.json").exists()
    return evaluate_test_split(data_root, out_dir) if finished or unreported else None
