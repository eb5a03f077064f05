"""What ``audit`` finds in a data set, as rows of one table: near duplicates (from ``near_copies.py``) and class
balance (this module), label issues and outliers (``label_checks.py``), exact duplicates (``duplicates.py``).

Every finding names one file by the path its dataset lists (``data.root``/split/class/file), its split, its
folder's class and a score, higher meaning more likely a real problem; ``extra`` holds the kind's own columns
(``COLUMNS``). The checks read arrays (embeddings, labels) and never touch a file: moving files is the user's act.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import torch

from ...core.errors import UserError
from .near_copies import MATCH, Thumbnails, near_copies
from .neighbours import Neighbours

# Each kind of finding: its CSV file, and the columns that follow kind, split, path, class, score (in this order).
COLUMNS: dict[str, tuple[str, ...]] = {
    "exact_duplicate": ("duplicate_of", "duplicate_split", "same"),
    "near_duplicate": ("duplicate_of", "duplicate_split"),
    "label_issue": ("suggested_class", "method"),
    "outlier": ("method",),
    "class_imbalance": ("count",),
}
FILES = {
    "exact_duplicate": "exact_duplicates",
    "near_duplicate": "near_duplicates",
    "label_issue": "label_issues",
    "outlier": "outliers",
    "class_imbalance": "class_balance",
}
# The pixel match (near_copies.py's NCC) from which two files are near duplicates; `audit
# --near-duplicate-similarity` sets another.
NEAR_DUPLICATE_SIMILARITY = MATCH
# A class with fewer images than this share of its split's median count is flagged (score above 1 - share).
IMBALANCE_SHARE = 0.2
# The label issues that go into relabel.csv: scored above this (1 - cleanlab's self-confidence: the cross-validated
# model gives the folder's class under a tenth). The others stay in label_issues.csv, to be looked at.
RELABEL_SCORE = 0.9


@dataclass(frozen=True)
class AuditFiles:
    """Every file audited, in the order train, val, test; each split in its dataset's order."""

    paths: list[str]
    splits: list[str]
    targets: np.ndarray  # the folder's class of each file, as an index into ``classes`` (train/'s classes)
    classes: list[str]

    def __len__(self) -> int:
        return len(self.paths)

    def finding(self, kind: str, index: int, score: float, extra: dict[str, Any]) -> Finding:
        """A finding about file ``index``: its split, path and folder's class filled in."""
        label = self.classes[int(self.targets[index])]
        return Finding(kind, self.splits[index], self.paths[index], label, float(score), extra)


@dataclass(frozen=True)
class Finding:
    kind: str
    split: str
    path: str
    label: str  # the class of the file's folder
    score: float  # higher: more likely a real problem
    extra: dict[str, Any] = field(default_factory=dict)  # the kind's own columns (COLUMNS)


def class_balance(files: AuditFiles) -> list[Finding]:
    """One row per class and split, from the folders alone: its count, and 1 - count / the split's median count."""
    rows = []
    for split in dict.fromkeys(files.splits):
        counts = Counter(int(t) for t, s in zip(files.targets, files.splits, strict=True) if s == split)
        per_class = [counts.get(index, 0) for index in range(len(files.classes))]
        middle = max(median(per_class), 1)
        for name, count in zip(files.classes, per_class, strict=True):
            score = max(0.0, 1 - count / middle)
            rows.append(Finding("class_imbalance", split, "", name, score, {"count": count}))
    return rows


def flagged_classes(rows: list[Finding]) -> list[Finding]:
    """The class-balance rows worth a look: fewer than ``IMBALANCE_SHARE`` of the split's median count."""
    return [row for row in rows if row.score > 1 - IMBALANCE_SHARE]


def near_duplicates(
    files: AuditFiles,
    graph: Neighbours | torch.Tensor,
    thumbs: Thumbnails,
    threshold: float,
    device: torch.device | None = None,
    show: bool = False,
) -> list[Finding]:
    """Pairs of files that show the same picture (``near_copies.py``: candidates from the audit's neighbour graph
    of the embeddings, or from the embeddings, checked on the pixels), each listed once, on the later file (the
    val or test file of a pair across splits), ``duplicate_of`` the earlier one; the score is the pixels' best
    normalized cross-correlation, highest first."""
    rows = [
        files.finding(
            "near_duplicate",
            later,
            score,
            {"duplicate_of": files.paths[earlier], "duplicate_split": files.splits[earlier]},
        )
        for later, earlier, score in near_copies(graph, thumbs, files.splits, threshold, device, show)
    ]
    return sorted(rows, key=lambda row: -row.score)


def across_splits(rows: list[Finding]) -> int:
    """How many of the duplicate rows pair files of two splits (what inflates val_acc)."""
    return sum(row.split != row.extra.get("duplicate_split", row.split) for row in rows)


def leaking(found: dict[str, list[Finding] | None]) -> list[Finding]:
    """For exclude.txt: the later file of every pair across splits, exact or near (a val/ or test/ file that copies
    one of an earlier split); a copy within a split stays (a burst of photos of one scene only weighs it more)."""
    rows = [row for kind in ("exact_duplicate", "near_duplicate") for row in found.get(kind) or []]
    return [row for row in rows if row.split != row.extra.get("duplicate_split", row.split)]


def to_relabel(found: dict[str, list[Finding] | None], above: float = RELABEL_SCORE) -> list[Finding]:
    """For relabel.csv: the label issues scored above ``above``, each with its suggested class."""
    return [row for row in found.get("label_issue") or [] if row.score > above and row.extra.get("suggested_class")]


def write_csv(folder: Path, kind: str, rows: list[Finding]) -> Path:
    """``folder/<kind's file>.csv``: kind, split, path, class, score, then the kind's columns; highest score first.
    Written whole or not at all (a temporary file renamed), so a CSV is never half a list."""
    path = folder / f"{FILES[kind]}.csv"
    partial = path.with_name(f".{path.name}.partial")
    try:
        with partial.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["kind", "split", "path", "class", "score", *COLUMNS[kind]])
            for row in sorted(rows, key=lambda row: -row.score):
                extra = [row.extra.get(column, "") for column in COLUMNS[kind]]
                writer.writerow([row.kind, row.split, row.path, row.label, f"{row.score:.6f}", *extra])
        partial.replace(path)
    except OSError as exc:
        raise UserError(f"cannot write {path} ({exc.strerror}): pass audit --out a writable folder") from None
    return path
