"""Pictures of a run with matplotlib (an optional dependency, the ``plots`` extra).

``plot_curves`` draws the training curves from ``metrics.jsonl`` rows;
``plot_confusion`` draws the confusion matrix that ``evaluate`` counts;
``plot_image_grid`` a grid of images with a caption each (``evaluate``'s top
losses, ``audit``'s findings).
Figures are made with the object API on the Agg backend: no display needed,
no global pyplot state left behind.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..core.optional import require

DPI = 120
# The confusion picture's side at most: 41.2 x 40 inches at 120 dpi is 23.7 megapixels (0.55 inch a class reaches
# it at 68 classes; evaluate draws at most 50).
MAX_CONFUSION_INCHES = 40.0
CELL_INCHES, TITLE_INCHES, CAPTION_POINTS = 2.2, 0.4, 6.5  # plot_image_grid: a column's width, the title's room
CURVE_PANELS = (
    ("Loss", "cross-entropy", (("train_loss", "train"), ("val_loss", "val"))),
    ("Accuracy", "top-1 accuracy (%)", (("train_acc", "train"), ("val_acc", "val"))),
    ("Learning rate", "learning rate", (("lr", "lr"),)),
)


def new_figure(width: float, height: float) -> Any:
    matplotlib = require("matplotlib", "plots", "drawing pictures")
    if "matplotlib.pyplot" not in sys.modules:  # a notebook's own backend (and its figures) is left alone
        matplotlib.use("Agg")  # files only, never a window
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def plot_curves(rows: Sequence[Mapping[str, Any]], path: str | Path, resumed_at: Sequence[float] = ()) -> Path:
    """Loss (train and val), accuracy and learning rate by epoch, side by side, saved as a PNG.

    ``rows`` are ``metrics.jsonl`` objects with ``epoch`` and any of
    ``train_loss``, ``val_loss``, ``train_acc``, ``val_acc`` (fractions) and
    ``lr``; a missing key leaves its line out. ``resumed_at`` (epochs,
    fractional inside an epoch) are drawn as dotted lines: a jump there may be
    the resume's doing (e.g. a schedule reshaped by a larger ``train.epochs``).
    """
    figure = new_figure(15, 4.2)
    from matplotlib.ticker import MaxNLocator

    axes = figure.subplots(1, len(CURVE_PANELS))
    for ax, (title, ylabel, series) in zip(axes, CURVE_PANELS, strict=True):
        for key, label in series:
            points = [(row["epoch"], row[key]) for row in rows if row.get(key) is not None]
            if not points:
                continue
            epochs, values = zip(*points, strict=True)
            scale = 100 if key.endswith("_acc") else 1
            marker = "o" if len(epochs) <= 50 else None  # dots for each epoch while they stay apart
            ax.plot(epochs, [scale * v for v in values], marker=marker, markersize=4, label=label)
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if len(ax.lines) > 1:
            ax.legend()
    for ax in axes:
        for number, epoch in enumerate(resumed_at):
            ax.axvline(epoch, color="grey", linestyle=":", label="resumed" if number == 0 else None)
        if resumed_at:
            ax.legend()
    losses = [v for line in axes[0].lines[: len(axes[0].lines) - len(resumed_at)] for v in line.get_ydata()]
    if losses and min(losses) > 0 and max(losses) / min(losses) > 20:
        axes[0].set_yscale("log")  # an early spike (e.g. batch-norm statistics at the peak lr) would flatten the rest
    axes[2].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    figure.suptitle("Training curves")
    return save(figure, path)


def plot_confusion(
    matrix: torch.Tensor | Sequence[Sequence[int]],
    classes: Sequence[str],
    path: str | Path,
    row_totals: torch.Tensor | Sequence[int] | None = None,
    title: str | None = None,
) -> Path:
    """The confusion matrix (rows: true class, columns: predicted) with counts in the cells, as a PNG.

    Colour shows each row's share, so that a rare class's errors stand out as
    much as a frequent one's. ``row_totals``: each true class's images where the
    matrix holds some classes only (the most-confused of many), so that a share
    is of the whole class. The picture is at most ``MAX_CONFUSION_INCHES``
    square (about 23 megapixels), however many classes it is given.
    """
    counts = torch.as_tensor(matrix, dtype=torch.long).cpu()
    totals = counts.sum(1) if row_totals is None else torch.as_tensor(row_totals, dtype=torch.long).cpu()
    shares = counts / totals.unsqueeze(1).clamp(min=1)
    size = min(max(4.5, 0.55 * len(classes) + 2.5), MAX_CONFUSION_INCHES)
    figure = new_figure(size + 1.2, size)
    ax = figure.subplots()
    image = ax.imshow(shares.numpy(), cmap="Blues", vmin=0, vmax=1)
    figure.colorbar(image, ax=ax, label="share of the true class", shrink=0.8)
    ticks = range(len(classes))
    ax.set_xticks(ticks, labels=classes, rotation=45, ha="right", rotation_mode="anchor")
    ax.set_yticks(ticks, labels=classes)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    if len(classes) <= 30:  # beyond that the numbers would not fit in the cells
        for row, (line, share_line) in enumerate(zip(counts.tolist(), shares.tolist(), strict=True)):
            for column, (value, share) in enumerate(zip(line, share_line, strict=True)):
                if not value:  # an empty cell reads as 0; its text took most of the drawing time (3 s at 30 classes)
                    continue
                colour = "white" if share > 0.5 else "black"
                ax.text(column, row, str(value), ha="center", va="center", color=colour, fontsize=9)
    if title is None:
        total = int(counts.sum())
        accuracy = float(counts.diag().sum()) / max(total, 1)
        title = f"Confusion matrix: {total} images, top-1 {100 * accuracy:.1f}%"
    ax.set_title(title)
    return save(figure, path)


def plot_image_grid(cells: Sequence[tuple[torch.Tensor, str]], path: str | Path, title: str, columns: int = 6) -> Path:
    """Images (uint8, channels first, as the evaluation transform makes them) in rows of ``columns``, each with
    its caption above it (a few short lines: the file, its label, what was found, the score).

    Drawn as one picture (the images pasted into one array) with the captions over it: one axes, where an axes a
    cell took 2 s for the audit's 48 cells, most of an audit's drawing time."""
    rows = max(1, -(-len(cells) // columns))
    height = max((image.shape[-2] for image, _ in cells), default=1)
    width = max((image.shape[-1] for image, _ in cells), default=1)
    gap = max(2, width // 16)  # between columns, half of it either side
    scale = CELL_INCHES * DPI / (width + gap)  # figure pixels per image pixel
    lines = max((caption.count("\n") + 1 for _, caption in cells), default=1)
    band = round(lines * CAPTION_POINTS * 1.4 * DPI / 72 / scale) + gap  # room for each caption above its image
    sheet = torch.full((rows * (band + height), columns * (width + gap), 3), 255, dtype=torch.uint8)
    for index, (image, _) in enumerate(cells):
        row, column = divmod(index, columns)
        top, left = row * (band + height) + band, column * (width + gap) + gap // 2
        pixels = image.cpu().permute(1, 2, 0).expand(-1, -1, 3)  # height x width x channels; a grey image as RGB
        sheet[top : top + pixels.shape[0], left : left + pixels.shape[1]] = pixels
    inches = CELL_INCHES * columns, CELL_INCHES * columns * sheet.shape[0] / sheet.shape[1]
    figure = new_figure(inches[0], inches[1] + TITLE_INCHES)
    figure.set_layout_engine("none")  # one axes filling the figure below the title: nothing to lay out
    ax = figure.add_axes((0, 0, 1, inches[1] / (inches[1] + TITLE_INCHES)))
    ax.imshow(sheet.numpy(), interpolation="nearest")  # each image pixel a block: what the network was given
    ax.set_axis_off()
    for index, (_, caption) in enumerate(cells):
        row, column = divmod(index, columns)
        x, y = (
            column * (width + gap) + gap // 2 + width / 2,
            row * (band + height) + band - 1,
        )  # above the image, centred
        ax.text(x, y, caption, fontsize=CAPTION_POINTS, ha="center", va="bottom")
    figure.suptitle(title)
    return save(figure, path)


def save(figure: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    return path
