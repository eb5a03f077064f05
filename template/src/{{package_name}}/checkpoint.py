"""Checkpoints: state_dicts and plain values only, written atomically (P7).

A checkpoint is a dict that loads with ``torch.load(path, map_location="cpu",
weights_only=True)``: ``model`` (unwrapped, unprefixed), ``optimizer``,
``scheduler``, ``scaler``, ``epoch``, ``global_step``, ``best_metric``,
``rng``, ``classes``, ``config`` and ``format_version``.
"""

from __future__ import annotations

import os
import pickle
import random
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

from .distributed import unwrap
from .errors import UserError

FORMAT_VERSION = 1
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Write to a temporary file in the same folder, fsync, then rename.

    ``os.replace`` is atomic, so a crash leaves either the old file or the new
    one, never half of one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load on the CPU, refusing anything but tensors and plain types."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint {path} not found: pass the path of a .pt file written by train")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise UserError(
            f"checkpoint {path} was refused: it holds Python objects, not only weights ({first[:120]}); "
            "load only checkpoints you trust, re-saved as state_dicts"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as exc:
        reason = exc.__class__.__name__
        raise UserError(f"checkpoint {path} is truncated or corrupt ({reason}): use another file") from None
    if not isinstance(state, dict):
        raise UserError(f"checkpoint {path} holds a {type(state).__name__}, not a dict of state")
    version = state.get("format_version", FORMAT_VERSION)
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise UserError(
            f"checkpoint {path} has format {version}, newer than this code reads ({FORMAT_VERSION}): "
            "update the project with `copier update`"
        )
    return state


def model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The unwrapped model's state_dict: no ``module.`` or ``_orig_mod.`` prefix."""
    return unwrap(model).state_dict()


def load_model_state(model: nn.Module, state: dict[str, torch.Tensor], source: str | Path = "checkpoint") -> None:
    """Load into the plain model, accepting a state_dict saved from a wrapper."""
    state = dict(state)
    for prefix in WRAPPER_PREFIXES:
        consume_prefix_in_state_dict_if_present(state, prefix)
    try:
        unwrap(model).load_state_dict(state)
    except RuntimeError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = "; ".join(lines[1:3])[:300]
        raise UserError(
            f"{source} does not fit this model ({detail}): use the same model settings it was trained with"
        ) from None


def rng_state() -> dict[str, Any]:
    """Every random generator the run draws from, as tensors and plain values."""
    numpy_state = np.random.get_state()  # noqa: NPY002 - the global generator user code may draw from
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [numpy_state[0], torch.from_numpy(numpy_state[1].copy()), *numpy_state[2:]],
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy(), *rest))  # noqa: NPY002
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def resume_path(resume: str | None, out_dir: str | Path) -> Path | None:
    """``auto``: ``out_dir/last.pt`` when it exists, else a fresh start."""
    if not resume:
        return None
    if resume == "auto":
        last = Path(out_dir) / "last.pt"
        return last if last.is_file() else None
    path = Path(resume)
    if not path.is_file():
        raise UserError(f"--resume {resume}: no such checkpoint; use --resume auto or the path of a .pt file")
    return path
