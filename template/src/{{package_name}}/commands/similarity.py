"""Similarity search: which training images does the network find most like a query?

The embeddings are ``models/embeddings.py``'s (P10: the head replaced by
``nn.Identity``; P17: unit length), as ``audit`` computes them; cosine
similarity is then one matrix product, never a Python loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import torch

from ..core.errors import UserError
from ..data import build_loader, build_transform, check_split, split_dataset
from ..models.embeddings import embed, without_head
from ..training.inference import Loaded, read_input


@dataclasses.dataclass(frozen=True)
class Match:
    path: str
    label: str
    similarity: float


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
