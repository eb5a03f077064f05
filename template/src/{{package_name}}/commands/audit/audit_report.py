"""What ``audit`` leaves behind besides its CSVs: one picture per kind, the arrays it computed, the summary table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ...core.errors import UserError
from .findings import FILES, AuditFiles, Finding, across_splits, flagged_classes

GRID_FILES = 24  # files drawn per picture, highest score first: the CSV lists every one
CHUNK = 65_536  # embeddings written at once
PICTURED = ("exact_duplicate", "near_duplicate", "label_issue", "outlier")


def write_arrays(folder: Path, files: AuditFiles, arrays: tuple[Any, np.ndarray], source: str) -> None:
    """``features.npy`` (N x D float32, unit length), ``pred_probs.npy`` (N x classes, every row out of sample) and
    ``arrays.json``, naming each row's file. Written in chunks: no float32 copy of a million embeddings in memory;
    probabilities already in ``pred_probs.npy`` (a memory-mapped file, ``label_checks.label_issues``) stay there."""
    features, probabilities = arrays
    about = {
        "rows": "one per file, in the order train, val, test (each split in its dataset's order)",
        "features": f"{source}, L2-normalized",
        "pred_probs": "every file's class probabilities from a linear head (softmax regression) trained without it "
        "(stratified folds on the standardized features; a class of one image: trained on all the others)",
        "classes": files.classes,
        "paths": files.paths,
        "splits": files.splits,
        "labels": [files.classes[target] for target in files.targets],
    }
    rows = np.lib.format.open_memmap(folder / "features.npy", "w+", np.float32, tuple(features.shape))
    for top in range(0, len(rows), CHUNK):
        rows[top : top + CHUNK] = np.asarray(features[top : top + CHUNK], dtype=np.float32)
    rows.flush()
    del rows
    (folder / "features_mirrored.npy").unlink(missing_ok=True)  # an earlier version's: no longer these files'
    if isinstance(probabilities, np.memmap) and Path(str(probabilities.filename)) == folder / "pred_probs.npy":
        probabilities.flush()  # written there as they came
    else:
        np.save(folder / "pred_probs.npy", probabilities.astype(np.float32))
    (folder / "arrays.json").write_text(json.dumps(about, indent=1) + "\n")


def short(path: str, root: Path) -> str:
    """A path as the picture names it: from below data.root, where it is there."""
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return path


def cells(row: Finding, audited: Any, root: Path) -> list[tuple[Any, str]]:
    """What the picture shows of one finding: the file with its folder's class, what was found, the score; a
    duplicate's other file beside it."""
    name, score = short(row.path, root), f"{row.score:.3f}"
    if row.kind == "label_issue":
        return [
            (
                audited.image(row.path),
                f"{name}\nfolder: {row.label}\nsuggested: {row.extra['suggested_class']}  {score}",
            )
        ]
    if row.kind == "outlier":
        return [(audited.image(row.path), f"{name}\n{row.label}  outlier {score}")]
    other = row.extra["duplicate_of"]
    other_label = audited.files.classes[int(audited.files.targets[audited.files.paths.index(other)])]
    return [
        (
            audited.image(row.path),
            f"{name}\n{row.label}  {'match' if row.kind == 'near_duplicate' else 'similarity'} {score}",
        ),
        (audited.image(other), f"duplicate of {short(other, root)}\n{other_label}"),
    ]


def crosses(row: Finding) -> bool:
    """A duplicate row that pairs files of two splits (what inflates val_acc)."""
    return row.split != row.extra.get("duplicate_split", row.split)


def pictured(rows: list[Finding]) -> tuple[list[Finding], str]:
    """The ``GRID_FILES`` rows a picture draws, and its title's words for them: duplicates across splits first (a
    data set's own overlapping crops within train/ can outnumber them 19 to 1), then by score."""
    ranked = sorted(rows, key=lambda row: (not crosses(row), -row.score))
    shown = f"{min(len(rows), GRID_FILES)} of {len(rows)}"
    across = sum(crosses(row) for row in rows)
    if across and across < len(rows):
        return ranked[:GRID_FILES], f"{shown}, the {across} across splits first, each part by score"
    return ranked[:GRID_FILES], f"{shown}, highest score first"


def save_pictures(found: dict[str, list[Finding] | None], audited: Any, folder: Path, root: Path) -> list[str]:
    """``<kind>.png`` beside each CSV that lists anything; without matplotlib (the plots extra), one line."""
    for kind in PICTURED:
        (folder / f"{FILES[kind]}.png").unlink(missing_ok=True)  # a picture of an earlier audit would mislead
    wanted = [(kind, rows) for kind, rows in found.items() if kind in PICTURED and rows]
    if not wanted:
        return []
    try:
        from ...outputs.plots import plot_image_grid

        for kind, rows in wanted:
            drawn, order = pictured(rows)
            shown = [cell for row in drawn for cell in cells(row, audited, root)]
            plot_image_grid(shown, folder / f"{FILES[kind]}.png", f"{FILES[kind].replace('_', ' ')}: {order}")
    except UserError as exc:  # the plots extra is missing: the CSVs say everything the pictures would
        return [f"no pictures: {exc}"]
    return []


def summary_table(
    files: AuditFiles, found: dict[str, list[Finding] | None], written: dict[str, Path], notes: list[str]
) -> str:
    """kind, count, where: one line per kind of finding, then the notes on what was not checked."""
    splits = {split: files.splits.count(split) for split in dict.fromkeys(files.splits)}
    lines = [
        f"audit: {len(files):,} images ({', '.join(f'{s} {n:,}' for s, n in splits.items())}), "
        f"{len(files.classes)} classes",
        f"  {'kind':<16} {'count':>6}  where",
    ]
    for kind, rows in found.items():
        where = str(written[kind]) if kind in written else "not checked"
        if rows is None:
            count = "-"
        elif kind == "class_imbalance":
            count = str(len(flagged_classes(rows)))
            where += " (classes under a fifth of their split's median count)"
        else:
            count = str(len(rows))
            crossing = across_splits(rows) if kind.endswith("duplicate") else 0
            where += f" ({crossing} across splits)" if crossing else ""
        lines.append(f"  {kind:<16} {count:>6}  {where}")
    return "\n".join([*lines, *(f"note: {note}" for note in notes)])
