"""``data.pipeline``: the way training images take from their files to the model.

``sample``: torchvision's transforms run per image in the loader, each seeded
by (seed, epoch, index); every augmentation is possible there.
``batch``: each image is decoded once to a uint8 square (the evaluation
resize, center-cropped to a square), in the loader or once for the whole run
(``data.cache: memory``); random crops and flips are then made for the whole
batch on the training device (``augment.py``). On a few CPU cores this is the
difference between feeding the model and starving it (benchmarks/throughput.py).
``auto`` takes ``batch`` whenever it gives the same recipe.
Evaluation images take the per-sample path either way: their pixels do not change.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset
from torchvision import datasets
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from ...core.config import DataConfig
from ...core.distributed import World
from ...core.errors import UserError
from ...core.machine import cores_per_process
from ...core.progress import meter
from ...models import extensions
from ..decoding.decode import square_side
from .cache import refuse_if_too_big
from .store import CacheKey, CacheStore, MappedBlock

FILL_BATCH = 64  # images per batch while data.cache fills
FILL_PARALLEL_MIN = 2000  # images: fewer decode in the main process faster than loader workers start


# The per-image training steps the batch path makes itself: the evaluation resize and center crop (its uint8
# squares), random resized crop and flip (augment.BatchAugment, a whole batch at once), and the conversions.
BATCH_MADE = (v2.Resize, v2.CenterCrop, v2.RandomResizedCrop, v2.RandomHorizontalFlip, v2.ToImage, v2.ToPureTensor)


def per_sample_reason(cfg: DataConfig, train_transform: v2.Compose) -> str | None:
    """What only the per-sample path can apply; None when the batch path gives the same recipe.

    ``train_transform`` is ``folders.build_transform(cfg, train=True)``: the one
    description of the per-image training augmentation, the config's policies,
    ``extensions.extra_train_transforms()`` and any step added there by hand.
    Any step the batch path does not make itself is a reason to run per sample.
    """
    if cfg.format != "image":
        return f"data.format={cfg.format}"
    extra = [step for step in train_transform.transforms if not isinstance(step, BATCH_MADE)]
    if not extra:
        return None
    names = ", ".join(type(step).__name__ for step in extra)
    if getattr(cfg, "auto_augment", "none") != "none":
        return f"data.auto_augment={cfg.auto_augment} ({names})"
    if getattr(cfg, "random_erasing", 0.0) > 0 and all(isinstance(step, v2.RandomErasing) for step in extra):
        return f"data.random_erasing={cfg.random_erasing}"
    if getattr(cfg, "extra_train_transforms", True) and extensions.extra_train_transforms():
        return f"extensions.extra_train_transforms() ({names})"
    return f"{names} in data/folders.py build_transform"


def batch_path(cfg: DataConfig, train_transform: v2.Compose) -> bool:
    """Whether training images take the batch path; ``batch`` with a per-sample recipe is refused."""
    if cfg.pipeline == "sample":
        return False
    reason = per_sample_reason(cfg, train_transform)
    if reason and cfg.pipeline == "batch":
        raise UserError(f"data.pipeline=batch cannot apply {reason}, which works per image: set data.pipeline=auto")
    return reason is None


def on_batch_path(dataset: Dataset) -> bool:
    """Whether ``build_datasets`` put this training set on the batch path: ``batch_path``'s decision, read back."""
    return isinstance(dataset, SquareImages)


def square(image: torch.Tensor, side: int) -> torch.Tensor:
    """A decoded image as the batch path keeps it, on whichever device it is."""
    image = TF.resize(image, [side], antialias=True)  # shorter side, exactly as evaluation resizes
    return TF.center_crop(image, [side, side])


