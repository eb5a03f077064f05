"""Streamed JPEG data sets on CUDA: loader workers read the files' bytes, nvJPEG decodes each batch on the GPU.

For data sets that do not fit in memory, decoding on the CPU is what limits a
light network on a GPU (DALI's documentation says as much). Here the loader
only reads bytes; TorchCodec's ``decode_jpeg`` decodes the whole batch in one
nvJPEG call on the training device, where the images are then resized and
center-cropped to their squares as ``pipeline.square`` does on the CPU, one
call per image size; the next batch is decoded on a side stream while the
model computes on this one. Order and crops are the loader's and
``BatchAugment``'s: resume stays exact. nvJPEG decodes what it reads as the
decode contract does (``decode.py``) within bounds (``nvjpeg_reads``); the
rest is decoded on the CPU in the workers, and a file nvJPEG refuses
mid-batch falls back to the CPU alone. Whether this path or the loader's
workers decode a run is measured at its start (``decode_race.py``).

Memory is bounded. nvJPEG gets no JPEG the contract decodes at reduced scale
(its shorter side twice the square's or more: the CPU decodes it at 1/2 to
1/8 of its size, for less than nvJPEG's full decode), none of more than
``DEVICE_PIXELS`` squares' pixels (48 x side x side bytes decoded: 3 MB at
224 px), and none whose bytes outnumber its square's: no sample crosses
``/dev/shm`` as more bytes than the CPU path sends for it. Resizes run in
float32 on at most ``RESIZE_BYTES`` of images at a time.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from PIL import Image
from torch.utils.data import DataLoader

from ..decoding import codec
from ..decoding.decode import ORIENTATION, decode_tensor, reduces, refuse_bomb, sniff
from ..files.bad_files import READ_ERRORS, Checked
from .pipeline import SquareImages, square
from .prefetch import Batch, Prefetched

JPEG = (".jpg", ".jpeg")
# Huffman-coded sequential frames (SOF0 baseline, SOF1 extended): the ones nvJPEG decodes on the GPU. A progressive
# frame (SOF2) takes its hybrid path, a single-threaded Huffman decode on this process: the workers do it faster.
NVJPEG_FRAMES = (0xC0, 0xC1)
DEVICE_PIXELS = 16  # the most pixels nvJPEG decodes of one file, in squares (side x side): 4 x the side each way
RESIZE_BYTES = 256 * 2**20  # the most float32 images one resize call holds on the GPU
# What nvJPEG and the CUDA allocator say when memory runs out: not a file nvJPEG refuses (``out_of_memory``).
OUT_OF_MEMORY = re.compile(r"out of memory|ALLOCATOR_FAILURE|cudaErrorMemoryAllocation", re.IGNORECASE)


def jpeg_decoder() -> Callable[..., list[torch.Tensor]] | None:
    """TorchCodec's batched ``decode_jpeg`` (the ``decode`` extra), or None where it is missing or cannot decode
    here (``codec.py``: the data: line then says why)."""
    return codec.decoder("decode_jpeg")


def jpegs_on_cuda(paths: list[str], device: torch.device) -> bool:
    """On CUDA, with TorchCodec, when every training file is a JPEG (nvJPEG decodes nothing else)."""
    return device.type == "cuda" and all(p.lower().endswith(JPEG) for p in paths) and jpeg_decoder() is not None


def cuda_decode_failure(device: torch.device) -> str | None:
    """Why TorchCodec cannot decode a JPEG on ``device``, in one line; None when a tiny probe decodes there.

    That TorchCodec imports says nothing of CUDA: a build without nvJPEG (or
    CUDA) imports, and fails only at its first decode on the GPU.
    """
    decode = jpeg_decoder()
    if decode is None:  # installed and cannot decode here (why and the fix), or not installed
        found = codec.problem()
        return f"{found}: {codec.fix()}" if found else "TorchCodec is not installed (the decode extra)"
    encoded = io.BytesIO()
    Image.new("RGB", (8, 8)).save(encoded, format="JPEG")
    try:
        decode([torch.frombuffer(bytearray(encoded.getvalue()), dtype=torch.uint8)], mode="RGB", device=device)
    except Exception as exc:  # whatever the build raises, the CPU then decodes
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        return f"TorchCodec could not decode a JPEG on {device}: {first.strip()}"
    return None


def nvjpeg_unavailable(paths: list[str], device: torch.device) -> str | None:
    """Why nvJPEG cannot decode these training files on ``device``, in words for the start-up line; None where it
    can (``decodes_on_gpu``)."""
    if device.type != "cuda":
        return f"the training device is {device}, not a CUDA GPU"
    others = sum(not path.lower().endswith(JPEG) for path in paths)
    if others:
        return f"{others} of the {len(paths)} training files are not .jpg or .jpeg files, and nvJPEG decodes JPEG alone"
    return cuda_decode_failure(device)  # TorchCodec missing, or its probe decode failing on this GPU


def decodes_on_gpu(paths: list[str], device: torch.device) -> bool:
    """JPEG files on CUDA (``jpegs_on_cuda``) where TorchCodec's probe decode there succeeds."""
    return jpegs_on_cuda(paths, device) and cuda_decode_failure(device) is None


