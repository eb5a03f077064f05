"""Similarity search: which training images does the network find most like a query?

P10: the classification head is replaced by ``nn.Identity``, so the network
returns its embedding. P17: embeddings are L2-normalized with ``F.normalize``,
and cosine similarity is then one matrix product, never a Python loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..core.device import autocast
from ..core.errors import UserError
from ..data.folders import build_transform, check_split, split_dataset
from ..data.loaders import build_loader
from ..training.inference import Loaded, read_input


@dataclasses.dataclass(frozen=True)
class Match:
    path: str
    label: str
    similarity: float


def without_head(model: nn.Module) -> nn.Module:
    """P10: the same network returning embeddings; the loaded classifier is changed in place."""
    model.head = nn.Identity()
    return model.eval()


def embed(model: nn.Module, batches: Iterable[torch.Tensor], device: torch.device, precision: str) -> torch.Tensor:
    """Unit-length embeddings (P17: ``F.normalize``), one row per image, computed batch by batch."""
    chunks = []
    with torch.inference_mode():  # P11: no graph and no autograd bookkeeping for a pass that only reads
        for images in batches:
            with autocast(device, precision):
                features = model(images.to(device, non_blocking=True))
            chunks.append(F.normalize(features.float(), dim=1))
    return torch.cat(chunks)


def top_k(queries: torch.Tensor, index: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine similarities and positions of the ``k`` nearest index rows, most similar first.

    Both inputs are unit length, so their matrix product is the cosine similarity.
    """
    return (queries @ index.T).topk(min(k, len(index)), dim=1)


class SimilarityIndex:
    """The embeddings of every image of one split of ``data.root``, in file order."""

    def __init__(self, loaded: Loaded, split: str = "train") -> None:
        cfg = loaded.config
        root = Path(cfg.data.root)
        check_split(root, split)  # a subfolder, or a split that pack-shards packed
        dataset = split_dataset(root, split, cfg.data, train=False)  # the eval transform: no random crops
        self.paths = [path for path, _ in dataset.samples]
        self.labels = [dataset.classes[target] for _, target in dataset.samples]
        self.model = without_head(loaded.model)
        self.loaded = loaded
        loader = build_loader(dataset, cfg.data, cfg.train.seed, loaded.device, train=False)
        self.embeddings = embed(self.model, (images for images, _ in loader), loaded.device, loaded.precision)

    def query_embeddings(self, files: Sequence[str | Path]) -> torch.Tensor:
        cfg = self.loaded.config
        transform = build_transform(cfg.data, train=False)
        images = [transform(read_input(Path(path), cfg.data)) for path in files]
        size = cfg.data.batch_size
        batches = (torch.stack(images[start : start + size]) for start in range(0, len(images), size))
        return embed(self.model, batches, self.loaded.device, self.loaded.precision)

    def search(self, files: Sequence[str | Path], k: int = 5) -> list[list[Match]]:
        """For each query file, its ``k`` most similar images of the split, most similar first."""
        if k < 1:
            raise UserError(f"--k {k}: ask for at least one neighbour")
        scores, positions = top_k(self.query_embeddings(files), self.embeddings, k)
        return [
            [Match(self.paths[i], self.labels[i], s) for i, s in zip(row, values, strict=True)]
            for row, values in zip(positions.tolist(), scores.tolist(), strict=True)
        ]
