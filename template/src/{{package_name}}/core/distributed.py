"""Several GPUs or processes: process groups, DataParallel / DDP wrapping, collectives (P14).

Device, precision and backend flags are device.py's.
"""

from __future__ import annotations

import datetime
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import nn

from . import PACKAGE
from .config import TrainConfig
from .device import select_device
from .errors import UserError

# How long the processes wait for each other while they set up their data (``files_checked``, the decoder's vote
# ``all_agree``, ``started``): a rank on a slow shared file system may fingerprint and cache its data far longer
# than a collective should take (train.collective_timeout). The file checks, whose length grows with the data, are
# waited for before, as long as they make progress (core/waiting.py), not against this clock.
STARTUP_TIMEOUT = datetime.timedelta(hours=2)


@dataclass(frozen=True)
class World:
    """This process's place among the processes that torchrun started (one, without torchrun)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    # A gloo group with STARTUP_TIMEOUT for the waits of the data's set-up (``files_checked``, ``all_agree``,
    # ``started``); None for one process.
    startup: Any = field(default=None, compare=False, repr=False)
    # This process's device, chosen once (``init_world`` under torchrun, else the trainer) and read by the rest.
    device: torch.device | None = field(default=None, compare=False)
    # torchrun's key-value store (this attempt's keys): where the file checkers post how far they are, read by the
    # ranks that wait for them (core/waiting.py); None for one process.
    store: Any = field(default=None, compare=False, repr=False)

    @property
    def is_main(self) -> bool:
        """Only the main process writes checkpoints, metrics and pictures."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


# How many callers hold the process group open: a sweep joins it once and keeps it across its trials'
# train() calls, whose close_world then leaves it open (a group made again would reuse the store's keys).
holders = 0


