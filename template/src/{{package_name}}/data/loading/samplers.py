"""The order a training epoch draws its images in, and how evaluation shares its files out.

Everything here depends on (seed, epoch) and the process's rank alone, never
on worker count or on what ran before: a resumed run sees the order an
uninterrupted one saw (``ResumableSampler``); ``data.sampler: balanced``
draws every class equally often, and ``optim.class_weights: balanced``
weighs the loss by the same counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Dataset, DistributedSampler, Sampler

from ...core.distributed import World
from ...core.errors import UserError


class ResumableSampler(DistributedSampler):
    """torch's DistributedSampler (order from seed + epoch, one shard per process) that can resume.

    It starts at an offset inside this process's shard, and yields
    ``(epoch, index, draw)``: because the order depends on nothing else, a
    resumed run sees exactly the data order of an uninterrupted one, and the
    epoch and draw travel with each index so that ``SeededSamples`` can seed
    the sample's augmentation in whichever worker process it lands. With
    ``weights`` (``data.sampler: balanced``) indices are drawn with
    replacement, class-balanced; ``draw`` then tells two draws of one image
    apart, so each gets its own augmentation. Without, ``draw`` is the index.
    """

    def __init__(
        self, dataset: Dataset, seed: int, world: World | None = None, weights: torch.Tensor | None = None
    ) -> None:
        world = world or World()
        super().__init__(dataset, num_replicas=world.size, rank=world.rank, shuffle=True, seed=seed)
        self.start = 0
        self.weights = weights

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        super().set_epoch(epoch)
        self.start = start

    def shard(self) -> list[tuple[int, int]]:
        """This process's (index, draw) pairs of the epoch, from (seed, epoch) alone."""
        if self.weights is None:
            return [(index, index) for index in super().__iter__()]
        generator = torch.Generator().manual_seed(self.seed + self.epoch)  # as DistributedSampler seeds
        drawn = torch.multinomial(self.weights, self.total_size, replacement=True, generator=generator).tolist()
        return [(drawn[draw], draw) for draw in range(self.rank, self.total_size, self.num_replicas)]

    def __iter__(self) -> Iterator[tuple[int, int, int]]:  # type: ignore[override]
        return ((self.epoch, index, draw) for index, draw in self.shard()[self.start :])

    def __len__(self) -> int:
        return self.num_samples - self.start


class ShardSampler(Sampler[int]):
    """Every process evaluates its own share of the files, none twice and none left out."""

    def __init__(self, length: int, world: World) -> None:
        self.indices = range(world.rank, length, world.size)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def class_counts(dataset: Any) -> list[int]:
    """Training images per class; a class left without images (``on_bad_file: skip``) is named."""
    counts = torch.bincount(torch.as_tensor(dataset.targets), minlength=len(dataset.classes)).tolist()
    empty = [name for name, count in zip(dataset.classes, counts, strict=True) if count == 0]
    if empty:
        raise UserError(
            f"class {empty[0]!r} has no training images left: balanced classes need at least one per class; "
            "add images or remove its folder"
        )
    return counts


def balanced_class_weights(dataset: Any) -> torch.Tensor:
    """Inverse-frequency weights, 1 on average over the images: N / (classes * count)."""
    counts = torch.as_tensor(class_counts(dataset), dtype=torch.float32)
    return counts.sum() / (len(counts) * counts)


def sample_weights(dataset: Any) -> torch.Tensor:
    """Each image's chance to be drawn, so that every class is drawn equally often."""
    per_class = 1.0 / torch.as_tensor(class_counts(dataset), dtype=torch.float64)
    return per_class[torch.as_tensor(dataset.targets)]
