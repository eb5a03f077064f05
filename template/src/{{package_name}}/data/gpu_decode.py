"""Streamed JPEG data sets on CUDA: loader workers read the files' bytes, nvJPEG decodes each batch on the GPU.

For data sets that do not fit in memory, decoding on the CPU is what limits a
light network on a GPU (DALI's documentation says as much). Here the loader
only reads bytes; TorchCodec's ``decode_jpeg`` decodes the whole batch in one
nvJPEG call on the training device, where each image is then resized and
center-cropped to its square as ``pipeline.square`` does on the CPU. Order and
crops are the loader's and ``BatchAugment``'s: resume stays exact.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import torch
from torch.utils.data import DataLoader

from .pipeline import SquareImages, square
from .shards import read_bytes

JPEG = (".jpg", ".jpeg")


@functools.cache
def jpeg_decoder() -> Callable[..., list[torch.Tensor]] | None:
    """TorchCodec's batched ``decode_jpeg`` (the ``decode`` extra), or None where it does not load."""
    try:
        from torchcodec.decoders import decode_jpeg
    except (ImportError, OSError, RuntimeError):
        return None
    return decode_jpeg


def decodes_on_gpu(paths: list[str], device: torch.device) -> bool:
    """On CUDA, with TorchCodec, when every training file is a JPEG (nvJPEG decodes nothing else)."""
    return device.type == "cuda" and all(p.lower().endswith(JPEG) for p in paths) and jpeg_decoder() is not None


class EncodedImages(SquareImages):
    """A batch as the files' bytes, read in the loader's workers; decoded later.

    The batch's files travel as one flat uint8 tensor and their lengths: a
    tensor per file would cross the worker boundary as one file descriptor per
    image per batch, and large batches with prefetch exhaust ``ulimit -n``.
    """

    def __getitems__(self, keys: list[tuple[int, int, int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # type: ignore[override]
        indices = [key[1] for key in keys]
        files = [read_bytes(self.loader, self.samples[i][0]) for i in indices]  # from the file, or its shard
        flat = torch.frombuffer(bytearray(b"".join(files)), dtype=torch.uint8)
        return flat, torch.as_tensor([len(data) for data in files], dtype=torch.long), self.labels[indices]


def split_files(flat: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
    """``EncodedImages``' batch back as one 1-D uint8 tensor per file (views, no copy), as nvJPEG takes them."""
    return list(torch.split(flat, lengths.tolist()))


class GpuDecoded:
    """A DataLoader of ``EncodedImages`` whose batches come out decoded, as uint8 squares on ``device``."""

    def __init__(self, loader: DataLoader, device: torch.device, side: int) -> None:
        self.loader, self.device, self.side = loader, device, side  # the sampler stays the loader's

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        decode = jpeg_decoder()
        assert decode is not None, "decodes_on_gpu chose this path"
        for flat, lengths, labels in self.loader:
            images = decode(split_files(flat, lengths), mode="RGB", device=self.device)  # one nvJPEG call for the batch
            squares = torch.stack([square(image, self.side) for image in images])
            yield squares, labels.to(self.device, non_blocking=True)
