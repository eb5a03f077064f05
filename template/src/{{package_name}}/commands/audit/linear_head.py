"""Out-of-sample class probabilities for the audit's label check: a linear head on frozen embeddings, k folds.

Each fold trains a softmax regression (one ``nn.Linear``) on the standardized embeddings of the other folds, by
mini-batch on the device (Adam, a cosine-decayed rate, the L2 penalty of scikit-learn's logistic regression at its
default ``C=1``), and predicts its own files: every file's probabilities come from a model that never saw its
label. Written with torch rather than scikit-learn: its ``LogisticRegression`` (lbfgs, full batch, one CPU)
takes hours at 1,000 classes and a million files; this costs a few passes over the embeddings, on a GPU where
there is one. The folds and the batch order come from fixed seeds: an audit says the same twice.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ...core.progress import meter

FOLDS = 5  # folds; fewer when the largest class has fewer images
BATCH = 1024  # files a step; a sixteenth of the fold's files where that is fewer (at least 32)
EPOCHS = 3.0  # passes over a fold's training files ...
MIN_STEPS = 600  # ... and at least this many steps (a small data set needs many passes to converge)
RATE = 1e-3  # Adam's learning rate at the start (cosine-decayed to 0)
PREDICT = 16_384  # files predicted at once


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


def out_of_sample_probabilities(
    features: torch.Tensor,
    targets: np.ndarray,
    checked: np.ndarray,
    probabilities: np.ndarray,
    device: torch.device | None = None,
    show: bool = False,
) -> int:
    """Each file's class probabilities into ``probabilities`` (N x classes, e.g. a memory-mapped file): the
    ``checked`` files from the models of the folds without them, the others from a model of every checked file.
    Returns the number of folds."""
    device = device or torch.device("cpu")
    folds = int(min(FOLDS, np.bincount(targets[checked]).max()))
    fold = fold_of(targets, checked, folds)
    # The embeddings go to a GPU once (float16: half the memory); on the CPU they stay where they are.
    source = features.to(device) if device.type == "cuda" else features
    labels = torch.as_tensor(targets, dtype=torch.long)
    parts = [(np.flatnonzero(checked & (fold != f)), np.flatnonzero(fold == f)) for f in range(folds)]
    if not checked.all():
        parts.append((np.flatnonzero(checked), np.flatnonzero(~checked)))
    steps = [max(MIN_STEPS, math.ceil(EPOCHS * len(fit) / batch_size(len(fit)))) for fit, _ in parts]
    shown = meter(f"audit: {folds}-fold linear head", sum(steps), show, "steps")
    try:
        for seed, ((fit, held), count) in enumerate(zip(parts, steps, strict=True)):
            head, scale = train_head(source, labels, fit, probabilities.shape[1], count, seed, shown)
            predict(head, scale, source, held, probabilities)
    finally:
        shown.close()
    return folds


def batch_size(files: int) -> int:
    """Files a step: ``BATCH``, or a sixteenth of a small fold (its ``MIN_STEPS`` then cost little)."""
    return max(1, min(BATCH, files, max(32, files // 16)))


def standardizer(source: torch.Tensor, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and standard deviation of each feature over ``rows`` (in chunks, float64 sums): on unit-length
    embeddings a penalty would otherwise leave every probability near 1 / classes."""
    total = torch.zeros(source.shape[1], dtype=torch.float64, device=source.device)
    squares = torch.zeros_like(total)
    for top in range(0, len(rows), PREDICT):
        part = source[torch.as_tensor(rows[top : top + PREDICT], device=source.device)].double()
        total += part.sum(0)
        squares += (part * part).sum(0)
    mean = total / len(rows)
    std = (squares / len(rows) - mean * mean).clamp_min(0).sqrt().clamp_min(1e-6)
    return mean.float(), std.float()


def train_head(
    source: torch.Tensor, labels: torch.Tensor, fit: np.ndarray, classes: int, steps: int, seed: int, shown: object
) -> tuple[torch.nn.Linear, tuple[torch.Tensor, torch.Tensor]]:
    """One fold's softmax regression on ``fit``'s standardized embeddings: ``steps`` mini-batches, drawn in
    an order fixed by ``seed``."""
    device = source.device
    mean, std = standardizer(source, fit)
    head = torch.nn.Linear(source.shape[1], classes, device=device)
    torch.nn.init.zeros_(head.weight)  # a logistic regression's start: no randomness, every class alike
    torch.nn.init.zeros_(head.bias)
    # scikit-learn's default penalty, ||W||^2 / 2 on the summed loss (C=1), is ||W||^2 / (2 n) on the mean loss.
    optimizer = torch.optim.Adam(
        [{"params": [head.weight], "weight_decay": 1 / len(fit)}, {"params": [head.bias]}], lr=RATE
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * step / steps)))
    generator = torch.Generator().manual_seed(seed)
    rows = torch.as_tensor(fit)
    batch = batch_size(len(fit))
    order = torch.empty(0, dtype=torch.long)
    for _ in range(steps):
        if len(order) < batch:  # a new pass over the fold, in a new order
            order = torch.cat([order, rows[torch.randperm(len(rows), generator=generator)]])
        chosen, order = order[:batch], order[batch:]
        inputs = (source[chosen.to(device)].float() - mean) / std
        loss = F.cross_entropy(head(inputs), labels[chosen].to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        shown.update(1)  # type: ignore[attr-defined]
    return head, (mean, std)


@torch.inference_mode()
def predict(
    head: torch.nn.Linear,
    scale: tuple[torch.Tensor, torch.Tensor],
    source: torch.Tensor,
    held: np.ndarray,
    out: np.ndarray,
) -> None:
    """``held``'s class probabilities into ``out``, ``PREDICT`` rows at a time."""
    head.eval()  # P11: a plain linear layer, but evaluated as every model is
    mean, std = scale
    for top in range(0, len(held), PREDICT):
        rows = held[top : top + PREDICT]
        inputs = (source[torch.as_tensor(rows, device=source.device)].float() - mean) / std
        out[rows] = F.softmax(head(inputs), dim=1).cpu().numpy()
