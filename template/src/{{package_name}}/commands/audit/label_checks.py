"""Likely label errors and outliers, from embeddings, by cleanlab (the ``audit`` extra) rather than by hand.

Label issues need probabilities from a model that did not see the file's label: ``linear_head.fitted_heads``
solves a linear classifier (shrinkage discriminant analysis) on the standardized frozen embeddings in closed form
over stratified folds, from one pass of sums (``linear_head.py``), so no training run is needed and a million
files take minutes, not the hours of scikit-learn's lbfgs; cleanlab's confident learning (``find_label_issues``,
or its batched label inspection ``LabelInspector`` where the probabilities would not fit in memory)
then flags the files whose folder disagrees with them, ranked by ``get_label_quality_scores``. Where the
probabilities would not fit in memory (at 1.28 million files and 1,000 classes: 5.1 GB), no array holds them:
cleanlab's ``LabelInspector`` takes them a chunk at a time as the heads make them (its confident thresholds),
they go to ``pred_probs.npy`` through a file, not a memory map, and it reads them back to score each label.
Outliers are the files whose nearest neighbours are far: the audit's one neighbour graph (``neighbours.py``)
scored by cleanlab's ``transform_distances_to_scores``, as Datalab scores a precomputed ``knn_graph``, flagged
as Datalab flags them.
"""

from __future__ import annotations

import contextlib
import itertools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from ...core.optional import require
from ...core.progress import meter
from .findings import AuditFiles, Finding
from .linear_head import Heads, fitted_heads, probability_batches
from .neighbours import Neighbours, search

if TYPE_CHECKING:
    from cleanlab.experimental.label_issues_batched import LabelInspector

FILTER = "prune_by_noise_rate"  # cleanlab's default way to decide which labels are issues
RANKING = "self_confidence"  # the label quality score: the probability of the folder's class
OUTLIER_NEIGHBOURS = 10  # cleanlab's default k: a file's mean distance to its k nearest files
# An outlier's mean neighbour distance lies past Q3 + 1.7 x IQR of all files': Datalab's rule (its threshold 0.37037).
OUTLIER_IQR = 1.7
# Probabilities (files x classes x 4 bytes) up to this size are checked in memory by find_label_issues; above,
# by cleanlab's batched label inspection: made once by the heads a chunk at a time, written, read back (``inspected``).
IN_MEMORY = 1 << 30
READ_ROWS = 16_384  # probabilities read back at once by the batched check (64 MB at 1,000 classes)
BATCH = 100_000  # files a batch of the quality scores in memory
PURPOSE = "audit's label and outlier checks"


@dataclass(frozen=True)
class LabelCheck:
    findings: list[Finding]
    probabilities: np.ndarray  # N x classes, each row out of sample: from a model fitted without that file
    note: str  # why some files or the whole check were left out; '' when all were checked


def cleanlab_installed() -> None:
    """Asked before any work: a missing extra is one line, not a failure after minutes of embedding."""
    require("cleanlab", "audit", PURPOSE)


def label_issues(
    files: AuditFiles,
    features: np.ndarray | torch.Tensor,
    source: str,
    show: bool = False,
    device: torch.device | None = None,
    folder: Path | None = None,
) -> LabelCheck:
    """Files whose folder's class the other files' embeddings contradict, with the class they suggest.
    ``folder``: the probabilities are written there as they come (``pred_probs.npy``), not kept in memory."""
    counts = np.bincount(files.targets, minlength=len(files.classes))
    kept = np.flatnonzero(counts >= 2)  # a class of one image cannot be cross-validated
    small = [f"{files.classes[c]} ({counts[c]})" for c in np.flatnonzero((counts > 0) & (counts < 2))]
    shape = (len(files), len(files.classes))
    if len(kept) < 2:
        return LabelCheck(
            [], np.zeros(shape, np.float32), "label issues not checked: they need 2 classes of 2 images or more"
        )
    checked = np.isin(files.targets, kept)
    vectors = torch.as_tensor(features)
    heads = fitted_heads(vectors, files.targets, checked, len(files.classes), device, show)
    rows = np.flatnonzero(checked)
    position = np.full(len(files.classes), -1)
    position[kept] = np.arange(len(kept))  # cleanlab wants the classes of the checked files, 0..K-1
    batched = len(rows) * len(kept) * 4 > IN_MEMORY
    if batched:
        probabilities, found = inspected(heads, vectors, files.targets, position, kept, show, device, folder)
        flagged, quality, best = found
    else:
        probabilities = (
            np.lib.format.open_memmap(folder / "pred_probs.npy", "w+", np.float32, shape)
            if folder is not None
            else np.zeros(shape, dtype=np.float32)
        )
        for held, batch in probability_batches(vectors, heads, device, show):
            probabilities[held] = batch
        labels = position[files.targets[checked]]
        whole = len(kept) == len(files.classes) and len(rows) == len(files)  # no copy needed for cleanlab
        probs = probabilities if whole else probabilities[np.ix_(checked, kept)]
        flagged = flagged_labels(labels, probs)
        quality = quality_scores(labels, probs, show)
        best = np.asarray(probs).argmax(1)
    how = "batched label inspection (LabelInspector)" if batched else f"find_label_issues ({FILTER})"
    method = f"cleanlab {how}, {heads.folds}-fold linear head (closed form) on {source} (standardized)"

    def suggested(i: int) -> str:
        return files.classes[int(kept[best[i]])]  # where the other files' embeddings point

    findings = [
        files.finding("label_issue", rows[i], 1 - quality[i], {"suggested_class": suggested(i), "method": method})
        for i in flagged
    ]
    note = f"label issues not checked for classes of one image: {', '.join(small)}" if small else ""
    return LabelCheck(sorted(findings, key=lambda row: -row.score), probabilities, note)


