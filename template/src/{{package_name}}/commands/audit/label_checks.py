"""Likely label errors and outliers, from embeddings, by cleanlab (the ``audit`` extra) rather than by hand.

Label issues need probabilities from a model that did not see the file's label: ``out_of_sample_probabilities``
cross-validates a logistic regression on the frozen embeddings (scikit-learn, which cleanlab brings), so no
training run is needed; cleanlab's confident learning (``find_label_issues``) then flags the files whose folder
disagrees with them, ranked by ``get_label_quality_scores``. Outliers are the files whose nearest neighbours are
far (``cleanlab.outlier.OutOfDistribution`` on the embeddings), flagged as cleanlab's Datalab flags them.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from dataclasses import dataclass

import numpy as np

from ...core.optional import require
from ...core.progress import tracked
from .findings import AuditFiles, Finding

FOLDS = 5  # folds of the cross-validation; fewer when the smallest class has fewer images
FILTER = "prune_by_noise_rate"  # cleanlab's default way to decide which labels are issues
RANKING = "self_confidence"  # the label quality score: the probability of the folder's class
OUTLIER_NEIGHBOURS = 10  # cleanlab's default k: a file's mean distance to its k nearest files
# An outlier's mean neighbour distance lies past Q3 + 1.7 x IQR of all files': Datalab's rule (its threshold 0.37037).
OUTLIER_IQR = 1.7
PURPOSE = "audit's label and outlier checks"


@dataclass(frozen=True)
class LabelCheck:
    findings: list[Finding]
    probabilities: np.ndarray  # N x classes, each row out of sample: from a model fitted without that file
    note: str  # why some files or the whole check were left out; '' when all were checked


def cleanlab_installed() -> None:
    """Asked before any work: a missing extra is one line, not a failure after minutes of embedding."""
    require("cleanlab", "audit", PURPOSE)
    require("sklearn", "audit", PURPOSE)


def out_of_sample_probabilities(
    features: np.ndarray, targets: np.ndarray, checked: np.ndarray, num_classes: int, show: bool
) -> tuple[np.ndarray, int]:
    """Each file's class probabilities from a logistic regression fitted on the other folds (stratified, fixed
    seed): ``checked`` files are cross-validated, the others predicted by a model fitted on every checked file."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits  # scikit-learn's own dependency

    # A class of fewer images than folds is in some folds only: its files are still predicted by models fitted on
    # its other images, so one small class does not cut every class's folds.
    folds = int(min(FOLDS, np.unique(targets[checked], return_counts=True)[1].max()))
    rows = np.flatnonzero(checked)
    probabilities = np.zeros((len(targets), num_classes), dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn's warning about that small class
        splits = list(StratifiedKFold(folds, shuffle=True, random_state=0).split(rows, targets[rows]))
    others = np.flatnonzero(~checked)
    parts = [*((rows[fit], rows[held]) for fit, held in splits), *([(rows, others)] if len(others) else [])]
    for fit, held in tracked(parts, "audit: cross-validating labels", len(parts), show, unit="folds"):
        # One BLAS thread: these products are small, and BLAS threads spinning beside torch's made a fold 15x
        # slower on a busy 2-core machine (measured: 0.6 CPU-seconds for 8,000 x 1,280 features alone, 10 with 2).
        with threadpool_limits(1):
            # Standardized first: on unit-length embeddings the default penalty would leave every probability
            # near 1 / classes, and confident learning would have nothing to go on.
            model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
            model.fit(features[fit], targets[fit])
        probabilities[np.ix_(held, model.classes_)] = model.predict_proba(features[held])
    return probabilities, folds


def label_issues(files: AuditFiles, features: np.ndarray, source: str, show: bool = False) -> LabelCheck:
    """Files whose folder's class the other files' embeddings contradict, with the class they suggest."""
    counts = np.bincount(files.targets, minlength=len(files.classes))
    kept = np.flatnonzero(counts >= 2)  # a class of one image cannot be cross-validated
    small = [f"{files.classes[c]} ({counts[c]})" for c in np.flatnonzero((counts > 0) & (counts < 2))]
    empty = np.zeros((len(files), len(files.classes)), dtype=np.float32)
    if len(kept) < 2:
        return LabelCheck([], empty, "label issues not checked: they need 2 classes of 2 images or more")
    checked = np.isin(files.targets, kept)
    probabilities, folds = out_of_sample_probabilities(features, files.targets, checked, len(files.classes), show)
    from cleanlab.filter import find_label_issues
    from cleanlab.rank import get_label_quality_scores

    position = {int(c): i for i, c in enumerate(kept)}  # cleanlab wants the classes of the checked files, 0..K-1
    labels = np.array([position[int(t)] for t in files.targets[checked]])
    probs = probabilities[np.ix_(checked, kept)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its advice on tiny data sets; the counts are in the summary
        flagged = find_label_issues(labels, probs, filter_by=FILTER)
    quality = get_label_quality_scores(labels, probs, method=RANKING)
    method = f"cleanlab find_label_issues ({FILTER}), {folds}-fold logistic regression on {source} (standardized)"
    rows = np.flatnonzero(checked)

    def suggested(i: int) -> str:
        return files.classes[int(kept[probs[i].argmax()])]  # the class the other files' embeddings point to

    findings = [
        files.finding("label_issue", rows[i], 1 - quality[i], {"suggested_class": suggested(i), "method": method})
        for i in np.flatnonzero(flagged)
    ]
    note = f"label issues not checked for classes of one image: {', '.join(small)}" if small else ""
    return LabelCheck(sorted(findings, key=lambda row: -row.score), probabilities, note)


def outliers(files: AuditFiles, features: np.ndarray, source: str) -> list[Finding]:
    """Files far from their nearest neighbours: score 1 - cleanlab's OOD score (higher: more outlying)."""
    if len(files) <= 2:
        return []  # no neighbourhood to stand out of
    from cleanlab.outlier import OutOfDistribution

    k = min(OUTLIER_NEIGHBOURS, len(files) - 1)
    with contextlib.redirect_stdout(io.StringIO()):  # its "Fitting OOD estimator ..." line: the summary says it
        scores = OutOfDistribution({"k": k}).fit_score(features=features)
    # cleanlab's score is exp(-mean distance / scale): -log gives the distance back up to a factor, which the
    # quartile rule ignores.
    distance = -np.log(np.clip(scores, np.finfo(np.float64).tiny, None))
    q1, q3 = np.percentile(distance, [25, 75])
    limit = q3 + OUTLIER_IQR * (q3 - q1)
    method = f"cleanlab OutOfDistribution ({k} nearest neighbours on {source}), past Q3 + {OUTLIER_IQR} IQR"
    flagged = np.flatnonzero(distance > limit)
    findings = [files.finding("outlier", i, 1 - scores[i], {"method": method}) for i in flagged]
    return sorted(findings, key=lambda row: -row.score)