def nvjpeg_reads(data: bytes, side: int) -> bool:
    """Whether nvJPEG decodes this file, and as the decode contract does, within the module's bounds: a JPEG by its
    bytes (not its name), baseline or extended (``NVJPEG_FRAMES``), YCbCr or gray, with no EXIF turn; its shorter
    side under twice ``side`` (else the contract decodes it at reduced scale, on the CPU); at most
    ``DEVICE_PIXELS`` squares of pixels, and no more bytes than its square. A CMYK JPEG, a PNG named .jpg, a
    tagged phone photo, a progressive JPEG or a large photo is decoded on the CPU, in the loader's workers."""
    header = sniff(data)
    if header is None or header.format != "JPEG" or header.frame not in NVJPEG_FRAMES:
        return False
    if reduces(header, side) or header.width * header.height > DEVICE_PIXELS * side * side:
        return False
    if len(data) > 3 * side * side:  # what a square of the CPU path weighs: the most a sample sends
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
    order: torch.Tensor  # where each sample stands in [nvJPEG's squares, the CPU's] (``batch_order``)

    def pin_memory(self, device: Any = None) -> EncodedBatch:
        """What the DataLoader's pin thread calls on CUDA: page-locked memory for what is copied to the GPU (the
        squares, labels and order: a pageable copy would wait for the side stream's decode); the bytes are parsed
        by TorchCodec on the host, megabytes a batch."""
        host, labels, order = (tensor.pin_memory() for tensor in (self.host, self.labels, self.order))
        return self._replace(host=host, labels=labels, order=order)


class EncodedImages(SquareImages):
    """A batch as the files' bytes, read in the loader's workers; decoded later on the GPU.

    The files nvJPEG decodes as the contract does (``nvjpeg_reads``) travel as
    one flat uint8 tensor and their lengths: a tensor per file would cross the
    worker boundary as one file descriptor per image per batch, and large
    batches with prefetch exhaust ``ulimit -n``. The others are decoded here, on
    the CPU, by the contract, and travel as uint8 squares.
    """

    decoder = "nvjpeg"  # what a checkpoint records (core/provenance.py): the run's training images decoded so

    def __getitems__(self, keys: list[tuple[int, int, int]]) -> EncodedBatch:  # type: ignore[override]
        indices = [key[1] for key in keys]
        device_files, host_squares, on_device = [], [], []
        for index in indices:
            path = self.samples[index][0]
            data = self.loader.read_bytes(path)  # from the file, or its shard
            on_device.append(nvjpeg_reads(data, self.side))
            if on_device[-1]:
                device_files.append(data)
            else:
                host_squares.append(square(contract_decode(data, path, self.side), self.side))
        # No file for nvJPEG (a batch of phone photos): no bytes, which torch.frombuffer refuses.
        joined = bytearray(b"".join(device_files))
        flat = torch.frombuffer(joined, dtype=torch.uint8) if joined else torch.empty(0, dtype=torch.uint8)
        lengths = torch.as_tensor([len(data) for data in device_files], dtype=torch.long)
        host = torch.stack(host_squares) if host_squares else torch.empty(0, 3, self.side, self.side, dtype=torch.uint8)
        mask = torch.as_tensor(on_device, dtype=torch.bool)
        labels, kept = self.labels[indices], torch.as_tensor(indices, dtype=torch.long)
        return EncodedBatch(flat, lengths, mask, host, labels, kept, batch_order(mask))


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


def on_side_stream(images: list[torch.Tensor], stream: Any) -> list[torch.Tensor]:
    """nvJPEG's images, each recorded as ``stream``'s (None: the CPU, nothing to record): the allocator then keeps
    its block until the work ``stream`` has queued on it is done, whichever stream the decoder allocated it on."""
    if stream is not None:
        for image in images:
            image.record_stream(stream)
    return images