def flagged_labels(labels: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """The rows cleanlab's confident learning calls label issues, the probabilities in memory."""
    from cleanlab.filter import find_label_issues

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its advice on tiny data sets; the counts are in the summary
        # n_jobs=1: no process pool (a pool forked from a process with threads left a worker hanging in tests)
        return np.flatnonzero(find_label_issues(labels, probs, filter_by=FILTER, n_jobs=1))


def inspected(
    heads: Heads,
    vectors: torch.Tensor,
    targets: np.ndarray,
    position: np.ndarray,
    kept: np.ndarray,
    show: bool,
    device: torch.device | None,
    folder: Path | None,
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """cleanlab's batched label inspection (``LabelInspector``, as ``find_label_issues_batched`` runs it) on the
    probabilities a chunk at a time, never all at once: as the heads make them, they give the classes' confident
    thresholds and go to ``folder``'s ``pred_probs.npy`` through a file, not a memory map, whose pages would
    count as the process's memory; read back from it in row order, every label is scored against them.
    Returns the probabilities (read-only from that file; in memory without a folder) and, over the checked
    files in order: the flagged rows (worst first), each label's quality score and the suggested class's column.
    """
    from cleanlab.count import _reduce_issues
    from cleanlab.experimental.label_issues_batched import LabelInspector
    from cleanlab.rank import get_label_quality_scores

    count, classes = len(targets), len(position)
    inspector = LabelInspector(num_class=len(kept), store_results=True, verbose=False, n_jobs=1)
    checked = position[targets] >= 0
    place = np.cumsum(checked) - 1  # each checked file's row among the checked files
    quality, best = np.empty(int(checked.sum())), np.empty(int(checked.sum()), dtype=np.int64)
    right = np.zeros(len(quality), dtype=bool)  # predicted its own label: never an issue (as the batched call)
    memory = np.zeros((count, classes), np.float32) if folder is None else None
    path = None if folder is None else folder / "pred_probs.npy"
    with contextlib.ExitStack() as stack:
        out = None if path is None else stack.enter_context(open_rows(path, (count, classes)))
        for held, batch in probability_batches(vectors, heads, device, show):
            if memory is not None:
                memory[held] = batch
            else:
                out(held, batch)
            mine = checked[held]
            labels, probs = position[targets[held[mine]]], batch[mine][:, kept]
            if len(labels):
                inspector.update_confident_thresholds(labels, probs)
                at = place[held[mine]]
                quality[at] = get_label_quality_scores(labels, probs, method=RANKING)
                best[at] = probs.argmax(1)
                right[at] = _reduce_issues(probs, labels)
    issues = scored_in_order(inspector, written_batches(memory, path, (count, classes)), (targets, position, kept),
                             place, show)  # fmt: skip
    flagged = issues[~right[issues]]
    probabilities = memory if memory is not None else np.load(path, mmap_mode="r")
    return probabilities, (flagged, quality, best)


def scored_in_order(
    inspector: LabelInspector,
    batches: Iterator[tuple[np.ndarray, np.ndarray]],
    labels: tuple[np.ndarray, np.ndarray, np.ndarray],
    place: np.ndarray,
    show: bool,
) -> np.ndarray:
    """``inspected``'s second pass: every checked label scored against the confident thresholds, the probabilities
    read back in the files' order; the rows (among the checked files) cleanlab calls label issues, worst first.
    ``labels``: each file's target, each target's column among the checked classes (-1: not checked), the kept
    classes' columns."""
    targets, position, kept = labels
    order = []
    shown = meter("audit: label scores", len(targets), show, "files")
    try:
        for held, batch in batches:
            mine = position[targets[held]] >= 0
            if mine.any():
                inspector.score_label_quality(position[targets[held[mine]]], batch[mine][:, kept])
                order.append(place[held[mine]])
            shown.update(len(held))
    finally:
        shown.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its advice on tiny data sets
        return np.concatenate(order)[inspector.get_label_issues()]


def written_batches(
    memory: np.ndarray | None, path: Path | None, shape: tuple[int, int]
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The probabilities the first pass wrote, ``READ_ROWS`` rows at a time in row order: from memory, or read
    from the .npy file by plain reads (the page cache they pass through is not the process's memory, as a memory
    map's pages would be), which is many times faster than the heads making them again."""
    if memory is not None:
        for top in range(0, shape[0], READ_ROWS):
            yield np.arange(top, min(top + READ_ROWS, shape[0])), memory[top : top + READ_ROWS]
        return
    assert path is not None
    with path.open("rb") as source:
        np.lib.format.read_magic(source)
        np.lib.format.read_array_header_1_0(source)
        for top in range(0, shape[0], READ_ROWS):
            rows = min(READ_ROWS, shape[0] - top)
            batch = np.fromfile(source, dtype="<f4", count=rows * shape[1]).reshape(rows, shape[1])
            yield np.arange(top, top + rows), batch


@contextlib.contextmanager
def open_rows(path: Path, shape: tuple[int, int]) -> Iterator[Callable[[np.ndarray, np.ndarray], None]]:
    """``path`` made an .npy file of ``shape`` float32 rows; yields what writes given rows (ascending) in place,
    each run of consecutive rows in one write."""
    with path.open("wb") as out:
        np.lib.format.write_array_header_1_0(out, {"descr": "<f4", "fortran_order": False, "shape": shape})
        start, width = out.tell(), shape[1] * 4
        out.truncate(start + shape[0] * width)

        def write(rows: np.ndarray, batch: np.ndarray) -> None:
            breaks = np.flatnonzero(np.diff(rows) != 1) + 1
            for left, right in itertools.pairwise([0, *breaks.tolist(), len(rows)]):
                out.seek(start + int(rows[left]) * width)
                out.write(np.ascontiguousarray(batch[left:right], dtype=np.float32).tobytes())

        yield write


def quality_scores(labels: np.ndarray, probs: np.ndarray, show: bool) -> np.ndarray:
    """cleanlab's label quality score of every row (``RANKING``), ``BATCH`` rows at a time."""
    from cleanlab.rank import get_label_quality_scores

    quality = np.empty(len(labels))
    shown = meter("audit: label quality", len(labels), show, "files")
    try:
        for top in range(0, len(labels), BATCH):
            part = slice(top, top + BATCH)
            quality[part] = get_label_quality_scores(labels[part], np.asarray(probs[part]), method=RANKING)
            shown.update(len(quality[part]))
    finally:
        shown.close()
    return quality


def outliers(files: AuditFiles, graph: Neighbours | np.ndarray, source: str) -> list[Finding]:
    """Files far from their nearest neighbours: score 1 - cleanlab's outlier score (higher: more outlying).
    ``graph``: the audit's neighbour graph (``neighbours.search``), or embeddings to search here."""
    if len(files) <= 2:
        return []  # no neighbourhood to stand out of
    from cleanlab.outlier import transform_distances_to_scores

    if not isinstance(graph, Neighbours):
        vectors = F.normalize(torch.as_tensor(graph, dtype=torch.float32), dim=1)  # cosine, as cleanlab's default
        graph = search(vectors, files.splits, OUTLIER_NEIGHBOURS + 1, torch.device("cpu"))
    k = min(OUTLIER_NEIGHBOURS, len(files) - 1)
    _, similarity = graph.nearest(k)
    # Cosine distances, as cleanlab's own search of high-dimensional features measures them.
    distance = (1 - similarity.double()).clamp_min(0).mean(1).numpy()
    scale = float(max(np.median(distance), 100 * np.finfo(np.float64).eps))  # Datalab's scaling factor
    scores = transform_distances_to_scores(distance, t=1, scaling_factor=scale)
    q1, q3 = np.percentile(distance, [25, 75])
    limit = q3 + OUTLIER_IQR * (q3 - q1)
    method = (
        f"cleanlab outlier scores ({k} nearest neighbours on {source}, {graph.method}), past Q3 + {OUTLIER_IQR} IQR"
    )
    flagged = np.flatnonzero(distance > limit)
    findings = [files.finding("outlier", i, 1 - scores[i], {"method": method}) for i in flagged]
    return sorted(findings, key=lambda row: -row.score)
