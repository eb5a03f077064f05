"""DataLoaders: how many workers, how they start and stop, in which order they read (one owner for loading).

The datasets come from ``folders.py``; what the loader's batches then become
on the way to the model is ``batches.py``'s.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import multiprocessing
from torch.utils.data import DataLoader, Dataset, Sampler

from ...core.config import DataConfig
from ...core.distributed import World
from ...core.machine import cores_per_process
from ...core.seeding import SeededSamples
from .pipeline import keep_batch, on_batch_path
from .samplers import ResumableSampler, ShardSampler, sample_weights


def ignore_stop_signals(worker_id: int) -> None:
    """Ctrl-C and SIGTERM are for the main process, which checkpoints and then stops the workers.

    Because the workers ignore SIGTERM, multiprocessing's exit handler (which
    ends daemon children with SIGTERM and then joins them) would wait for
    persistent workers forever: ``stop_workers`` ends them first.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def start_worker(main_pid: int, worker_id: int) -> None:
    """Each loader worker: stop signals ignored, and gone within a second or two of its main process.

    A worker started by a forkserver (under DDP) is the forkserver's child, and
    PyTorch's own watchdog watches that parent, which lives as long as any of
    its children holds its pipe: a SIGKILLed rank left its forkserver and
    workers running forever (and holding torchrun's output open). So each
    worker also watches the process that made its loader.
    """
    ignore_stop_signals(worker_id)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(main_pid, 0)  # signal 0: is it still there?
            except ProcessLookupError:
                os._exit(0)  # nothing to save: the main process owned the run

    threading.Thread(target=watch, name="main-process-watch", daemon=True).start()


def stop_workers(loader: DataLoader) -> None:
    """End a loader's persistent workers now, on every way out of a run (done, error, stop).

    DataLoader has no public call for this; dropping its iterator runs the
    iterator's own shutdown (a sentinel to each worker, then join), which the
    workers obey whatever signals they ignore.
    """
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None:
        # Only a multi-process iterator has workers to end; a single-process one holds nothing.
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        loader._iterator = None


def worker_start(workers: int) -> Any:
    """How loader workers start: forked, except in a process whose process group is initialized (DDP).

    A fork copies the calling thread alone; a thread of the process group (gloo,
    NCCL) that holds a lock at that instant leaves the worker waiting for it
    forever (seen: a validation worker of a 2-rank gloo run, hung inside
    os.fork). There, workers fork from a forkserver instead: a process started
    by fork and exec, single-threaded, with this package preloaded so that each
    worker starts warm. The dataset, its transforms (``models/extensions.py``'s too)
    and the loader's functions then travel by pickle; tensors go through shared
    memory. Seeds come from (seed, epoch, index) as before: resume stays exact.
    """
    if workers == 0 or not (dist.is_available() and dist.is_initialized()):
        return None  # the default: fork, and memory caches shared copy-on-write
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([f"{__package__}.folders"])  # the data modules, read when it starts
    return context


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
