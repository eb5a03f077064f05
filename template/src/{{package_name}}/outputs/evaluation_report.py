"""What ``evaluate`` reports besides accuracy: per-class precision, recall and F1, the confusion counts as CSV,
the most-confused class pairs, a picture of the top losses (as fast.ai's ClassificationInterpretation shows) and
a confusion picture.

Everything derives from the confusion counts that ``engine.evaluate`` makes
(``confusion.py``: the (true, predicted) pairs that occur) and the per-sample
losses it keeps when asked, so no second pass over the data. Nothing here
grows with the square of the class count, and no picture with the class count:
at 20,000 classes the terminal shows the worst rows, the picture the
most-confused classes, and the files hold everything.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import torch

from ..core.errors import UserError
from ..core.optional import require
from .confusion import Confusion

COLUMNS = ("class", "precision", "recall", "f1", "support")
CONFUSED_PAIRS = 10  # most-confused pairs printed
TOP_LOSSES = 16  # images in the top-losses picture
# Above this many classes the terminal shows the table's worst rows and the picture the most-confused classes: a
# 1,000-row table scrolls the accuracy away, and a cell per pair (0.55 inch at 120 dpi) made a picture of 66,000 x
# 66,000 pixels at 1,000 classes, some 17 GB to draw.
READABLE_CLASSES = 50
WORST_ROWS = 20  # rows of the table printed above READABLE_CLASSES: the lowest F1 first
PICTURE_CLASSES = 30  # classes in the picture above READABLE_CLASSES (counts still fit in their cells)
# The confusion counts as a dense CSV (a row and a column a class) up to here; above, a row a non-zero pair
# (true, predicted, count): a dense file of 20,000 classes would hold 400 million cells.
DENSE_CSV_CLASSES = 256


def as_confusion(confusion: Confusion | torch.Tensor) -> Confusion:
    """The counts, also from a dense N x N matrix (rows: true class, columns: predicted), as before 0.13."""
    return confusion if isinstance(confusion, Confusion) else Confusion.from_dense(confusion)


def per_class_metrics(confusion: Confusion | torch.Tensor) -> dict[str, torch.Tensor]:
    """Precision, recall, F1 and support per class; 0 where a class was never predicted or never seen."""
    confusion = as_confusion(confusion)
    hits, support = confusion.hits().double(), confusion.support()
    precision = hits / confusion.predicted_totals().double().clamp(min=1)
    recall = hits / support.double().clamp(min=1)
    total = precision + recall
    f1 = torch.where(total > 0, 2 * precision * recall / total.clamp(min=1e-12), torch.zeros_like(total))
    return {"precision": precision, "recall": recall, "f1": f1, "support": support}


Row = tuple[str, float, float, float, int]  # class, precision, recall, F1, support


def table_rows(confusion: Confusion | torch.Tensor, classes: Sequence[str]) -> list[Row]:
    """One row per class, then the unweighted mean over classes ("macro avg")."""
    metrics = per_class_metrics(confusion)
    columns = [metrics[key].tolist() for key in ("precision", "recall", "f1", "support")]
    rows = [(name, *values) for name, *values in zip(classes, *columns, strict=True)]
    macro = [metrics[key].mean().item() for key in ("precision", "recall", "f1")]
    return [*rows, ("macro avg", *macro, int(metrics["support"].sum()))]  # type: ignore[list-item]


def shown_rows(rows: list[Row]) -> tuple[list[Row], int, int]:
    """The class rows the terminal shows: all up to READABLE_CLASSES; beyond, the WORST_ROWS with the lowest F1
    among the classes with images (ties: lower recall, then class order). Also how many rows are left out, and how
    many classes have no image in the split (their zeros say nothing of the model)."""
    if len(rows) <= READABLE_CLASSES:
        return rows, 0, 0
    seen = [row for row in rows if row[4] > 0]
    worst = sorted(seen, key=lambda row: (row[3], row[2]))[:WORST_ROWS]  # sorted() is stable: class order in ties
    return worst, len(rows) - len(worst), len(rows) - len(seen)


def format_table(confusion: Confusion | torch.Tensor, classes: Sequence[str], where: str = "") -> str:
    """The table for the terminal: every class up to READABLE_CLASSES, else the worst rows; then the macro avg.
    ``where``: where the whole table went (" in per_class.csv"), said when rows are left out."""
    *rows, average = table_rows(confusion, classes)
    shown, left_out, unseen = shown_rows(rows)
    width = max(len(COLUMNS[0]), len(average[0]), *(len(row[0]) for row in shown))
    lines = [f"  {COLUMNS[0]:<{width}}  " + "  ".join(f"{name:>9}" for name in COLUMNS[1:])]
    row = "  {:<{width}}  {:9.3f}  {:9.3f}  {:9.3f}  {:9d}"
    lines += [row.format(*values, width=width) for values in shown]
    if left_out:
        absent = f"; {unseen} classes have no image in this split" if unseen else ""
        lines.append(f"  ... {left_out} more classes{where}{absent}")
    lines.append(row.format(*average, width=width))
    return "\n".join(lines)


def table_title(num_classes: int) -> str:
    """The line above the table: which rows it shows."""
    if num_classes <= READABLE_CLASSES:
        return "per class (recall is the class's accuracy):"
    return f"per class (recall is the class's accuracy), the {WORST_ROWS} of {num_classes} with the lowest F1:"


def write_csv(confusion: Confusion | torch.Tensor, classes: Sequence[str], path: str | Path) -> Path:
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


def matrix_name(num_classes: int) -> str:
    """The confusion counts' file name: a dense matrix for few classes, the non-zero pairs for many."""
    return "confusion_matrix" if num_classes <= DENSE_CSV_CLASSES else "confusion_pairs"


