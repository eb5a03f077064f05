"""MixUp and CutMix on a training batch (torchvision transforms v2), drawn from (seed, epoch, batch).

The mixing ratio, the CutMix box and the choice between the two come from
torch's CPU generator, seeded here per batch: a resumed run mixes exactly as
an uninterrupted one, and no CUDA generator is touched. Targets become
probabilities over the classes; training accuracy is still counted against
the hard labels.
"""

from __future__ import annotations

import torch
from torchvision.transforms import v2

from ...core.config import DataConfig
from ...core.seeding import batch_seed


class BatchMixer:
    """``data.mixup_alpha`` and ``data.cutmix_alpha``; with both, each batch gets one of them."""

    def __init__(self, cfg: DataConfig, seed: int, num_classes: int) -> None:
        choices: list[v2.Transform] = []
        if cfg.mixup_alpha > 0:
            choices.append(v2.MixUp(alpha=cfg.mixup_alpha, num_classes=num_classes))
        if cfg.cutmix_alpha > 0:
            choices.append(v2.CutMix(alpha=cfg.cutmix_alpha, num_classes=num_classes))
        self.mix = v2.RandomChoice(choices) if len(choices) > 1 else choices[0]
        self.seed = seed

    @staticmethod
    def wanted(cfg: DataConfig) -> bool:
        return cfg.mixup_alpha > 0 or cfg.cutmix_alpha > 0

    def __call__(self, images: torch.Tensor, targets: torch.Tensor, epoch: int, batch: int) -> tuple[torch.Tensor, ...]:
        """Mixed float images in [0, 1] (the model normalizes them) and soft targets."""
        if not images.is_floating_point():
            images = images.float().div_(255)  # mixing averages pixels: uint8 would round them
        with torch.random.fork_rng(devices=[]):  # the CPU generator alone; the caller's state comes back after
            torch.default_generator.manual_seed(batch_seed(self.seed, epoch, batch))
            mixed, soft = self.mix(images, targets)
        # MixUp's roll() returns NCHW whatever it was given, CutMix keeps the input's layout: give back the
        # training layout (channels_last or not), or the model would switch layouts from batch to batch.
        return mixed.contiguous(memory_format=layout_of(images)), soft


def layout_of(images: torch.Tensor) -> torch.memory_format:
    """channels_last when the batch is laid out so, else contiguous (NCHW)."""
    channels_last = images.dim() == 4 and images.is_contiguous(memory_format=torch.channels_last)
    return torch.channels_last if channels_last and not images.is_contiguous() else torch.contiguous_format
