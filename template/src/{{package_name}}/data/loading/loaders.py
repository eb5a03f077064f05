"""DataLoaders: how many workers and in which order they read (one owner for loading); how workers start and stop
is ``core/workers.py``'s, which the first start's file checks share.

The datasets come from ``folders.py``; what the loader's batches then become
on the way to the model is ``batches.py``'s.
"""

from __future__ import annotations

import functools
import os

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ...core.config import DataConfig
from ...core.distributed import World
from ...core.machine import cores_per_process
from ...core.seeding import SeededSamples
from ...core.workers import start_worker, worker_start
from ...core.workers import stop_workers as stop_workers  # the loaders' callers end their workers by it
from .pipeline import keep_batch, on_batch_path
from .samplers import ResumableSampler, ShardSampler, sample_weights


def loader_workers(setting: int | str, world: World, device: torch.device) -> int:
    """``auto``: this process's share of the CPU cores (cores / processes on this node), less its own, at most 8.

    On CUDA the main process mostly waits for the GPU, so the share's other
    cores load: 16 cores and 8 GPUs give each rank 1 worker (this used to
    give 0: two cores were kept back per rank). On the CPU the model computes
    on the same cores, so two stay with it: a 2-core machine loads in the main
    process, which is fastest there (benchmarks/throughput.py). At most 8: each
    worker holds its own prefetched batches and a copy of the sample list, and
    one process rarely needs more (``data.num_workers`` sets any count).
    """
    if setting != "auto":
        return int(setting)
    share = cores_per_process(world.size)  # of the affinity's cores (or the server profile's, core/machine.py)
    kept = 1 if device.type == "cuda" else 2  # the main process; on the CPU also the model's own threads
    return max(0, min(8, share - kept))


def build_sampler(dataset: Dataset, cfg: DataConfig, seed: int, world: World, train: bool) -> Sampler:
    """Training: the resumable (seed, epoch) order, balanced draws with ``data.sampler``; evaluation: file order.

    Under torchrun each process gets its own shard (P14).
    """
    if not train:
        return ShardSampler(len(dataset), world)  # type: ignore[arg-type]
    weights = sample_weights(dataset) if cfg.sampler == "balanced" else None
    return ResumableSampler(dataset, seed, world, weights)  # type: ignore[arg-type]


def build_loader(
    dataset: Dataset,
    cfg: DataConfig,
    seed: int,
    device: torch.device,
    train: bool,
    world: World | None = None,
    persistent: bool = False,
) -> DataLoader:
    """Training batches in the resumable (seed, epoch) order; evaluation in file order.

    Under torchrun each process loads its own shard (P14); ``data.batch_size``
    is per process. ``persistent`` keeps the workers between passes (a
    training run's epochs); whoever asks for it calls ``stop_workers`` at the end.
    How the training batches then reach the device is ``batches.TrainingBatches.build``'s choice.
    """
    world = world or World()
    workers = loader_workers(cfg.num_workers, world, device)
    sampler = build_sampler(dataset, cfg, seed, world, train)
    squares = on_batch_path(dataset)  # the batch path: nothing random per sample, batches come stacked
    return DataLoader(
        SeededSamples(dataset, seed) if train and not squares else dataset,
        batch_size=cfg.batch_size,
        collate_fn=keep_batch if squares else None,
        sampler=sampler,
        num_workers=workers,
        pin_memory=device.type == "cuda",  # page-locked batches: asynchronous copies (an EncodedBatch pins its own)
        persistent_workers=persistent and workers > 0,
        drop_last=train and len(sampler) > cfg.batch_size,  # type: ignore[arg-type]
        worker_init_fn=functools.partial(start_worker, os.getpid()),
        multiprocessing_context=worker_start(workers),
        # Each worker's torch, random and NumPy seeds derive from this generator
        # (DataLoader seeds all three), so workers never repeat each other's draws.
        generator=torch.Generator().manual_seed(seed),
    )
