"""Deployable artifacts of a trained model: TorchScript, ``torch.export`` (.pt2) or ONNX.

The artifacts take float images in [0, 1], shape (batch, channels, size,
size), any batch size; normalization is inside (the model's buffers, P9).
Tracing and exporting record one input dtype, so unlike the eager model they
do not also take uint8: convert with ``images.float() / 255`` first.

Each artifact carries what a user of it needs besides the weights (class
names, the evaluation resize, its interpolation and crop, mean and std, the
pretrained weights it started from: ``export_metadata``):
ONNX in its ``metadata_props`` (strings only: each value JSON-encoded),
TorchScript and ``.pt2`` as an extra file ``metadata.json`` inside the
archive, one JSON object of plain values. ``read_metadata`` reads either back.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..core.errors import UserError
from ..core.optional import require
from ..training.inference import Loaded

FORMATS = {"torchscript": ".torchscript.pt", "exported": ".pt2", "onnx": ".onnx"}
METADATA_FILE = "metadata.json"  # the extra file inside TorchScript and .pt2 archives


def example_batch(channels: int, image_size: int, batch: int = 2) -> torch.Tensor:
    """A float batch to trace with; 2 images so that the batch dimension is not taken for a constant 1."""
    generator = torch.Generator().manual_seed(0)
    return torch.rand(batch, channels, image_size, image_size, generator=generator)


def default_output(checkpoint: str | Path, fmt: str) -> Path:
    """Beside the checkpoint: best.pt -> best.torchscript.pt, best.pt2 or best.onnx."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.stem + FORMATS[fmt])


def export_metadata(loaded: Loaded) -> dict[str, Any]:
    """What it takes to use the artifact without this package, as plain JSON values."""
    cfg = loaded.config
    values: dict[str, Any] = {
        "classes": loaded.classes,  # index i of the output is classes[i]
        "input": "float RGB in [0, 1], shape (batch, 3, crop, crop); normalization is inside the model",
        "resize": round(cfg.data.image_size / cfg.data.eval_crop_ratio),  # the shorter side, before the crop
        "interpolation": cfg.data.interpolation,  # of that resize: the pretrained weights' own (data.interpolation)
        "crop": cfg.data.image_size,  # then the center crop, a square of this side
        "mean": cfg.model.mean,  # applied inside the model: for reference only
        "std": cfg.model.std,
        # The published weights the training started from (models/weights.py), or null.
        "pretrained_weights": (loaded.provenance.get("weights") or {}).get("label"),
    }
    return values


def read_metadata(path: str | Path, fmt: str) -> dict[str, Any]:
    """The metadata an artifact carries, decoded."""
    if fmt == "onnx":
        onnx = require("onnx", "onnx", "reading ONNX metadata")
        props = onnx.load(str(path), load_external_data=False).metadata_props
        return {prop.key: json.loads(prop.value) for prop in props}  # ONNX holds strings: each value is JSON
    files = {METADATA_FILE: ""}
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            torch.jit.load(str(path), map_location="cpu", _extra_files=files)
    else:
        torch.export.load(str(path), extra_files=files)
    return json.loads(files[METADATA_FILE] or "{}")


def export_program(model: nn.Module, example: torch.Tensor) -> torch.export.ExportedProgram:
    """``torch.export`` with a dynamic batch dimension."""
    return torch.export.export(model.eval(), (example,), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))


def export_model(
    model: nn.Module, fmt: str, example: torch.Tensor, output: str | Path, metadata: dict[str, Any] | None = None
) -> Path:
    """Write ``model`` (in eval mode, on the CPU) as ``fmt`` to ``output``, with ``metadata`` inside."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    model = model.cpu().eval()
    extra = {METADATA_FILE: json.dumps(metadata or {})}
    with torch.inference_mode(False), torch.no_grad():
        if fmt == "torchscript":
            with warnings.catch_warnings():  # PyTorch deprecates TorchScript; docs/export.md says to prefer `exported`
                warnings.simplefilter("ignore", FutureWarning)
                torch.jit.trace(model, example).save(str(output), _extra_files=extra)
        elif fmt == "exported":
            torch.export.save(export_program(model, example), str(output), extra_files=extra)
        elif fmt == "onnx":
            onnx = require("onnx", "onnx", "ONNX export")
            require("onnxscript", "onnx", "ONNX export")
            program = torch.onnx.export(export_program(model, example), (example,), dynamo=True, verbose=False)
            program.save(str(output))
            proto = onnx.load(str(output))
            onnx.helper.set_model_props(proto, {key: json.dumps(value) for key, value in (metadata or {}).items()})
            onnx.save(proto, str(output))
        else:
            raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    return output


def load_artifact(path: str | Path, fmt: str) -> Any:
    """A callable ``batch -> logits`` from an exported file, to check it or to serve it."""
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return torch.jit.load(str(path), map_location="cpu")
    if fmt == "exported":
        return torch.export.load(str(path)).module()
    ort = require("onnxruntime", "onnx", "running an ONNX model")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda batch: torch.from_numpy(session.run(None, {name: batch.detach().cpu().numpy()})[0])


def max_difference(model: nn.Module, artifact: Any, batch: torch.Tensor) -> float:
    """Largest absolute difference between the eager model's logits and the artifact's."""
    with torch.no_grad():
        return (model.cpu().eval()(batch) - artifact(batch)).abs().max().item()


def export_checkpoint(loaded: Loaded, checkpoint: str | Path, fmt: str, output: str | Path | None = None) -> str:
    """Export on the CPU in fp32, then check the artifact against the eager model on another batch size."""
    cfg = loaded.config
    channels, size = len(cfg.model.mean), cfg.data.image_size
    output = output or default_output(checkpoint, fmt)
    path = export_model(loaded.model, fmt, example_batch(channels, size), output, export_metadata(loaded))
    try:
        difference = max_difference(loaded.model, load_artifact(path, fmt), example_batch(channels, size, batch=3))
    except UserError as exc:
        return f"wrote {path} (not checked: {exc})"
    return (
        f"wrote {path} (class names, resize, crop, mean and std inside): float input in [0, 1], any batch size; "
        f"max |logit difference| vs eager {difference:.2e}"
    )
