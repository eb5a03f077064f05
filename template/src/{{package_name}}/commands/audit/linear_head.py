"""Out-of-sample class probabilities for the audit's label check: a linear classifier in closed form, k folds.

Each fold's classifier is solved, not trained: one pass over the embeddings sums, for every fold, its files'
features, their Gram matrix (width x width) and each class's feature sums; a fold's training statistics are the
totals less its own, so k classifiers cost one pass and k small solves (width x width against classes columns).
The classifier is shrinkage linear discriminant analysis on standardized features: every class a Gaussian of one
shared, shrunk covariance; its posterior is a softmax of linear scores, which a temperature, fitted on the folds'
own held-out scores, then calibrates. (Ridge regression on one-hot targets, which the same sums also solve,
measured a little worse on real photos: precision 0.92 against 0.96 on two sets.)

Why not a logistic regression: scikit-learn's (lbfgs, full batch, one CPU) takes hours at 1,000 classes and a
million files, and the mini-batch softmax regression that replaced it ran about one step a second there, 3,000
steps and more; this costs one pass to sum and one to predict, O(files x width^2), minutes at a million files,
and no randomness: the same files give the same probabilities. Measured on real photos (docs/audit.md): label
precision and recall at least scikit-learn's logistic regression's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from ...core.progress import meter

FOLDS = 5  # folds; fewer when the largest class has fewer images
SHRINK = 0.5  # the covariance's weight moved to its mean variance (the best of 0.3, 0.5, 0.7 on real photos)
VARIANCE_FLOOR = 1e-3  # the least variance shrunk towards (standardized features have variance 1)
CONSTANT = 1e-9  # a variance at most this share of the largest one is a constant feature's rounding
CHUNK = 16_384  # files summed or predicted at once
CALIBRATE = 20_000  # held-out files (at most) the temperature is fitted on
SHIFT_SAMPLE = 4_096  # files whose mean is subtracted before summing: the sums then lose no precision


@dataclass
class Sums:
    """One fold's statistics (float64): its file count, feature sums, Gram matrix and per-class feature sums and
    counts, all of features less ``shift``."""

    count: float
    total: torch.Tensor  # width
    gram: torch.Tensor  # width x width
    by_class: torch.Tensor  # classes x width
    per_class: torch.Tensor  # classes

    def __sub__(self, other: Sums) -> Sums:
        return Sums(
            self.count - other.count,
            self.total - other.total,
            self.gram - other.gram,
            self.by_class - other.by_class,
            self.per_class - other.per_class,
        )

    def __add__(self, other: Sums) -> Sums:
        return Sums(
            self.count + other.count,
            self.total + other.total,
            self.gram + other.gram,
            self.by_class + other.by_class,
            self.per_class + other.per_class,
        )


def memory_needed(width: int, classes: int) -> int:
    """Bytes the head takes at most: every fold's sums and their total (float64), the heads (float32), and a
    chunk's inputs, class sums, scores and probabilities."""
    sums = (width * width + classes * width + width + classes) * 8
    heads = (width * classes + classes) * 4
    chunk = CHUNK * width * 4 + classes * width * 12 + 2 * CHUNK * classes * 4
    return (FOLDS + 2) * sums + (FOLDS + 1) * heads + chunk + 4 * width * width * 8  # + the solve's matrices


def fold_of(targets: np.ndarray, checked: np.ndarray, folds: int) -> np.ndarray:
    """Each checked file's fold (-1 for the others): within each class the files in a fixed random order, dealt
    round the folds, so every fold holds each class's share."""
    fold = np.full(len(targets), -1)
    order = np.random.default_rng(0).permutation(len(targets))
    order = order[checked[order]]
    ranked = order[np.argsort(targets[order], kind="stable")]  # by class; the random order within each
    starts = np.searchsorted(targets[ranked], targets[ranked], side="left")
    fold[ranked] = (np.arange(len(ranked)) - starts) % folds
    return fold


@dataclass(frozen=True)
class Heads:
    """The fitted classifiers and which files each predicts: ``jobs`` pairs a head with its held-out rows."""

    folds: int
    temperature: float
    jobs: list[tuple[tuple[torch.Tensor, torch.Tensor], np.ndarray]]


