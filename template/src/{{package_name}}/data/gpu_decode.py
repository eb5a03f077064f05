"""Streamed JPEG data sets on CUDA: loader workers read the files' bytes, nvJPEG decodes each batch on the GPU.

For data sets that do not fit in memory, decoding on the CPU is what limits a
light network on a GPU (DALI's documentation says as much). Here the loader
only reads bytes; TorchCodec's ``decode_jpeg`` decodes the whole batch in one
nvJPEG call on the training device, where the images are then resized and
center-cropped to their squares as ``pipeline.square`` does on the CPU, one
call per image size; the next batch is decoded on a side stream while the
model computes on this one. Order and crops are the loader's and
``BatchAugment``'s: resume stays exact. nvJPEG decodes what it reads as the
decode contract does (``decode.py``); the rest is decoded on the CPU in the
workers, and a file nvJPEG refuses mid-batch falls back to the CPU alone.
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from PIL import Image
from torch.utils.data import DataLoader

from .bad_files import READ_ERRORS, Checked
from .decode import ORIENTATION, decode_tensor, refuse_bomb, sniff
from .pipeline import SquareImages, square
from .prefetch import Batch, Prefetched

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


def nvjpeg_reads(data: bytes) -> bool:
    """Whether nvJPEG gives this file the decode contract's pixels: a JPEG by its bytes (not its name), YCbCr or
    gray, with no EXIF turn to apply. A CMYK JPEG, a PNG named .jpg or a tagged phone photo is decoded on the CPU."""
    header = sniff(data)
    if header is None or header.format != "JPEG":
        return False
    try:
        refuse_bomb(header)
        with Image.open(io.BytesIO(data)) as image:  # the header alone: a few microseconds
            return image.mode in ("RGB", "L") and image.getexif().get(ORIENTATION, 1) == 1
    except (*READ_ERRORS, Warning):
        return False  # the CPU decode names what is wrong with it (data.on_bad_file)


class EncodedBatch(NamedTuple):
    """A batch of ``EncodedImages``, as it crosses from a loader worker: bytes for nvJPEG, squares decoded here."""

    flat: torch.Tensor  # the bytes of the files nvJPEG decodes, one after the other
    lengths: torch.Tensor  # their lengths
    on_device: torch.Tensor  # bool, a sample: decoded by nvJPEG (True) or here, on the CPU
    host: torch.Tensor  # uint8 squares of the samples decoded here, in batch order
    labels: torch.Tensor
    indices: torch.Tensor  # the samples' indices: a file nvJPEG refuses is named by its path

    def pin_memory(self, device: Any = None) -> EncodedBatch:
        """What the DataLoader's pin thread calls on CUDA: page-locked memory for what is copied to the GPU (the
        squares and the labels) alone; the bytes are parsed by TorchCodec on the host, megabytes a batch."""
        return self._replace(host=self.host.pin_memory(), labels=self.labels.pin_memory())


class EncodedImages(SquareImages):
    """A batch as the files' bytes, read in the loader's workers; decoded later on the GPU.

    The files nvJPEG decodes as the contract does (``nvjpeg_reads``) travel as
    one flat uint8 tensor and their lengths: a tensor per file would cross the
    worker boundary as one file descriptor per image per batch, and large
    batches with prefetch exhaust ``ulimit -n``. The others are decoded here, on
    the CPU, by the contract, and travel as uint8 squares.
    """

    def __getitems__(self, keys: list[tuple[int, int, int]]) -> EncodedBatch:  # type: ignore[override]
        indices = [key[1] for key in keys]
        device_files, host_squares, on_device = [], [], []
        for index in indices:
            path = self.samples[index][0]
            data = self.loader.read_bytes(path)  # from the file, or its shard
            on_device.append(nvjpeg_reads(data))
            if on_device[-1]:
                device_files.append(data)
            else:
                host_squares.append(square(contract_decode(data, path, self.side), self.side))
        flat = torch.frombuffer(bytearray(b"".join(device_files)), dtype=torch.uint8)
        lengths = torch.as_tensor([len(data) for data in device_files], dtype=torch.long)
        host = torch.stack(host_squares) if host_squares else torch.empty(0, 3, self.side, self.side, dtype=torch.uint8)
        mask = torch.as_tensor(on_device, dtype=torch.bool)
        return EncodedBatch(flat, lengths, mask, host, self.labels[indices], torch.as_tensor(indices, dtype=torch.long))


def contract_decode(data: bytes, path: str, side: int) -> torch.Tensor:
    """The CPU's decode of a file's bytes (decode.py); a file it cannot read stops the run naming itself, as
    on the CPU path (``data.on_bad_file: skip`` left such files out at start)."""
    return Checked.guarded(lambda _: decode_tensor(data, side), path)


def batch_order(on_device: torch.Tensor) -> torch.Tensor:
    """Where each sample of the batch stands in [nvJPEG's squares, the CPU's squares]: their order restored."""
    joined = torch.cat([on_device.nonzero().flatten(), (~on_device).nonzero().flatten()])
    return torch.argsort(joined)


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
    for the step before it, and the loop for both. A batch nvJPEG refuses as a
    whole is decoded file by file; a file it refuses alone is decoded on the CPU
    by the contract and copied over. Each decision depends on the file alone, so
    every rank of a DDP run makes its own without waiting for another.
    """

    def __init__(self, loader: DataLoader, device: torch.device, side: int) -> None:
        super().__init__(loader, device)  # the sampler stays the loader's
        self.side = side

    def send(self, batch: Batch, stream: Any) -> Batch:
        """Queue the batch's decode (one nvJPEG call), resizes and copies on the side stream, in the batch's order."""
        flat, lengths, on_device, host, labels, indices = batch
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            parts = []  # nvJPEG's squares, then those decoded on the CPU
            if len(lengths):
                parts.append(squares_of(self.decoded(split_files(flat, lengths), indices[on_device]), self.side))
            if len(host):
                parts.append(host.to(self.device, non_blocking=True))
            squares = parts[0] if len(parts) == 1 else torch.cat(parts)[batch_order(on_device).to(self.device)]
            return squares, labels.to(self.device, non_blocking=True)

    def decoded(self, files: list[torch.Tensor], indices: torch.Tensor) -> list[torch.Tensor]:
        """nvJPEG's images of ``files`` (the samples ``indices``): the whole batch in one call, or file by file
        where that call fails."""
        decode = jpeg_decoder()
        assert decode is not None, "decodes_on_gpu chose this path"
        try:
            return decode(files, mode="RGB", device=self.device)
        except (RuntimeError, ValueError):  # one file spoils the batch's call: find it
            return [self.one(decode, file, int(index)) for file, index in zip(files, indices, strict=True)]

    def one(self, decode: Callable[..., list[torch.Tensor]], file: torch.Tensor, index: int) -> torch.Tensor:
        try:
            return decode([file], mode="RGB", device=self.device)[0]
        except (RuntimeError, ValueError):  # nvJPEG refuses it (a truncated file, a kind it lacks): the CPU decodes
            path = self.loader.dataset.samples[index][0]  # type: ignore[attr-defined]  # to name it if it is bad
            return contract_decode(bytes(file.numpy()), path, self.side).to(self.device)
