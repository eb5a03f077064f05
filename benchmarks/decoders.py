"""CPU image decoding, side by side: Pillow, TorchCodec and torchvision.io (deprecated since torchvision 0.29).

The batch path (the decode contract, ``data/decoding/decode.py``'s ``decode_tensor``) decodes every training image to a
uint8 (3, H, W) tensor. This measures, per file format and size, the
microseconds one decode takes on this machine, so that the choice of decoder
rests on figures. TorchCodec is optional: where it does not import, its row
says why.

    .venv/bin/python benchmarks/decoders.py [--files 200] [--rounds 5] [--out .bench/decoders.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision.transforms.v2 import functional as TF

Decoder = Callable[[str], torch.Tensor]


def pillow_numpy(path: str) -> torch.Tensor:
    with Image.open(path) as image:
        return torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1)  # a writable copy


def pillow_pil_to_tensor(path: str) -> torch.Tensor:
    with Image.open(path) as image:
        return TF.pil_to_tensor(image.convert("RGB"))


def decoders() -> dict[str, Decoder | str]:
    """Each decoder by name; a string where it cannot run here (the reason)."""
    found: dict[str, Decoder | str] = {
        "pillow (np.array)": pillow_numpy,
        "pillow (pil_to_tensor)": pillow_pil_to_tensor,
    }
    try:
        from torchcodec.decoders import decode_image as codec_decode

        found["torchcodec"] = lambda path: codec_decode(path, mode="RGB")
    except (ImportError, RuntimeError, OSError) as error:  # not installed, or its native library does not load
        found["torchcodec"] = f"not available: {type(error).__name__}: {str(error).splitlines()[0][:120]}"
    from torchvision.io import ImageReadMode, decode_image

    def torchvision_io(path: str) -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return decode_image(path, mode=ImageReadMode.RGB)

    found["torchvision.io (deprecated)"] = torchvision_io
    return found


def write_images(folder: Path, count: int, side: int, suffix: str) -> list[str]:
    """Smooth pictures with some noise, as photos are: random noise alone would make JPEG unusually slow."""
    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 255, side, dtype=np.float32)
    paths = []
    for index in range(count):
        base = ramp[None, :, None] * rng.uniform(0.3, 1.0, 3) + ramp[:, None, None] * rng.uniform(0, 0.5, 3)
        pixels = np.clip(base + rng.normal(0, 12, (side, side, 3)), 0, 255).astype(np.uint8)
        path = folder / f"{index}{suffix}"
        Image.fromarray(pixels).save(path, quality=90) if suffix == ".jpg" else Image.fromarray(pixels).save(path)
        paths.append(str(path))
    return paths


def microseconds(decode: Decoder, paths: list[str], rounds: int) -> float:
    """Per image, the fastest of ``rounds`` passes (another process on a shared machine only slows a pass)."""
    reference = decode(paths[0])
    assert reference.dtype == torch.uint8 and reference.shape[0] == 3, reference.shape
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for path in paths:
            decode(path)
        best = min(best, (time.perf_counter() - start) / len(paths))
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(".bench/decoders.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)  # a loader decodes one image per process: so does this
    found = decoders()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in (".png", ".jpg"):
            for side in (64, 224):
                folder = Path(tmp) / f"{suffix[1:]}{side}"
                folder.mkdir()
                paths = write_images(folder, args.files, side, suffix)
                for name, decode in found.items():
                    us = None if isinstance(decode, str) else microseconds(decode, paths, args.rounds)
                    rows.append({"format": suffix[1:], "side": side, "decoder": name, "us_per_image": us})
                    shown = f"{us:8.1f} us" if us is not None else decode
                    print(f"{suffix[1:]:4} {side:4} px  {name:28} {shown}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