def fitted_heads(
    features: torch.Tensor,
    targets: np.ndarray,
    checked: np.ndarray,
    classes: int,
    device: torch.device | None = None,
    show: bool = False,
) -> Heads:
    """One pass of sums, then each fold's classifier solved (module docstring) and the temperature fitted."""
    device = device or torch.device("cpu")
    folds = int(min(FOLDS, np.bincount(targets[checked]).max()))
    fold = fold_of(targets, checked, folds)
    rows = np.flatnonzero(checked)
    shift = features[torch.as_tensor(np.random.default_rng(0).choice(rows, min(len(rows), SHIFT_SAMPLE)))]
    shift = shift.to(device, torch.float64).mean(0)
    labels = torch.as_tensor(targets, dtype=torch.long)
    shown = meter(f"audit: {folds}-fold linear head, sums", len(rows), show, "files")
    try:
        parts = [fold_sums(features, labels, np.flatnonzero(fold == f), shift, classes, shown) for f in range(folds)]
    finally:
        shown.close()
    every = parts[0]
    for part in parts[1:]:
        every = every + part
    heads = [solve(every - part, shift) for part in parts]
    temperature = fit_temperature(features, labels, fold, heads, device)
    jobs = [(heads[f], np.flatnonzero(fold == f)) for f in range(folds)]
    if not checked.all():
        jobs.append((solve(every, shift), np.flatnonzero(~checked)))
    return Heads(folds, temperature, jobs)


def probability_batches(
    features: torch.Tensor, heads: Heads, device: torch.device | None = None, show: bool = False
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every file's out-of-sample probabilities, ``CHUNK`` files at a time, fold after fold: (rows, rows x
    classes float32); the checked files from the classifiers of the folds without them, the others from one of
    every checked file. A pass over the embeddings: the label check writes them as they come."""
    device = device or torch.device("cpu")
    shown = meter(f"audit: {heads.folds}-fold linear head, probabilities", sum(len(h) for _, h in heads.jobs), show,
                  "files")  # fmt: skip
    try:
        for head, held in heads.jobs:
            for top in range(0, len(held), CHUNK):
                rows = held[top : top + CHUNK]
                yield rows, predict(head, heads.temperature, features[torch.as_tensor(rows)], device)
                shown.update(len(rows))
    finally:
        shown.close()


def fold_sums(
    features: torch.Tensor, labels: torch.Tensor, rows: np.ndarray, shift: torch.Tensor, classes: int, shown: object
) -> Sums:
    """``rows``' statistics, ``CHUNK`` files at a time: each chunk's products in float32 on the device, added in
    float64."""
    device, width = shift.device, len(shift)
    sums = Sums(
        0.0,
        torch.zeros(width, dtype=torch.float64, device=device),
        torch.zeros(width, width, dtype=torch.float64, device=device),
        torch.zeros(classes, width, dtype=torch.float64, device=device),
        torch.zeros(classes, dtype=torch.float64, device=device),
    )
    for top in range(0, len(rows), CHUNK):
        chosen = torch.as_tensor(rows[top : top + CHUNK])
        part = features[chosen].to(device, torch.float32) - shift.float()
        named = labels[chosen].to(device)
        sums.count += len(chosen)
        sums.total += part.sum(0, dtype=torch.float64)
        sums.gram += (part.T @ part).double()
        sums.by_class += torch.zeros(classes, width, device=device).index_add_(0, named, part).double()
        sums.per_class += torch.bincount(named, minlength=classes).double()
        shown.update(len(chosen))  # type: ignore[attr-defined]
    return sums


def solve(sums: Sums, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The classifier of these statistics on standardized features, as weights and biases on the raw features
    (width x classes float32, classes float32): ``scores = features @ weights + biases``."""
    count = sums.count
    mean = sums.total / count
    covariance = sums.gram / count - torch.outer(mean, mean)
    variances = covariance.diagonal().clamp_min(0)
    # A feature (almost) the same in every file (a channel a small image never lights): its variance is rounding
    # left by the subtraction above, and scaled up by its own tiny std it made the spread indefinite
    # (data_audit.py --quick, 32 px). It carries no information: taken out, a unit variance on its own.
    constant = variances <= CONSTANT * variances.max()
    std = variances.sqrt().clamp_min(1e-6)
    covariance = covariance / torch.outer(std, std)  # of the standardized features: a correlation matrix
    covariance[constant] = 0
    covariance[:, constant] = 0
    covariance[constant, constant] = 1
    width = len(mean)
    present = sums.per_class > 0  # a class absent from this fold's training files is never predicted
    centres = (sums.by_class / sums.per_class.clamp_min(1)[:, None] - mean) / std  # classes x width, standardized
    centres[:, constant] = 0
    # The pooled within-class covariance: the total less what the class centres explain.
    spread = covariance - (centres.T * (sums.per_class / count)) @ centres
    identity = torch.eye(width, dtype=spread.dtype, device=spread.device)
    # Shrunk towards its mean variance: positive definite however few files a class has (one a class: no spread
    # within classes at all, then the shrinkage is all of it, at a floor of the features' variance).
    variance = spread.diagonal().mean().clamp_min(VARIANCE_FLOOR)
    spread = (1 - SHRINK) * spread + SHRINK * variance * identity
    weights = torch.cholesky_solve(centres.T, cholesky(spread, variance * identity))  # width x classes
    biases = -0.5 * (centres * weights.T).sum(1) + torch.log(sums.per_class.clamp_min(1) / count)
    biases = torch.where(present, biases, torch.full_like(biases, -torch.inf))
    raw = weights / std[:, None]  # on the raw features: z = (x - shift - mean) / std
    biases = biases - (shift + mean) @ raw
    return raw.float(), biases.float()


