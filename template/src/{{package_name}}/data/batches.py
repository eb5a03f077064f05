"""The training batches of an epoch, model-ready: loaded, on the device, augmented as a batch, mixed.

``TrainingBatches`` is the one iterable ``Trainer.fit`` loops over. Each step
of the way happens here, in this order:

1. the loader (``folders.py``): this process's shard in the (seed, epoch) order;
   per-sample transforms on the per-sample path, uint8 squares on the batch path.
   Where ``data.cache`` put the images decides its form (``TrainingBatches.build``):
   batches gathered on the device (``resident.py``), or a DataLoader, prefetched
   on CUDA (``prefetch.py``) or decoded there by nvJPEG (``gpu_decode.py``);
2. the device (``Compute.batch``): asynchronous copies, the model's memory layout;
3. on the batch path, crop and flip of the whole batch (``augment.BatchAugment``);
4. with ``data.mixup_alpha`` / ``data.cutmix_alpha``, mixing (``mixing.BatchMixer``).

Which path the training images take, and where they live, was decided once by
``build_training_data`` (``pipeline.batch_path``, ``placement.choose``): its ``TrainingData`` says so. Every random
draw comes from (seed, epoch, batch index, rank), so that a run resumed at
batch N of an epoch sees exactly the batches an uninterrupted run saw.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from ..core.config import DataConfig
from ..core.device import Compute
from ..core.distributed import World
from .folders import TrainingData
from .loading.augment import BatchAugment
from .loading.loaders import build_loader, build_sampler, stop_workers
from .loading.mixing import BatchMixer
from .loading.pipeline import SquareCache, on_batch_path
from .loading.prefetch import Prefetched, prefetches
from .loading.resident import DeviceBatches


def gpu_decoded(loader: DataLoader, device: torch.device, train_set: Any) -> Iterable | None:
    """nvJPEG's batches from a loader of encoded files (gpu_decode.py); None for a set of another kind. Called
    where placement chose nvJPEG, which it does only where the gpu_decode part is there (core/parts.py)."""
    from .loading.gpu_decode import EncodedImages, GpuDecoded

    return GpuDecoded(loader, device, train_set.side) if isinstance(train_set, EncodedImages) else None


class TrainingBatches:
    """``for inputs, labels, targets in batches``: the model's input, the loss's labels (soft when mixing), the
    hard labels (for accuracy and the sample grid). ``set_epoch`` before each epoch, as with a sampler."""

    def __init__(
        self,
        loader: DataLoader | DeviceBatches,
        compute: Compute,
        augment: BatchAugment | None,
        mixer: BatchMixer | None,
        stream: Iterable | None = None,
    ) -> None:
        # ``loader`` owns the sampler, batch size and dataset; ``stream`` is what is iterated: the loader itself,
        # or a wrapper that delivers the loader's batches on the device (prefetch.py, gpu_decode.py).
        self.loader, self.stream = loader, stream if stream is not None else loader
        self.compute, self.augment, self.mixer = compute, augment, mixer
        self.per_epoch = len(loader)  # batches in a whole epoch: asked before any set_epoch shortens it
        self.epoch, self.start = 0, 0

    @classmethod
    def build(cls, data: TrainingData, cfg: DataConfig, seed: int, world: World, compute: Compute) -> TrainingBatches:
        """The batch stream where ``data.cache`` put the images, and the batch-level steps the config asks for."""
        device, train_set, where = compute.device, data.train, data.placement.where
        if world.is_main:
            print(data.placement.line, flush=True)  # the one line that says where the training images live
        stream: Iterable | None = None
        if where == "device" and isinstance(train_set, SquareCache):
            # No DataLoader, no worker: batches gathered from the device's copy in the sampler's order.
            sampler = build_sampler(train_set, cfg, seed, world, train=True)
            loader: DataLoader | DeviceBatches = DeviceBatches(train_set, device, cfg.batch_size, sampler)
        else:
            # Persistent workers live across epochs; close() ends them on every way out of the run.
            loader = build_loader(train_set, cfg, seed, device, train=True, world=world, persistent=True)
            if where == "gpu-decode":
                stream = gpu_decoded(loader, device, train_set)  # the loader reads bytes; nvJPEG decodes
            if stream is None and prefetches(device):
                # On CUDA, batches come over on a side stream while the previous one computes (prefetch.py).
                stream = Prefetched(loader, device)
        # The batch path: random crops and flips of whole batches, on the training device; its own rank's crops.
        augment = BatchAugment(cfg, seed, world.rank, compute.layout) if on_batch_path(train_set) else None
        mixer = BatchMixer(cfg, seed, len(train_set.classes)) if BatchMixer.wanted(cfg) else None
        return cls(loader, compute, augment, mixer, stream)

    @property
    def images(self) -> int:
        """Training images in this process's set (the start-up line says it)."""
        return len(self.loader.dataset)  # type: ignore[arg-type]

    @property
    def workers(self) -> int:
        """Loader processes feeding the batches: none for a device-resident set (resident.DeviceBatches)."""
        return getattr(self.loader, "num_workers", 0)

    @property
    def batch_path(self) -> bool:
        """Crops and flips made per batch on the device, not per image in the loader."""
        return self.augment is not None

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Begin ``epoch`` at batch ``start``: a resumed epoch skips, in this process's shard, what it trained."""
        self.epoch, self.start = epoch, start
        self.loader.sampler.set_epoch(epoch, start=start * self.loader.batch_size)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.loader)  # what is left of the epoch after set_epoch's start

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        # The batch's index in the whole epoch (not in what is left of it) seeds its crops and its mixing.
        for index, (images, targets) in enumerate(self.stream, start=self.start):
            images, targets = self.compute.batch(images, targets)
            images = self.augment(images, self.epoch, index) if self.augment is not None else images
            inputs, labels = (images, targets) if self.mixer is None else self.mixer(images, targets, self.epoch, index)
            yield inputs, labels, targets

    def close(self) -> None:
        """End the loader's persistent workers (they ignore SIGTERM: the interpreter's exit would wait forever)."""
        if isinstance(self.loader, DataLoader):  # DeviceBatches has none
            stop_workers(self.loader)
