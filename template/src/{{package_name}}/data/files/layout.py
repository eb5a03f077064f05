"""What ``data.root`` holds: train/ and val/ (test/ where there), each with one folder per class, checked and said
in our words before any file is read; a split's classes aligned with train/'s."""

from __future__ import annotations

import os
from pathlib import Path

from torchvision import datasets

from ...core.config import DataConfig
from ...core.errors import UserError
from ...core.parts import part_off, present
from .bad_files import extension_list, listing

SPLITS = ("train", "val")  # what data.root must hold; test/ is optional (duplicates.SPLITS: all three)
MANIFEST = "shards.json"  # what pack-shards writes last (the shards part's shards.py); named here, as it may be absent


def is_packed(root: Path) -> bool:
    """Whether ``data.root`` is a folder that pack-shards wrote (shards.py reads it). A project made without the
    shards part refuses one in one line that says how to add the part."""
    if not present("shards"):
        if (root / MANIFEST).is_file():
            raise part_off("shards", f"{root}, a folder pack-shards wrote,")
        return False
    from . import shards  # the shards part, there: imported only now (core/parts.py)

    return shards.is_packed(root)


def packed_splits(root: Path) -> list[str]:
    """The splits of a folder pack-shards wrote (``is_packed`` said it is one, so the shards part is there)."""
    from . import shards

    return shards.packed_splits(root)


def has_split(root: Path, split: str) -> bool:
    """Whether ``data.root`` holds the split: a subfolder, or a packed split."""
    return split in packed_splits(root) if is_packed(root) else (root / split).is_dir()


def check_split(root: Path, split: str) -> None:
    """For the commands that read one split (evaluate --split, similar --split): name a missing one."""
    if not has_split(root, split) and is_packed(root):
        raise UserError(f"{root} holds no packed {split}/ split: pack a folder that has {split}/ with pack-shards")
    if not has_split(root, split):
        raise UserError(f"{root / split} not found: set data.root to the folder holding {split}/ (--set data.root=DIR)")


def check_class_folders(root: Path, extensions: tuple[str, ...], allow_empty: bool) -> None:
    """What ImageFolder needs, said in our words: one subfolder per class, each with at least one sample."""
    example = f"{root}/<class name>/<file>, e.g. {root}/cat/0001.jpg and {root}/dog/0002.jpg"
    classes = sorted(entry for entry in root.iterdir() if entry.is_dir() and not entry.name.startswith("."))
    if not classes:
        raise UserError(f"{root} has no class folders: put the samples in one subfolder per class, as {example}")
    if not allow_empty:  # val/ may lack a class: it is labelled with train/'s classes
        empty = [folder.name for folder in classes if not has_sample(folder, extensions)]
        if empty:
            raise UserError(
                f"class folder(s) {', '.join(empty)} in {root} hold no {extension_list(extensions)} files: "
                f"put samples in every class folder, as {example}, or remove the empty ones"
            )


def has_sample(folder: Path, extensions: tuple[str, ...]) -> bool:
    """As ImageFolder counts: any file below the folder whose name ends in an accepted extension, in any case."""
    return any(name.lower().endswith(extensions) for _, _, names in os.walk(folder, followlinks=True) for name in names)


def check_data_root(root: Path) -> None:
    """data.root holds train/ and val/; the fix named depends on what the user pointed at."""
    sample = root == Path(DataConfig.root)  # only the default sample path is made by sample-data
    make_sample = f", or make the sample data with `sample-data {root}`" if sample else ""
    if root.is_file():
        raise UserError(f"data.root {root} is a file, not a folder: point it at the folder that holds train/ and val/")
    if not root.is_dir():
        raise UserError(
            f"data.root {root} does not exist: point it at the folder that holds train/ and val/ "
            f"(--set data.root=DIR){make_sample}"
        )
    if root.name in SPLITS and not all((root / split).is_dir() for split in SPLITS):
        raise UserError(
            f"data.root {root} is a {root.name}/ folder: set data.root to its parent, {root.parent}, "
            "which holds train/ and val/"
        )
    for split in SPLITS:
        if not (root / split).is_dir():
            raise UserError(
                f"{root / split} not found: data.root must hold train/ and val/, each with one folder per class "
                f"({root}/train/<class name>/<file>){make_sample}"
            )


def align_classes(dataset: datasets.DatasetFolder, class_to_idx: dict[str, int]) -> None:
    unknown = sorted(set(dataset.classes) - set(class_to_idx))
    if unknown:
        raise UserError(
            f"{dataset.root} has classes that train/ lacks: {', '.join(unknown)}; add them to train/ or remove them"
        )
    own = dataset.classes
    dataset.samples = [(path, class_to_idx[own[target]]) for path, target in dataset.samples]
    dataset.imgs = dataset.samples
    dataset.targets = [target for _, target in dataset.samples]
    dataset.classes = sorted(class_to_idx, key=class_to_idx.__getitem__)
    dataset.class_to_idx = dict(class_to_idx)


def warn_missing_classes(dataset: datasets.DatasetFolder) -> list[str]:
    """One line naming the training classes a split has no image of: its accuracy is silent about them."""
    present = set(dataset.targets)
    missing = [name for index, name in enumerate(dataset.classes) if index not in present]
    if missing:
        print(
            f"warning: {dataset.root} has no images of {len(missing)} of the {len(dataset.classes)} classes: "
            f"{listing(missing)}; val_acc does not measure them: move some of their images from train/ to "
            f"{dataset.root}/<class name>/"
        )
    return missing
