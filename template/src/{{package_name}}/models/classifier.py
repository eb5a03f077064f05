"""The network: a backbone that makes an embedding, and a linear head.

``simple_cnn`` is written out here; any torchvision classifier can stand in
as the backbone, with its own head replaced by ``nn.Identity``.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from .. import extensions
from ..core.checkpoint import read_checkpoint, weights_of
from ..core.config import ModelConfig
from ..core.errors import UserError


class SimpleCNN(nn.Module):
    """A stride-2 stem, then stages of conv-BN-ReLU blocks, halving the resolution between stages."""

    def __init__(self, widths: list[int], blocks_per_stage: int, in_channels: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(),
        )
        stages = []
        channels = widths[0]
        for width in widths:
            blocks: list[nn.Module] = []
            for _ in range(blocks_per_stage):
                blocks += [nn.Conv2d(channels, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
                channels = width
            stages.append(nn.Sequential(*blocks))
        # P4: a ModuleList registers every stage: .to() moves it, state_dict saves it.
        self.stages = nn.ModuleList(stages)
        self.downsample = nn.MaxPool2d(2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.out_features = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for index, stage in enumerate(self.stages):
            if index > 0:
                x = self.downsample(x)
            x = stage(x)
        return self.pool(x).flatten(1)


class ImageClassifier(nn.Module):
    """Normalization, backbone, dropout, head.

    Takes uint8 images (as the loader delivers them) or floats in [0, 1].
    """

    def __init__(
        self,
        backbone: nn.Module,
        num_features: int,
        num_classes: int,
        dropout: float,
        mean: list[float],
        std: list[float],
    ) -> None:
        super().__init__()
        # P9: constants as buffers follow .to() and live in the state_dict.
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float32).view(1, -1, 1, 1))
        self.backbone = backbone
        self.dropout = dropout
        # P10: with no classes the head is switched off and the model returns embeddings.
        self.head: nn.Module = nn.Linear(num_features, num_classes) if num_classes > 0 else nn.Identity()
        self.num_features = num_features

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_floating_point():
            x = x.float().div(255)
        return (x - self.mean) / self.std

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The embedding before the head: (batch, num_features)."""
        return self.backbone(self.normalize(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # P8: stateless dropout from nn.functional must be told whether we train.
        x = F.dropout(self.features(x), self.dropout, training=self.training)
        return self.head(x)


def torchvision_names() -> list[str]:
    return torchvision.models.list_models(module=torchvision.models)


# Families whose torchvision builder needs the image size, or refuses some: what each needs, said once here.
PATCH_SIZE = {"vit_b_16": 16, "vit_b_32": 32, "vit_h_14": 14, "vit_l_16": 16, "vit_l_32": 32}
# The smallest image whose features survive the family's strides and pools (measured for each; others take 16).
MIN_SIZE = {"alexnet": 63, "convnext": 32, "densenet": 29, "inception_v3": 75, "vgg": 32}
MULTIPLE_OF = {"maxvit_t": 224}  # every stage's map must split into 7x7 windows: 1/32 of the image, times 7


def size_problem(name: str, image_size: int) -> str | None:
    """Why ``name`` cannot train on ``image_size`` pixels square; None when it can."""
    step = PATCH_SIZE.get(name) or MULTIPLE_OF.get(name)
    if step and image_size % step:
        nearest = " or ".join(map(str, sorted({max(step, image_size // step * step), (image_size // step + 1) * step})))
        return f"{name} needs data.image_size a multiple of {step}: use {nearest}, not {image_size}"
    smallest = max((size for family, size in MIN_SIZE.items() if name.startswith(family)), default=0)
    if image_size < smallest:
        return f"{name} needs data.image_size of at least {smallest}, not {image_size}"
    return None


def builder_options(name: str, image_size: int) -> dict[str, object]:
    """What torchvision's builder must be told beyond the name: the size, or one output instead of three."""
    if name in PATCH_SIZE:
        return {"image_size": image_size}  # the position embeddings are made for this many patches
    if name in MULTIPLE_OF:
        return {"input_size": (image_size, image_size)}
    if name in ("googlenet", "inception_v3"):
        # Their auxiliary heads return a tuple in training, and their default init warns (and is slow).
        return {"aux_logits": False, "init_weights": True}
    return {}


def torchvision_backbone(name: str, image_size: int = 224) -> tuple[nn.Module, int, str]:
    """A torchvision classifier for ``image_size`` pixels, with its last Linear replaced by ``nn.Identity``.

    Returns the backbone, its embedding size and the replaced layer's name.
    """
    names = torchvision_names()
    if name not in names:
        close = difflib.get_close_matches(name, [*names, "simple_cnn"], n=3)
        raise UserError(f"unknown model.name {name!r}: use simple_cnn or a torchvision classifier ({', '.join(close)})")
    problem = size_problem(name, image_size)
    if problem:
        raise UserError(problem)
    network = torchvision.models.get_model(name, weights=None, **builder_options(name, image_size))  # no download
    if name.startswith("squeezenet"):
        # Its head is a 1x1 convolution before the pooling, not a Linear: pool the features instead.
        conv = network.classifier[1]
        network.classifier = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        return network, conv.in_channels, "classifier.1"
    head_name = [n for n, m in network.named_modules() if isinstance(m, nn.Linear)][-1]
    head = network.get_submodule(head_name)
    parent_name, _, child = head_name.rpartition(".")
    # P10: nn.Identity in the head's place keeps the module tree (and state_dict keys) intact, minus the head.
    setattr(network.get_submodule(parent_name), child, nn.Identity())
    return network, head.in_features, head_name


def build_model(cfg: ModelConfig, num_classes: int, image_size: int = 224) -> ImageClassifier:
    """The configured network for ``image_size`` pixels (ViT and MaxViT are built for one size)."""
    removed_head = ""
    custom = extensions.custom_backbone(cfg.name)
    if custom is not None:
        backbone, num_features = custom
    elif cfg.name == "simple_cnn":
        backbone: nn.Module = SimpleCNN(cfg.widths, cfg.blocks_per_stage, in_channels=len(cfg.mean))
        num_features = backbone.out_features
    else:
        backbone, num_features, removed_head = torchvision_backbone(cfg.name, image_size)
    if cfg.pretrained_weights:
        load_pretrained(backbone, Path(cfg.pretrained_weights), removed_head)
    model = ImageClassifier(backbone, num_features, num_classes, cfg.dropout, cfg.mean, cfg.std)
    if cfg.freeze_backbone:
        # P13: frozen weights get no gradient; training/optim.py hands only trainable ones to the optimizer.
        model.backbone.requires_grad_(False)
    return model


def load_pretrained(backbone: nn.Module, path: Path, removed_head: str = "") -> None:
    """Load a local weights file into the backbone; nothing is downloaded.

    Accepts a plain state_dict (e.g. torchvision's published weights) or a
    checkpoint of this project; the old head's weights are dropped.
    """
    if not path.is_file():
        raise UserError(f"model.pretrained_weights {path} not found: give the path of a local weights file")
    state = weights_of(read_checkpoint(path), extra_prefixes=("backbone.",))
    dropped = {f"{removed_head}.weight", f"{removed_head}.bias"} if removed_head else set()
    state = {k: v for k, v in state.items() if k not in dropped and not k.startswith("head.")}
    state = {k: v for k, v in state.items() if k not in ("mean", "std")}
    missing, unexpected = backbone.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise UserError(
            f"{path} does not fit model.name: {len(missing)} missing keys (e.g. {missing[:2]}), "
            f"{len(unexpected)} unexpected (e.g. {unexpected[:2]}); use weights made for this architecture"
        )
