"""Defects injected into a clean set of real photographs, with the ground truth kept: what ``data_audit.py`` scores.

The clean set is ``real_photos.py``'s: ten photographs, one class each, cut into a 3 x 3 grid. Training crops come
from the five cells of one colour of the checkerboard (as for ``finetune.py``); the four others are shared out so
that no two splits share a pixel: validation crops from the cells above and below the centre, the held-out test
crops from those left and right of it. ``inject`` then adds, with a seed:

  exact copies of validation files in train/: the same bytes, or the same pixels re-saved as a PNG (upright, as
      ``ImageOps.exif_transpose`` turns the sideways files);
  near copies of validation files in train/, one transform each: resized (40 to 75 % of each side), re-compressed
      (JPEG quality 20 to 50), cropped (75 to 90 % of each side), flipped (left to right), recoloured (brightness,
      contrast and saturation each by 0.85 to 1.15);
  near copies of plain pictures: a validation file blurred in place (a photo of little detail: Gaussian blur of
      2 to 4 % of a side), and its copy in train/ cropped to 90 to 95 % of each side and saved at JPEG quality 65
      to 75, as a user's lightly cropped, re-sent photo of blurred wood or fur (issue 59); by what they show:
      blurred textures (coffee's wood and cup, ihc's tissue, china, flower), fur (cat), sky with some structure
      (rocket's towers at dusk, hubble's field);
  training files moved to another class's folder (a share of the clean training files: 5 % and 10 % in the run);
  images of no class in training folders: crops of photographs, textures and scans that are none of the ten
      subjects (scikit-image's cameraman, coins, moon, retina, ...; matplotlib's present box).

Every copy sits in its source's class folder (its label is right: only its split is wrong). The kinds draw from
random streams of their own, so two settings that differ in the share moved have the same copies and outliers, and
the files moved at 5 % are among those moved at 10 %. ``<set>.truth.json`` beside the injected set lists every
defect by its path relative to the set's root.

    python benchmarks/defects.py OUT [--seed 0] [--mislabelled 0.05]
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageEnhance, ImageFilter, ImageOps
from real_photos import GRID, PHOTOS, crop_boxes, save_as_camera  # sibling script: benchmarks/ is on the path

SPLIT_CELLS = {"val": [(0, 1), (2, 1)], "test": [(1, 0), (1, 2)]}  # the odd cells of the checkerboard, shared out
NEAR_KINDS = ("resized", "recompressed", "cropped", "flipped", "recoloured")
RESIZED = (0.4, 0.75)  # of each side
RECOMPRESSED = (20, 50)  # JPEG quality
CROPPED = (0.75, 0.9)  # of each side
RECOLOURED = (0.85, 1.15)  # brightness, contrast and saturation factors
# Photographs (and two scans) of nothing among the ten classes, shipped in the same packages as the class photos.
NO_CLASS = (
    ("skimage", "data/camera.png"),
    ("skimage", "data/coins.png"),
    ("skimage", "data/moon.png"),
    ("skimage", "data/retina.jpg"),
    ("skimage", "data/clock_motion.png"),
    ("skimage", "data/brick.png"),
    ("skimage", "data/grass.png"),
    ("skimage", "data/gravel.png"),
    ("skimage", "data/page.png"),
    ("skimage", "data/cell.png"),
    ("skimage", "data/color.png"),
    ("matplotlib", "sample_data/Minduka_Present_Blue_Pack.png"),
)
NO_CLASS_SIDE = 128  # pixels of an outlier's shorter side, about a class crop's
BLANK_STD = 12.0  # grey levels (of 255): a crop below it is blank (about 9 % of the crops: rocket's sky, mostly)
# The near copies of plain pictures (issue 59): their kind, and the classes whose val crops show it.
PLAIN_KINDS = {
    "blurred texture": ("coffee", "ihc", "china", "flower"),
    "blurred fur": ("cat",),
    "blurred sky": ("rocket", "hubble"),
}
PLAIN_BLUR = (0.02, 0.04)  # the Gaussian blur's sigma, of the picture's side
PLAIN_CROPPED = (0.9, 0.95)  # of each side
PLAIN_QUALITY = (65, 75)  # JPEG quality of the copy
STREAMS = {"exact": 1, "near": 2, "mislabelled": 3, "no_class": 4, "plain": 5}  # one random stream per kind of defect


@dataclass(frozen=True)
class Plan:
    """How many defects of each kind: copies and outliers as counts, moved files as a share of the clean train."""

    exact_bytes: int = 10
    exact_pixels: int = 10
    near_each: int = 10  # copies per near transform
    plain_each: int = 10  # near copies per kind of plain picture (PLAIN_KINDS)
    mislabelled: float = 0.05
    no_class: int = 10


@dataclass
class Truth:
    """The defects of one injected set, every path relative to its root (``train/<class>/<file>``)."""

    exact: list[dict[str, str]] = field(default_factory=list)  # path, source (the val file), same: bytes | pixels
    near: list[dict[str, str]] = field(default_factory=list)  # path, source, transform
    mislabelled: list[dict[str, str]] = field(default_factory=list)  # path, true_class, folder_class
    no_class: list[dict[str, str]] = field(default_factory=list)  # path, source (the package's file)
    # Where each file of a class photo was cut from, copies included: path -> [photo, top, left, height, width].
    regions: dict[str, list[Any]] = field(default_factory=dict)

    def save(self, root: Path) -> None:
        truth_file(root).write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, root: Path) -> Truth:
        return cls(**json.loads(truth_file(root).read_text()))


def truth_file(root: Path) -> Path:
    """Beside the set, not in it: no tool may read the answers."""
    return root.with_name(root.name + ".truth.json")


def package_file(package: str, path: str) -> Path:
    module = importlib.import_module(package)
    if package == "matplotlib":
        return Path(module.get_data_path()) / path
    return Path(module.__file__).parent / path


def make_clean(root: Path, train_per_class: int, val_per_class: int, test_per_class: int, seed: int = 0) -> Path:
    """``root/{train,val,test}/<class>/*.jpg``: real_photos' training crops, and its validation stream's crops
    shared out by cell between val/ and test/ (``SPLIT_CELLS``), so that no two splits share a pixel; blank
    crops skipped (``blank``). Where each file was cut from goes beside the set (``regions_file``)."""
    regions: dict[str, list[Any]] = {}
    for label, photo in enumerate(PHOTOS):
        pixels = np.asarray(Image.open(photo.file()).convert("RGB"))
        wanted = {"train": train_per_class, "val": val_per_class, "test": test_per_class}
        streams = {"train": ("train", seed * 1000 + label * 2), "val": ("val", seed * 1000 + label * 2 + 1)}
        for split, count in wanted.items():
            (root / split / photo.name).mkdir(parents=True, exist_ok=True)
            cut_from, stream = streams["train" if split == "train" else "val"]
            # The stream's first boxes are the same however many are drawn: plenty, for the blank ones and (the
            # validation stream visits the odd cells in turn) those of the other held-out split.
            boxes = crop_boxes(*pixels.shape[:2], cut_from, 8 * count + 8, stream)
            owned = [box for i, box in enumerate(boxes) if split == "train" or owner(cell_of(i)) == split]
            chosen = [box for box in owned if not blank(pixels, box)][:count]
            if len(chosen) != count:
                raise SystemExit(f"{photo.name}: {len(chosen)} {split} crops that are not blank, of {count}")
            for index, (top, left, side) in enumerate(chosen):
                name = f"{split}/{photo.name}/{photo.name}_{index:03d}.jpg"
                save_as_camera(pixels[top : top + side, left : left + side], root / name, index % 4 == 1)
                regions[name] = [photo.name, top, left, side, side]
    regions_file(root).write_text(json.dumps(regions))
    return root


def blank(pixels: np.ndarray, box: tuple[int, int, int]) -> bool:
    """A crop with almost no picture in it (plain sky, a black background): the grey levels' standard deviation
    under ``BLANK_STD``. Two such crops look alike wherever they were cut, so every near-duplicate check pairs
    them, rightly, though they share no pixel; photos users bring are seldom blank."""
    top, left, side = box
    grey = pixels[top : top + side, left : left + side].astype(np.float32) @ np.array([0.299, 0.587, 0.114])
    return float(grey.std()) < BLANK_STD


def regions_file(root: Path) -> Path:
    """Where each file of a set was cut from: ``{path: [photo, top, left, height, width]}``, beside the set."""
    return root.with_name(root.name + ".regions.json")


def cell_of(index: int) -> tuple[int, int]:
    """The cell of the validation stream's ``index``-th crop (``real_photos.crops`` takes the odd cells in turn)."""
    odd = [(row, col) for row in range(GRID) for col in range(GRID) if (row + col) % 2 == 1]
    return odd[index % len(odd)]


def owner(cell: tuple[int, int]) -> str:
    return next(split for split, cells in SPLIT_CELLS.items() if cell in cells)


def upright(path: Path) -> Image.Image:
    return ImageOps.exif_transpose(Image.open(path)).convert("RGB")


def near_copy(
    image: Image.Image, transform: str, rng: np.random.Generator
) -> tuple[Image.Image, int, tuple[int, int, int, int]]:
    """The picture changed by ``transform``, the JPEG quality to save it with, and the part of ``image`` it shows
    (top, left, height, width)."""
    width, height = image.size
    whole = (0, 0, height, width)
    if transform == "resized":
        scale = rng.uniform(*RESIZED)
        size = (max(8, round(width * scale)), max(8, round(height * scale)))
        return image.resize(size, Image.Resampling.LANCZOS), 90, whole
    if transform == "recompressed":
        return image, int(rng.integers(RECOMPRESSED[0], RECOMPRESSED[1] + 1)), whole
    if transform == "cropped":
        keep_w, keep_h = (round(side * rng.uniform(*CROPPED)) for side in (width, height))
        left, top = int(rng.integers(0, width - keep_w + 1)), int(rng.integers(0, height - keep_h + 1))
        return image.crop((left, top, left + keep_w, top + keep_h)), 90, (top, left, keep_h, keep_w)
    if transform == "flipped":
        return ImageOps.mirror(image), 90, whole
    if transform == "recoloured":
        for enhancer in (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color):
            image = enhancer(image).enhance(rng.uniform(*RECOLOURED))
        return image, 90, whole
    raise ValueError(transform)


def plain_copies(out: Path, val: list[Path], used: set[Path], each: int, truth: Truth, seed: int) -> None:
    """``each`` near copies of every kind of ``PLAIN_KINDS``: val files not ``used`` by other copies, of the kind's
    classes, blurred in place (``val`` holds the clean set's paths: the files changed are ``out``'s), and a lightly
    cropped, re-compressed copy of each in its class's train/ folder; into ``truth.near``."""
    rng = np.random.default_rng([seed, STREAMS["plain"]])
    index = 0
    for kind, classes in PLAIN_KINDS.items():
        pool = [path for path in val if path.parent.name in classes and path not in used]
        for position in rng.permutation(len(pool))[:each]:
            source = pool[int(position)]
            used.add(source)
            image = upright(source)
            blurred = image.filter(ImageFilter.GaussianBlur(min(image.size) * rng.uniform(*PLAIN_BLUR)))
            kept = out / source.relative_to(source.parents[2])  # the same val file, in the injected set
            blurred.save(kept, "JPEG", quality=90)  # upright now: no orientation tag
            width, height = blurred.size
            keep_w, keep_h = (round(side * rng.uniform(*PLAIN_CROPPED)) for side in (width, height))
            left, top = int(rng.integers(0, width - keep_w + 1)), int(rng.integers(0, height - keep_h + 1))
            target = out / "train" / source.parent.name / f"plain_{index:03d}.jpg"
            quality = int(rng.integers(PLAIN_QUALITY[0], PLAIN_QUALITY[1] + 1))
            blurred.crop((left, top, left + keep_w, top + keep_h)).save(target, "JPEG", quality=quality)
            index += 1
            source_name = kept.relative_to(out).as_posix()
            truth.near.append({"path": target.relative_to(out).as_posix(), "source": source_name, "transform": kind})
            photo, source_top, source_left, *_ = truth.regions[source_name]
            truth.regions[truth.near[-1]["path"]] = [photo, source_top + top, source_left + left, keep_h, keep_w]


def no_class_image(source: Path, rng: np.random.Generator) -> Image.Image:
    """A square crop (50 to 100 % of the shorter side) of a picture of no class, scaled to a class crop's size."""
    image = Image.open(source).convert("RGB")
    width, height = image.size
    side = int(min(width, height) * rng.uniform(0.5, 1.0))
    left, top = int(rng.integers(0, width - side + 1)), int(rng.integers(0, height - side + 1))
    return image.crop((left, top, left + side, top + side)).resize((NO_CLASS_SIDE, NO_CLASS_SIDE))


def files(root: Path, split: str) -> list[Path]:
    return sorted((root / split).glob("*/*"))


