"""The preprocessing that published weights expect, and the four config keys that carry it.

Weights trained on ImageNet saw images normalised with given statistics,
resized and center-cropped at a given ratio with a given interpolation;
fine-tuned with other values they start worse, silently. So ``model.mean``,
``model.std``, ``data.eval_crop_ratio`` and ``data.interpolation`` are null
by default: ``with_preprocessing`` fills each null key from the weights'
metadata (torchvision's ``weights.transforms()``, timm's ``pretrained_cfg``),
or from ``PLAIN_PREPROCESSING`` without published weights. A key the config
sets is kept; where it differs from the weights', one warning names both.
The filled config goes into every checkpoint, so ``evaluate``, ``predict``
and ``export`` use what training used.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..core.config import PLAIN_PREPROCESSING, Config, ModelConfig, validate

KEYS = {"mean": "model.mean", "std": "model.std", "eval_crop_ratio": "data.eval_crop_ratio"}
KEYS["interpolation"] = "data.interpolation"


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """What a set of weights was trained and evaluated with."""

    mean: list[float]
    std: list[float]
    eval_crop_ratio: float  # the crop's side over the evaluation resize's shorter side
    interpolation: str  # a torchvision InterpolationMode value: bilinear, bicubic, nearest
    trained_size: int | None = None  # the crop the weights were evaluated at, for the start line

    def values(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in KEYS}


def torchvision_preprocessing(weights: Any) -> Preprocessing:
    """From a torchvision weights enum member: its ``transforms()`` is the evaluation preset they were measured with."""
    preset = weights.transforms()
    crop, resize = preset.crop_size[0], preset.resize_size[0]
    return Preprocessing(list(preset.mean), list(preset.std), crop / resize, preset.interpolation.value, crop)


def timm_preprocessing(pretrained_cfg: dict[str, Any]) -> Preprocessing:
    """From timm's ``pretrained_cfg`` through its own ``resolve_data_config`` (defaults for what a cfg leaves out)."""
    from timm.data import resolve_data_config

    data = resolve_data_config(pretrained_cfg=pretrained_cfg)
    size = data["input_size"][-1]
    return Preprocessing(list(data["mean"]), list(data["std"]), data["crop_pct"], data["interpolation"], size)


def same(a: Any, b: Any) -> bool:
    """Equal values, floats to 6 digits (a config written by hand rounds ImageNet's statistics)."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float | int) and isinstance(b, float | int):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
    return a == b


@dataclasses.dataclass(frozen=True)
class Filled:
    """``with_preprocessing``'s result: the config, the keys taken from the weights, and the keys that disagree."""

    config: Config
    taken: list[str]  # dotted keys filled from the weights
    differing: list[tuple[str, Any, Any]]  # (dotted key, the config's value, the weights')

    def warning(self, label: str) -> str | None:
        """One line naming every key the config sets against the weights, with both values."""
        if not self.differing:
            return None
        pairs = "; ".join(f"{key} {mine} (the weights': {theirs})" for key, mine, theirs in self.differing)
        return f"the config sets {pairs}, not as {label} were trained: null takes the weights' value"


def with_preprocessing(cfg: Config, expected: Preprocessing | None) -> Filled:
    """``cfg`` with every null preprocessing key filled from ``expected`` (None: plain values)."""
    sources = {"model.mean": cfg.model, "model.std": cfg.model, "data.eval_crop_ratio": cfg.data}
    sources["data.interpolation"] = cfg.data
    theirs = expected.values() if expected is not None else PLAIN_PREPROCESSING
    model, data, taken, differing = {}, {}, [], []
    for key, dotted in KEYS.items():
        mine = getattr(sources[dotted], key)
        if mine is None:
            (model if dotted.startswith("model.") else data)[key] = theirs[key]
            taken += [dotted] if expected is not None else []
        elif expected is not None and not same(mine, theirs[key]):
            differing.append((dotted, mine, theirs[key]))
    if cfg.model.freeze_batchnorm == "auto":
        model["freeze_batchnorm"] = frozen_batchnorm(cfg.data.image_size, expected)
    filled = dataclasses.replace(
        cfg, model=dataclasses.replace(cfg.model, **model), data=dataclasses.replace(cfg.data, **data)
    )
    validate(filled)  # a config's mean of one value against the weights' std of three: one line
    return Filled(filled, taken, differing)


def frozen_batchnorm(image_size: int, expected: Preprocessing | None) -> bool:
    """``model.freeze_batchnorm: auto`` with pretrained weights: the weights' statistics below the size they were
    trained at (or where that size is unknown), this data's at that size or above (core/config.py's FINE_TUNING
    says what was measured)."""
    trained = expected.trained_size if expected is not None else None
    return trained is None or image_size < trained


def normalization(cfg: ModelConfig, expected: Preprocessing | None) -> tuple[list[float], list[float]]:
    """The mean and std a model is built with: the config's, else the weights', else ImageNet's."""
    plain = expected.values() if expected is not None else PLAIN_PREPROCESSING
    return cfg.mean or plain["mean"], cfg.std or plain["std"]


def with_trained_preprocessing(cfg: Config, saved: dict[str, Any]) -> Config:
    """For a checkpoint's commands: null keys take the values the checkpoint's run was filled with.

    A checkpoint written before ``data.interpolation`` existed was evaluated bilinear: what is still null
    then takes the plain values. Neither the weights' file nor their library is needed.
    """
    sections = {"model": dict(saved.get("model") or {}), "data": dict(saved.get("data") or {})}
    model = {k: sections["model"].get(k) for k in ("mean", "std") if getattr(cfg.model, k) is None}
    data = {k: sections["data"].get(k) for k in ("eval_crop_ratio", "interpolation") if getattr(cfg.data, k) is None}
    known = dataclasses.replace(
        cfg,
        model=dataclasses.replace(cfg.model, **{k: v for k, v in model.items() if v is not None}),
        data=dataclasses.replace(cfg.data, **{k: v for k, v in data.items() if v is not None}),
    )
    return with_preprocessing(known, None).config
