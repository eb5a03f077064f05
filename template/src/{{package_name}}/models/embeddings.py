"""Embeddings: what the network sees in an image, as one unit-length vector (``similar`` and ``audit`` share them).

P10: the classification head is replaced by ``nn.Identity``, so the network
returns its embedding. P17: embeddings are L2-normalized with ``F.normalize``,
so that cosine similarity is one matrix product, never a Python loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ..core.device import autocast


def without_head(model: nn.Module) -> nn.Module:
    """P10: the same network returning embeddings; the loaded classifier is changed in place."""
    model.head = nn.Identity()
    return model.eval()


def unit_embeddings(model: nn.Module, images: torch.Tensor, precision: str) -> torch.Tensor:
    """One batch's unit-length embeddings, in float32 whatever precision computed them."""
    with autocast(images.device, precision):
        features = model(images)
    return F.normalize(features.float(), dim=1)


def embedded(
    model: nn.Module, batches: Iterable[torch.Tensor], device: torch.device, precision: str
) -> Iterator[torch.Tensor]:
    """Each batch's unit-length embeddings (P17: ``F.normalize``), on ``device``, as each is done: a caller that
    moves them to the host keeps one batch on the device (the audit of a million files)."""
    with torch.inference_mode():  # P11: no graph and no autograd bookkeeping for a pass that only reads
        for images in batches:
            yield unit_embeddings(model, images.to(device, non_blocking=True), precision)


def embed(model: nn.Module, batches: Iterable[torch.Tensor], device: torch.device, precision: str) -> torch.Tensor:
    """Unit-length embeddings, one row per image, computed batch by batch."""
    return torch.cat(list(embedded(model, batches, device, precision)))
