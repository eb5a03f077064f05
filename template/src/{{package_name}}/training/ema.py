"""The moving average of the weights (``train.ema_decay``), updated on the device with no host sync.

After each optimizer step every floating-point parameter and buffer of the
average moves towards the trained model's: ``avg += (1 - decay_t) * (w - avg)``,
one ``torch._foreach_lerp_`` per device and dtype; integer buffers (batch
norm's ``num_batches_tracked``) are copied. The first update copies everything.

``decay_t = min(decay, (1 + t) / (10 + t))`` after ``t`` updates (the warm-up
of TensorFlow's ``ExponentialMovingAverage`` with ``num_updates``): early in a
run, and in a run shorter than the average's horizon ``1 / (1 - decay)``, the
average follows the recent weights instead of the first ones. ``t`` is a
Python int saved in the checkpoint, so a resumed run averages bit for bit as
an uninterrupted one, and nothing is copied between host and device per step
(``torch.optim.swa_utils.AveragedModel`` keeps its counter on the CPU and
copies it to the device at every update: a host sync per dtype group).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn

from ..core.checkpoint import load_model_state

WARMUP_OFFSET = 10  # decay_t = (1 + t) / (10 + t) early on: 0.18 after 1 update, 0.92 after 100, 0.99 after 890


def warmed_up_decay(decay: float, updates: int) -> float:
    """The decay the update after ``updates`` earlier ones uses: ``decay``, once the warm-up has reached it."""
    return min(decay, (1 + updates) / (WARMUP_OFFSET + updates))


def horizon(decay: float) -> float:
    """About how many of the latest optimizer steps the average spans at full decay."""
    return 1.0 / (1.0 - decay)


def horizon_warning(decay: float, total_steps: int) -> str | None:
    """One line when the average cannot reach its decay in this run: it then ends as a shorter average."""
    if not decay or horizon(decay) <= total_steps:
        return None
    fits = math.floor((1.0 - 1.0 / max(total_steps, 1)) * 10_000) / 10_000  # the decay whose horizon is the run
    reached = warmed_up_decay(decay, total_steps)  # the warm-up reaches decay only after ~9 / (1 - decay) updates
    return (
        f"train.ema_decay {decay} averages over ~{horizon(decay):.0f} optimizer steps but this run takes "
        f"{total_steps}: its decay is never reached (the warm-up ends at {reached:.3f}); "
        f"set train.ema_decay to at most {fits} or train longer"
    )


class WeightAverage:
    """A copy of the model whose weights and buffers are the moving average of the trained model's.

    ``module`` is evaluated, chosen by best.pt and saved as the checkpoint's
    ``model_ema`` (a plain, unprefixed state_dict); ``updates`` is saved as
    ``model_ema_updates``, the keys ``AveragedModel`` checkpoints have.
    """

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.module = copy.deepcopy(model).requires_grad_(False)
        self.decay = decay
        self.updates = 0  # a Python int: reading it never waits for the device
        averaged = self.tensors(self.module)
        self.floats = [i for i, t in enumerate(averaged) if t.is_floating_point() or t.is_complex()]
        self.integers = [i for i in range(len(averaged)) if i not in self.floats]

    @staticmethod
    def tensors(model: nn.Module) -> list[torch.Tensor]:
        """Parameters then buffers, in a fixed order, detached: what the average follows."""
        return [t.detach() for t in (*model.parameters(), *model.buffers())]

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Move the average towards ``model`` (call after each optimizer step); queued on the device, no sync."""
        averaged, trained = self.tensors(self.module), self.tensors(model)
        if self.updates == 0:
            torch._foreach_copy_(averaged, trained)  # the first update copies, as AveragedModel's does
        else:
            weight = 1.0 - warmed_up_decay(self.decay, self.updates)  # a Python float: no host-to-device copy
            torch._foreach_lerp_([averaged[i] for i in self.floats], [trained[i] for i in self.floats], weight)
            for i in self.integers:
                averaged[i].copy_(trained[i])  # counters are not averaged: num_batches_tracked follows the model
        self.updates += 1

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint's two keys for the average."""
        return {"model_ema": self.module.state_dict(), "model_ema_updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """From a checkpoint written by this class or by ``AveragedModel`` (template 1.x): the same keys."""
        load_model_state(self.module, state["model_ema"], "model_ema")
        self.updates = int(state["model_ema_updates"])
