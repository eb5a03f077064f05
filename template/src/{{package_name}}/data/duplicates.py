"""Exact duplicates: files with the same bytes, or the same pixels by the decode contract, in train/, val/ and test/.

A photo in both train/ and val/ makes val_acc measure memory, and best.pt is
chosen by it. Every start finds such files before training
(``folders.build_training_data``), says the counts in one line, warns in one
more when val/ or test/ holds copies of training files, lists every group in
``<train.out_dir>/duplicates.csv`` and does what ``data.duplicates`` says:

- ``warn`` (the default): train on every file;
- ``drop``: each group keeps one file, its first in train/, else in val/, else
  in test/ (by path); the others are left out: the val/ and test/ copies of
  training files and the repeats within a split. The main process decides and
  every process of a torchrun job trains on its list (``agreed``); ``evaluate``
  leaves the same files out;
- ``error``: stop in one line naming the count, the CSV and the fix.

``exact_duplicates(root, cfg)`` gives the groups without training (the
``audit`` command): the checks of training first (a bad file refused or left
out as ``data.on_bad_file`` says), then a list of ``DuplicateGroup``;
``csv_rows`` turns them into rows of the audit's columns.

Cost, and why this design. Same bytes: a SHA-256 of each file, made while its
check reads it anyway (``bad_files.examine``: one read gives the header and
the digest) and kept beside the check's verdict in the file index
(``file_index.py``): a second start reads no unchanged file. Same pixels needs
a decode, 5 to 50 times the cost of reading and hashing a file, so it is made
only where it can find something: two files hold the same pixels only if their
decoded pictures have the same size, so a file is decoded only when another
file with other bytes has its picture size (one decode a group of equal
bytes), and what the decode found is kept in the index too. A folder of
pictures of many sizes (web images) then decodes few files; one of a single
size (a camera's photos, a resized data set) decodes each once, on the first
start. The pixels are this run's, by the decode contract (``decode.open_rgb``
at the evaluation resize's side): what every path of the run reads, so a
12-megapixel JPEG is decoded at 1/8 of its size (about 12 ms, not 250 ms).
A digest is kept with that scale and made again only when another image
size changes the scale; ``data.on_bad_file=skip`` decodes every file for its
check and keeps the digest then. The decodes run in threads: Pillow and
hashlib release the GIL while they work.

Shards (``pack-shards``) have no file index: pack-shards finds the groups as a
start from the folder would and records them in its manifest, and a start from
the shards reads them there; a pack made before records none, and the start
says that the check was skipped.
"""

from __future__ import annotations

import csv
import io
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torchvision import datasets

from ..core.config import DataConfig
from ..core.distributed import World
from ..core.errors import UserError
from ..core.files import write_atomically
from ..core.progress import tracked
from . import decode  # decode.read_file: the one place a file is read (the tests count them there)
from .bad_files import READ_ERRORS, Problems, bombs_refused, reason
from .file_index import BAD, FileIndex, Found, pixel_digest, scale_of

SPLITS = ("train", "val", "test")  # a group keeps its first file in this order, then by path
CSV_NAME = "duplicates.csv"
# The audit's columns (kind, split, path, class, score, then the kind's own), and this list's: group, left_out.
COLUMNS = ("kind", "split", "path", "class", "score", "duplicate_of", "duplicate_split", "same", "group", "left_out")
THREADS = 8  # decodes at once, at most (and no more than the CPU cores)


@dataclass(frozen=True)
class Copy:
    """One file of a group: its split, its path as the dataset lists it, its class folder, its bytes' digest."""

    split: str
    path: str
    label: str
    digest: str

    def order(self) -> tuple[int, str]:
        return SPLITS.index(self.split), self.path


