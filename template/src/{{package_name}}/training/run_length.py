"""Settings that cannot work for a run this short: one warning line each, printed when a fresh run starts."""

from __future__ import annotations

from ..core.config import Config
from .ema import horizon_warning


def run_length_warnings(cfg: Config, steps_per_epoch: int) -> list[str]:
    """What this run's ``train.epochs`` x optimizer steps per epoch leaves no room for."""
    total = cfg.train.epochs * steps_per_epoch
    warnings = [horizon_warning(cfg.train.ema_decay, total)]
    if cfg.optim.warmup_epochs >= cfg.train.epochs:
        warnings.append(
            f"optim.warmup_epochs {cfg.optim.warmup_epochs} is not shorter than train.epochs {cfg.train.epochs}: "
            "the learning rate never reaches optim.lr; lower optim.warmup_epochs or train longer"
        )
    if cfg.model.unfreeze_at_epoch > cfg.train.epochs:
        warnings.append(
            f"model.unfreeze_at_epoch {cfg.model.unfreeze_at_epoch} is after train.epochs {cfg.train.epochs}: "
            "the backbone stays frozen all run; lower model.unfreeze_at_epoch or train longer"
        )
    return [warning for warning in warnings if warning]
