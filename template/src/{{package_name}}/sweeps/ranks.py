"""A sweep under torchrun: every rank trains the same trial, as one DDP job.

Rank 0 alone talks to Optuna. Before each trial it sends the trial's config to
the other ranks, and after each epoch whether the pruner stops the trial, so
every rank stops at the same epoch (a rank that trained on would wait at a
collective for ranks that stopped). The process group is joined once for the
whole sweep and kept across the trials' ``train()`` calls.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from ..core.config import TrainConfig, config_from_dict
from ..core.distributed import World, close_world, init_world
from ..core.errors import UserError
from ..training.preemption import Preempted
from .cleanup import free_memory, sticky_cuda_error

# Between trials the other ranks wait for rank 0, which may wait for other processes' trials of a shared
# study. If rank 0 dies instead, torchrun ends the other ranks, so a long wait here never hangs a job.
BETWEEN_TRIALS = datetime.timedelta(days=7)
END = None  # rank 0's message after its last trial


@dataclass
class Ranks:
    """This process's place in the sweep, and the channel on which rank 0 tells the others what to do."""

    world: World
    group: Any = None  # a gloo group for the messages, also when training talks NCCL

    @classmethod
    def alone(cls) -> Ranks:
        return cls(World())

    @classmethod
    def join(cls, cfg: TrainConfig) -> Ranks:
        """Join torchrun's process group once for every trial (one process without torchrun)."""
        world = init_world(cfg.parallel, cfg.device, cfg.collective_timeout)
        if not world.distributed:
            return cls(world)
        return cls(world, dist.new_group(backend="gloo", timeout=BETWEEN_TRIALS))

    def send(self, message: Any) -> Any:
        """Rank 0's ``message`` on every rank (the others pass anything): a collective, all ranks call it."""
        if not self.world.distributed:
            return message
        box = [message if self.world.is_main else None]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def close(self) -> None:
        close_world(self.world)


def follow(ranks: Ranks) -> int:
    """A rank other than 0: train each trial rank 0 sends, until it sends the end; returns the trials trained."""
    from ..training.trainer import train

    trained = 0
    while (raw := ranks.send(None)) is not END:
        cfg = config_from_dict(raw)

        def epoch_end(row: dict[str, Any]) -> bool:
            return bool(ranks.send(None))  # rank 0's pruning decision for this epoch

        try:
            train(cfg, resume="auto", epoch_end=epoch_end)
        except (UserError, Preempted):  # bad input, a stop signal: rank 0 sees the same and ends the sweep
            raise
        except Exception as error:
            # The trial failed here as on rank 0, which records it; the next trial goes on.
            sticky = sticky_cuda_error(error)
            if sticky is not None:
                raise UserError(f"a CUDA error left this process's GPU unusable ({sticky}): the sweep stops") from None
        free_memory(cfg.train)
        trained += 1
    return trained
