"""What the machine has, as ``auto`` sees it: the one place that reads the cores, and the one place to pretend.

``TORCH_SCAFFOLD_PROFILE=server`` (tests/conftest.py's ``server_profile``) makes this machine answer as a GPU
server does for each of its ranks: 4 cores a rank (a 32-core node with 8 GPUs), so ``auto`` starts loader
workers in every process (2 each on the CPU, where two cores stay with the model), and fused optimizer kernels
(torch has them for the CPU too). With DDP under torchrun, the memory cache, persistent workers and the
forkserver follow from those answers as on a server; what only CUDA does (pinned memory, nvJPEG, device
placement, several GPUs) is driven through fakes in the tests. Users never set it.
"""

from __future__ import annotations

import os

import torch

PROFILE_ENV = "TORCH_SCAFFOLD_PROFILE"
SERVER_CORES_PER_RANK = 4  # a 32-core node's share for each of its 8 GPUs


def server_profile() -> bool:
    return os.environ.get(PROFILE_ENV) == "server"


def cpu_cores() -> int:
    """The cores this process may run on (its affinity, as taskset, cgroups and Slurm's --cpus-per-task set it)."""
    if server_profile():
        return SERVER_CORES_PER_RANK * int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cores_per_process(processes: int) -> int:
    """This process's share of the node's cores: ``cpu_cores()`` among torchrun's processes on this node
    (``LOCAL_WORLD_SIZE``; ``processes`` where nothing set it)."""
    return cpu_cores() // max(int(os.environ.get("LOCAL_WORLD_SIZE", processes)), 1)


def fused_kernels(device: torch.device) -> bool | None:
    """``fused=True`` on CUDA (and everywhere in the server profile), torch's default elsewhere.

    On the CPU the default keeps the numbers a CPU run has always had; the
    profile takes the fused path so that what a GPU run loads and saves
    (the groups' ``fused`` flag, the ``step`` tensors) is exercised here.
    """
    return True if device.type == "cuda" or server_profile() else None
