"""``data.cache: memory``: decode every image once and keep it as a uint8 tensor.

For data sets of small images that fit in memory, later epochs skip the file
reads and the PNG/JPEG decoding, which on a few CPU cores can cost as much as
the model's own step. Images are stored at the evaluation resize (shorter side
``image_size / eval_crop_ratio``), so evaluation sees the same pixels as
without the cache and training crops are taken from that size. The random
augmentation still runs per sample, seeded as without the cache, so resumed
runs stay exact. With ``data.cache_dir`` (``store.py``) the decoded images are
written once to local disk, and every later start and every process of the
node maps that file instead of decoding again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Dataset
from torchvision import datasets
from torchvision.transforms import v2

from ...core.config import DataConfig
from ...core.errors import UserError
from ...core.progress import tracked
from .store import CacheKey, CacheStore, MappedBlock, Stored

MEMORY_SHARE = 0.5  # of the machine's memory, at most
AUTO_SHARE = 0.25  # data.cache: auto keeps the images when they take at most this share; larger sets stream


def memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def keeps_in_memory(cfg: DataConfig, images: int) -> bool:
    """``memory`` (and ``device``, decoded on the host first); or ``auto``, when the decoded images take at most
    a quarter of this machine's memory."""
    if cfg.cache != "auto":
        return cfg.cache in ("memory", "device")
    side = round(cfg.image_size / cfg.eval_crop_ratio)
    estimate = images * 3 * side * side * 4 // 3  # uint8, about a third more for aspect ratios
    return cfg.format == "image" and estimate * copies(cfg.cache_dir != "none") <= AUTO_SHARE * memory_bytes()


def copies(mapped: bool) -> int:
    """Copies of the cache on this machine: one when mapped from data.cache_dir, else one per torchrun process."""
    return 1 if mapped else int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def refuse_if_too_big(estimate: int, mapped: bool = False) -> None:
    """A cache of ``estimate`` bytes per process must leave half the machine's memory to the rest."""
    processes = copies(mapped)
    if estimate * processes > MEMORY_SHARE * memory_bytes():
        raise UserError(
            f"data.cache=memory would hold about {estimate * processes / 2**30:.1f} GiB of images, more than half "
            "of this machine's memory: use data.cache=none"
        )


class PackedImages:
    """Images of different sizes in one flat block of memory, read back as views: ``images[i]``, ``len(images)``.

    A list of tensors would cross to each loader worker as one shared-memory
    file descriptor per image; a forkserver (the workers' start under DDP,
    ``data.worker_start``) refuses more than 256 in one go, so a cache of a few
    hundred images crashed the first validation of every DDP run with workers.
    One block is one descriptor, whatever the count; a block mapped from
    ``data.cache_dir`` crosses as its file's path (``store.MappedBlock``). Each
    image starts at a multiple of 8 bytes, so that any dtype (a float ``.npy``
    set) can be viewed in place.
    """

    def __init__(self, images: list[torch.Tensor]) -> None:
        sizes = [image.numel() * image.element_size() for image in images]
        starts = [0]
        for size in sizes:
            starts.append(starts[-1] + -(-size // 8) * 8)  # the next image starts on an 8-byte boundary
        self.block = torch.empty(starts[-1], dtype=torch.uint8)
        self.starts, self.shapes = starts[:-1], [tuple(image.shape) for image in images]
        self.dtypes = [image.dtype for image in images]
        self.mapped: MappedBlock | None = None
        for index, image in enumerate(images):
            self.block[starts[index] : starts[index] + sizes[index]] = image.contiguous().view(-1).view(torch.uint8)
            images[index] = None  # type: ignore[call-overload]  # let each decoded copy go as soon as it is packed

    @classmethod
    def from_file(cls, stored: Stored) -> PackedImages:
        """The images of a cache file, one chunk each, as ``store.cache_chunks`` wrote them (8-byte aligned)."""
        packed = cls([])
        packed.mapped, packed.block = stored.block, stored.block.tensor
        packed.starts = [start for start, _, _ in stored.chunks]
        packed.shapes = [tuple(shape) for _, shape, _ in stored.chunks]
        packed.dtypes = [getattr(torch, dtype) for _, _, dtype in stored.chunks]
        return packed

    def __getstate__(self) -> dict[str, Any]:
        """A mapped block crosses to a loader worker as its file's path, not as its bytes."""
        state = dict(self.__dict__)
        if self.mapped is not None:
            del state["block"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.mapped is not None:
            self.block = self.mapped.tensor

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int) -> torch.Tensor:
        dtype, shape = self.dtypes[index], self.shapes[index]
        start = self.starts[index]
        return self.block[start : start + torch.Size(shape).numel() * dtype.itemsize].view(dtype).view(shape)


class MemoryCache(Dataset):
    """The folder's samples, decoded once; ``classes`` and ``targets`` as the folder has them.

    With a ``store`` (``data.cache_dir``) the decoded images are kept in a file
    that later starts and the other processes of the node map; ``files`` is the
    samples' digest (``FileIndex.digest``), part of the file's key.
    """

    def __init__(
        self,
        folder: datasets.DatasetFolder,
        cfg: DataConfig,
        progress: bool = False,
        store: CacheStore | None = None,
        files: str = "",
    ) -> None:
        side = round(cfg.image_size / cfg.eval_crop_ratio)
        estimate = len(folder) * 3 * side * side * 4 // 3  # about a third more for aspect ratios
        refuse_if_too_big(estimate, mapped=store is not None)
        # Resized as evaluation resizes (data.build_transform): by Pillow for images, so cached pixels are predict's.
        interpolation = cfg.interpolation or "bilinear"  # data.interpolation: the pretrained weights' own
        steps = [v2.Resize(side, v2.InterpolationMode(interpolation), antialias=True), v2.ToImage()]
        resize = v2.Compose([*(steps if cfg.format == "image" else steps[::-1]), v2.ToPureTensor()])
        paths = [path for path, _ in folder.samples]

        def decoded() -> Iterator[torch.Tensor]:
            return (resize(folder.loader(p)) for p in tracked(paths, f"caching {folder.root}", len(paths), progress))

        kind = "resized" if interpolation == "bilinear" else f"resized-{interpolation}"  # pixels differ: a new file
        key = CacheKey(str(folder.root), kind, side, files, cfg.format)
        stored = store.obtain(key, decoded, 8, estimate) if store is not None else None
        if stored is not None and len(stored.chunks) == len(paths):
            self.images = PackedImages.from_file(stored)
        else:  # one block: a loader worker receives it as one shared-memory handle
            self.images = PackedImages(list(decoded()))
        self.transform = folder.transform
        self.samples, self.targets = list(folder.samples), list(folder.targets)  # (path, class) as the folder has them
        self.classes = folder.classes
        self.class_to_idx = folder.class_to_idx
        self.root = folder.root
        self.samples = list(folder.samples)  # the files behind the images: provenance fingerprints them
        self.file_size = getattr(
            folder, "file_size", os.path.getsize
        )  # their sizes (a packed split: data/files/shards.py)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, Any]:
        image = self.images[index]
        return (self.transform(image) if self.transform else image), self.targets[index]
