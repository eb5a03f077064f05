"""The files users bring, made at run time: phone photos, scans, web scrapes (no binary file is committed).

Each specimen holds a known picture, its ``truth``: the upright RGB image, 8
bits a channel, that the decode contract (``data/decoding/decode.py``) must give. A
lossless file gives it exactly; a JPEG within its compression's loss. The
pictures are asymmetric (a bright top-left corner, a ramp from left to right),
so a sideways or mirrored decode cannot pass for an upright one.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

EXIF_ORIENTATION = 0x0112
# orientation -> how the upright picture is stored (its inverse is what a reader applies)
STORED = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}
LARGE = (4032, 3024)  # a 12-megapixel phone photo


@dataclass(frozen=True)
class Specimen:
    path: Path
    truth: np.ndarray | None  # H x W x 3 uint8, upright; None: no picture to read (a damaged file)
    lossy: bool = False  # a JPEG: equal to the truth within its compression's loss


def picture(width: int, height: int, seed: int = 0, horizontal: bool = True, noise: int = 16) -> np.ndarray:
    """An asymmetric RGB picture: a ramp left to right (red), stripes (green), a ramp top to bottom with ``noise``
    (blue: a sensor's noise, or a small file's texture), a bright top-left corner."""
    rng = np.random.default_rng(seed)
    # A column and a row, broadcast: the 12-megapixel photo's full int64 grids took 2.5 CPU-seconds a zoo.
    y, x = np.arange(height)[:, None], np.arange(width)[None, :]
    stripes = ((y if horizontal else x) // max(2, min(width, height) // 8)) % 2
    image = np.empty((height, width, 3), dtype=np.uint8)
    image[:, :, 0] = (x * 200 // max(width - 1, 1) + 20).clip(0, 255)  # red
    image[:, :, 1] = 60 + 140 * stripes  # green
    blue = y * 120 // max(height - 1, 1) + 60 + rng.integers(-noise, noise + 1, (height, width)) // 2
    image[:, :, 2] = blue.clip(0, 255)
    image[: height // 4, : width // 4] = (250, 250, 250)  # the top-left corner says which way is up
    return image


def write_png16(path: Path, samples: np.ndarray) -> None:
    """A 16-bit PNG (gray: H x W, colour: H x W x 3), written by hand: Pillow writes 16-bit colour PNGs as 8-bit."""
    height, width = samples.shape[:2]
    colour = 2 if samples.ndim == 3 else 0
    rows = b"".join(b"\0" + samples[row].astype(">u2").tobytes() for row in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 16, colour, 0, 0, 0))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + header + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def sixteen_bits(truth: np.ndarray, seed: int) -> np.ndarray:
    """16-bit samples whose high byte is ``truth``: every value but a dark one lies above 255 (clipping shows)."""
    low = np.random.default_rng(seed).integers(0, 256, truth.shape)
    return truth.astype(np.uint16) * 256 + low.astype(np.uint16)


def exif(orientation: int) -> Image.Exif:
    tags = Image.Exif()
    tags[EXIF_ORIENTATION] = orientation
    return tags


# JPEG options of the small specimens: full-resolution colour (4:4:4), so that the loss stays a few levels on their
# sharp stripes; the 12-megapixel photo is saved as phones save, with halved colour resolution (4:2:0).
SMALL_JPEG = {"quality": 95, "subsampling": 0}


def write_exif_jpeg(path: Path, truth: np.ndarray, orientation: int, **options: object) -> Specimen:
    """A JPEG whose pixels are stored as a camera stores them, with the EXIF tag that turns them upright."""
    stored = Image.fromarray(truth).transpose(STORED[orientation])
    stored.save(path, "JPEG", exif=exif(orientation), **(options or SMALL_JPEG))
    return Specimen(path, truth, lossy=True)


def jpeg_bytes(image: Image.Image) -> bytes:
    encoded = io.BytesIO()
    image.save(encoded, "JPEG", **SMALL_JPEG)
    return encoded.getvalue()


def write_zoo(folder: Path, width: int = 48, height: int = 32, large: bool = True) -> dict[str, Specimen]:
    """One file of each kind users bring, in ``folder``; by kind. ``large``: also a 12-megapixel photo."""
    folder.mkdir(parents=True, exist_ok=True)
    truth = picture(width, height)
    rgb = Image.fromarray(truth)
    zoo: dict[str, Specimen] = {}

    zoo["exif_jpeg"] = write_exif_jpeg(folder / "portrait.jpg", truth, 6)
    gray16 = sixteen_bits(truth[:, :, 0], 1)
    write_png16(folder / "scan16.png", gray16)
    zoo["png16"] = Specimen(folder / "scan16.png", np.repeat(truth[:, :, :1], 3, axis=2))
    write_png16(folder / "camera16.png", sixteen_bits(truth, 2))
    zoo["rgb16_png"] = Specimen(folder / "camera16.png", truth)
    Image.fromarray(gray16).save(folder / "scan16.tif")  # Pillow writes 16-bit gray TIFF
    zoo["tiff16"] = Specimen(folder / "scan16.tif", np.repeat(truth[:, :, :1], 3, axis=2))
    rgb.convert("CMYK").save(folder / "print.jpg", "JPEG", **SMALL_JPEG)
    zoo["cmyk_jpeg"] = Specimen(folder / "print.jpg", truth, lossy=True)  # C = 255 - R, ...: back to the truth
    (folder / "really_a_png.jpg").write_bytes(png_bytes(rgb))
    zoo["png_named_jpg"] = Specimen(folder / "really_a_png.jpg", truth)
    (folder / "really_a_jpeg.png").write_bytes(jpeg_bytes(rgb))
    zoo["jpeg_named_png"] = Specimen(folder / "really_a_jpeg.png", truth, lossy=True)
    gray = np.asarray(rgb.convert("L"))
    Image.fromarray(gray).save(folder / "gray.jpg", "JPEG", **SMALL_JPEG)
    zoo["gray_jpeg"] = Specimen(folder / "gray.jpg", np.repeat(gray[:, :, None], 3, axis=2), lossy=True)
    alpha = np.random.default_rng(3).integers(0, 256, (height, width), dtype=np.uint8)  # any: it is dropped
    Image.fromarray(np.dstack([truth, alpha]), "RGBA").save(folder / "logo.png")
    zoo["rgba_png"] = Specimen(folder / "logo.png", truth)
    Image.fromarray(np.dstack([gray, alpha]), "LA").save(folder / "gray_alpha.png")
    zoo["gray_alpha_png"] = Specimen(folder / "gray_alpha.png", np.repeat(gray[:, :, None], 3, axis=2))
    palette = rgb.quantize(64)
    palette.save(folder / "palette.png", transparency=0)  # palette index 0 marked transparent
    zoo["palette_png"] = Specimen(folder / "palette.png", np.asarray(palette.convert("RGB")))
    rgb.save(folder / "progressive.jpg", "JPEG", progressive=True, **SMALL_JPEG)
    zoo["progressive_jpeg"] = Specimen(folder / "progressive.jpg", truth, lossy=True)
    rgb.save(folder / "web.webp", "WEBP", lossless=True)
    zoo["webp"] = Specimen(folder / "web.webp", truth)
    rgb.save(folder / "scan.tiff")
    zoo["tiff"] = Specimen(folder / "scan.tiff", truth)
    other = Image.fromarray(picture(width, height, seed=9, horizontal=False))
    rgb.save(folder / "pages.tiff", save_all=True, append_images=[other])
    zoo["multipage_tiff"] = Specimen(folder / "pages.tiff", truth)  # its first page
    rgb.save(folder / "screenshot.bmp")
    zoo["bmp"] = Specimen(folder / "screenshot.bmp", truth)
    frames = [palette, other.quantize(64)]
    frames[0].save(folder / "animated.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    zoo["animated_gif"] = Specimen(folder / "animated.gif", np.asarray(palette.convert("RGB")))  # its first frame
    if large:
        photo = picture(*LARGE, seed=4, noise=12)  # a photo's noise: a few levels
        zoo["large_photo"] = write_exif_jpeg(folder / "phone.jpg", photo, 6, quality=90, subsampling=2)
    whole = jpeg_bytes(rgb)
    (folder / "cut_short.jpg").write_bytes(whole[: len(whole) // 2])  # a copy cut short: no picture to read
    zoo["truncated_jpeg"] = Specimen(folder / "cut_short.jpg", None)
    return zoo


def png_bytes(image: Image.Image) -> bytes:
    encoded = io.BytesIO()
    image.save(encoded, "PNG")
    return encoded.getvalue()
