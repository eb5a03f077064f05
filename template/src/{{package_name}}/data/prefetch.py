"""Training batches copied to the GPU on a side CUDA stream, one batch ahead, as timm's prefetcher does.

The loader pins its batches (``pin_memory`` on CUDA); the copy of batch n + 1
is queued on a side stream before batch n is handed over, so it runs while the
model computes on batch n. The compute stream waits for a batch's copy before
using it, and ``record_stream`` keeps the allocator from reusing its memory
while the compute stream still reads it. Order and pixels are the loader's:
nothing here draws a random number, so resume stays exact.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

Batch = tuple[torch.Tensor, ...]


def prefetches(device: torch.device) -> bool:
    """On CUDA only: on the CPU there is no copy to overlap (a device-resident set has none either)."""
    return device.type == "cuda"


class Prefetched:
    """A DataLoader's batches, arriving on ``device``; its sampler stays the loader's (``TrainingBatches`` sets it)."""

    def __init__(self, loader: DataLoader, device: torch.device) -> None:
        self.loader, self.device = loader, device

    def __len__(self) -> int:
        return len(self.loader)

    def side_stream(self) -> Any:
        return torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

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
