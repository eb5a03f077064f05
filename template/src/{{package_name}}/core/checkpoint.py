"""Checkpoint files: state_dicts and plain values only, written atomically (P7).

The file-level mechanics: atomic writes, ``last.pt`` and the numbered files
``train.keep_last`` keeps, safe reads, wrapper prefixes and the random
generators' state. A checkpoint is a dict that loads with
``torch.load(path, map_location="cpu", weights_only=True)``; which keys a run
checkpoint holds (19 of them, ``format_version`` 1) is written down once, in
``training/run_state.py``, beside the code that saves and restores them.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import random
import re
import shutil
import sys
import zipfile
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

from .distributed import World, gather_objects, unwrap
from .errors import UserError
from .files import fsync_folder, write_atomically

FORMAT_VERSION = 1
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Written atomically (files.py): a crash leaves either the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda handle: torch.save(state, handle))


def link_atomically(source: Path, target: Path) -> None:
    """Make ``target`` name the same finished file as ``source``, atomically.

    A hard link costs no copy; where links are not supported, a copy is made.
    Checkpoint files are never changed in place, so sharing one is safe.
    """
    tmp = target.with_name(f".{target.name}.{os.getpid()}.link.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        with source.open("rb") as original, tmp.open("wb") as copy:
            shutil.copyfileobj(original, copy)
            copy.flush()
            os.fsync(copy.fileno())
    os.replace(tmp, target)
    fsync_folder(target.parent)


def history(out_dir: Path) -> list[Path]:
    """Older checkpoints kept by ``train.keep_last``, oldest first."""
    return sorted(out_dir.glob("ckpt-e*-s*.pt"))


def save_run_checkpoint(state: dict[str, Any], out_dir: Path, keep_last: int = 0) -> Path:
    """Write ``out_dir/last.pt``; with ``keep_last`` > 0 keep that many older ones too.

    The new file is complete on disk before any older one is removed, so a
    run always has at least one intact checkpoint.
    """
    last = out_dir / "last.pt"
    if keep_last <= 0:
        save_checkpoint(state, last)
        return last
    numbered = out_dir / f"ckpt-e{state['epoch']:04d}-s{state['global_step']:08d}.pt"
    save_checkpoint(state, numbered)
    link_atomically(numbered, last)
    for old in history(out_dir)[: -(keep_last + 1)]:
        old.unlink()
    return last


def not_a_checkpoint(path: Path) -> str | None:
    """What ``path`` is when it is something else a user may pass for a checkpoint: a run folder or an export.

    Checked before ``torch.load``, whose own errors for these name another
    problem ("not found", "holds Python objects", "corrupt").
    """
    if path.is_dir():
        inside = [path / name for name in ("best.pt", "last.pt") if (path / name).is_file()]
        found = (
            f"pass a file in it, e.g. {' or '.join(map(str, inside))}" if inside else "it holds no best.pt or last.pt"
        )
        return f"checkpoint {path} is a folder, not a checkpoint file: {found}"
    with path.open("rb") as handle:
        head = handle.read(4)
    if path.suffix.lower() == ".onnx" or head[:1] == b"\x08":  # an ONNX ModelProto starts with field 1, ir_version
        return (
            f"checkpoint {path} is an ONNX export, not a checkpoint: run it with onnxruntime (docs/export.md), "
            "or pass the .pt file it was exported from"
        )
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            if any(name.endswith("archive_format") for name in archive.namelist()):  # torch.export.save's layout
                return (
                    f"checkpoint {path} is a torch.export program (.pt2), not a checkpoint: load it with "
                    "torch.export.load (docs/export.md), or pass the .pt file it was exported from"
                )
    return None


def refused_objects(exc: Exception) -> str:
    """The Python object PyTorch refused, named whole (its message is a paragraph about weights_only)."""
    found = re.search(r"\bGLOBAL ([\w.]+)", str(exc))  # "Unsupported global: GLOBAL x.Y" or "unsupported GLOBAL x.y"
    if found:
        return f"a {found.group(1)}"
    last = [line.strip() for line in str(exc).splitlines() if "WeightsUnpickler error" in line]
    return last[0].split(":", 1)[1].strip().rstrip(".") if last else exc.__class__.__name__


def read_checkpoint(path: str | Path, mapped: bool = False) -> dict[str, Any]:
    """Load on the CPU, refusing anything but tensors and plain types; ``mapped``: its tensors stay on disk, mapped
    into memory (``torch.load``'s mmap), for a look at its plain entries."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"checkpoint {path} not found: pass the path of a .pt file written by train")
    other = not_a_checkpoint(path)
    if other:
        raise UserError(other)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mapped)
    except pickle.UnpicklingError as exc:
        raise UserError(
            f"checkpoint {path} was refused: it holds Python objects, not only weights ({refused_objects(exc)}); "
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


def weights_of(state: dict[str, Any], extra_prefixes: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """The model's tensors from a checkpoint or a bare state_dict, without wrapper prefixes (P7).

    DataParallel and DDP save ``module.``, ``torch.compile`` saves ``_orig_mod.``.
    """
    source = state["model"] if isinstance(state.get("model"), dict) else state
    weights = with_metadata(source, source)
    for prefix in (*WRAPPER_PREFIXES, *extra_prefixes):
        consume_prefix_in_state_dict_if_present(weights, prefix)  # the metadata's module names too
    return weights


def with_metadata(tensors: dict[str, Any], source: Any) -> OrderedDict[str, Any]:
    """``tensors`` as a state_dict carrying (a copy of) ``source``'s ``_metadata``, as ``state_dict()`` makes them:
    the module versions some loaders need (torchvision's MNASNet refuses a state without them)."""
    state = OrderedDict(tensors)
    metadata = getattr(source, "_metadata", None)
    if metadata is not None:
        state._metadata = OrderedDict(metadata)  # type: ignore[attr-defined]
    return state


def load_model_state(
    model: nn.Module,
    state: dict[str, torch.Tensor],
    source: str | Path = "checkpoint",
    models: tuple[Any, Any] | None = None,
) -> None:
    """Load into the plain model, accepting a state_dict saved from a wrapper.

    ``models``: the checkpoint's ``model`` config section and this run's, so
    that a mismatch names the two models instead of listing tensor names.
    """
    state = weights_of(state)
    target = unwrap(model).state_dict()
    missing = sorted(set(target) - set(state))
    unexpected = sorted(set(state) - set(target))
    reshaped = [k for k in target if k in state and state[k].shape != target[k].shape]
    if missing or unexpected or reshaped:
        differences = model_differences(*models) if models else ""
        detail = differences or tensor_differences(missing, unexpected, shapes(reshaped, state, target), "checkpoint")
        fix = "use the model settings it was trained with" + (" (--set KEY=VALUE)" if differences else "")
        raise UserError(f"{source} does not fit this model ({detail}): {fix}")
    unwrap(model).load_state_dict(state)


def model_differences(saved: Any, ours: Any) -> str:
    """The model keys whose values differ, checkpoint's against this run's: model.name first."""
    saved, ours = (dataclasses.asdict(m) if dataclasses.is_dataclass(m) else dict(m or {}) for m in (saved, ours))
    keys = sorted((k for k in set(saved) & set(ours) if saved[k] != ours[k]), key=lambda k: (k != "name", k))
    return "; ".join(f"model.{k} is {saved[k]!r} in the checkpoint, {ours[k]!r} in the config" for k in keys)


def tensor_differences(
    missing: list[str], unexpected: list[str], reshaped: list[tuple[str, list[int], list[int]]], source: str = "file"
) -> str:
    """What keeps ``source``'s tensors from a model, in one readable line: a size mismatch first (``reshaped``:
    name, its shape in the source, in the model), in torch's words, as it is what another architecture's weights
    usually show; then counts and the first few names of the tensors either side lacks."""

    def few(names: list[str]) -> str:
        return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")

    parts = []
    if reshaped:
        name, theirs, ours = reshaped[0]
        more = f" and {len(reshaped) - 1} more" if len(reshaped) > 1 else ""
        parts.append(f"size mismatch for {name} ({source} {theirs}, model {ours}){more}")
    if missing:
        parts.append(f"{len(missing)} of the model's tensors missing from the {source}: {few(missing)}")
    if unexpected:
        parts.append(f"{len(unexpected)} tensor{'s' if len(unexpected) > 1 else ''} the model lacks: {few(unexpected)}")
    return "; ".join(parts)


def shapes(names: list[str], state: dict[str, torch.Tensor], target: dict[str, torch.Tensor]) -> list[Any]:
    """(name, its shape in ``state``, in ``target``) for each name: ``tensor_differences``' size mismatches."""
    return [(name, list(state[name].shape), list(target[name].shape)) for name in names]


def rng_state(
    cuda_devices: Sequence[int] = (),
    cuda_by_rank: list[list[torch.Tensor]] | None = None,
    torch_by_rank: list[torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Every random generator the run draws from, as tensors and plain values.

    Of the GPUs, those the training uses (the training device, and under
    DataParallel each replica's GPU, whose dropout draws from its own
    generator): the file then also resumes on a machine with another number
    of GPUs. Under DDP each rank draws dropout from generators of its own
    (``seeding.seed_process``): ``cuda_by_rank`` (``cuda_rng_by_rank``) and
    ``torch_by_rank`` (``torch_rng_by_rank``, the CPU's) hold every rank's, at its rank.
    """
    numpy_state = np.random.get_state()  # noqa: NPY002 - the global generator user code may draw from
    return {
        "torch": torch.get_rng_state(),
        "torch_by_rank": torch_by_rank,
        "cuda": {index: torch.cuda.get_rng_state(index) for index in cuda_devices} or None,
        "cuda_by_rank": cuda_by_rank,
        "numpy": [numpy_state[0], torch.from_numpy(numpy_state[1].copy()), *numpy_state[2:]],
        "python": random.getstate(),
    }


def cuda_rng_by_rank(cuda_devices: Sequence[int], world: World) -> list[list[torch.Tensor]] | None:
    """Under DDP on GPUs, every rank's CUDA generators (its GPUs' order), in rank order; else None.

    A collective: every process calls it at the same point, before the main
    process alone writes the checkpoint.
    """
    if not world.distributed or not cuda_devices:
        return None
    return gather_objects([torch.cuda.get_rng_state(index) for index in cuda_devices], world)


def torch_rng_by_rank(world: World) -> list[torch.Tensor] | None:
    """Under DDP, every rank's CPU generator, in rank order; else None. A collective, as ``cuda_rng_by_rank``."""
    if not world.distributed:
        return None
    return gather_objects(torch.get_rng_state(), world)


def set_rng_state(state: dict[str, Any], cuda_devices: Sequence[int] = (), rank: int | None = None) -> None:
    """Restore the generators ``rng_state`` saved; a GPU this run does not use keeps its own.

    ``rank`` (under DDP) takes this rank's own generators from
    ``torch_by_rank`` and ``cuda_by_rank``, matched by position: rank 1
    trained on cuda:1 on one machine resumes on cuda:0 of a second. Files
    without them (written before, or by one process) restore the GPUs they
    name, and rank 0's CPU generator on rank 0 alone: another rank keeps the
    stream ``seed_process`` gave it, not a copy of rank 0's.
    """
    cpu_by_rank = state.get("torch_by_rank")
    if rank is None or (rank == 0 and cpu_by_rank is None):
        torch.set_rng_state(state["torch"])
    elif cpu_by_rank is not None and rank < len(cpu_by_rank):
        torch.set_rng_state(cpu_by_rank[rank])
    by_rank = state.get("cuda_by_rank")
    if rank is not None and by_rank is not None and rank < len(by_rank):
        saved = dict(zip(cuda_devices, by_rank[rank], strict=False))  # this rank's GPUs, in the order it saved them
    else:
        saved = state.get("cuda")
    if isinstance(saved, torch.Tensor):  # files of template 1.x: the training device's generator alone
        saved = {cuda_devices[0]: saved} if cuda_devices else {}
    for index, generator in (saved or {}).items():
        if index in cuda_devices:
            torch.cuda.set_rng_state(generator, index)
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy(), *rest))  # noqa: NPY002
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def find_resume_state(
    resume: str | None, out_dir: str | Path, mapped: bool = False
) -> tuple[Path, dict[str, Any]] | None:
    """The checkpoint to continue from, read; None for a fresh start.

    ``auto``: ``out_dir/last.pt``, or, if that is damaged, the newest intact
    checkpoint kept by ``train.keep_last``; a fresh start when there is none.
    A path: that file, which must be intact. ``mapped``: read as
    ``read_checkpoint`` maps it, and without the warnings, for the data's
    set-up to learn which decoder that file's run used before the restore
    reads the same file (``data/loading/placement.py``, ``recorded_decoder``).
    """
    if not resume:
        return None
    if resume != "auto":
        path = Path(resume)
        if not path.exists():  # a folder: read_checkpoint names the checkpoints inside it
            raise UserError(f"--resume {resume}: no such checkpoint; use --resume auto or the path of a .pt file")
        return path, read_checkpoint(path, mapped)
    out_dir = Path(out_dir)
    candidates = [p for p in [out_dir / "last.pt", *reversed(history(out_dir))] if p.is_file()]
    for path in candidates:
        try:
            return path, read_checkpoint(path, mapped)
        except UserError as exc:
            if not mapped:  # said once, by the restore
                print(f"warning: {exc}; trying an older checkpoint", file=sys.stderr)
    if candidates:
        raise UserError(
            f"no intact checkpoint in {out_dir}: set train.keep_last to keep older ones, "
            "or start a new run in another train.out_dir"
        )
    return None


def load_matching(model: nn.Module, path: str | Path, name: str = "") -> str:
    """Fine-tuning start: copy the tensors whose names and shapes match; report the rest.

    Meant for ``model.init_from``, where another class list or a changed head
    is expected; resuming instead demands an exact fit. ``name``: this run's
    model.name, for the message when nothing fits.
    """
    checkpoint = read_checkpoint(path)
    weights = weights_of(checkpoint)
    target = unwrap(model).state_dict()
    matching = with_metadata({k: v for k, v in weights.items() if k in target and v.shape == target[k].shape}, weights)
    if not matching:
        saved = (checkpoint.get("config") or {}).get("model", {}).get("name")  # a bare state_dict has no config
        trained = f" (it was trained as model.name {saved})" if saved else ""
        raise UserError(
            f"model.init_from {path}: no tensor fits model.name {name or 'of this config'}{trained}: "
            "set model.name to the checkpoint's, or start from a checkpoint of this model.name"
        )
    unwrap(model).load_state_dict(matching, strict=False)
    skipped = sorted(set(target) - set(matching))
    shown = ", ".join(skipped[:4]) + (", ..." if len(skipped) > 4 else "")
    return f"initialized {len(matching)} of {len(target)} tensors from {path}" + (
        f"; kept fresh: {shown}" if skipped else ""
    )


def load_scaler_state(scaler: torch.amp.GradScaler, state: dict[str, Any]) -> str | None:
    """Resume the fp16 gradient scaler; a checkpoint written without fp16 has none, and it starts fresh.

    Returns a note for the user in that case (GradScaler itself would stop with
    "The source state dict is empty").
    """
    if scaler.is_enabled() and not state:
        return "the checkpoint was trained without fp16: its gradient scaler starts fresh"
    scaler.load_state_dict(state)
    return None
