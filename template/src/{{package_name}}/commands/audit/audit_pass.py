"""The audit's one pass over the files: each decoded once, for the network and for the pixel check together.

Each loader worker decodes a file, makes the model's input (the evaluation transform) and the file's small
thumbnail (``near_copies.thumbnail``: 1 KB of grey pixels, its shape and colour) from the same picture, and
sends both; the embeddings leave the device batch by batch into one host array (float16: ``HOST_DTYPE``), so
device memory holds a batch, not the data set. Before any of it, ``memory_needed`` says whether the host
can hold what the audit keeps.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset
from torchvision import datasets

from ...core.config import DataConfig
from ...core.errors import UserError
from ...core.progress import tracked
from ...data import build_loader
from ...models.embeddings import embedded
from . import linear_head
from .near_copies import SIDE, Thumbnails, thumbnail
from .neighbours import APPROXIMATE_FROM, REDUCED, faiss_module

# The embeddings as the host keeps them: float16 is enough for the search and the label check (measured on
# benchmarks/data_audit.py: the same findings as float32) and half the memory.
HOST_DTYPE = torch.float16
# Bytes a file of the neighbour graphs (index and cosine: 12 bytes a neighbour; 3 splits): the embeddings' (11 a
# split) and the thumbnails' (7 a split, the picture's and its mirror image's at once), and the thumbnails' unit
# rows (2 x 256 halfs).
GRAPH_BYTES = 12 * 3 * (11 + 2 * 7) + 2 * 256 * 2


@dataclass(frozen=True)
class Pass:
    """What the pass keeps of every file, in the audit's order: unit embeddings (N x D, ``HOST_DTYPE``, host)
    and thumbnails."""

    features: torch.Tensor
    thumbs: Thumbnails


class WithThumbnails(Dataset):
    """A split's dataset whose items are (model input, grey thumbnail, width / height, mean colour): one decode
    serves both. A class at module level: it pickles to loader workers started by a forkserver."""

    def __init__(self, dataset: datasets.DatasetFolder) -> None:
        self.samples, self.loader, self.transform = dataset.samples, dataset.loader, dataset.transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, torch.Tensor, float, torch.Tensor]:
        picture = self.loader(self.samples[index][0])  # the decode contract: data/decoding/decode.py
        grey, aspect, chroma = thumbnail(picture)
        return self.transform(picture), grey, aspect, chroma


def one_pass(
    sets: dict[str, datasets.DatasetFolder],
    model: torch.nn.Module,
    setting: tuple[torch.device, str],
    data: DataConfig,
    seed: int,
    show: bool,
) -> Pass:
    """Every file's unit embedding and thumbnail, split after split, from one decode a file in the loader
    workers; the embeddings copied to the host as each batch is done."""
    device, precision = setting
    total = sum(len(dataset) for dataset in sets.values())
    features: torch.Tensor | None = None
    grey = torch.empty(total, 1, SIDE, SIDE, dtype=torch.uint8)
    aspect, chroma = torch.empty(total), torch.empty(total, 2)
    done = 0
    for split, dataset in sets.items():
        loader = build_loader(WithThumbnails(dataset), data, seed, device, train=False)
        thumbs: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]] = []

        def inputs(batches: Any = loader, kept: list = thumbs) -> Any:
            for images, small, shape, colour in batches:
                kept.append((len(images), small, shape, colour))
                yield images

        batches = tracked(inputs(), f"audit: embedding {split}", len(loader), show, "batches")
        for rows in embedded(model, batches, device, precision):
            count, small, shape, colour = thumbs.pop(0)
            if features is None:  # the width is known at the first batch
                features = torch.empty(total, rows.shape[1], dtype=HOST_DTYPE)
            features[done : done + count] = rows.to("cpu", HOST_DTYPE)
            grey[done : done + count], aspect[done : done + count], chroma[done : done + count] = small, shape, colour
            done += count
    assert features is not None and done == total  # every split holds files (read_splits)
    return Pass(features, Thumbnails(grey, aspect, chroma))


def memory_needed(files: int, width: int, classes: int, device: torch.device) -> dict[str, int]:
    """Bytes the audit keeps on the host for ``files`` files of ``width``-wide embeddings, by what: the
    embeddings, what the search adds (a float32 copy on the CPU without FAISS; FAISS's index), the thumbnails,
    the neighbour graphs, the label check's working rows (the probabilities go to a file, not to memory)."""
    if device.type != "cpu":
        search = 0  # on the device
    elif faiss_module() is None or files < APPROXIMATE_FROM:
        search = files * width * 4  # the blocked products' float32 copy
    else:
        search = min(files, APPROXIMATE_FROM) * width * 4 + files * (REDUCED + 8)  # a split exactly, or 8-bit codes
    return {
        "embeddings": files * width * HOST_DTYPE.itemsize,
        "search": search,
        "thumbnails": files * (SIDE * SIDE + 12),
        "neighbour graphs": files * GRAPH_BYTES,
        "label check": linear_head.memory_needed(width, classes),  # its sums, heads and one chunk
    }


def available_memory() -> int | None:
    """Bytes this process may still take: the smaller of the host's available memory and its cgroup's room."""
    found = []
    try:
        with open("/proc/meminfo") as handle:
            found += [int(line.split()[1]) * 1024 for line in handle if line.startswith("MemAvailable:")]
    except OSError:
        pass
    for limit, used in (("memory.max", "memory.current"), ("memory.limit_in_bytes", "memory.usage_in_bytes")):
        for folder in ("/sys/fs/cgroup", "/sys/fs/cgroup/memory"):
            try:
                with open(os.path.join(folder, limit)) as a, open(os.path.join(folder, used)) as b:
                    cap, now = a.read().strip(), b.read().strip()
            except OSError:
                continue
            if cap.isdigit() and int(cap) < 1 << 60:  # "max", or the huge number of no limit
                found.append(int(cap) - int(now))
    return min(found) if found else None


def check_memory(files: int, width: int, classes: int, device: torch.device, available: int | None) -> None:
    """One line before any work when the host cannot hold what the audit keeps, naming the flag that lowers it."""
    needed = memory_needed(files, width, classes, device)
    if available is None or sum(needed.values()) <= available:
        return
    parts = ", ".join(f"{name} {size / 2**30:.1f}" for name, size in needed.items())
    raise UserError(
        f"the audit of {files:,} files needs about {sum(needed.values()) / 2**30:.1f} GB of memory ({parts} GB), "
        f"and {available / 2**30:.1f} GB is free: audit a share of each class with audit --max-files N "
        f"(about {int(files * available / sum(needed.values())):,} fit)"
    )
