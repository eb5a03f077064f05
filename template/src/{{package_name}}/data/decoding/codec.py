"""TorchCodec (the ``decode`` extra): loaded once, in one place; where it is installed and cannot decode, one line.

Both decoders used here come from this one import: ``decode_image`` for the
decode contract on the CPU (``decode.py``: JPEG about twice Pillow's speed)
and ``decode_jpeg`` for nvJPEG on a GPU (``gpu_decode.py``). A TorchCodec that
is installed but does not load (a build for another torch or another CUDA,
whose library then misses symbols; before 0.16, FFmpeg's libraries missing)
left Pillow decoding without a word; ``unusable`` is the clause the ``data:``
start line then ends with (``placement.choose``), naming why and the fix.

Which TorchCodec goes with which torch: the image decoders came with 0.16,
built against torch's stable ABI as of torch 2.11, so 0.16 and later load with
torch 2.11 and every later release (the CUDA build from PyTorch's index for
torch's CUDA where pip's default build is for another). Each earlier release
was built for one torch minor and has no image decoder: with torch 2.10 or
older, Pillow decodes and nvJPEG cannot run.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import Any

import torch

from ...core import libraries

IMAGE_DECODERS = "0.16"  # the first TorchCodec with decode_image and decode_jpeg (the decode extra's floor)
IMAGE_DECODERS_TORCH = (2, 11)  # the torch its stable-ABI builds target: they load with it and every later one
LOAD_ERRORS = (ImportError, OSError, RuntimeError)  # what the import of a TorchCodec that cannot load raises


def load_torchcodec() -> ModuleType | None:
    """``torchcodec.decoders``, imported (its native libraries loaded with it): the one place TorchCodec is
    loaded. None where it is not installed; raises what its import raises (the tests make it fail here)."""
    if importlib.util.find_spec("torchcodec") is None:
        return None
    return importlib.import_module("torchcodec.decoders")


@functools.cache
def loaded() -> tuple[ModuleType | None, str | None]:
    """(TorchCodec's decoders, None) where it loads with its image decoders; (None, why not, in words) where it is
    installed and cannot decode images here; (None, None) where it is not installed (Pillow decodes, unsaid)."""
    found = libraries.installed()
    mismatch = libraries.torchcodec_problem(found, builds=False)
    if mismatch is not None:  # not imported: a build for another torch release may not fail cleanly at import
        return None, mismatch.replace(f"TorchCodec {found.torchcodec} ", "it ", 1)
    try:
        decoders = load_torchcodec()
    except LOAD_ERRORS as error:
        first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
        return None, f"it does not load with torch {torch.__version__} ({first})"
    if decoders is not None and not all(hasattr(decoders, name) for name in ("decode_image", "decode_jpeg")):
        return None, f"it has no image decoder (decode_image and decode_jpeg came with TorchCodec {IMAGE_DECODERS})"
    return decoders, None


def decoder(name: str) -> Callable[..., Any] | None:
    """One of TorchCodec's decoders (``decode_image``, ``decode_jpeg``), or None where it cannot decode here."""
    decoders, _ = loaded()
    return getattr(decoders, name) if decoders is not None else None


def installed() -> str:
    """``TorchCodec X.Y.Z`` as installed (the version pip knows), for the lines that name it."""
    try:
        return f"TorchCodec {version('torchcodec')}"
    except PackageNotFoundError:
        return "TorchCodec"


def torch_release() -> tuple[int, int]:
    """(major, minor) of this torch: ``2.14.1+cu130`` is (2, 14)."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def fix() -> str:
    """What to do about a TorchCodec that cannot decode here, for this torch."""
    if torch_release() < IMAGE_DECODERS_TORCH:
        return (
            f"TorchCodec's image decoders need torch {'.'.join(map(str, IMAGE_DECODERS_TORCH))} or later: upgrade "
            "torch, or `pip uninstall torchcodec` to silence this"
        )
    # The build for this torch, from torch's own index (core/libraries.py): PyPI's default may be for another CUDA.
    command = libraries.matching_set(libraries.installed(), ["torchcodec"])
    return f"`{command}`, or `pip uninstall torchcodec` to silence this"


def problem() -> str | None:
    """Why TorchCodec cannot decode here, naming it (``TorchCodec 0.17.0 ...``); None where it can or is absent."""
    _, why = loaded()
    return f"{installed()} is installed but cannot decode: {why}" if why else None


def unusable() -> str | None:
    """The ``data:`` line's clause where TorchCodec is installed and cannot decode: why, what it costs, the fix."""
    why = problem()
    if why is None:
        return None
    return f"{why}; Pillow decodes instead (JPEG about 2x slower) and nvJPEG cannot run: {fix()}"