@dataclass(frozen=True)
class DuplicateGroup:
    """Files with the same content. ``files[0]`` is the one ``drop`` keeps: the first in train/, val/, test/."""

    files: tuple[Copy, ...]

    @property
    def kept(self) -> Copy:
        return self.files[0]

    @property
    def copies(self) -> tuple[Copy, ...]:
        return self.files[1:]

    def same(self, copy: Copy) -> str:
        """``bytes`` where ``copy`` holds the kept file's bytes, else ``pixels`` (e.g. a PNG saved again)."""
        return "bytes" if copy.digest == self.kept.digest else "pixels"

    @property
    def leaks(self) -> tuple[Copy, ...]:
        """Its val/ and test/ files when it holds a training file: what makes their figures measure memory."""
        return tuple(c for c in self.copies if c.split != "train") if self.kept.split == "train" else ()


def decoded_size(found: Found, min_side: int | None) -> tuple[int, int]:
    """The decoded picture's sides, shorter first (an EXIF turn swaps them), at the contract's scale (Pillow's draft
    rounds up): two files can hold the same pixels only if these are equal."""
    scale = scale_of(found, min_side)
    sides = (-(-found.width // scale), -(-found.height // scale))
    return min(sides), max(sides)


# A file as find_groups sees it: its split, its path as the dataset lists it, its class folder, what its check found.
Entry = tuple[str, str, str, Found]


def entry_order(entry: Entry) -> tuple[int, str]:
    return SPLITS.index(entry[0]), entry[1]


def find_groups(
    files: Iterable[Entry], min_side: int | None, pixels: Callable[[list[Entry]], list[str | None]]
) -> list[DuplicateGroup]:
    """Groups of two or more ``files`` with the same bytes or the same pixels, in the order of their kept file.

    ``pixels`` gives the pixel digests of the files asked (None: it cannot be decoded); it is asked only for
    one file a group of equal bytes (its first), and only where another such group has a picture of the same
    size. Written for a second start of 100,000 files (benchmarks/startup.py): no object made a file, sizes
    computed once a picture shape.
    """
    first: dict[str, Entry] = {}  # bytes digest -> its file (the first in split and path order, where several)
    same_bytes: dict[str, list[Entry]] = {}  # bytes digest -> its files, where several
    for entry in files:  # no list a file: 100,000 of them, made and dropped, cost the garbage collector seconds
        seen = first.setdefault(entry[3].digest, entry)
        if seen is not entry:
            same_bytes.setdefault(entry[3].digest, [seen]).append(entry)
    for digest, members in same_bytes.items():
        first[digest] = min(members, key=entry_order)
    sizes: dict[tuple[int, int, bool], tuple[int, int]] = {}  # (width, height, jpeg) -> decoded size: few shapes

    def size(found: Found) -> tuple[int, int]:
        shape = (found.width, found.height, found.jpeg)
        return sizes.get(shape) or sizes.setdefault(shape, decoded_size(found, min_side))

    pictures = [entry for entry in first.values() if entry[3].width]  # a .npy array has its bytes alone
    counts = Counter(size(entry[3]) for entry in pictures)
    candidates = [entry for entry in pictures if counts[size(entry[3])] > 1]
    owner: dict[str, str] = {}  # pixel digest -> the first group of equal bytes that has it
    same_pixels: dict[str, list[str]] = {}  # pixel digest -> its groups of equal bytes, where several
    for entry, found_pixels in zip(candidates, pixels(candidates), strict=True):
        if found_pixels is not None and owner.setdefault(found_pixels, entry[3].digest) != entry[3].digest:
            same_pixels.setdefault(found_pixels, [owner[found_pixels]]).append(entry[3].digest)
    merged = list(same_pixels.values())
    joined = {digest for digests in merged for digest in digests}
    merged += [[digest] for digest in same_bytes if digest not in joined]
    groups = []
    for digests in merged:
        members = [entry for digest in digests for entry in same_bytes.get(digest, [first[digest]])]
        copies = [Copy(split, path, label, found.digest) for split, path, label, found in members]
        groups.append(DuplicateGroup(tuple(sorted(copies, key=Copy.order))))
    return sorted(groups, key=lambda group: group.kept.order())


class FilePixels:
    """``find_groups``' ``pixels`` for a folder: a digest remembered in the file index at this scale, else the file
    decoded (in threads) and its digest recorded there. A file that cannot be decoded is recorded as bad (the next
    start's check names it) and added to ``problems`` (None: left to the loader, which skips it)."""

    def __init__(
        self, indexes: dict[str, FileIndex], min_side: int | None, problems: Problems | None, progress: bool
    ) -> None:
        self.indexes, self.min_side, self.problems, self.progress = indexes, min_side, problems, progress

    def decode(self, entry: Entry) -> tuple[str | None, str]:
        """(the pixel digest, "") or (None, why it cannot be decoded)."""
        path, found = entry[1], entry[3]
        try:
            return bombs_refused(lambda p: pixel_digest(decode.read_file(p), found, self.min_side), path), ""
        except READ_ERRORS as exc:
            return None, reason(exc, path)

    def __call__(self, entries: list[Entry]) -> list[str | None]:
        prefixes: dict[tuple[int, int, bool], str] = {}  # (width, height, jpeg) -> "<scale>:" of this run

        def kept(found: Found) -> str | None:
            shape = (found.width, found.height, found.jpeg)
            prefix = prefixes.get(shape) or prefixes.setdefault(shape, f"{scale_of(found, self.min_side)}:")
            return found.pixels if found.pixels.startswith(prefix) else None

        known = [kept(entry[3]) for entry in entries]
        todo = [entry for entry, digest in zip(entries, known, strict=True) if digest is None]
        threads = max(1, min(THREADS, os.cpu_count() or 1, len(todo)))
        with ThreadPoolExecutor(threads) as pool:  # Pillow's decoders and hashlib release the GIL
            decoded = tracked(pool.map(self.decode, todo), "comparing pixels", len(todo), self.progress)
            made = {entry[1]: result for entry, result in zip(todo, decoded, strict=True)}
        for split, path, _, found in todo:
            digest, why = made[path]
            index = self.indexes[split]
            if digest is None:
                index.record(path, Found(BAD + why))  # named at this start, and by the next one's check
                if self.problems is not None:
                    self.problems.add(index.root, unreadable=[(path, why)])
            else:
                index.record(path, found._replace(pixels=digest))
        return [made[entry[1]][0] if digest is None else digest for entry, digest in zip(entries, known, strict=True)]


def folder_files(sets: dict[str, datasets.DatasetFolder], indexes: dict[str, FileIndex]) -> list[Entry]:
    """Every readable file of ``sets`` (by split) with what its check found (a file the check did not see: none)."""
    files = []
    for split, dataset in sets.items():
        index, names = indexes[split], dataset.classes
        found, prefix, cut = index.found, index.prefix, len(index.prefix)
        for path, target in dataset.samples:
            # The scan's paths start with the index's prefix: a cut, not index.relative's call (100,000 files).
            checked = found.get(path[cut:] if path.startswith(prefix) else index.relative(path))
            if checked is not None and checked.digest:  # a bad file has no digest
                files.append((split, path, names[target], checked))
    return files


def folder_groups(
    sets: dict[str, datasets.DatasetFolder],
    indexes: dict[str, FileIndex],
    min_side: int | None,
    problems: Problems | None,
    progress: bool = False,
) -> list[DuplicateGroup]:
    """The groups of a folder's splits, from what their checks found; pixel digests made are kept in the index."""
    groups = find_groups(folder_files(sets, indexes), min_side, FilePixels(indexes, min_side, problems, progress))
    for index in indexes.values():
        index.save()
    return groups


def packed_groups(manifest: dict[str, Any], root: Path) -> list[DuplicateGroup] | None:
    """The groups pack-shards recorded in a packed folder's manifest; None for a pack made before it did."""
    recorded = manifest.get("duplicates")
    if recorded is None:
        return None
    classes = manifest["classes"]

    def copy(entry: list[Any]) -> Copy:
        split, relative, target, digest = entry
        return Copy(split, os.path.join(str(root / split), relative), classes[target], digest)

    return [DuplicateGroup(tuple(copy(entry) for entry in group)) for group in recorded]


def recorded(groups: list[DuplicateGroup], root: Path, classes: list[str]) -> list[list[list[Any]]]:
    """``groups`` as pack-shards records them in the manifest: paths below their split, the class by its index in
    ``classes`` (the manifest's, train/'s)."""

    def entry(copy: Copy) -> list[Any]:
        relative = os.path.relpath(copy.path, root / copy.split).replace(os.sep, "/")
        return [copy.split, relative, classes.index(copy.label), copy.digest]

    return [[entry(copy) for copy in group.files] for group in groups]


def csv_rows(groups: Iterable[DuplicateGroup], left_out: set[str] | frozenset[str] = frozenset()) -> list[list[Any]]:
    """One row a copy, in ``COLUMNS``' order: the audit's ``exact_duplicates.csv`` (its first eight columns) and the
    run's ``duplicates.csv``. A group's kept file is each of its rows' ``duplicate_of``."""
    rows = []
    for number, group in enumerate(groups, 1):
        kept = group.kept
        for copy in group.copies:
            dropped = str(copy.path in left_out).lower()
            row = [copy.split, copy.path, copy.label, 1.0, kept.path, kept.split, group.same(copy), number, dropped]
            rows.append(["exact_duplicate", *row])
    return rows


def write_csv(groups: list[DuplicateGroup], path: Path, left_out: set[str] | frozenset[str] = frozenset()) -> Path:
    """``duplicates.csv``: every group, a row a copy (``csv_rows``), written whole or not at all."""
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(COLUMNS)
    writer.writerows(csv_rows(groups, left_out))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda handle: handle.write(text.getvalue().encode()))
    return path


def left_out(groups: Iterable[DuplicateGroup]) -> list[str]:
    """What ``data.duplicates=drop`` leaves out: every file of a group but its kept one, sorted."""
    return sorted(copy.path for group in groups for copy in group.copies)


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
    parts = [f"{sum(c.split == s for c in leaks)} in {s}/" for s in splits[1:] if any(c.split == s for c in leaks)]
    where = [f"{' and '.join(parts)} of train/ files"] if parts else []
    others = len(copies) - len(leaks)
    where += [f"{others} within a split{' or between val/ and test/' if 'test' in splits else ''}"] if others else []
    mixed = sum(len({copy.label for copy in group.files}) > 1 for group in groups)
    where += [f"{mixed} group(s) across class folders (one picture, two labels)"] if mixed else []
    return (
        f"duplicates: {len(copies)} of the {files:,} files of {named} repeat another file's content "
        f"({len(copies) - by_pixels} the same bytes, {by_pixels} the same pixels only), in {len(groups)} group(s): "
        f"{', '.join(where)}{listed_in(listed)}"
    )


def leak_warning(groups: list[DuplicateGroup], listed: Path | None) -> str | None:
    """One line when val/ or test/ holds copies of training files: what they do to the figures, and the fix."""
    leaks = [copy for group in groups for copy in group.leaks]
    if not leaks:
        return None
    val, test = sum(c.split == "val" for c in leaks), sum(c.split == "test" for c in leaks)
    held = " and ".join(f"{n} {split}/" for n, split in ((val, "val"), (test, "test")) if n)
    return (
        f"warning: {held} file(s) are copies of training files: the model is scored on pictures it trained on, "
        f"so val_acc{' and test_acc' if test else ''} partly measure memory, not what it learnt, and best.pt is "
        f"chosen by val_acc; set data.duplicates=drop to leave them out, or remove them{listed_in(listed)}"
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


def settle(
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


def exact_duplicates(root: str | Path, cfg: DataConfig, progress: bool = False) -> list[DuplicateGroup]:
    """Every group of exact duplicates in ``root``'s train/, val/ and test/, without training (the ``audit``).

    The files are listed and checked as a training start checks them
    (``folders.folder_dataset``: a bad file stops it in one line, or is left out
    under ``data.on_bad_file=skip``), with the same file index: after a start,
    nothing unchanged is read again. A packed folder gives what pack-shards
    recorded (an older pack: none, and one line says so).
    """
    from .folders import checked_splits  # folders builds on this module: imported when called

    root = Path(root)
    found = checked_splits(root, cfg, progress)
    return found.groups if found.groups is not None else []
