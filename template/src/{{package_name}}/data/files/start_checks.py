"""What a start does about what its data checks found, before training: the lines, the lists, and the data left.

``folders.checked_splits`` lists and checks every split (bad_files.py: every
stray and unreadable file said at once) and finds the exact duplicates
(duplicates.py); ``settle`` then says their counts in one line, warns in one
more when val/ or test/ holds copies of training files, lists every group in
``<train.out_dir>/duplicates.csv`` and does what ``data.duplicates`` says:

- ``warn`` (the default): train on every file;
- ``drop``: each group keeps its first file (train/, else val/, else test/, by
  path) and the others are left out: the val/ and test/ copies of training
  files and the repeats within a split. The main process decides and every
  process of a torchrun job trains on its list (``agreed``); ``evaluate``
  leaves the same files out (training/inference.py); a resumed run leaves out
  the same files, since they follow from the files alone;
- ``error``: stop in one line naming the count, the CSV and the fix.

Then what is left must be able to train: a training split of one class, or
left empty, or a val/ whose every image was a copy, is refused in one line; a
test/ left empty and a class with very few training images (class_counts.py)
get one warning.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch.distributed as dist
from torchvision import datasets

from ...core.config import DataConfig
from ...core.distributed import World
from ...core.errors import UserError
from .bad_files import Problems, leave_out
from .class_counts import check_class_count, tiny_classes_warning
from .duplicates import CSV_NAME, Copy, DuplicateGroup, left_out, write_csv
from .file_index import FileIndex


@dataclass
class CheckedSplits:
    """A start's splits, listed and checked (``folders.checked_splits``), with what the checks found."""

    sets: dict[str, datasets.DatasetFolder]  # train, val, and test/ where there (and this process checks files)
    indexes: dict[str, FileIndex]  # what the per-file checks found, by split (file_index.py)
    folder: Path | None  # data.cache_dir's folder; None: nothing kept between runs, or packed data
    groups: list[DuplicateGroup] | None  # the exact duplicates (the main process's); None elsewhere, or not known


def settle(checked: CheckedSplits, cfg: DataConfig, out_dir: Path | None, world: World) -> None:
    """Act on the duplicates (``act_on_duplicates``: train/ and val/ lose the copies ``drop`` leaves out, the same on
    every process), then refuse what cannot train and warn of what trains badly. ``out_dir``: where the lists
    go (None: nowhere, e.g. the datasets of a test)."""
    train_set, val_set, root = checked.sets["train"], checked.sets["val"], Path(cfg.root)
    check_class_count(train_set)  # one class folder: nothing to learn (the audit still looks at such data)
    files = sum(len(dataset) for dataset in checked.sets.values())
    dropped = act_on_duplicates(checked.groups, cfg, out_dir, world, files, list(checked.sets))
    copies = sum(path.startswith(os.path.join(str(val_set.root), "")) for path in dropped)
    for dataset in (train_set, val_set):
        leave_out(dataset, dropped)
    if len(train_set) == 0:  # every file unreadable, and data.on_bad_file=skip left them all out
        raise UserError(
            f"{root / 'train'} holds no readable images (every one was skipped as unreadable): replace them"
        )
    if len(val_set) == 0 and copies:
        raise UserError(
            f"every image in {root / 'val'} is a copy of a training image (left out by data.duplicates=drop): move "
            f"some of each class's other images from train/ to {root / 'val'}/<class name>/, so that validation "
            "measures something"
        )
    if len(val_set) == 0:  # else every epoch would report val_acc 0.0% and pick a "best" from nothing
        raise UserError(
            f"{root / 'val'} holds no images (its class folders are empty): put some of each class's images in "
            f"{root / 'val'}/<class name>/, moved out of train/, so that validation measures something"
        )
    gone = set(dropped)
    test = checked.sets.get("test")
    if world.is_main and test is not None and all(path in gone for path, _ in test.samples):
        print(f"warning: {root / 'test'} holds no images to evaluate at the end (empty, unreadable or copies)")
    tiny = tiny_classes_warning(train_set)
    if tiny and world.is_main:
        print(f"warning: {tiny}", flush=True)


def skipped(sets: dict[str, datasets.DatasetFolder], problems: Problems, cfg: DataConfig, world: World) -> None:
    """data.on_bad_file=skip under torchrun: every rank leaves out rank 0's unreadable files, which only the nodes'
    checkers read (each rank must train on the same list). A collective under skip: every process asks, once."""
    if cfg.on_bad_file == "skip":
        unreadable = [path for path, _ in problems.unreadable] if world.is_main else None
        gone = agreed(unreadable, world)  # on one process: its own list, left out already
        for dataset in sets.values():
            leave_out(dataset, gone)


def agreed(paths: list[str] | None, world: World) -> list[str]:
    """The main process's ``paths`` on every process (``drop`` must leave out the same files on each, or the ranks
    would train on different data). A collective on the start-up group: every process asks, once."""
    if not world.distributed or world.startup is None:
        return paths or []
    box = [paths]
    dist.broadcast_object_list(box, src=0, group=world.startup)
    return box[0] or []


def listed_in(listed: Path | None) -> str:
    """Where the groups are listed, for a line (nowhere: the datasets built without a run, e.g. by a test)."""
    return f" (listed in {listed})" if listed is not None else ""


