"""Loader worker processes: how they start (forked, or from a forkserver under DDP), why they ignore stop signals,
and how they end with their main process, on every way out.

One owner for every pool of loader workers: training's and evaluation's loaders (``data/loading/loaders.py``)
and the first start's file checks (``data/files/bad_files.py``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import torch.distributed as dist
from torch import multiprocessing
from torch.utils.data import DataLoader

from . import PACKAGE


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
    context.set_forkserver_preload([f"{PACKAGE}.data.folders"])  # the data modules, read when it starts
    return context