def inject(clean: Path, out: Path, plan: Plan, seed: int) -> Truth:
    """A copy of ``clean`` at ``out`` with ``plan``'s defects; its ``truth.json`` is written and returned."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(clean, out)
    truth = Truth(regions=json.loads(regions_file(clean).read_text()))
    classes = sorted(path.name for path in (clean / "train").iterdir())
    val = files(clean, "val")
    train = files(clean, "train")

    def rel(path: Path) -> str:
        return path.relative_to(out).as_posix()

    # Copies of val files: distinct sources, exact ones first, from one stream; each in its class's train folder.
    rng = np.random.default_rng([seed, STREAMS["exact"]])
    wanted = plan.exact_bytes + plan.exact_pixels + plan.near_each * len(NEAR_KINDS)
    if wanted > len(val):
        raise SystemExit(f"{wanted} copies asked of {len(val)} validation files")
    sources = [val[i] for i in rng.permutation(len(val))[:wanted]]
    for index, source in enumerate(sources[: plan.exact_bytes + plan.exact_pixels]):
        same = "bytes" if index < plan.exact_bytes else "pixels"
        target = out / "train" / source.parent.name / f"copy_{index:03d}{source.suffix if same == 'bytes' else '.png'}"
        if same == "bytes":
            shutil.copyfile(source, target)
        else:
            upright(source).save(target)
        truth.exact.append({"path": rel(target), "source": rel(out / source.relative_to(clean)), "same": same})
        truth.regions[rel(target)] = truth.regions[truth.exact[-1]["source"]]
    rng = np.random.default_rng([seed, STREAMS["near"]])
    near_sources = sources[plan.exact_bytes + plan.exact_pixels :]
    for index, source in enumerate(near_sources):
        transform = NEAR_KINDS[index % len(NEAR_KINDS)]
        image, quality, (top, left, height, width) = near_copy(upright(source), transform, rng)
        target = out / "train" / source.parent.name / f"near_{index:03d}.jpg"
        image.save(target, "JPEG", quality=quality)
        truth.near.append({"path": rel(target), "source": rel(out / source.relative_to(clean)), "transform": transform})
        photo, source_top, source_left, *_ = truth.regions[truth.near[-1]["source"]]
        truth.regions[rel(target)] = [photo, source_top + top, source_left + left, height, width]

    plain_copies(out, val, set(sources), plan.plain_each, truth, seed)

    # Clean training files moved to another class's folder: a prefix of one permutation, so 5 % is within 10 %.
    rng = np.random.default_rng([seed, STREAMS["mislabelled"]])
    order = rng.permutation(len(train))
    others = rng.integers(1, len(classes), size=len(train))  # an offset: never the file's own class
    for position in order[: max(1, round(plan.mislabelled * len(train)))] if plan.mislabelled > 0 else []:
        source = train[position]
        true_class = source.parent.name
        folder_class = classes[(classes.index(true_class) + int(others[position])) % len(classes)]
        target = out / "train" / folder_class / source.name
        (out / source.relative_to(clean)).rename(target)
        truth.regions[rel(target)] = truth.regions.pop(rel(out / source.relative_to(clean)))
        truth.mislabelled.append({"path": rel(target), "true_class": true_class, "folder_class": folder_class})

    # Images of no class, each from another source picture, in random training folders.
    if plan.no_class > len(NO_CLASS):
        raise SystemExit(f"{plan.no_class} images of no class asked; {len(NO_CLASS)} source pictures")
    rng = np.random.default_rng([seed, STREAMS["no_class"]])
    picks = rng.permutation(len(NO_CLASS))[: plan.no_class]
    for index, pick in enumerate(picks):
        package, path = NO_CLASS[int(pick)]
        folder = classes[int(rng.integers(len(classes)))]
        target = out / "train" / folder / f"other_{index:03d}.jpg"
        save_as_camera(np.asarray(no_class_image(package_file(package, path), rng)), target, sideways=False)
        truth.no_class.append({"path": rel(target), "source": f"{package}:{path}"})
    truth.save(out)
    return truth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-class", type=int, nargs=3, default=[50, 40, 40], help="train, val, test photos a class")
    parser.add_argument("--mislabelled", type=float, default=0.05)
    args = parser.parse_args()
    clean = make_clean(args.out.with_name(args.out.name + "-clean"), *args.per_class)
    truth = inject(clean, args.out, Plan(mislabelled=args.mislabelled), args.seed)
    print(f"{args.out}: " + ", ".join(f"{len(v)} {k}" for k, v in asdict(truth).items()))


if __name__ == "__main__":
    main()
