"""Any timm model as the backbone: ``model.name: timm/<name>`` (the ``timm`` extra).

timm builds the network and loads its published weights itself (its
checkpoint filters resample a ViT's position embeddings for another image
size, adapt the first convolution to other channel counts); this project's
head replaces timm's classifier (``reset_classifier(0)``: the backbone returns
the pooled embedding). ``<name>`` is timm's: an architecture (``convnext_tiny``)
or one of its pretrained tags (``convnext_tiny.fb_in22k_ft_in1k``).
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

from torch import nn

from ..core.checkpoint import tensor_differences
from ..core.errors import UserError
from ..core.optional import require

PREFIX = "timm/"


def is_timm(name: str) -> bool:
    return name.startswith(PREFIX)


def timm_module() -> ModuleType:
    return require("timm", "timm", f"model.name {PREFIX}<name>")


def checked_name(model_name: str) -> str:
    """timm's name from ``timm/<name>``, known to timm's registry (the nearest names otherwise)."""
    timm, name = timm_module(), model_name.removeprefix(PREFIX)
    architecture, _, tag = name.partition(".")
    if not timm.is_model(architecture):
        close = difflib.get_close_matches(architecture, timm.list_models(), n=3)
        hint = f" (did you mean {', '.join(PREFIX + c for c in close)}?)" if close else ""
        raise UserError(f"unknown model.name {model_name}: timm {timm.__version__} has no {architecture!r}{hint}")
    if tag and name not in timm.list_pretrained(f"{architecture}.*"):
        tags = [n.partition(".")[2] for n in timm.list_pretrained(f"{architecture}.*")]
        raise UserError(
            f"unknown model.name {model_name}: timm's {architecture} has no weights {tag!r}; "
            f"its tags: {', '.join(tags) or 'none'}"
        )
    return name


def pretrained_cfg(name: str) -> dict[str, Any]:
    """timm's metadata of a model's published weights (its default tag's without one), as a dict."""
    from timm.models import get_pretrained_cfg

    found = get_pretrained_cfg(name)
    if found is None:
        raise UserError(f"model.name {PREFIX}{name} has no published weights in timm: use a local file")
    return found.to_dict()


def build(name: str, image_size: int, in_chans: int, weights: Path | None) -> nn.Module:
    """The network for ``image_size`` pixels, weights from ``weights`` (a local file) or none, without a classifier.

    With weights it is built with the classifier they were trained with, so that timm loads them strictly (a file
    of another architecture is refused, not half loaded), then the classifier is removed.
    """
    timm = timm_module()
    options: dict[str, Any] = {"in_chans": in_chans, "num_classes": 0}
    if weights is not None:
        options.update(
            pretrained=True,
            num_classes=pretrained_cfg(name).get("num_classes", 1000),
            pretrained_cfg_overlay={"file": str(weights)},  # timm's local-file override: it downloads nothing
        )
    try:
        network = sized(timm, name, image_size, options)
    except RuntimeError as exc:  # load_state_dict: missing, unexpected or reshaped tensors
        reason = load_error(str(exc)) or str(exc).strip().splitlines()[0]
        raise UserError(f"{weights} does not fit model.name {PREFIX}{name}: {reason}; use its own weights") from None
    network.reset_classifier(0)  # this project's head follows (models/classifier.py)
    return network


# torch's load_state_dict error: a line per kind of problem, the tensors' names quoted, shapes as torch.Size([...]).
KEYS = re.compile(r"^\s*(Missing|Unexpected) key\(s\) in state_dict: (.*)$", re.MULTILINE)
RESHAPED = re.compile(
    r"size mismatch for (\S+): copying a param with shape torch\.Size\((\[[\d, ]*\])\) from checkpoint, "
    r"the shape in current model is torch\.Size\((\[[\d, ]*\])\)"
)


def load_error(message: str) -> str:
    """torch's error when timm loads a file strictly, in the words of the project's other weights (a size mismatch
    with both shapes, then what either side lacks: core/checkpoint.py); "" where it is not such an error."""
    keys = {kind: re.findall(r'"([^"]+)"', names) for kind, names in KEYS.findall(message)}
    reshaped = [(name, json.loads(file), json.loads(model)) for name, file, model in RESHAPED.findall(message)]
    return tensor_differences(keys.get("Missing", []), keys.get("Unexpected", []), reshaped)


def sized(timm: ModuleType, name: str, image_size: int, options: dict[str, Any]) -> nn.Module:
    """Transformers are built for one image size (``img_size``); convolutional networks take any and refuse it."""
    try:
        return timm.create_model(name, img_size=image_size, **options)
    except TypeError as exc:
        if "img_size" not in str(exc):
            raise
    return timm.create_model(name, **options)


def embedding_size(network: nn.Module) -> int:
    """What the network returns without a classifier: after timm's pre-logits layer where it has one."""
    return getattr(network, "head_hidden_size", None) or network.num_features
