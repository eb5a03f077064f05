"""Training batches copied to the GPU on a side CUDA stream, one batch ahead, as timm's prefetcher does.

The loader pins its batches (``pin_memory`` on CUDA); the copy of batch n + 1
is queued on a side stream before batch n is handed over, so it runs while the
model computes on batch n. The compute stream waits for a batch's copy before
using it, and ``record_stream`` keeps the allocator from reusing its memory
while the compute stream still reads it. Order and pixels are the loader's:
nothing here draws a random number, so resume stays exact.

The side stream is the loader's own, made once for all its epochs, at high
priority: ``torch.cuda.Stream`` hands out the streams of a pool in turn (32
a priority on each GPU), and ProcessGroupNCCL takes the stream on which DDP's
all-reduce runs from the same pool, at normal priority. A stream taken each
epoch would walk that pool and, some epoch, be the collectives' own: a batch's
copy then waits for the gradients' all-reduce, and the all-reduce for the copy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

Batch = tuple[torch.Tensor, ...]
# CUDA stream priorities: lower is more urgent, 0 the default. -1 draws from the high-priority pool, which NCCL's
# streams come from only where TORCH_NCCL_HIGH_PRIORITY=1 asks for it.
HIGH_PRIORITY = -1


def prefetches(device: torch.device) -> bool:
    """On CUDA only: on the CPU there is no copy to overlap (a device-resident set has none either)."""
    return device.type == "cuda"


class Prefetched:
    """A DataLoader's batches, arriving on ``device``; its sampler stays the loader's (``TrainingBatches`` sets it)."""

    def __init__(self, loader: DataLoader, device: torch.device) -> None:
        self.loader, self.device = loader, device
        self.prefetch_stream: Any = None  # made at the first epoch, kept for the loader's life

    def __len__(self) -> int:
        return len(self.loader)

    def side_stream(self) -> Any:
        """This loader's one side stream (None on the CPU): made once, at high priority (the module says why)."""
        if self.prefetch_stream is None and self.device.type == "cuda":
            self.prefetch_stream = torch.cuda.Stream(self.device, priority=HIGH_PRIORITY)
        return self.prefetch_stream

    def send(self, batch: Batch, stream: Any) -> Batch:
        """Queue the copies on the side stream (or copy plainly where there is none: the CPU, in tests)."""
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            return tuple(tensor.to(self.device, non_blocking=True) for tensor in batch)

    def handed_over(self, batch: Batch, stream: Any) -> Batch:
        """The compute stream waits for the batch's copy and marks the batch as its own."""
        if stream is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(stream)
            for tensor in batch:
                tensor.record_stream(current)
        return batch

    def __iter__(self) -> Iterator[Batch]:
        stream = self.side_stream()
        pending: Batch | None = None
        for batch in self.loader:
            # The wait is recorded before the next copy is queued, so it covers the previous batch's copy alone;
            # the next copy is queued before the previous batch is yielded, so it runs while that one computes.
            ready = self.handed_over(pending, stream) if pending is not None else None
            pending = self.send(batch, stream)
            if ready is not None:
                yield ready
        if pending is not None:
            yield self.handed_over(pending, stream)
