"""``data.cache: device``: the training set's uint8 squares in the training device's memory, batches gathered there.

No DataLoader, no worker, no host-to-device copy: each batch is one
``index_select`` of the device tensor, in the order ``ResumableSampler``
gives for (seed, epoch), from the same offset on resume. The batches are
therefore the ones the loader would deliver from ``SquareCache``, bit for bit;
``BatchAugment`` then crops and flips them where they are.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler

from .pipeline import SquareCache


class DeviceBatches:
    """What the trainer asks of its training loader: ``sampler.set_epoch``, ``len`` and iteration."""

    def __init__(self, cache: SquareCache, device: torch.device, batch_size: int, sampler: Sampler) -> None:
        self.dataset = cache  # classes, targets and samples, as a loader's dataset has them
        self.images = cache.images.to(device)  # one copy, at start; the host copy goes with the cache
        self.labels = cache.labels.to(device)
        self.device, self.batch_size = device, batch_size
        self.sampler = sampler  # samplers.ResumableSampler: (epoch, index, draw) keys from (seed, epoch), an offset
        # As build_loader decides for its DataLoader: a last, smaller batch is dropped when there is more than one.
        self.drop_last = len(sampler) > batch_size  # type: ignore[arg-type]

    def __len__(self) -> int:
        whole, rest = divmod(len(self.sampler), self.batch_size)  # type: ignore[arg-type]
        return whole + (1 if rest and not self.drop_last else 0)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # The epoch's remaining order (sampler.set_epoch set epoch and offset), copied to the device once.
        order = torch.as_tensor([index for _, index, _ in self.sampler], dtype=torch.long).to(self.device)
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            indices = order[start : start + self.batch_size]
            yield self.images.index_select(0, indices), self.labels.index_select(0, indices)