class SquareImages(Dataset):
    """A folder's training images as uint8 squares, decoded when asked; whole batches at once.

    Keys are the sampler's (epoch, index, draw): nothing random happens here.
    """

    decoder = "cpu"  # what a checkpoint records (core/provenance.py): decoded by the contract, on the CPU

    def __init__(self, folder: datasets.DatasetFolder, side: int) -> None:
        self.samples, self.loader, self.side = list(folder.samples), folder.loader, side
        self.targets = list(folder.targets)
        self.classes, self.class_to_idx, self.root = folder.classes, folder.class_to_idx, folder.root
        self.labels = torch.as_tensor(self.targets, dtype=torch.long)
        self.file_size = getattr(folder, "file_size", os.path.getsize)  # for provenance: a packed split knows them

    def __len__(self) -> int:
        return len(self.samples)

    def image(self, index: int) -> torch.Tensor:
        """Decoded by the contract (decode.py: upright, RGB, 8 bits; TorchCodec where installed), then squared."""
        return square(self.loader.tensor(self.samples[index][0]), self.side)

    def __getitem__(self, key: int | tuple[int, int, int]) -> tuple[torch.Tensor, int]:
        index = key if isinstance(key, int) else key[1]  # an index, or the training sampler's key
        return self.image(index), self.targets[index]

    def __getitems__(self, keys: list[tuple[int, int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """DataLoader asks for a whole batch at once: one stacked uint8 tensor, no per-sample collation."""
        indices = [key[1] for key in keys]
        return torch.stack([self.image(index) for index in indices]), self.labels[indices]


@dataclass(frozen=True)
class Fill:
    """How a cache is filled: by ``workers`` loader processes started by ``start`` (``core/workers.py``'s
    ``worker_start``: a forkserver under DDP), ``progress`` reported (``core/progress.py``)."""

    workers: int = 0
    start: Any = None
    progress: bool = False


def fill_workers(setting: int | str, world: World, images: int) -> int:
    """Loader processes that decode the images into the cache: with ``auto``, every core of this process's share.

    Training keeps two cores for the model's own threads (``loader_workers``);
    while the cache fills the model waits, so those cores decode too (on 2
    cores: 2 workers instead of none, 1.5x faster). Fewer than
    ``FILL_PARALLEL_MIN`` images decode faster than workers start.
    """
    if setting != "auto":
        return int(setting)
    share = min(8, cores_per_process(world.size))  # of the affinity's cores (or the server profile's, machine.py)
    return share if share > 1 and images >= FILL_PARALLEL_MIN else 0


class SquareCache(SquareImages):
    """``data.cache: memory`` on the batch path: every square decoded once, in one uint8 tensor.

    3 x side x side bytes per image: 15,987 at image_size 64 (side 73), 196,608 at 224 (side 256).
    With a ``store`` (``data.cache_dir``) that tensor is a file on local disk,
    mapped by every later start and every process of the node; ``files`` is the
    samples' digest (``FileIndex.digest``), part of the file's key.
    """

    def __init__(
        self,
        folder: datasets.DatasetFolder,
        side: int,
        fill: Fill | None = None,
        store: CacheStore | None = None,
        files: str = "",
    ) -> None:
        super().__init__(folder, side)
        count = len(self.samples)
        refuse_if_too_big(count * 3 * side * side, mapped=store is not None)
        self.mapped: MappedBlock | None = None
        key = CacheKey(str(folder.root), "squares", side, files, "image")

        def decoded() -> Iterator[torch.Tensor]:
            return self.decoded(folder, fill or Fill())

        stored = store.obtain(key, decoded, 1, count * 3 * side * side) if store is not None else None
        if stored is not None and stored.block.size == count * 3 * side * side:
            self.mapped = stored.block
            self.images = stored.block.tensor.view(count, 3, side, side)
            return
        self.images = torch.empty(count, 3, side, side, dtype=torch.uint8)
        start = 0
        for images in decoded():
            self.images[start : start + len(images)] = images
            start += len(images)

    def decoded(self, folder: datasets.DatasetFolder, fill: Fill) -> Iterator[torch.Tensor]:
        """The squares in file order, a batch at a time, decoded by ``fill.workers`` loader processes."""
        streamed = SquareImages(folder, self.side)
        keys = [(0, index, index) for index in range(len(self.samples))]
        # Its own generator: a DataLoader draws its workers' base seed from torch's global one otherwise, and the
        # model's initial weights, drawn after, would then depend on whether the images were cached.
        batches = DataLoader(
            streamed,
            batch_size=FILL_BATCH,
            sampler=keys,
            num_workers=fill.workers,
            collate_fn=keep_batch,
            multiprocessing_context=fill.start if fill.workers else None,
            generator=torch.Generator().manual_seed(0),
        )
        shown = meter(f"caching {folder.root}", len(keys), fill.progress, "images")
        try:
            for images, _ in batches:
                yield images
                shown.update(len(images))
        finally:
            shown.close()

    def __getstate__(self) -> dict[str, Any]:
        """A mapped cache crosses to a loader worker as its file's path, not as its bytes."""
        state = dict(self.__dict__)
        if self.mapped is not None:
            del state["images"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.mapped is not None:
            self.images = self.mapped.tensor.view(len(self.samples), 3, self.side, self.side)

    def image(self, index: int) -> torch.Tensor:
        return self.images[index]

    def __getitems__(self, keys: list[tuple[int, int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        indices = torch.as_tensor([key[1] for key in keys])
        return self.images[indices], self.labels[indices]  # one gather for the whole batch


def square_images(
    folder: datasets.DatasetFolder,
    cfg: DataConfig,
    memory: bool,
    fill: Fill | None = None,
    store: CacheStore | None = None,
    files: str = "",
) -> SquareImages:
    side = square_side(cfg)
    return SquareCache(folder, side, fill, store, files) if memory else SquareImages(folder, side)


def keep_batch(batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The DataLoader's collate_fn for ``SquareImages``, whose batches come stacked already."""
    return batch
