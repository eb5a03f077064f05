"""The decode contract: every path reads an image file as the same upright RGB picture.

Training (both paths), the caches, shards, validation, ``evaluate``,
``predict``, ``similar`` and the nvJPEG path's CPU fallback read files here
and nowhere else. A file becomes an RGB image with 8 bits a channel:

- the format is read from the bytes, never from the name (a PNG named .jpg is a PNG);
- the EXIF orientation is applied: a phone photo taken in portrait stands upright;
- 16-bit samples (microscopy, X-ray, scanners) keep their high byte (``v >> 8``,
  65535 -> 255, as Pillow reads 16-bit colour PNGs): scaled, never clipped to white;
- CMYK, gray, gray + alpha, palette and RGBA become RGB as Pillow converts them;
  alpha is dropped: a transparent pixel keeps the colour stored under it, as
  torchvision's loader and TorchCodec read it (composite it in ``models/extensions.py`` if you need a background);
- an animated GIF or WebP, or a multi-page TIFF: its first frame;
- a JPEG at least twice the size needed (``min_side``: the evaluation resize's
  side) is decoded by libjpeg at 1/2, 1/4 or 1/8 of its size (Pillow's
  ``draft``), its shorter side still at least ``min_side``; the transforms then
  resize it as they would the whole image. A 12-megapixel photo trained at 224 px
  costs a fraction of its full decode (benchmarks/large_photos.py).

Pillow decodes every kind; TorchCodec (the ``decode`` extra), where installed,
decodes JPEG and PNG faster with the same pixels (the tests compare them on
every kind of file). ``DECODE_VERSION`` is part of every cache's key: pixels
decoded under another contract are never mixed with these.
"""

from __future__ import annotations

import io
import struct
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from PIL import Image, ImageOps
from torchvision.datasets.folder import IMG_EXTENSIONS
from torchvision.transforms.v2 import functional as TF

from . import codec

if TYPE_CHECKING:  # an annotation only: the contract loads without the package (benchmarks/large_photos.py)
    from ...core.config import DataConfig

# 1: Pillow's convert("RGB") per sample, TorchCodec on the batch path (EXIF and 16-bit read two ways).
# 2: this contract. Bump it when any decoded pixel changes: the caches keyed by it are then made again.
DECODE_VERSION = 2


def square_side(cfg: DataConfig) -> int:
    return round(cfg.image_size / cfg.eval_crop_ratio)  # the evaluation resize: what data.cache keeps too


IMAGE_EXTENSIONS = (*IMG_EXTENSIONS, ".gif")  # torchvision's list, and GIF (web scrapes), first frame
ORIENTATION = 0x0112  # the EXIF tag: 1 upright, 2 to 8 mirrored and/or turned
PNG_MAGIC, JPEG_MAGIC = b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff"
# The JPEG markers that start a frame and give its size (SOF0-3, 5-7, 9-11, 13-15; C4, C8, CC are others).
FRAME_MARKERS = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


@dataclass(frozen=True)
class Header:
    """What the first bytes of a JPEG or PNG say, before any decoding."""

    format: str  # JPEG | PNG
    width: int
    height: int
    frame: int = 0  # a JPEG's start-of-frame marker: 0xC0 baseline, 0xC1 extended, 0xC2 progressive...


def sniff(data: bytes) -> Header | None:
    """The format and size of a JPEG or PNG from its bytes; None for anything else (Pillow then reads it).

    Hand-written (about 20 lines) rather than Pillow's ``Image.open``: that
    costs about 20 us a file, a third of TorchCodec's whole decode of a small JPEG.
    """
    if data.startswith(PNG_MAGIC) and data[12:16] == b"IHDR" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return Header("PNG", width, height)
    if not data.startswith(JPEG_MAGIC):
        return None
    at = 2
    while at + 4 <= len(data):  # marker segments, up to the frame header
        if data[at] != 0xFF:
            return None  # not a marker where one must be: damaged; Pillow names why
        marker = data[at + 1]
        if marker == 0xFF:  # a fill byte before the marker
            at += 1
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in FRAME_MARKERS and at + 9 <= len(data):
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return Header("JPEG", width, height, marker)
        at += 2 + length
    return None


def refuse_bomb(header: Header) -> None:
    """Pillow's decompression-bomb limit, applied before TorchCodec allocates anything: a header that claims
    more than ``Image.MAX_IMAGE_PIXELS`` warns (the loaders raise it as an error), more than twice raises."""
    limit, pixels = Image.MAX_IMAGE_PIXELS, header.width * header.height
    if limit and pixels > 2 * limit:
        raise Image.DecompressionBombError(
            f"Image size ({pixels} pixels) exceeds limit of {2 * limit} pixels, could be decompression bomb DOS attack."
        )
    if limit and pixels > limit:
        warnings.warn(
            f"Image size ({pixels} pixels) exceeds limit of {limit} pixels, could be decompression bomb DOS attack.",
            Image.DecompressionBombWarning,
            stacklevel=2,
        )