def counts_line(groups: list[DuplicateGroup], files: int, splits: Sequence[str], listed: Path | None) -> str:
    """The start line: how many files repeat another's content, and where."""
    named = ", ".join(f"{split}/" for split in splits[:-1]) + f" and {splits[-1]}/"
    if not groups:
        return f"duplicates: none among the {files:,} files of {named} (same bytes or same pixels)"
    copies = [(group, copy) for group in groups for copy in group.copies]
    by_pixels = sum(group.same(copy) == "pixels" for group, copy in copies)
    leaks = [copy for group in groups for copy in group.leaks]
    where = [leaks_said(leaks, splits)] if leaks else []
    others = len(copies) - len(leaks)
    between = " or between val/ and test/" if "test" in splits else ""
    where += [f"{others} {'is a copy' if others == 1 else 'are copies'} within a split{between}"] if others else []
    mixed = sum(len({copy.label for copy in group.files}) > 1 for group in groups)
    spans = "group spans" if mixed == 1 else "groups span"
    where += [f"{mixed} {spans} two class folders (one picture, two labels)"] if mixed else []
    return (
        f"duplicates: {len(copies)} of the {files:,} files of {named} repeat another file's content "
        f"({len(copies) - by_pixels} the same bytes, {by_pixels} the same pixels only), in {len(groups)} group(s): "
        f"{'; '.join(where)}{listed_in(listed)}"
    )


def leaks_said(leaks: Sequence[Copy], splits: Sequence[str]) -> str:
    """``2 files in val/ and 1 in test/ are copies of files in train/``: the copies that mislead the figures."""
    counts = [(sum(copy.split == split for copy in leaks), split) for split in splits[1:]]
    held = [f"{count} in {split}/" for count, split in counts if count]
    first, _, rest = held[0].partition(" ")
    noun = "file" if len(leaks) == 1 and len(held) == 1 else "files"
    said = " and ".join([f"{first} {noun} {rest}", *held[1:]])
    return f"{said} {'is a copy of a file' if len(leaks) == 1 else 'are copies of files'} in train/"


def leak_warning(groups: list[DuplicateGroup], listed: Path | None) -> str | None:
    """One line when val/ or test/ holds copies of training files: what they do to the figures, and the fix."""
    leaks = [copy for group in groups for copy in group.leaks]
    if not leaks:
        return None
    val, test = sum(c.split == "val" for c in leaks), sum(c.split == "test" for c in leaks)
    held = " and ".join(f"{n} {split}/" for n, split in ((val, "val"), (test, "test")) if n)
    return (
        f"warning: {held} file(s) are copies of training files: the model is scored on pictures it trained on, "
        f"so {'val_acc and test_acc partly measure' if test else 'val_acc partly measures'} memory, not what it "
        f"learnt, and best.pt is chosen by val_acc; set data.duplicates=drop to leave them out, or remove "
        f"them{listed_in(listed)}"
    )


def drop_line(groups: list[DuplicateGroup], splits: Sequence[str]) -> str:
    """What ``drop`` left out, by split, and which file of each group it kept."""
    gone = [copy.split for group in groups for copy in group.copies]
    parts = ", ".join(f"{gone.count(split)} from {split}/" for split in splits if gone.count(split))
    return (
        f"duplicates: left out {len(gone)} copies (data.duplicates=drop): {parts}; each group keeps its first file "
        "in train/, else val/, else test/ (by path), as duplicates.csv's duplicate_of column says"
    )


def refusal(groups: list[DuplicateGroup], listed: Path | None) -> UserError:
    """data.duplicates=error: one line with the count, the CSV and the fix."""
    copies = sum(len(group.copies) for group in groups)
    leaks = sum(len(group.leaks) for group in groups)
    return UserError(
        f"{copies} file(s) repeat another file's content ({leaks} of them val/ or test/ copies of training files) "
        f"and data.duplicates=error{listed_in(listed)}: remove the copies (each group's duplicate_of is its first "
        "file), or set data.duplicates=drop to leave them out, or warn to train on them"
    )


def act_on_duplicates(
    groups: list[DuplicateGroup] | None,
    cfg: DataConfig,
    out_dir: Path | None,
    world: World,
    files: int,
    splits: Sequence[str],
) -> list[str]:
    """Say the counts, warn, write the CSV into ``out_dir`` (None: none written) and act as ``data.duplicates`` says
    (``groups``: the main process's, None elsewhere or where nothing could be checked); returns the paths left out,
    the same on every process."""
    listed = out_dir / CSV_NAME if out_dir is not None and groups else None
    dropped: list[str] | None = None
    if world.is_main and groups is not None:
        drop = cfg.duplicates == "drop"
        dropped = left_out(groups) if drop else []
        if listed is not None:
            write_csv(groups, listed, set(dropped))
        if groups and cfg.duplicates == "error":
            raise refusal(groups, listed)
        print(counts_line(groups, files, splits, listed), flush=True)
        said = drop_line(groups, splits) if drop and groups else leak_warning(groups, listed)
        if said:
            print(said, flush=True)
    return agreed(dropped, world) if cfg.duplicates == "drop" else []
