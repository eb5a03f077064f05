"""A few-shot set of real photographs, made at run time from photos that ship inside Python packages.

Ten photographs that nobody here painted (matplotlib's ``grace_hopper.jpg``,
scikit-learn's ``china.jpg`` and ``flower.jpg``, and scikit-image's astronaut,
cat, coffee, rocket, motorcycle, Hubble deep field and immunohistochemistry
pictures), one class each. Each photo is cut into a 3 x 3 grid: crops for
training come from the five cells of one colour of a checkerboard, crops for
validation from the four others, so that no validation crop shares a pixel
with a training crop, while both splits see every part of the photo's
subject. A crop is a square of 60 to 100 % of its cell's shorter side, at the
photo's own resolution, saved as a camera writes a JPEG: quality 90, 4:2:0
chroma subsampling, Make and Model tags, and every fourth file stored sideways
with the EXIF orientation tag that turns it upright (as a phone does).

The crops come from one random stream a class and split, so the first 10
training crops of a class are the same whether 10 or 50 are asked for, and
the validation set is the same for every training size.

    python benchmarks/real_photos.py OUT [--train-per-class 10] [--val-per-class 40]
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

GRID = 3  # each photo's cells: GRID x GRID
CROP_SIDE = (0.6, 1.0)  # of the cell's shorter side
JPEG_QUALITY = 90
SIDEWAYS_EVERY = 4  # every fourth file is stored rotated, with the EXIF tag that turns it upright
EXIF_ORIENTATION, EXIF_MAKE, EXIF_MODEL = 0x0112, 0x010F, 0x0110
ROTATE_CW_TO_VIEW = 6  # EXIF orientation 6: the viewer turns the stored pixels 90 degrees clockwise


@dataclass(frozen=True)
class Photo:
    name: str  # the class's name
    package: str  # the package that ships the file
    path: str  # inside the package's folder

    def file(self) -> Path:
        module = importlib.import_module(self.package)
        if self.package == "matplotlib":
            return Path(module.get_data_path()) / self.path
        return Path(module.__file__).parent / self.path


PHOTOS = (
    Photo("grace_hopper", "matplotlib", "sample_data/grace_hopper.jpg"),
    Photo("china", "sklearn", "datasets/images/china.jpg"),
    Photo("flower", "sklearn", "datasets/images/flower.jpg"),
    Photo("astronaut", "skimage", "data/astronaut.png"),
    Photo("cat", "skimage", "data/chelsea.png"),
    Photo("coffee", "skimage", "data/coffee.png"),
    Photo("rocket", "skimage", "data/rocket.jpg"),
    Photo("motorcycle", "skimage", "data/motorcycle_left.png"),
    Photo("hubble", "skimage", "data/hubble_deep_field.jpg"),
    Photo("ihc", "skimage", "data/ihc.png"),
)


def cells(split: str) -> list[tuple[int, int]]:
    """The checkerboard's cells of one split: training the even ones (5 of 9), validation the odd ones (4)."""
    parity = 0 if split == "train" else 1
    return [(row, col) for row in range(GRID) for col in range(GRID) if (row + col) % 2 == parity]


def crop_boxes(height: int, width: int, split: str, count: int, seed: int) -> list[tuple[int, int, int]]:
    """``count`` squares (top, left, side) inside ``split``'s cells of a ``height`` x ``width`` photo, the cells
    taken in turn: where ``crops`` cuts (``defects.py`` keeps them, to know which crops share pixels)."""
    rng = np.random.default_rng(seed)
    cell_h, cell_w = height // GRID, width // GRID
    chosen = cells(split)
    boxes = []
    for index in range(count):
        row, col = chosen[index % len(chosen)]
        side = int(min(cell_h, cell_w) * rng.uniform(*CROP_SIDE))
        top = row * cell_h + int(rng.integers(0, cell_h - side + 1))
        left = col * cell_w + int(rng.integers(0, cell_w - side + 1))
        boxes.append((top, left, side))
    return boxes


def crops(photo: np.ndarray, split: str, count: int, seed: int) -> list[np.ndarray]:
    """``count`` square crops of ``photo`` (H, W, 3) inside ``split``'s cells, the cells taken in turn."""
    boxes = crop_boxes(photo.shape[0], photo.shape[1], split, count, seed)
    return [photo[top : top + side, left : left + side] for top, left, side in boxes]


def save_as_camera(pixels: np.ndarray, path: Path, sideways: bool) -> None:
    """A JPEG as a camera writes one: 4:2:0, quality 90, Make/Model, and when ``sideways`` the pixels stored turned
    90 degrees counter-clockwise with orientation 6, which the decode contract turns upright again."""
    image = Image.fromarray(pixels)
    exif = Image.Exif()
    exif[EXIF_MAKE], exif[EXIF_MODEL] = "torch-scaffold", "real-photos benchmark"
    if sideways:
        image = image.transpose(Image.Transpose.ROTATE_90)  # stored turned left; the viewer turns it right
        exif[EXIF_ORIENTATION] = ROTATE_CW_TO_VIEW
    image.save(path, "JPEG", quality=JPEG_QUALITY, subsampling="4:2:0", exif=exif.tobytes())


def make_set(root: Path, train_per_class: int, val_per_class: int = 40, seed: int = 0) -> Path:
    """``root/train/<class>/*.jpg`` and ``root/val/<class>/*.jpg``; returns ``root``."""
    for label, photo in enumerate(PHOTOS):
        pixels = np.asarray(Image.open(photo.file()).convert("RGB"))
        for split, count in (("train", train_per_class), ("val", val_per_class)):
            folder = root / split / photo.name
            folder.mkdir(parents=True, exist_ok=True)
            # One stream per (seed, class, split): the first N training crops are the same for every N.
            stream = seed * 1000 + label * 2 + (split == "val")
            for index, crop in enumerate(crops(pixels, split, count, stream)):
                save_as_camera(crop, folder / f"{photo.name}_{index:03d}.jpg", index % SIDEWAYS_EVERY == 1)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--train-per-class", type=int, default=10)
    parser.add_argument("--val-per-class", type=int, default=40)
    args = parser.parse_args()
    make_set(args.out, args.train_per_class, args.val_per_class)
    print(f"{args.out}: {len(PHOTOS)} classes, {args.train_per_class} + {args.val_per_class} photos a class")


if __name__ == "__main__":
    main()
