"""Can this Python's torch compute on a GPU here? One JSON line, for make gpu-check (tests/gpu/check.py).

check.py runs it with the system's Python first and, when it had to install torch, with its environment's:
each Python its own torch. ``refused`` is None when a kernel ran and finished on cuda:0, else the one line
that says why not: a CPU-only build, ``torch.cuda.is_available()`` false (torch's own warning says why: a
driver older than the build's CUDA, say), or the driver refusing the device at the first kernel (a build
without this GPU's architecture). ``--torchcodec`` adds whether TorchCodec's nvJPEG (``decode_jpeg``) decodes a JPEG
on cuda:0, before any project is installed. ``--nvjpeg PACKAGE`` adds whether the generated project's nvJPEG path
decodes a JPEG on cuda:0 (``PACKAGE.data.gpu_decode.cuda_decode_failure``).

    python tests/gpu/probe.py [--torchcodec] [--nvjpeg PACKAGE]
"""

from __future__ import annotations

import argparse
import importlib
import json
import warnings
from typing import Any


def first_line(text: str, fallback: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), fallback)


def cuda_facts(torch: Any) -> dict[str, Any]:
    """The GPUs torch sees and whether it can use the first; ``refused`` says why not, in one line."""
    facts: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": 0, "refused": None}
    if torch.version.cuda is None:
        return {**facts, "refused": f"torch {torch.__version__} is a CPU-only build"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # torch says why CUDA is unavailable in a warning, once
        available = torch.cuda.is_available()
    if not available:
        why = first_line(str(caught[0].message), "") if caught else ""
        because = f": {why}" if why else " (no GPU visible to it; CUDA_VISIBLE_DEVICES?)"
        return {**facts, "refused": f"torch {torch.__version__} finds no usable GPU{because}"}
    try:
        # A kernel and its result back on the host: a driver that accepts the context may still refuse the
        # build's kernels ("no kernel image is available for execution on the device").
        ran = torch.ones(1, device="cuda:0").add_(1).item()
    except RuntimeError as error:
        return {**facts, "refused": f"cuda:0 refuses torch {torch.__version__}: {first_line(str(error), 'error')}"}
    if ran != 2.0:
        return {**facts, "refused": f"cuda:0 computed 1 + 1 = {ran} (torch {torch.__version__})"}
    count = torch.cuda.device_count()
    return {
        **facts,
        "gpus": count,
        "names": [torch.cuda.get_device_name(index) for index in range(count)],
        "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
    }


def torchcodec_failure(torch: Any) -> str | None:
    """Why TorchCodec's ``decode_jpeg`` cannot decode a small JPEG on cuda:0, in one line; None where it can."""
    import io

    try:
        from PIL import Image
        from torchcodec.decoders import decode_jpeg

        buffer = io.BytesIO()
        Image.new("RGB", (16, 16), (200, 30, 30)).save(buffer, "JPEG")
        data = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
        decoded = decode_jpeg([data], mode="RGB", device="cuda:0")
    except Exception as error:  # ImportError, a missing symbol, a CUDA or nvJPEG error: each is why
        return f"{type(error).__name__}: {first_line(str(error), 'no message')}"
    return None if decoded[0].is_cuda else "decode_jpeg returned the image on the CPU"


def nvjpeg_failure(torch: Any, package: str) -> str | None:
    """The generated project's own probe: why its nvJPEG path cannot decode on cuda:0, or None."""
    gpu_decode = importlib.import_module(f"{package}.data.loading.gpu_decode")
    return gpu_decode.cuda_decode_failure(torch.device("cuda", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torchcodec", action="store_true", help="also probe TorchCodec's decode_jpeg on cuda:0")
    parser.add_argument("--nvjpeg", metavar="PACKAGE", help="also probe this generated package's nvJPEG decoding")
    args = parser.parse_args()
    try:
        import torch
    except ImportError as error:
        print(json.dumps({"torch": None, "gpus": 0, "refused": f"no torch in this Python ({error})"}))
        return
    facts = cuda_facts(torch)
    if args.torchcodec and facts["refused"] is None:
        facts["torchcodec_failure"] = torchcodec_failure(torch)
    if args.nvjpeg and facts["refused"] is None:
        facts["nvjpeg_failure"] = nvjpeg_failure(torch, args.nvjpeg)
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