def write_matrix(confusion: Confusion | torch.Tensor, classes: Sequence[str], path: str | Path) -> Path:
    """Every count of the confusion matrix as CSV. Up to DENSE_CSV_CLASSES classes dense: a header row
    ``true/predicted,<class>,...``, then a row a true class. Beyond, the non-zero pairs, a row each:
    ``true,predicted,count`` (right predictions too, true == predicted), by true class, then predicted."""
    confusion = as_confusion(confusion)
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            if confusion.num_classes <= DENSE_CSV_CLASSES:
                writer.writerow(["true/predicted", *classes])
                for name, line in zip(classes, confusion.dense().tolist(), strict=True):
                    writer.writerow([name, *line])
            else:
                writer.writerow(["true", "predicted", "count"])
                true, predicted = confusion.true.tolist(), confusion.predicted.tolist()
                pairs = zip(true, predicted, confusion.counts.tolist(), strict=True)
                writer.writerows((classes[t], classes[p], count) for t, p, count in pairs)
    except OSError as exc:
        raise UserError(f"cannot write {path} ({exc.strerror}): pass --matrix a writable path") from None
    return path


def default_confusion_path(
    checkpoint: str | Path, split: str, name: str = "confusion_matrix", extension: str = ".png"
) -> Path:
    """Beside the checkpoint: ``<name>.png`` for val, ``<name>_<split>.png`` otherwise (name: confusion_matrix,
    top_losses; per_class and matrix_name's with extension .csv)."""
    suffix = "" if split == "val" else f"_{split}"
    return Path(checkpoint).parent / f"{name}{suffix}{extension}"


def most_confused(
    confusion: Confusion | torch.Tensor, classes: Sequence[str], count: int = CONFUSED_PAIRS
) -> list[tuple[str, str, int]]:
    """(true class, predicted class, images) for the off-diagonal cells with most images, most first."""
    true, predicted, counts = (part[:count].tolist() for part in as_confusion(confusion).errors())
    return [(classes[t], classes[p], n) for t, p, n in zip(true, predicted, counts, strict=True)]


def format_confused(confusion: Confusion | torch.Tensor, classes: Sequence[str]) -> str:
    """The most-confused pairs, one a line; one line saying so when every image was right."""
    pairs = most_confused(confusion, classes)
    if not pairs:
        return "most confused: none, every image was classified right"
    lines = ["most confused (true class -> predicted: images):"]
    return "\n".join([*lines, *(f"  {true} -> {predicted}: {n}" for true, predicted, n in pairs)])


def pictures_missing() -> str | None:
    """Why ``evaluate`` can draw neither picture (matplotlib, the plots extra, is missing): one line for both, said
    before the evaluation (which then keeps no per-image losses); None where it can draw them."""
    try:
        require("matplotlib", "plots", "the confusion-matrix and top-losses pictures")
    except UserError as exc:
        return f"no pictures: {exc}"
    return None


