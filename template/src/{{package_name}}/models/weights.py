"""What ``model.pretrained_weights`` names: published weights by name, or a local file.

``resolve_weights`` answers without reading data or downloading anything,
so that a check of the whole config can call it before a run starts:

- a name, as torchvision spells it for ``model.name`` (``DEFAULT``,
  ``IMAGENET1K_V1``, or ``ResNet50_Weights.IMAGENET1K_V2``): its weights
  enum says the file (in torch.hub's cache, ``$TORCH_HOME/hub/checkpoints``)
  and the preprocessing it was trained with;
- with ``model.name: timm/<name>``: ``DEFAULT`` (the tag in ``<name>``, or
  timm's default one) or a tag (``fb_in22k_ft_in1k``): timm's
  ``pretrained_cfg`` says the file (in the Hugging Face cache) and the preprocessing;
- a path (it exists, or has a folder or a weights file's suffix): the file
  as it is; a timm model's file keeps its name's preprocessing.

``Weights.fetch`` then finds the file, downloading it where a network is
reachable (``weight_files.py``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torchvision

from ..core.config import ModelConfig
from ..core.errors import UserError
from . import timm_backbone
from .preprocessing import Preprocessing, timm_preprocessing, torchvision_preprocessing
from .weight_files import HubFile, LocalFile, TorchHubFile, WeightFile, short_digest

FILE_SUFFIXES = (".pt", ".pth", ".pth.tar", ".bin", ".safetensors", ".ckpt", ".tar")
DEFAULT = "DEFAULT"


@dataclasses.dataclass(frozen=True)
class Weights:
    """Resolved ``model.pretrained_weights``: how to name them, where their file is, what preprocessing they expect."""

    setting: str  # the config's value
    label: str  # e.g. ResNet18_Weights.IMAGENET1K_V1, timm/resnet18.a1_in1k, or the path
    file: WeightFile
    expected: Preprocessing | None  # None: a local file without metadata
    timm_name: str | None = None  # the timm model with its tag, for a timm backbone

    @property
    def what(self) -> str:
        return f"model.pretrained_weights {self.setting}"

    def fetch(self) -> Path:
        """The local file; downloaded first where it is missing and a network is reachable, else one line."""
        return self.file.fetch(self.what)

    def described(self, path: Path) -> str:
        """``label (file, sha256 digest)``: which weights, and which bytes, a run starts from."""
        named = "" if self.label == str(path) else f" ({path.name}"
        return f"{self.label}{named}{', ' if named else ' ('}sha256 {short_digest(path)})"


def is_path(value: str) -> bool:
    """A local file, not a name: it exists, or it names a folder or ends like a weights file."""
    path = Path(value).expanduser()
    return path.exists() or "/" in value or "\\" in value or value.lower().endswith(FILE_SUFFIXES)


def resolve_weights(cfg: ModelConfig) -> Weights | None:
    """``cfg.pretrained_weights`` resolved for ``cfg.name``; None without any. Unknown names: one line."""
    value = cfg.pretrained_weights
    if not value:
        return None
    if timm_backbone.is_timm(cfg.name):
        return timm_weights(cfg.name, value)
    if is_path(value):
        return Weights(value, value, LocalFile(Path(value).expanduser()), None)
    member = torchvision_member(cfg.name, value)
    label = f"{type(member).__name__}.{member.name}"
    return Weights(value, label, TorchHubFile(member.url), torchvision_preprocessing(member))


def torchvision_member(model_name: str, value: str) -> torchvision.models.WeightsEnum:
    """The member of ``model_name``'s weights enum that ``value`` names, as torchvision spells it."""
    try:
        enum = torchvision.models.get_model_weights(model_name)
    except (ValueError, KeyError):  # simple_cnn, an extension's backbone, a misspelt name: no weights enum
        raise UserError(
            f"model.pretrained_weights {value} names published weights, but model.name {model_name} has none: "
            "use a torchvision classifier or timm/<name>, or give the path of a local weights file"
        ) from None
    prefix, _, name = value.rpartition(".")
    if prefix and prefix != enum.__name__:
        raise UserError(f"model.pretrained_weights {value} are not {model_name}'s ({enum.__name__}): use one of theirs")
    if name not in enum.__members__:
        raise UserError(
            f"model.pretrained_weights {value} is neither a file nor {model_name}'s weights: "
            f"use {', '.join(enum.__members__)}, or the path of a local file"
        )
    return enum[name]


def timm_weights(model_name: str, value: str) -> Weights:
    """timm's weights of ``timm/<name>``: ``DEFAULT``, a tag, or a local file with the name's preprocessing."""
    name = timm_backbone.checked_name(model_name)
    architecture, _, tag = name.partition(".")
    if not is_path(value) and value != DEFAULT:
        if tag and tag != value:
            raise UserError(f"model.pretrained_weights {value} contradicts model.name {model_name}: name one tag")
        name = timm_backbone.checked_name(f"{timm_backbone.PREFIX}{architecture}.{value}")
    cfg = timm_backbone.pretrained_cfg(name)
    name = f"{architecture}.{cfg.get('tag') or tag}".rstrip(".")  # the tag timm picks when the name has none
    expected = timm_preprocessing(cfg)
    if is_path(value):
        return Weights(value, value, LocalFile(Path(value).expanduser()), expected, name)
    return Weights(value, f"{timm_backbone.PREFIX}{name}", timm_file(cfg), expected, name)


def timm_file(cfg: dict) -> WeightFile:
    """Where timm would load the weights from: its Hugging Face repository, else its URL (torch.hub's cache)."""
    hub_id = cfg.get("hf_hub_id")
    if not hub_id:
        if not cfg.get("url"):
            raise UserError(f"timm has no file for {cfg.get('architecture')}'s weights: use a local file")
        return TorchHubFile(cfg["url"])
    repo, _, revision = hub_id.partition("@")
    named = cfg.get("hf_hub_filename")
    # timm looks for a safetensors file first (timm.models._hub.load_state_dict_from_hf): so do we.
    names = (named.replace("pytorch_model.bin", "model.safetensors"), named) if named else ()
    names = names or ("model.safetensors", "pytorch_model.bin")
    return HubFile(repo, tuple(dict.fromkeys(names)), revision or None)