def init_world(parallel: str, device: str = "auto", timeout: float = 300.0) -> World:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1).

    The backend follows the training device that ``train.device`` resolves
    to, not merely whether CUDA exists: nccl for GPUs, gloo for the CPU (also
    on a GPU machine with ``train.device=cpu``).
    """
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size > 1 and parallel in ("none", "dp"):
        raise UserError(
            f"train.parallel={parallel} under torchrun would run {size} separate trainings into one out_dir: "
            "use train.parallel=auto or ddp"
        )
    if size == 1:
        if parallel == "ddp":
            raise UserError(
                "train.parallel=ddp needs several processes: launch with "
                "`torchrun --nproc_per_node=N -m <package> train ...`"
            )
        return World()
    if device.startswith("cuda:"):
        raise UserError(
            f"train.device={device} under torchrun would put every process on one GPU: use train.device=cuda "
            "(each process takes the GPU of its local rank; choose GPUs with CUDA_VISIBLE_DEVICES)"
        )
    world = World(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", "0")))
    # One-line errors for a missing GPU; on a GPU, it becomes this process's current device (torch.cuda.set_device)
    # before NCCL starts, so each rank talks from its own GPU.
    world = replace(world, device=select_device(device, world.local_rank))
    if not dist.is_initialized():
        on_gpu = world.device.type == "cuda"  # type: ignore[union-attr]
        # A process that waits longer than this at a collective (a rank died or hangs) raises instead of
        # waiting forever; train() turns that into one line naming this rank.
        wait = datetime.timedelta(seconds=timeout)
        store, rank, size = next(dist.rendezvous("env://", timeout=wait))
        store = attempt_store(store, size)
        backend = "nccl" if on_gpu else "gloo"
        # device_id binds NCCL to this rank's GPU now (eagerly), instead of at the first collective, where a
        # barrier would have to guess the device (and warns that it does).
        device_id = torch.device("cuda", world.local_rank) if on_gpu else None
        dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=wait, device_id=device_id)
        world = replace(world, startup=dist.new_group(backend="gloo", timeout=STARTUP_TIMEOUT), store=store)
    global holders
    holders += 1
    return world


def started(world: World) -> None:
    """Every process waits here, once, until all have set up their data; up to STARTUP_TIMEOUT, not the collectives'.

    Before this point each process works alone (file checks once per node,
    fingerprints, caches), and a slow one must not make the others give up.
    A process that fails before it gets here ends the wait at once.
    """
    if world.distributed and world.startup is not None:
        dist.barrier(group=world.startup)


def files_checked(world: World) -> None:
    """Every process waits here until each node's local rank 0 has checked the files (the others skip the checks),
    as at ``started``: before any process times its decode (``data/loading/decode_race.py``), so that no file check
    shares the cores a race times. A collective: every process asks, once, at the same point."""
    if world.distributed and world.startup is not None:
        dist.barrier(group=world.startup)


def attempt_store(store: dist.Store, size: int) -> dist.Store:
    """The store under a key space of its own for this attempt of the job, the same on every process.

    After torchrun --max-restarts restarts the workers, the store (torchrun's
    agent keeps it across restarts) still holds the addresses the dead attempt
    published, and a new process group would dial them (pytorch/pytorch#167288).
    ``TORCHELASTIC_RESTART_COUNT`` cannot name the attempt: each node's agent
    counts only its own workers' failures, so two nodes disagree. Instead every
    process adds 1 to a counter in the store (an atomic add): the N processes of
    the first attempt read 1..N, those of the second N+1..2N, and so on. (A
    process that dies before it gets here, while it imports, would shift the
    count: the next attempt then times out at its start, with one line.)
    """
    arrivals = store.add(f"{PACKAGE}/arrivals/world-{size}", 1)  # per world size: an elastic job may shrink
    attempt = (arrivals - 1) // size
    return dist.PrefixStore(f"{PACKAGE}/attempt-{attempt}", store)


def collective_failure(error: BaseException, world: World) -> UserError | None:
    """One line for a collective that failed because another process died, failed or hung; else None."""
    text = str(error)
    if not world.distributed or not (isinstance(error, dist.DistError) or "gloo" in text or "NCCL" in text):
        return None
    first = next((line for line in text.splitlines() if line.strip()), type(error).__name__)
    cause = re.sub(r"^\[[^\]]*\]\s*", "", first.strip())  # gloo prefixes its source file and line
    cause = cause.split(". ")[0].rstrip(".")  # the cause; gloo's advice after it says what this message says
    return UserError(
        f"lost the other processes at a collective ({cause}): another rank failed or hangs, see its error; "
        "continue with --resume auto once the cause is fixed"
    )


def close_world(world: World) -> None:
    """Leave the process group; the last of its holders destroys it."""
    global holders
    if world.distributed and dist.is_initialized():
        holders = max(holders - 1, 0)
        if not holders:
            dist.destroy_process_group()


def end_process(code: int) -> NoReturn:
    """End this process with ``code``; a torchrun process (``TORCHELASTIC_RUN_ID``) with ``os._exit``.

    PyTorch's race at exit: a gloo worker thread releases the last
    collective's work (a barrier holding tensors made in Python) while the main
    thread finalizes the interpreter; its GIL acquire then exits the thread
    inside a noexcept destructor: ``terminate called without an active
    exception``, SIGABRT, and torchrun reports a finished job as failed (seen
    in 1 run of 5 on a busy 2-core machine; core dump and a minimal
    reproduction: benchmarks/gloo_exit_race.py). The process group object
    outlives ``destroy_process_group`` while the DDP module refers to it, so
    its threads run into finalization. Every file, loader worker, tracker and
    lock is closed before this is called (the trainer's ``close``), so skipping
    the interpreter's finalization loses nothing: the output is flushed here.
    """
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def sum_across(tensor: torch.Tensor, world: World) -> torch.Tensor:
    """Sum a tensor over every process, in place (a no-op for one process)."""
    if world.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def agreed(flag: bool, world: World, device: torch.device) -> bool:
    """True on every process when any process says so. A collective: every process must ask at the same step."""
    if not world.distributed:
        return flag
    votes = torch.tensor([1.0 if flag else 0.0], device=device)
    return bool(sum_across(votes, world).item() > 0)


def all_agree(flag: bool, world: World) -> bool:
    """True on every process when every process says so: at start-up, on its long-waiting group (``started``), so
    a process still setting up its data is waited for. A collective: every process asks, once, at the same point."""
    if not world.distributed or world.startup is None:
        return flag
    votes = torch.tensor([1 if flag else 0])
    dist.all_reduce(votes, op=dist.ReduceOp.MIN, group=world.startup)  # gloo: a CPU tensor
    return bool(votes.item())


def gather_objects(value: Any, world: World) -> list[Any]:
    """Every process's ``value`` (picklable), in rank order, on every process; ``[value]`` for one process."""
    if not world.distributed:
        return [value]
    gathered: list[Any] = [None] * world.size
    dist.all_gather_object(gathered, value)
    return gathered


def sync_buffers(model: nn.Module, world: World) -> None:
    """Give every process rank 0's buffers (batch-norm statistics) before it evaluates.

    DDP broadcasts them at the start of each training forward, so after the
    epoch's last step each process still holds statistics of its own batches.
    """
    if world.distributed:
        for buffer in model.buffers():
            dist.broadcast(buffer, src=0)


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def data_parallel_ids(device: torch.device, cfg: TrainConfig, batch_size: int, world: World | None = None) -> list[int]:
    """The GPUs that ``nn.DataParallel`` spreads each batch over, the training device first; [] for none.

    ``parallel: auto`` uses every visible GPU when ``train.device`` names no
    index; an explicit ``cuda:N`` trains on that GPU alone unless ``parallel: dp``.
    Under torchrun (``world`` of several processes) never: each process is DDP's, on its own GPU.
    """
    if world is not None and world.distributed:
        return []  # before the checks below: compile and small batches are DDP's to take, not DataParallel's
    gpus = torch.cuda.device_count() if device.type == "cuda" else 0
    one_named_gpu = cfg.parallel == "auto" and ":" in cfg.device
    if cfg.parallel == "none" or gpus < 2 or one_named_gpu:
        return []
    if cfg.compile:
        raise UserError(
            f"train.compile=true with DataParallel over {gpus} GPUs: its replicas would call the uncompiled model. "
            f"Launch with `torchrun --nproc_per_node={gpus}` (DDP), or set train.parallel=none"
        )
    if batch_size < gpus:
        raise UserError(f"data.batch_size {batch_size} is smaller than the {gpus} GPUs: raise it to at least {gpus}")
    first = device.index or 0
    return [first, *(index for index in range(gpus) if index != first)]  # outputs gather on device_ids[0]


# Images a GPU below which DataParallel leaves its GPUs mostly waiting: each step scatters the batch and gathers
# the outputs through the first GPU, from one process's threads, so a small share is mostly that overhead.
DATA_PARALLEL_MIN_SHARE = 8


def data_parallel_warning(device_ids: list[int], batch_size: int) -> str | None:
    """One line where DataParallel gives each GPU fewer than ``DATA_PARALLEL_MIN_SHARE`` images, naming torchrun."""
    gpus = len(device_ids)
    if gpus < 2 or batch_size >= DATA_PARALLEL_MIN_SHARE * gpus:
        return None
    return (
        f"DataParallel spreads data.batch_size {batch_size} over {gpus} GPUs: {batch_size // gpus} images a GPU, "
        "too few to keep one busy, from one process's threads (and without train.compile); launch one process a "
        f"GPU with `torchrun --nproc_per_node={gpus} -m {PACKAGE} train ...` (DDP, data.batch_size a GPU), or set "
        f"data.batch_size to {DATA_PARALLEL_MIN_SHARE * gpus} or more"
    )


def autocast_replica(replica: nn.Module, dtype: torch.dtype, device_type: str) -> Callable[..., Any]:
    """A replica's forward under the training's autocast dtype, wherever autocast was switched on."""

    def forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type, dtype=dtype, enabled=torch.is_autocast_enabled(device_type)):
            return replica(*args, **kwargs)

    return forward


class DataParallel(nn.DataParallel):
    """``nn.DataParallel`` whose replica threads keep the autocast dtype of the training (bf16 or fp16).

    torch's ``parallel_apply`` re-enters autocast in each worker thread with
    ``enabled`` alone; the dtype is per thread and defaults to fp16 on CUDA,
    so bf16 training would run its replicas in fp16, with no gradient scaler.
    """

    def __init__(self, module: nn.Module, device_ids: list[int], autocast_dtype: torch.dtype | None) -> None:
        super().__init__(module, device_ids=device_ids)
        self.autocast_dtype = autocast_dtype

    def parallel_apply(self, replicas: Sequence[nn.Module], inputs: Sequence[Any], kwargs: Any) -> list[Any]:
        if self.autocast_dtype is not None:
            device_type = self.src_device_obj.type if hasattr(self, "src_device_obj") else "cuda"
            replicas = [autocast_replica(r, self.autocast_dtype, device_type) for r in replicas]  # type: ignore[misc]
        return super().parallel_apply(replicas, inputs, kwargs)


def wrap_model(
    model: nn.Module,
    device: torch.device,
    device_ids: list[int],
    autocast_dtype: torch.dtype | None,
    world: World | None = None,
    compile: bool = False,
) -> nn.Module:
    """P14: DistributedDataParallel under torchrun; else DataParallel over ``device_ids`` when there are several.

    Either way the real model stays at ``.module``. ``compile``: torch.compile
    around the result, DDP included, as PyTorch documents it: its DDP
    optimizer splits the compiled graph at DDP's gradient buckets, so each
    bucket's all-reduce starts while the backward goes on (compiled inside DDP,
    the all-reduce waited for the whole compiled backward). DataParallel is
    never compiled (``data_parallel_ids`` refuses the pair). Each compile
    starts from empty caches (``forget_compiled``).
    """
    wrapped = model
    if world is not None and world.distributed:
        ids = [device.index] if device.type == "cuda" else None
        wrapped = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    elif len(device_ids) > 1:
        wrapped = DataParallel(model, device_ids, autocast_dtype)
    if not compile:
        return wrapped
    forget_compiled()
    return torch.compile(wrapped)


def forget_compiled() -> None:
    """Drop every graph dynamo has compiled in this process, before the model is compiled (again).

    A new ``torch.compile`` wrapper alone is not enough: dynamo keeps its
    graphs on the code objects (the model's ``forward``, DDP's, the functions
    that resume after a graph break), not on the wrapper, and reuses one
    whose guards pass. Some torch versions skip the guard on a parameter's
    ``requires_grad`` when the module's parameter dict is unchanged
    (pytorch/pytorch#139476; fixed by #177158, March 2026, while
    ``pyproject.toml`` admits torch 2.4): after ``model.unfreeze_at_epoch``
    they would run the graph traced with the backbone frozen, which computes
    no gradient for it (under DDP, the new wrapper then waits for gradients
    that never come). ``torch.compiler.reset`` is the narrowest call that
    reaches them all: ``torch._dynamo.reset_code`` takes one code object,
    and the trainer cannot name the ones a graph break made. Only the
    trainer compiles in its process; what is dropped is compiled again on
    its first call (inductor's kernels from its on-disk cache).
    """
    torch.compiler.reset()


def sync_batchnorm(model: nn.Module, world: World, device: torch.device) -> nn.Module:
    """``train.sync_batchnorm``: batch-norm statistics over every process's batch, not each its own."""
    if not world.distributed:
        return model  # one process: its batch is the whole batch
    if device.type != "cuda":
        raise UserError("train.sync_batchnorm needs GPUs (PyTorch's SyncBatchNorm runs on CUDA only): set it false")
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside DataParallel, DDP and torch.compile wrappers (P7)."""
    while True:
        if isinstance(model, nn.DataParallel | nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model