def reduces(header: Header | None, min_side: int | None) -> bool:
    """Whether libjpeg can decode at 1/2 or less and keep the shorter side at ``min_side`` (``draft``'s rule)."""
    if not min_side or header is None or header.format != "JPEG":
        return False
    return min(header.width, header.height) >= 2 * min_side


def rgb(image: Image.Image) -> Image.Image:
    """Any Pillow mode as 8-bit RGB, by the contract (module docstring)."""
    if image.mode == "RGB":
        return image
    if image.mode.startswith("I;16") or image.mode == "I":  # 16-bit gray (32-bit integers taken as 16-bit)
        high = np.clip(np.asarray(image, dtype=np.int64), 0, 65535) >> 8
        return Image.fromarray(high.astype(np.uint8), "L").convert("RGB")
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")  # what convert("RGB") does here anyway, without its warning
    return image.convert("RGB")


def open_rgb(data: bytes, min_side: int | None = None) -> Image.Image:
    """The reference decode, with Pillow: an upright RGB image (the per-sample transforms resize it with Pillow)."""
    image = Image.open(io.BytesIO(data))  # its first frame; the format from the bytes
    if min_side and image.format == "JPEG":
        image.draft(image.mode, (min_side, min_side))  # libjpeg's DCT scaling: 1/2, 1/4 or 1/8, if no smaller
    if image.getexif().get(ORIENTATION, 1) != 1:
        image = ImageOps.exif_transpose(image)
    image.load()
    return rgb(image)


def codec_decoder() -> Callable[..., torch.Tensor] | None:
    """TorchCodec's image decoder (the ``decode`` extra), or None where it is not installed or cannot decode here.

    Imported on first use (``codec.py``): the import takes a while and a
    project without the extra never pays for it. A TorchCodec built for
    another torch fails to load its native library: Pillow then decodes, and
    the ``data:`` start line says why and what to do (``codec.unusable``).
    """
    return codec.decoder("decode_image")


def decode_tensor(data: bytes, min_side: int | None = None) -> torch.Tensor:
    """The contract's image as a uint8 ``(3, H, W)`` tensor: TorchCodec for JPEG and PNG where installed and no
    reduced decode applies, else Pillow (which also names what is wrong with a damaged file).

    Not torchvision.io: torchvision 0.29 deprecated its decoders in favour of
    TorchCodec, which wraps the same libjpeg-turbo and libpng.
    """
    header = sniff(data)
    decode = codec_decoder()
    if header is not None and decode is not None and not reduces(header, min_side):
        refuse_bomb(header)
        try:
            image = decode(data, mode="RGB", output_dtype="auto")  # uint16 for a 16-bit PNG: scaled below
        except (RuntimeError, ValueError):
            pass  # damaged, or a kind TorchCodec refuses: Pillow reads it, or says why it cannot
        else:
            return (image.to(torch.int32) >> 8).to(torch.uint8) if image.dtype == torch.uint16 else image
    return TF.pil_to_tensor(open_rgb(data, min_side))


def read_file(path: str) -> bytes:
    """A file's bytes: the one place a folder's image is read (the tests count the files read here).

    Unbuffered: one read of the whole file, about 6 us less than ``Path.read_bytes`` on a small one. The bytes,
    not the path, go to TorchCodec, which decodes a small JPEG from memory in half the time it takes from a path.
    """
    with open(path, "rb", buffering=0) as handle:
        return handle.readall()


class LocalFiles:
    """The bytes of files on disk, by path (a packed split's reader, ``shards.PackedFiles``, has the same call)."""

    def read_bytes(self, path: str) -> bytes:
        return read_file(path)


class ImageFiles:
    """A dataset's image loader by the contract: ``loader(path)`` an RGB PIL image (the per-sample transforms
    take it), ``loader.tensor(path)`` a uint8 tensor (the batch path), ``read_bytes`` the file as stored.

    ``min_side``: the shorter side the transforms need (the evaluation resize):
    larger JPEGs decode at a reduced scale. A class, not a closure: the dataset that
    holds it pickles to loader workers started by a forkserver.
    """

    def __init__(self, min_side: int | None, reader: LocalFiles | None = None) -> None:
        self.min_side, self.reader = min_side, reader or LocalFiles()  # where the bytes come from
        self.__name__ = "image_loader"  # Checked names its wrapper after the loader

    def read_bytes(self, path: str) -> bytes:
        return self.reader.read_bytes(path)

    def __call__(self, path: str) -> Image.Image:
        return open_rgb(self.read_bytes(path), self.min_side)

    def tensor(self, path: str) -> torch.Tensor:
        return decode_tensor(self.read_bytes(path), self.min_side)
