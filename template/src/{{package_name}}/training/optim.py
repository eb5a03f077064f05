"""Parameter groups, optimizer and learning-rate schedule (P12, P13)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from ..core.config import OptimConfig
from ..core.machine import fused_kernels


def param_groups(model: nn.Module, cfg: OptimConfig, frozen_too: bool = False) -> list[dict[str, Any]]:
    """Up to four groups: backbone or head, with or without weight decay.

    Biases and normalization weights (every tensor with fewer than two
    dimensions) get no weight decay; the backbone's learning rate is scaled by
    ``backbone_lr_scale``. Frozen parameters are left out (P13), unless they
    train later (``frozen_too``: ``model.unfreeze_at_epoch``): then they are in
    their group from the start, and the optimizer skips them while their
    gradient is None, so that the optimizer's state has one layout all run
    long and a resume across the unfreezing epoch loads into it.
    """
    groups: dict[tuple[str, bool], list[nn.Parameter]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad and not frozen_too:
            continue
        part = "head" if name.startswith("head.") else "backbone"
        groups.setdefault((part, param.ndim > 1), []).append(param)
    # ``auto`` is resolved by the whole Config (core/config.py: the recipe's scale with pretrained weights); an
    # OptimConfig made alone, without a model section to decide, trains the backbone at the head's rate.
    backbone_scale = 1.0 if cfg.backbone_lr_scale == "auto" else float(cfg.backbone_lr_scale)
    result = []
    for (part, decay), params in sorted(groups.items()):
        scale = backbone_scale if part == "backbone" else 1.0
        result.append(
            {
                "name": f"{part}{'' if decay else '_no_decay'}",
                "params": params,
                "lr": cfg.lr * scale,
                "weight_decay": cfg.weight_decay if decay else 0.0,
            }
        )
    return result


def fused_on(device: torch.device) -> bool | None:
    """``fused=True`` on CUDA (core/machine.py), torch's default elsewhere (the CPU's numbers stay as they were).

    A fused optimizer takes GradScaler's found-inf flag as a device tensor and
    skips an overflowed fp16 step on the GPU; any other makes GradScaler read
    the flag with ``.item()``, a host sync at every step.
    """
    return fused_kernels(device)


def build_optimizer(model: nn.Module, cfg: OptimConfig, frozen_too: bool = False) -> torch.optim.Optimizer:
    """SGD (Nesterov momentum when ``momentum`` > 0) or AdamW, fused on CUDA; build it after the model is moved."""
    groups = param_groups(model, cfg, frozen_too)
    device = next((p.device for group in groups for p in group["params"]), torch.device("cpu"))
    fused = fused_on(device)
    if cfg.name == "adamw":
        optimizer: torch.optim.Optimizer = torch.optim.AdamW(groups, lr=cfg.lr, fused=fused)
    else:
        optimizer = torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.momentum > 0, fused=fused)
    keep_fused(optimizer, fused)
    return optimizer


def keep_fused(optimizer: torch.optim.Optimizer, fused: bool | None) -> None:
    """``load_state_dict`` takes each group's ``fused`` from the checkpoint: put this device's choice in first.

    Else a CPU checkpoint resumed on a GPU would step unfused (and GradScaler,
    told at construction that the step is fused, would hand it a flag it
    rejects). It must be in the incoming groups, not set after loading: torch
    places each state tensor by the loaded group's flag, and an unfused
    group's ``step`` stays on the CPU, where the fused CUDA kernel refuses it
    (pytorch/pytorch#104767, #124133).
    """

    def with_choice(_: torch.optim.Optimizer, state_dict: dict[str, Any]) -> dict[str, Any]:
        # New group dicts: load_state_dict copied only the outer dict, the caller's checkpoint stays as read.
        state_dict["param_groups"] = [{**group, "fused": fused} for group in state_dict["param_groups"]]
        return state_dict

    optimizer.register_load_state_dict_pre_hook(with_choice)


def lr_factor(cfg: OptimConfig, steps_per_epoch: int, epochs: int) -> Callable[[int], float]:
    """The multiplier of every group's base lr after ``step`` optimizer steps.

    Linear warmup from ``warmup_start_factor`` to 1, then cosine down to
    ``min_lr_ratio`` at the last step, or a drop by ``gamma`` every
    ``step_epochs`` epochs.
    """
    warmup = round(cfg.warmup_epochs * steps_per_epoch)
    total = max(epochs * steps_per_epoch, warmup + 1)

    def factor(step: int) -> float:
        if step < warmup:
            return cfg.warmup_start_factor + (1 - cfg.warmup_start_factor) * step / warmup
        if cfg.scheduler == "step":
            return cfg.gamma ** (step // (cfg.step_epochs * steps_per_epoch))
        progress = min(1.0, (step - warmup) / (total - warmup))
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: OptimConfig, steps_per_epoch: int, epochs: int) -> LambdaLR:
    """Stepped once per optimizer step (not per epoch).

    LambdaLR with a closed-form factor keeps the state_dict to plain numbers
    and makes the curve exact after resume, with a per-group floor that
    SequentialLR + CosineAnnealingLR's single ``eta_min`` cannot give.
    """
    return LambdaLR(optimizer, lr_factor(cfg, steps_per_epoch, epochs))
