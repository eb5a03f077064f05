"""Likely label errors and outliers, from embeddings, by cleanlab (the ``audit`` extra) rather than by hand.

Label issues need probabilities from a model that did not see the file's label: ``out_of_sample_probabilities``
solves a linear classifier (shrinkage discriminant analysis) on the standardized frozen embeddings in closed form
over stratified folds, from one pass of sums (``linear_head.py``), so no training run is needed and a million
files take minutes, not the hours of scikit-learn's lbfgs; cleanlab's confident learning (``find_label_issues``,
or its batched label inspection ``find_label_issues_batched`` where the probabilities would not fit in memory)
then flags the files whose folder disagrees with them, ranked by ``get_label_quality_scores``. Outliers are the
files whose nearest neighbours are far: the audit's one neighbour graph (``neighbours.py``) scored by cleanlab's
``transform_distances_to_scores``, as Datalab scores a precomputed ``knn_graph``, flagged as Datalab flags them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ...core.optional import require
from ...core.progress import meter
from .findings import AuditFiles, Finding
from .linear_head import out_of_sample_probabilities
from .neighbours import Neighbours, search

FILTER = "prune_by_noise_rate"  # cleanlab's default way to decide which labels are issues
RANKING = "self_confidence"  # the label quality score: the probability of the folder's class
OUTLIER_NEIGHBOURS = 10  # cleanlab's default k: a file's mean distance to its k nearest files
# An outlier's mean neighbour distance lies past Q3 + 1.7 x IQR of all files': Datalab's rule (its threshold 0.37037).
OUTLIER_IQR = 1.7
# Probabilities (files x classes x 4 bytes) up to this size are checked in memory by find_label_issues; above,
# by cleanlab's batched label inspection, reading them from the file they were written to.
IN_MEMORY = 1 << 30
BATCH = 100_000  # files a batch of the batched inspection and of the quality scores
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
    probabilities = (
        np.lib.format.open_memmap(folder / "pred_probs.npy", "w+", np.float32, shape)
        if folder is not None
        else np.zeros(shape, dtype=np.float32)
    )
    if len(kept) < 2:
        return LabelCheck([], probabilities, "label issues not checked: they need 2 classes of 2 images or more")
    checked = np.isin(files.targets, kept)
    vectors = torch.as_tensor(features)
    folds = out_of_sample_probabilities(vectors, files.targets, checked, probabilities, device, show)
    rows = np.flatnonzero(checked)
    position = np.full(len(files.classes), -1)
    position[kept] = np.arange(len(kept))  # cleanlab wants the classes of the checked files, 0..K-1
    labels = position[files.targets[checked]]
    whole = len(kept) == len(files.classes) and len(rows) == len(files)  # no copy needed for cleanlab
    probs = probabilities if whole else probabilities[np.ix_(checked, kept)]
    batched = probs.size * 4 > IN_MEMORY
    flagged = flagged_labels(labels, probs, batched)
    quality = quality_scores(labels, probs, show)
    how = "find_label_issues_batched" if batched else f"find_label_issues ({FILTER})"
    method = f"cleanlab {how}, {folds}-fold linear head (closed form) on {source} (standardized)"

    def suggested(i: int) -> str:
        return files.classes[int(kept[np.asarray(probs[i]).argmax()])]  # where the other files' embeddings point

    findings = [
        files.finding("label_issue", rows[i], 1 - quality[i], {"suggested_class": suggested(i), "method": method})
        for i in flagged
    ]
    note = f"label issues not checked for classes of one image: {', '.join(small)}" if small else ""
    return LabelCheck(sorted(findings, key=lambda row: -row.score), probabilities, note)


def flagged_labels(labels: np.ndarray, probs: np.ndarray, batched: bool) -> np.ndarray:
    """The rows cleanlab calls label issues: confident learning in memory, or its batched label inspection
    (``find_label_issues_batched``: the probabilities read ``BATCH`` rows at a time)."""
    from cleanlab.experimental.label_issues_batched import find_label_issues_batched
    from cleanlab.filter import find_label_issues

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its advice on tiny data sets; the counts are in the summary
        if batched:
            return np.asarray(
                find_label_issues_batched(labels, probs, batch_size=BATCH, n_jobs=1, verbose=False)
            )  # indices, worst first
        return np.flatnonzero(find_label_issues(labels, probs, filter_by=FILTER))


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
