"""The network: a backbone that makes an embedding, and a linear head.

``simple_cnn`` is written out here; any torchvision classifier can stand in
as the backbone, with its own head replaced by ``nn.Identity``, and any timm
model (``timm_backbone.py``), without its classifier.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torchvision.models import vision_transformer

from ..core.checkpoint import read_checkpoint, shapes, tensor_differences, weights_of, with_metadata
from ..core.config import ModelConfig
from ..core.errors import UserError
from . import extensions, timm_backbone
from .preprocessing import normalization
from .weight_files import TorchHubFile
from .weights import Weights, resolve_weights


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
        freeze_batchnorm: bool = False,
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
        self.freeze_batchnorm = freeze_batchnorm  # model.freeze_batchnorm: see train()

    @property
    def backbone_frozen(self) -> bool:
        """P13: frozen is ``requires_grad`` off for every backbone parameter (``model.freeze_backbone``)."""
        return not any(parameter.requires_grad for parameter in self.backbone.parameters())

    def train(self, mode: bool = True) -> ImageClassifier:
        """A frozen backbone stays in eval mode: its batch-norm statistics stay the weights' (not this data's),
        its dropout and stochastic depth off. DDP, DataParallel and torch.compile pass their ``train()`` here.

        ``freeze_batchnorm`` (fine-tuning's default): the backbone trains, but its batch-norm layers stay in eval
        mode: they normalize with the weights' running statistics and keep them, as they were when the head was
        fitted, instead of the statistics of each batch of a few photos; their scale and shift still train.
        """
        super().train(mode)
        if mode and self.backbone_frozen:
            self.backbone.eval()
        elif mode and self.freeze_batchnorm:
            for module in self.backbone.modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm):  # BatchNorm1d/2d/3d, SyncBatchNorm, timm's
                    module.eval()
        return self

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


def builder_options(name: str, image_size: int, published: bool = False) -> dict[str, object]:
    """What torchvision's builder must be told beyond the name: the size, or one output instead of three."""
    if name in PATCH_SIZE:
        return {"image_size": image_size}  # the position embeddings are made for this many patches
    if name in MULTIPLE_OF:
        return {"input_size": (image_size, image_size)}
    if name in ("googlenet", "inception_v3"):
        # Their auxiliary heads return a tuple in training, and their default init warns (and is slow). Their
        # published weights expect inputs renormalised inside the model, as torchvision builds them for those.
        return {"aux_logits": False, "init_weights": not published, "transform_input": published}
    return {}


def torchvision_backbone(name: str, image_size: int = 224, published: bool = False) -> tuple[nn.Module, int, str]:
    """A torchvision classifier for ``image_size`` pixels, with its last Linear replaced by ``nn.Identity``.

    Returns the backbone, its embedding size and the replaced layer's name.
    ``published``: it will receive torchvision's own weights.
    """
    names = torchvision_names()
    if name not in names:
        close = difflib.get_close_matches(name, [*names, "simple_cnn"], n=3)
        raise UserError(
            f"unknown model.name {name!r}: use simple_cnn, a torchvision classifier ({', '.join(close)}) or timm/<name>"
        )
    problem = size_problem(name, image_size)
    if problem:
        raise UserError(problem)
    options = builder_options(name, image_size, published)
    network = torchvision.models.get_model(name, weights=None, **options)  # weights load after: see load_pretrained
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
    """The configured network for ``image_size`` pixels (ViT and MaxViT are built for one size).

    ``model.pretrained_weights`` are found by ``models/weights.py`` (downloaded where they are missing and a
    network is reachable); a null ``model.mean``/``model.std`` is the weights' own (``preprocessing.py``).
    """
    weights = resolve_weights(cfg)
    path = weights.fetch() if weights is not None else None
    mean, std = normalization(cfg, weights.expected if weights is not None else None)
    backbone, num_features = build_backbone(cfg, image_size, len(mean), path, weights)
    # auto left unresolved (a config not filled from the weights): the weights' statistics, the safe side
    frozen_norm = cfg.freeze_batchnorm if isinstance(cfg.freeze_batchnorm, bool) else True
    model = ImageClassifier(backbone, num_features, num_classes, cfg.dropout, mean, std, frozen_norm)
    if cfg.freeze_backbone:
        # P13: frozen weights get no gradient; training/optim.py hands the optimizer only trainable ones (and those
        # that model.unfreeze_at_epoch trains later), and ImageClassifier.train keeps the backbone in eval mode.
        model.backbone.requires_grad_(False)
    return model


def build_backbone(
    cfg: ModelConfig, image_size: int, channels: int, path: Path | None, weights: Weights | None
) -> tuple[nn.Module, int]:
    """The backbone and its embedding size, with the weights of ``path`` loaded where there are any."""
    custom = extensions.custom_backbone(cfg.name)
    removed_head = ""
    if custom is not None:
        backbone, num_features = custom
    elif cfg.name == "simple_cnn":
        backbone = SimpleCNN(cfg.widths, cfg.blocks_per_stage, in_channels=channels)
        num_features = backbone.out_features
    elif timm_backbone.is_timm(cfg.name):
        name = weights.timm_name if weights is not None else timm_backbone.checked_name(cfg.name)
        own = file_weights(path) if path is not None and path.suffix != ".safetensors" else None
        if own is None or not own[1]:  # timm reads its own files (its checkpoint filters adapt them)
            backbone = timm_backbone.build(name, image_size, channels, path)
            return backbone, timm_backbone.embedding_size(backbone)
        backbone = timm_backbone.build(name, image_size, channels, None)  # a checkpoint of this project: below
        num_features = timm_backbone.embedding_size(backbone)
    else:
        published = isinstance(weights and weights.file, TorchHubFile)  # torchvision's own file, by name
        backbone, num_features, removed_head = torchvision_backbone(cfg.name, image_size, published)
    if path is not None:
        load_pretrained(backbone, path, removed_head, (cfg.name, image_size))
    return backbone, num_features


def file_weights(path: Path) -> tuple[dict[str, torch.Tensor], bool]:
    """A weights file's tensors, and whether it is a checkpoint of this project (then its backbone's alone)."""
    state = weights_of(read_checkpoint(path))
    own = any(key.startswith("backbone.") for key in state)
    if own:
        state = with_metadata({k: v for k, v in state.items() if k.startswith("backbone.")}, state)
        consume_prefix_in_state_dict_if_present(state, "backbone.")  # the metadata's module names too
    return state, own


# Tensors of torchvision's published weights that this project's networks leave out: the auxiliary heads.
LEFT_OUT = ("aux1.", "aux2.", "AuxLogits.")


def load_pretrained(
    backbone: nn.Module, path: Path, removed_head: str = "", network: tuple[str, int] = ("", 0)
) -> None:
    """Load a local weights file into the backbone: a plain state_dict (torchvision's files) or a checkpoint of
    this project; the old head's weights are dropped. ``network``: the torchvision name and image size, for a
    ViT's position embeddings made for another size (resampled, as torchvision's own fine-tuning does)."""
    loaded, _ = file_weights(path)
    dropped = {f"{removed_head}.weight", f"{removed_head}.bias"} if removed_head else set()
    state = with_metadata({k: v for k, v in loaded.items() if k not in dropped and not k.startswith(LEFT_OUT)}, loaded)
    name, image_size = network
    if name in PATCH_SIZE and "encoder.pos_embedding" in state:
        state = with_metadata(vision_transformer.interpolate_embeddings(image_size, PATCH_SIZE[name], state), state)
    # Size mismatches found first: torch would stop at them without saying which tensors are missing or unexpected.
    target = backbone.state_dict()
    reshaped = [k for k in target if k in state and state[k].shape != target[k].shape]
    fitting = with_metadata({k: v for k, v in state.items() if k not in reshaped}, state)
    missing, unexpected = backbone.load_state_dict(fitting, strict=False)  # torch's names: buffers' versions known
    missing = [k for k in missing if k not in reshaped]
    if missing or unexpected or reshaped:
        model = f"model.name {name}" if name else "this model"
        detail = tensor_differences(missing, unexpected, shapes(reshaped, state, target))
        fix = f"use weights of {name}, or set" if name else "set"
        raise UserError(f"{path} does not fit {model}: {detail}; {fix} model.name to the weights' architecture")
