"""``data.cache: memory``: decode every image once and keep it as a uint8 tensor.

For data sets of small images that fit in memory, later epochs skip the file
reads and the PNG/JPEG decoding, which on a few CPU cores can cost as much as
the model's own step. Images are stored at the evaluation resize (shorter side
``image_size / eval_crop_ratio``), so evaluation sees the same pixels as
without the cache and training crops are taken from that size. The random
augmentation still runs per sample, seeded as without the cache, so resumed
runs stay exact.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import Dataset
from torchvision import datasets
from torchvision.transforms import v2

from ..core.config import DataConfig
from ..core.errors import UserError
from ..core.progress import tracked

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
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # each process under torchrun holds its own copy
    estimate = images * 3 * side * side * 4 // 3  # uint8, about a third more for aspect ratios
    return cfg.format == "image" and estimate * processes <= AUTO_SHARE * memory_bytes()


def refuse_if_too_big(estimate: int) -> None:
    """A cache of ``estimate`` bytes per process must leave half the machine's memory to the rest."""
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # each process under torchrun holds its own copy
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
    One block is one descriptor, whatever the count. Each image starts at a
    multiple of 8 bytes, so that any dtype (a float ``.npy`` set) can be viewed in place.
    """

    def __init__(self, images: list[torch.Tensor]) -> None:
        sizes = [image.numel() * image.element_size() for image in images]
        starts = [0]
        for size in sizes:
            starts.append(starts[-1] + -(-size // 8) * 8)  # the next image starts on an 8-byte boundary
        self.block = torch.empty(starts[-1], dtype=torch.uint8)
        self.starts, self.shapes = starts[:-1], [tuple(image.shape) for image in images]
        self.dtypes = [image.dtype for image in images]
        for index, image in enumerate(images):
            self.block[starts[index] : starts[index] + sizes[index]] = image.contiguous().view(-1).view(torch.uint8)
            images[index] = None  # type: ignore[call-overload]  # let each decoded copy go as soon as it is packed

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int) -> torch.Tensor:
        dtype, shape = self.dtypes[index], self.shapes[index]
        start = self.starts[index]
        return self.block[start : start + torch.Size(shape).numel() * dtype.itemsize].view(dtype).view(shape)


class MemoryCache(Dataset):
    """The folder's samples, decoded once; ``classes`` and ``targets`` as the folder has them."""

    def __init__(self, folder: datasets.DatasetFolder, cfg: DataConfig, progress: bool = False) -> None:
        side = round(cfg.image_size / cfg.eval_crop_ratio)
        refuse_if_too_big(len(folder) * 3 * side * side * 4 // 3)  # about a third more for aspect ratios
        # Resized as evaluation resizes (data.build_transform): by Pillow for images, so cached pixels are predict's.
        steps = [v2.Resize(side, antialias=True), v2.ToImage()]
        resize = v2.Compose([*(steps if cfg.format == "image" else steps[::-1]), v2.ToPureTensor()])
        paths = [path for path, _ in folder.samples]
        decoded = [resize(folder.loader(p)) for p in tracked(paths, f"caching {folder.root}", len(paths), progress)]
        self.images = PackedImages(decoded)  # one block: a loader worker receives it as one shared-memory handle
        self.transform = folder.transform
        self.samples, self.targets = list(folder.samples), list(folder.targets)  # (path, class) as the folder has them
        self.classes = folder.classes
        self.class_to_idx = folder.class_to_idx
        self.root = folder.root
        self.samples = list(folder.samples)  # the files behind the images: provenance fingerprints them

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, Any]:
        image = self.images[index]
        return (self.transform(image) if self.transform else image), self.targets[index]
