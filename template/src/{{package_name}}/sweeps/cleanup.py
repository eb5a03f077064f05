"""Between trials in one process: free what the last trial held, and know when the GPU itself is broken.

Trials run one after another in the same process, so whatever one leaves
behind (cached CUDA blocks, dynamo's compiled graphs) the next one inherits:
the caching allocator keeps freed blocks for this process, and dynamo counts
recompilations of the same code across trials until its limit stops compiling.
"""

from __future__ import annotations

import gc

import torch

from ..core.config import TrainConfig

# CUDA errors after which every later kernel launch in this process fails too (the context is lost);
# see the CUDA runtime's list of "sticky" errors. An out-of-memory error is not one of them.
STICKY_CUDA_ERRORS = (
    "an illegal memory access was encountered",
    "device-side assert triggered",
    "unspecified launch failure",
    "misaligned address",
    "an illegal instruction was encountered",
    "uncorrectable ECC error",
    "hardware stack error",
    "invalid program counter",
)


def free_memory(cfg: TrainConfig) -> None:
    """After a trial: forget its compiled graphs, collect its objects, hand its cached CUDA blocks back.

    In that order: dynamo's caches (compiled code, its guards, CUDA graph pools) still reference the trial's
    tensors; emptying the allocator's cache before they are dropped hands back nothing of theirs.
    """
    if cfg.compile:
        # Each trial compiles a new model; dynamo would count them as recompiles of one function and
        # stop compiling at torch._dynamo.config.recompile_limit.
        torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_initialized():
        # Blocks the caching allocator keeps would count against the next trial's (maybe larger) model.
        torch.cuda.empty_cache()


def sticky_cuda_error(error: BaseException) -> str | None:
    """The first line of a CUDA error that leaves this process's GPU unusable; None for any other error."""
    text = str(error)
    if not isinstance(error, RuntimeError) or not any(phrase in text for phrase in STICKY_CUDA_ERRORS):
        return None
    return next(line.strip() for line in text.splitlines() if line.strip())
