"""nvJPEG or the loader's workers: which decodes this run's JPEG files faster on this machine, timed at its start.

nvJPEG pays where the CPU cannot decode as fast as the GPU trains; where the
loader has many workers and the files are small, the workers may decode
faster than nvJPEG's batched call, which also takes GPU time from the step.
So a run whose JPEG files would stream on CUDA first times both on a sample
of its own files, those nvJPEG takes (``gpu_decode.nvjpeg_reads``): nvJPEG's
batched decode and resize on the training GPU, after a warm-up call on the
same files (what nvJPEG and the resize set up once, for this many files and
these sizes, is not charged to the timed call), against the decode contract
and square on one CPU core, after one file decoded untimed, times the
loader's workers that decode side by side. nvJPEG decodes the run only where it is clearly
the faster (``MARGIN``) on enough files to tell (``MIN_FILES``); a close
race, or a few files, leave it to the CPU, whose pixels do not hang on a
clock. The start-up line says both rates (``placement.choose``).

Under torchrun each process times its own, and nvJPEG decodes only where
every process chose it (``core/distributed.py``'s ``all_agree``): one
decoder's pixels in every rank. A resumed run keeps the decoder its
checkpoint records, so a race never changes the pixels of a run; two fresh
runs may still race differently: ``data.decoder`` pins the decoder, and
under ``train.deterministic`` no race is run (the CPU decodes).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import gpu_decode
from .gpu_decode import contract_decode, nvjpeg_reads, out_of_memory, squares_of
from .pipeline import square

SAMPLE = 32  # files timed each way: a batch's worth, a fraction of a second on either side
MIN_FILES = 8  # fewer sampled files that nvJPEG takes are too few to time: the CPU decodes
MARGIN = 1.2  # nvJPEG must decode at least this many times the CPU's files a second: a close race is the CPU's


@dataclass(frozen=True)
class DecodeRace:
    """Files a second each way, on this run's own files, and the verdict."""

    files: int  # sampled files nvJPEG takes: fewer than MIN_FILES, and none is timed
    nvjpeg: float  # nvJPEG's batched decode and resize on the training GPU
    cpu: float  # the contract's decode and square on one core, times the loader's workers
    workers: int  # the loader's workers (0: the training process decodes, counted as one)
    faster: bool  # nvJPEG at least MARGIN times the CPU's rate, on MIN_FILES files or more, in this process
    refused: str = ""  # nvJPEG's error on the sample, where it refused a file the contract reads: it loses

    def words(self) -> str:
        """What the start-up line says of it."""
        if self.files < MIN_FILES:
            found = f"{self.files} of the files sampled are ones" if self.files else "none of the files sampled is one"
            return f"{found} nvJPEG takes (data/loading/gpu_decode.py, nvjpeg_reads), fewer than {MIN_FILES} to time"
        if self.refused:
            return f"nvJPEG refused a sampled file at start ({self.refused})"
        workers = f"{self.workers} loader worker{'s' * (self.workers != 1)}" if self.workers else "the main process"
        rates = f"timed at start: nvJPEG {self.nvjpeg:,.0f} files/s, {workers} on the CPU {self.cpu:,.0f} files/s"
        return rates if self.faster else f"{rates} (nvJPEG needs {MARGIN:g} x the CPU's)"


def sampled(paths: list[str], read: Callable[[str], bytes], side: int) -> list[tuple[str, bytes]]:
    """Up to ``SAMPLE`` of the files, spread over the set (its classes, its sizes), that nvJPEG takes: their paths
    and bytes."""
    step = max(1, len(paths) // SAMPLE)
    files = ((path, read(path)) for path in paths[::step][:SAMPLE])
    return [(path, data) for path, data in files if nvjpeg_reads(data, side)]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the GPU's work is asynchronous: its end is what is timed


def race(
    paths: list[str],
    read: Callable[[str], bytes],
    side: int,
    device: torch.device,
    workers: int,
    clock: Callable[[], float] = time.perf_counter,
) -> DecodeRace:
    """Time nvJPEG against the loader's workers on a sample of ``paths`` (read by ``read``: the dataset's reader)."""
    files = sampled(paths, read, side)
    if len(files) < MIN_FILES:
        return DecodeRace(len(files), 0.0, 0.0, workers, faster=False)
    decode = gpu_decode.jpeg_decoder()  # looked up now: the tests put a stand-in there
    assert decode is not None, "decodes_on_gpu found TorchCodec"
    sources = [torch.frombuffer(bytearray(data), dtype=torch.uint8) for _, data in files]
    try:
        # The warm-up on the whole sample, as timed below: nvJPEG's handles and its buffers for this batch, the
        # resize's kernels for each size. Warmed up on one file, that set-up was timed, near the MARGIN.
        squares_of(decode(sources, mode="RGB", device=device), side)
        synchronize(device)
        start = clock()
        squares_of(decode(sources, mode="RGB", device=device), side)
        synchronize(device)
    except (RuntimeError, ValueError) as error:
        if out_of_memory(error):
            raise
        first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
        return DecodeRace(len(files), 0.0, 0.0, workers, faster=False, refused=first)
    on_gpu = max(clock() - start, 1e-9)
    square(contract_decode(files[0][1], files[0][0], side), side)  # the CPU's one-off set-up (the decoders' first call)
    start = clock()
    for path, data in files:  # as the loader's workers decode: a file Pillow cannot read stops the run naming it
        square(contract_decode(data, path, side), side)
    on_cpu = max(clock() - start, 1e-9) / max(workers, 1)  # the workers decode side by side, each a file at a time
    faster = on_cpu >= MARGIN * on_gpu  # seconds for the same files: nvJPEG's at most 1 / MARGIN of the CPU's
    return DecodeRace(len(files), len(files) / on_gpu, len(files) / on_cpu, workers, faster=faster)
