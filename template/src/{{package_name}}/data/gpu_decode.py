"""Streamed JPEG data sets on CUDA: loader workers read the files' bytes, nvJPEG decodes each batch on the GPU.

For data sets that do not fit in memory, decoding on the CPU is what limits a
light network on a GPU (DALI's documentation says as much). Here the loader
only reads bytes; TorchCodec's ``decode_jpeg`` decodes the whole batch in one
nvJPEG call on the training device, where the images are then resized and
center-cropped to their squares as ``pipeline.square`` does on the CPU, one
call per image size; the next batch is decoded on a side stream while the
model computes on this one. Order and crops are the loader's and
``BatchAugment``'s: resume stays exact.
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Callable
from typing import Any

import torch
from PIL import Image
from torch.utils.data import DataLoader

from .pipeline import SquareImages, square
from .prefetch import Batch, Prefetched
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


def jpegs_on_cuda(paths: list[str], device: torch.device) -> bool:
    """On CUDA, with TorchCodec, when every training file is a JPEG (nvJPEG decodes nothing else)."""
    return device.type == "cuda" and all(p.lower().endswith(JPEG) for p in paths) and jpeg_decoder() is not None


def cuda_decode_failure(device: torch.device) -> str | None:
    """Why TorchCodec cannot decode a JPEG on ``device``, in one line; None when a tiny probe decodes there.

    That TorchCodec imports says nothing of CUDA: a build without nvJPEG (or
    CUDA) imports, and fails only at its first decode on the GPU.
    """
    decode = jpeg_decoder()
    if decode is None:
        return "TorchCodec does not load (the decode extra)"
    encoded = io.BytesIO()
    Image.new("RGB", (8, 8)).save(encoded, format="JPEG")
    try:
        decode([torch.frombuffer(bytearray(encoded.getvalue()), dtype=torch.uint8)], mode="RGB", device=device)
    except Exception as exc:  # whatever the build raises, the CPU then decodes
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        return f"TorchCodec could not decode a JPEG on {device}: {first.strip()}"
    return None


def decodes_on_gpu(paths: list[str], device: torch.device) -> bool:
    """JPEG files on CUDA (``jpegs_on_cuda``) where TorchCodec's probe decode there succeeds."""
    return jpegs_on_cuda(paths, device) and cuda_decode_failure(device) is None


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


def squares_of(images: list[torch.Tensor], side: int) -> torch.Tensor:
    """``square`` of every image, stacked in order: one resize call per distinct size, not one per image."""
    by_size: dict[tuple[int, ...], list[int]] = {}
    for index, image in enumerate(images):
        by_size.setdefault(tuple(image.shape), []).append(index)
    done: list[torch.Tensor | None] = [None] * len(images)
    for indices in by_size.values():
        for index, made in zip(indices, square(torch.stack([images[i] for i in indices]), side), strict=True):
            done[index] = made
    return torch.stack(done)  # type: ignore[arg-type]


class GpuDecoded(Prefetched):
    """A DataLoader of ``EncodedImages`` whose batches come out decoded, as uint8 squares on ``device``.

    As ``Prefetched`` copies, this decodes batch n + 1 on a side stream while
    the model computes on batch n: on the compute stream the decode would wait
    for the step before it, and the loop for both.
    """

    def __init__(self, loader: DataLoader, device: torch.device, side: int) -> None:
        super().__init__(loader, device)  # the sampler stays the loader's
        self.side = side

    def send(self, batch: Batch, stream: Any) -> Batch:
        """Queue the batch's decode (one nvJPEG call), resizes and label copy on the side stream."""
        decode = jpeg_decoder()
        assert decode is not None, "decodes_on_gpu chose this path"
        flat, lengths, labels = batch
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            images = decode(split_files(flat, lengths), mode="RGB", device=self.device)
            return squares_of(images, self.side), labels.to(self.device, non_blocking=True)
