"""What ``evaluate`` reports besides accuracy: per-class precision, recall and F1, a confusion picture, the
most-confused class pairs, and a picture of the top losses (as fast.ai's ClassificationInterpretation shows).

Everything derives from the confusion matrix that ``engine.evaluate`` counts
(rows: true class, columns: predicted class) and the per-sample losses it keeps
when asked, so no second pass over the data.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..core.errors import UserError

COLUMNS = ("class", "precision", "recall", "f1", "support")
CONFUSED_PAIRS = 10  # most-confused pairs printed
TOP_LOSSES = 16  # images in the top-losses picture


def per_class_metrics(confusion: torch.Tensor) -> dict[str, torch.Tensor]:
    """Precision, recall, F1 and support per class; 0 where a class was never predicted or never seen."""
    matrix = confusion.double()
    hits = matrix.diag()
    precision = hits / matrix.sum(0).clamp(min=1)
    recall = hits / matrix.sum(1).clamp(min=1)
    total = precision + recall
    f1 = torch.where(total > 0, 2 * precision * recall / total.clamp(min=1e-12), torch.zeros_like(total))
    return {"precision": precision, "recall": recall, "f1": f1, "support": confusion.sum(1)}


def table_rows(confusion: torch.Tensor, classes: Sequence[str]) -> list[tuple[str, float, float, float, int]]:
    """One row per class, then the unweighted mean over classes ("macro avg")."""
    metrics = per_class_metrics(confusion)
    columns = [metrics[key].tolist() for key in ("precision", "recall", "f1", "support")]
    rows = [(name, *values) for name, *values in zip(classes, *columns, strict=True)]
    macro = [metrics[key].mean().item() for key in ("precision", "recall", "f1")]
    return [*rows, ("macro avg", *macro, int(confusion.sum()))]  # type: ignore[list-item]


def format_table(confusion: torch.Tensor, classes: Sequence[str]) -> str:
    rows = table_rows(confusion, classes)
    width = max(len(COLUMNS[0]), *(len(row[0]) for row in rows))
    lines = [f"  {COLUMNS[0]:<{width}}  " + "  ".join(f"{name:>9}" for name in COLUMNS[1:])]
    for name, precision, recall, f1, support in rows:
        lines.append(f"  {name:<{width}}  {precision:9.3f}  {recall:9.3f}  {f1:9.3f}  {support:9d}")
    return "\n".join(lines)


def write_csv(confusion: torch.Tensor, classes: Sequence[str], path: str | Path) -> Path:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(COLUMNS)
            for name, precision, recall, f1, support in table_rows(confusion, classes):
                writer.writerow([name, f"{precision:.6f}", f"{recall:.6f}", f"{f1:.6f}", support])
    except OSError as exc:
        raise UserError(f"cannot write {path} ({exc.strerror}): pass --csv a writable path") from None
    return path


def default_confusion_path(checkpoint: str | Path, split: str, name: str = "confusion_matrix") -> Path:
    """Beside the checkpoint: ``<name>.png`` for val, ``<name>_<split>.png`` otherwise (name: confusion_matrix,
    top_losses)."""
    suffix = "" if split == "val" else f"_{split}"
    return Path(checkpoint).parent / f"{name}{suffix}.png"


def most_confused(confusion: torch.Tensor, classes: Sequence[str], count: int = CONFUSED_PAIRS) -> list[tuple]:
    """(true class, predicted class, images) for the off-diagonal cells with most images, most first."""
    off = confusion.clone().long()
    off.fill_diagonal_(0)
    values, cells = off.flatten().topk(min(count, off.numel()))
    width = len(classes)
    return [
        (classes[c // width], classes[c % width], v) for v, c in zip(values.tolist(), cells.tolist(), strict=True) if v
    ]


def format_confused(confusion: torch.Tensor, classes: Sequence[str]) -> str:
    """The most-confused pairs, one a line; one line saying so when every image was right."""
    pairs = most_confused(confusion, classes)
    if not pairs:
        return "most confused: none, every image was classified right"
    lines = ["most confused (true class -> predicted: images):"]
    return "\n".join([*lines, *(f"  {true} -> {predicted}: {n}" for true, predicted, n in pairs)])


def save_top_losses(result: dict[str, Any], classes: Sequence[str], path: str | Path) -> str:
    """The images the model got most wrong (highest loss first): label, prediction, its probability, the loss.
    Without matplotlib (the plots extra), the line that says how to get it."""
    samples, dataset = result["samples"], result["dataset"]
    order = samples["loss"].argsort(descending=True)[:TOP_LOSSES].tolist()
    if not order:
        return "top losses: no images"
    cells = []
    for i in order:
        name = Path(dataset.samples[i][0]).name
        label, predicted = classes[int(samples["target"][i])], classes[int(samples["predicted"][i])]
        caption = f"{name}\nlabel {label}\npredicted {predicted} {float(samples['probability'][i]):.2f}"
        cells.append((dataset[i][0], f"{caption}\nloss {float(samples['loss'][i]):.2f}"))
    try:
        from .plots import plot_image_grid

        title = f"Top losses: {len(order)} of {len(samples['loss'])} images, highest loss first"
        return f"top losses: {plot_image_grid(cells, path, title, columns=4)}"
    except UserError as exc:
        return f"no top-losses picture: {exc}"


def save_confusion(confusion: torch.Tensor, classes: Sequence[str], path: str | Path) -> str:
    """Draw the picture; without matplotlib, the one line that says how to get it (the table still prints)."""
    try:
        from .plots import plot_confusion

        return f"confusion matrix: {plot_confusion(confusion, classes, path)}"
    except UserError as exc:
        return f"no confusion-matrix picture: {exc}"


def report_extras(
    confusion: torch.Tensor, classes: Sequence[str], csv_path: str | Path | None, picture: str | Path | None
) -> str:
    """What ``evaluate`` prints after the accuracy: the table, and where the CSV and the picture went."""
    lines = ["per class (recall is the class's accuracy):", format_table(confusion, classes)]
    if csv_path:
        lines.append(f"table: {write_csv(confusion, classes, csv_path)}")
    if picture:
        lines.append(save_confusion(confusion, classes, picture))
    return "\n".join(lines)