def cholesky(matrix: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The Cholesky factor of ``matrix``, symmetric positive definite but for rounding: where a feature is almost
    constant over few files (a small data set at a small image size), float64's rounding left the shrunk spread
    indefinite (data_audit.py --quick: its leading minor of order 342), so a little more of ``scale`` (the
    shrinkage target) is added, from a millionth up, until it factors."""
    factor, info = torch.linalg.cholesky_ex(matrix)
    jitter = 1e-6
    while int(info) > 0 and jitter <= 1.0:
        factor, info = torch.linalg.cholesky_ex(matrix + jitter * scale)
        jitter *= 10
    if int(info) > 0:  # not rounding: a bug upstream, said as such rather than as a wrong answer
        raise torch.linalg.LinAlgError(f"the label head's spread is not positive definite (minor {int(info)})")
    return factor


def scores(head: tuple[torch.Tensor, torch.Tensor], inputs: torch.Tensor) -> torch.Tensor:
    weights, biases = head
    return inputs.to(weights.device, torch.float32) @ weights + biases


def fit_temperature(
    features: torch.Tensor,
    labels: torch.Tensor,
    fold: np.ndarray,
    heads: list[tuple[torch.Tensor, torch.Tensor]],
    device: torch.device,
) -> float:
    """The factor on the scores that makes the held-out files' labels likeliest, the labels taken as what they
    are here: a share of them wrong, drawn at random (that share fitted too). Fitted on at most ``CALIBRATE``
    checked files, a fixed sample, each scored by its fold's classifier. Fitted to the labels as if all were
    right, the factor softens every probability to make room for the wrong ones, and confident learning then
    misses wrong labels (measured on real photos: recall 0.84 against 0.98, docs/audit.md)."""
    rows = np.flatnonzero(fold >= 0)
    rows = np.sort(np.random.default_rng(0).choice(rows, min(len(rows), CALIBRATE), replace=False))
    held = torch.cat([scores(heads[f], features[torch.as_tensor(rows[fold[rows] == f])]) for f in range(len(heads))])
    named = torch.cat([labels[torch.as_tensor(rows[fold[rows] == f])] for f in range(len(heads))]).to(device)
    possible = held.gather(1, named[:, None])[:, 0].isfinite()  # a class no training file had: no likelihood
    held, named = held[possible].double(), named[possible]
    chance = 1 / held.shape[1]

    def loss(log_factor: float) -> float:
        """The mean log loss of the labels at this factor, at the share of random labels that makes it least."""
        given = torch.log_softmax(held * np.exp(log_factor), dim=1).gather(1, named[:, None])[:, 0].exp()
        return least(lambda share: float(-torch.log((1 - share) * given + share * chance).mean()), 0.0, 0.5)[1]

    return float(np.exp(least(loss, -8.0, 8.0)[0]))


def least(function: Callable[[float], float], low: float, high: float, steps: int = 40) -> tuple[float, float]:
    """Where a convex function of one number is least between ``low`` and ``high``, and its value there: a
    golden-section search (the bracket shrinks to 0.618^40 of its width: far below what changes a probability)."""
    golden = (np.sqrt(5) - 1) / 2
    a, b = high - golden * (high - low), low + golden * (high - low)
    at_a, at_b = function(a), function(b)
    for _ in range(steps):
        if at_a < at_b:
            high, b, at_b = b, a, at_a
            a = high - golden * (high - low)
            at_a = function(a)
        else:
            low, a, at_a = a, b, at_b
            b = low + golden * (high - low)
            at_b = function(b)
    return (a, at_a) if at_a < at_b else (b, at_b)


@torch.inference_mode()
def predict(
    head: tuple[torch.Tensor, torch.Tensor], temperature: float, chosen: torch.Tensor, device: torch.device
) -> np.ndarray:
    """These files' class probabilities (rows x classes float32)."""
    return torch.softmax(scores(head, chosen.to(device)) * temperature, dim=1).cpu().numpy()