def squares_of(images: list[torch.Tensor], side: int) -> torch.Tensor:
    """``square`` of every image, stacked in order: one resize call per distinct size (not one per image), each
    on at most ``RESIZE_BYTES`` of images in float32 (the resize's own cast), so memory stays bounded."""
    by_size: dict[tuple[int, ...], list[int]] = {}
    for index, image in enumerate(images):
        by_size.setdefault(tuple(image.shape), []).append(index)
    done: list[torch.Tensor | None] = [None] * len(images)
    for shape, indices in by_size.items():
        per_call = max(1, RESIZE_BYTES // (4 * torch.Size(shape).numel()))
        for start in range(0, len(indices), per_call):
            group = indices[start : start + per_call]
            for index, made in zip(group, square(torch.stack([images[i] for i in group]), side), strict=True):
                done[index] = made
    return torch.stack(done)  # type: ignore[arg-type]


def out_of_memory(error: BaseException) -> bool:
    """The GPU ran out of memory (torch's error, or nvJPEG's words for it): raised, never taken for a bad file."""
    return isinstance(error, torch.OutOfMemoryError) or bool(OUT_OF_MEMORY.search(str(error)))


class GpuDecoded(Prefetched):
    """A DataLoader of ``EncodedImages`` whose batches come out decoded, as uint8 squares on ``device``.

    As ``Prefetched`` copies, this decodes on a side stream: on the compute
    stream the decode would wait for the step before it. Each TorchCodec call
    ends in a synchronize, so the host waits for the decode: batch n + 1 is
    decoded once batch n is handed over and its step queued, and the decode
    runs while that step computes. A call nvJPEG refuses is halved until each
    file it refuses stands alone, which the CPU then decodes by the contract;
    running out of GPU memory is raised, never taken for a refusal. Each
    decision depends on the file alone, so every rank of a DDP run makes its
    own without waiting for another.
    """

    def __init__(self, loader: DataLoader, device: torch.device, side: int) -> None:
        super().__init__(loader, device)  # the sampler stays the loader's
        self.side = side

    def __iter__(self) -> Iterator[Batch]:
        stream = self.side_stream()
        for batch in self.loader:
            yield self.handed_over(self.send(batch, stream), stream)  # decoded once the step before is queued

    def send(self, batch: Batch, stream: Any) -> Batch:
        """Queue the batch's decode (one nvJPEG call), resizes and copies on the side stream, in the batch's order.

        The caching allocator hands a freed block only to later work on the stream that allocated it. Every
        tensor made here is made on the side stream and, but for what is returned, read there alone and freed:
        their resize, the CPU's squares and the order copied over. nvJPEG's images are recorded as the side
        stream's (``on_side_stream``): a decoder may allocate them on a stream of its own, as torchvision's nvJPEG
        decoder does, which would free them for its next decode while the side stream still resizes them. What is
        returned, the compute stream reads: ``handed_over`` makes it wait for the side stream and records each
        tensor as the compute stream's (test_prefetch.py proves all three with the streams faked).
        """
        flat, lengths, on_device, host, labels, indices, order = batch
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            parts = []  # nvJPEG's squares, then those decoded on the CPU
            if len(lengths):
                images = on_side_stream(self.decoded(split_files(flat, lengths), indices[on_device]), stream)
                parts.append(squares_of(images, self.side))
            if len(host):
                parts.append(host.to(self.device, non_blocking=True))
            # The order, as the squares and labels, from the pinned memory of the loader's batch.
            squares = parts[0] if len(parts) == 1 else torch.cat(parts)[order.to(self.device, non_blocking=True)]
            return squares, labels.to(self.device, non_blocking=True)

    def decoded(self, files: list[torch.Tensor], indices: torch.Tensor) -> list[torch.Tensor]:
        """nvJPEG's images of ``files`` (the samples ``indices``): in one call; where it fails, each half in one,
        down to the files nvJPEG refuses alone (one bad file of B: 2 log2(B) calls or so, not B)."""
        decode = jpeg_decoder()
        assert decode is not None, "decodes_on_gpu chose this path"
        try:
            return decode(files, mode="RGB", device=self.device)
        except (RuntimeError, ValueError) as error:
            if out_of_memory(error):
                raise  # where a file is decoded must not depend on the GPU's memory pressure
            if len(files) == 1:  # nvJPEG refuses it (a truncated file, a kind it lacks): the CPU decodes
                return [self.on_the_cpu(files[0], int(indices[0]))]
        half = len(files) // 2
        return self.decoded(files[:half], indices[:half]) + self.decoded(files[half:], indices[half:])

    def on_the_cpu(self, file: torch.Tensor, index: int) -> torch.Tensor:
        """A file nvJPEG refuses, decoded by the contract, copied over from pinned memory (on CUDA)."""
        path = self.loader.dataset.samples[index][0]  # type: ignore[attr-defined]  # to name it if it is bad
        image = contract_decode(bytes(file.numpy()), path, self.side)
        return (image.pin_memory() if self.device.type == "cuda" else image).to(self.device, non_blocking=True)