def drawn(what: str, picture: str, draw: Callable[[], Path]) -> str:
    """``<what>: <path>`` once ``draw`` has saved its picture; one line where it cannot be drawn. A picture is
    the last thing a report makes and the least: whatever stops it (no matplotlib, a full disk, a picture its
    matplotlib refuses, no memory left) costs the picture alone, never the figures and files already written."""
    try:
        return f"{what}: {draw()}"
    except UserError as exc:  # no matplotlib: its own line names the extra
        return f"no {picture} picture: {exc}"
    except Exception as exc:  # any failure of an optional picture: one line, not a traceback
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else ""  # MemoryError() says nothing
        reason = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
        return f"warning: no {picture} picture ({reason}); the figures and files are written"


def save_top_losses(result: dict[str, Any], classes: Sequence[str], path: str | Path) -> str:
    """The images the model got most wrong (highest loss first): label, prediction, its probability, the loss.
    Without matplotlib (the plots extra), the line that says how to get it."""
    samples, dataset = result["samples"], result["dataset"]
    order = samples["loss"].argsort(descending=True)[:TOP_LOSSES].tolist()
    if not order:
        return "top losses: no images"

    def draw() -> Path:
        from .plots import plot_image_grid

        cells = []
        for i in order:
            name = Path(dataset.samples[i][0]).name
            label, predicted = classes[int(samples["target"][i])], classes[int(samples["predicted"][i])]
            caption = f"{name}\nlabel {label}\npredicted {predicted} {float(samples['probability'][i]):.2f}"
            cells.append((dataset[i][0], f"{caption}\nloss {float(samples['loss'][i]):.2f}"))
        title = f"Top losses: {len(order)} of {len(samples['loss'])} images, highest loss first"
        return plot_image_grid(cells, path, title, columns=4)

    return drawn("top losses", "top-losses", draw)


def picture_classes(confusion: Confusion) -> torch.Tensor:
    """The classes the confusion picture shows: all up to READABLE_CLASSES; beyond, the PICTURE_CLASSES with most
    errors (as the true or the predicted class), so that its size never grows with the class count."""
    if confusion.num_classes <= READABLE_CLASSES:
        return torch.arange(confusion.num_classes)
    return confusion.most_confused_classes(PICTURE_CLASSES)


def confusion_title(confusion: Confusion, shown: int) -> str:
    """The picture's title: the images and accuracy of the whole split, and which classes it shows."""
    total = confusion.total
    accuracy = float(confusion.hits().sum()) / max(total, 1)
    figures = f"{total} images, top-1 {100 * accuracy:.1f}%"
    if shown == confusion.num_classes:
        return f"Confusion matrix: {figures}"
    return (
        f"Confusion matrix: the {shown} most-confused of {confusion.num_classes} classes "
        f"(most errors as true or predicted class; every count in the CSV)\n{figures}"
    )


def save_confusion(confusion: Confusion | torch.Tensor, classes: Sequence[str], path: str | Path) -> str:
    """Draw the picture (of the most-confused classes where there are many); one line where it cannot be drawn."""
    confusion = as_confusion(confusion)
    chosen = picture_classes(confusion)

    def draw() -> Path:
        from .plots import plot_confusion

        names = [classes[i] for i in chosen.tolist()]
        title = confusion_title(confusion, len(chosen))
        return plot_confusion(confusion.dense(chosen), names, path, confusion.support()[chosen], title)

    return drawn("confusion matrix", "confusion-matrix", draw)


def report_extras(
    confusion: Confusion | torch.Tensor,
    classes: Sequence[str],
    csv_path: str | Path | None,
    matrix_path: str | Path | None = None,
    defaults: Collection[str | Path] = (),
) -> str:
    """What ``evaluate`` prints after the accuracy: the table (its worst rows where there are many classes), and
    where the table's CSV and the confusion counts went. The picture comes last, apart (``save_confusion``).
    A file of ``defaults`` (a place the user did not name: beside the checkpoint, maybe read-only) that cannot be
    written is a warning line; one the user named is an error."""
    confusion = as_confusion(confusion)
    where = f" in {csv_path}" if csv_path else ""
    lines = [table_title(confusion.num_classes), format_table(confusion, classes, where)]
    files = (("table", csv_path, write_csv), ("confusion counts", matrix_path, write_matrix))
    for what, path, write in files:
        if not path:
            continue
        try:
            lines.append(f"{what}: {write(confusion, classes, path)}")
        except UserError as exc:
            if path not in defaults:
                raise
            lines.append(f"warning: no {what} file: {exc}")
    return "\n".join(lines)
