"""Which epochs train the backbone: ``model.freeze_backbone`` and ``model.unfreeze_at_epoch`` (P13).

A frozen backbone has ``requires_grad`` off (no gradient, so the optimizer
skips it) and stays in eval mode (``ImageClassifier.train``). The state is a
function of the epoch, so a run resumed across the unfreezing epoch freezes
and unfreezes where the uninterrupted one did.
"""

from __future__ import annotations

from torch import nn

from ..core.config import ModelConfig
from ..core.progress import PaceChange


def frozen_in(cfg: ModelConfig, epoch: int) -> bool:
    """Whether the backbone is frozen while epoch ``epoch`` (counted from 1) trains."""
    return cfg.freeze_backbone and not (cfg.unfreeze_at_epoch and epoch >= cfg.unfreeze_at_epoch)


def set_frozen(model: nn.Module, frozen: bool) -> bool:
    """Freeze or unfreeze ``model.backbone``; True when that changed something."""
    if model.backbone_frozen == frozen:
        return False
    model.backbone.requires_grad_(not frozen)
    return True


def unfreezing_said(cfg: ModelConfig, epoch: int, scale: float, resumed_inside: bool = False) -> str:
    """The line said where the backbone starts training in this process: at ``model.unfreeze_at_epoch``, or on a
    resume past it (or inside it), where it has trained since that epoch, not from the one resumed."""
    start = cfg.unfreeze_at_epoch
    if epoch == start and not resumed_inside:
        return f"epoch {epoch}: the backbone trains from here on (model.unfreeze_at_epoch), at lr x {scale}"
    return (
        f"epoch {epoch} (resumed): the backbone has trained since epoch {start} (model.unfreeze_at_epoch), "
        f"at lr x {scale}"
    )


def parameter_counts(model: nn.Module) -> tuple[int, int]:
    """(trainable, frozen) parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters()) - trainable


def frozen_later(cfg: ModelConfig) -> bool:
    """Frozen parameters that train later belong in the optimizer from the start (``training/optim.py``)."""
    return cfg.freeze_backbone and cfg.unfreeze_at_epoch > 0


def pace_changes(cfg: ModelConfig) -> list[PaceChange]:
    """The epoch from which the backbone trains too: each batch then runs its backward pass as well, slower
    than the head's alone (EfficientNet-Lite0 on a 2-core CPU: 2 s an epoch frozen, 2 min 51 s for the run), so
    the estimate is measured again there (core/progress.py)."""
    if not frozen_later(cfg):
        return []
    return [PaceChange(cfg.unfreeze_at_epoch, "the backbone starts training", "the backbone started training")]
