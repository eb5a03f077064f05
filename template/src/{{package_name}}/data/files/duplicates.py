"""Exact duplicates: files with the same bytes, or the same pixels by the decode contract, in train/, val/ and test/.

A photo in both train/ and val/ makes val_acc measure memory, and best.pt is
chosen by it. Every start finds such files before training
(``folders.checked_splits``), as ``DuplicateGroup``s: each group's first file
in train/, else val/, else test/ (by path) is the one ``data.duplicates: drop``
keeps (``left_out``). What a start says and does about them, as
``data.duplicates`` asks (warn, drop, error), is ``start_checks.py``'s;
``duplicates.csv`` in the run folder lists every group (``write_csv``).

``folders.checked_splits(root, cfg).groups`` gives the groups without
training (the ``audit`` command, ``evaluate``): the checks of training first
(a bad file refused or left out as ``data.on_bad_file`` says), then a list of
``DuplicateGroup``; ``csv_rows`` turns them into rows of the audit's columns.

Cost, and why this design. Every new or changed file is read whole once at
start (``bad_files.examine``), so that an unreadable file of any split is named
before training with all the others; the digests are made in that read: the
SHA-256 of its bytes, and that of its pixels from its decode by the contract
(``decode.open_rgb`` at the evaluation resize's side: what every path of the
run reads, so a 12-megapixel JPEG is decoded at 1/8 of its size, 13 ms, not
250 ms in full). Both are kept beside the check's verdict in the file index
(``file_index.py``): a later start reads no unchanged file and finds the
groups from the index alone. A JPEG that the run decodes at reduced scale is
also compared whole with the lossless files (PNG, WebP, TIFF) of its size: a
photo saved again as PNG holds its whole picture, not the run's 1/8 of it; that
full decode is made only for such a JPEG (a folder of photos alone never makes
one). That whole read is the first start's cost (it
opened headers alone before): about 80 us a 32-px PNG, 500 us a 64-px one,
13 ms a phone photo, on a busy 2-core EPYC; 100,000 files' first start took
27 s, not 18 s, their second 4.6 s as before (benchmarks/startup.py). A
cheaper design that decoded only files that could match (same picture size,
other bytes) decoded every file of a folder of one picture size anyway, and
left a truncated file to a later run. A digest is kept with the scale it was
made at; when another image size changes a JPEG's scale, it is decoded again
only where it can match: two files hold the same pixels only if their decoded
pictures have the same size (``FilePixels``, in ``bad_files.threads``).
Hand-written (about 40 lines, ``find_groups``) rather than a library:
imagededup, cleanvision and fastdup hash or embed pictures to find near
copies and would decode every file again; exact equality of the contract's
pixels is a dictionary of digests.

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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchvision import datasets

from ...core.config import DataConfig
from ...core.files import write_atomically
from ...core.progress import tracked
from ..decoding import decode
from ..decoding.decode import square_side
from .bad_files import READ_ERRORS, Problems, bombs_refused, reason, threads
from .file_index import BAD, FileIndex, Found, pixel_digest, scale_of
from .layout import is_packed

SPLITS = ("train", "val", "test")  # a group keeps its first file in this order, then by path
CSV_NAME = "duplicates.csv"
# The audit's columns (kind, split, path, class, score, then the kind's own), and this list's: group, left_out.
COLUMNS = ("kind", "split", "path", "class", "score", "duplicate_of", "duplicate_split", "same", "group", "left_out")


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
# The digests (hex) of files' pictures, as the run decodes them or (True) whole; None where one cannot be decoded.
Pixels = Callable[[list[Entry], bool], list[str | None]]


def entry_order(entry: Entry) -> tuple[int, str]:
    return SPLITS.index(entry[0]), entry[1]


def full_size(found: Found) -> tuple[int, int]:
    """The picture's sides as stored, shorter first (an EXIF turn swaps them)."""
    return min(found.width, found.height), max(found.width, found.height)


class Links:
    """Groups of equal bytes found to hold the same pixels, joined: each digest -> one it joined (a union-find)."""

    def __init__(self) -> None:
        self.up: dict[str, str] = {}

    def root(self, digest: str) -> str:
        while digest in self.up:
            digest = self.up[digest]
        return digest

    def join(self, one: str, two: str) -> None:
        one, two = self.root(one), self.root(two)
        if one != two:
            self.up[max(one, two)] = min(one, two)  # by digest: the same groups whatever the order of the files

    def components(self, others: Iterable[str]) -> list[list[str]]:
        """The joined digests, and ``others`` alone, each with those it joined."""
        joined: dict[str, list[str]] = {}
        for digest in {*others, *self.up, *self.up.values()}:
            joined.setdefault(self.root(digest), []).append(digest)
        return list(joined.values())


def whole_matches(pictures: list[Entry], min_side: int | None, pixels: Pixels) -> Iterator[tuple[str, str]]:
    """(JPEG, lossless file) digest pairs with the same whole picture: a JPEG the run decodes at reduced scale, and a
    PNG, WebP or TIFF of its size (a photo saved again holds its whole picture, not the run's 1/8 of it)."""
    reduced = [entry for entry in pictures if entry[3].jpeg and scale_of(entry[3], min_side) > 1]
    wanted = {full_size(entry[3]) for entry in reduced}  # none, in a folder of small pictures: nothing more to do
    lossless: dict[tuple[int, int], list[Entry]] = {}
    for entry in pictures if wanted else []:
        if not entry[3].jpeg and full_size(entry[3]) in wanted:
            lossless.setdefault(full_size(entry[3]), []).append(entry)
    reduced = [entry for entry in reduced if full_size(entry[3]) in lossless]
    for entry, whole in zip(reduced, pixels(reduced, True), strict=True):
        for other in lossless[full_size(entry[3])] if whole is not None else []:
            if other[3].pixels.partition(":")[2] == whole:  # a lossless file's digest is of its whole picture
                yield entry[3].digest, other[3].digest


def find_groups(files: Iterable[Entry], min_side: int | None, pixels: Pixels) -> list[DuplicateGroup]:
    """Groups of two or more ``files`` with the same bytes or the same pixels, in the order of their kept file.

    Same pixels: the same picture as this run decodes them (a JPEG larger than needed at 1/2, 1/4 or 1/8), or a
    lossless file holding a JPEG's whole picture (``whole_matches``). ``pixels(files, whole)`` gives the digests
    of the files asked, as the run decodes them or (``whole``) at full size (None: it cannot be decoded); it is
    asked only where a match is possible: for one file a group of equal bytes (its first), where another group
    has a picture of the same size. Written for a second start of 100,000 files (benchmarks/startup.py): no
    object made a file, sizes computed once a picture shape.
    """
    first: dict[str, Entry] = {}  # bytes digest -> its file (the first in split and path order, where several)
    same_bytes: dict[str, list[Entry]] = {}  # bytes digest -> its files, where several
    for entry in files:  # no list a file: 100,000 of them, made and dropped, cost the garbage collector seconds
        seen = first.setdefault(entry[3].digest, entry)
        if seen is not entry:
            same_bytes.setdefault(entry[3].digest, [seen]).append(entry)
    for digest, members in same_bytes.items():
        first[digest] = min(members, key=entry_order)
    sizes: dict[tuple[int, int, int], tuple[int, int]] = {}  # (width, height, jpeg) -> decoded size: few shapes

    def size(found: Found) -> tuple[int, int]:
        shape = (found.width, found.height, found.jpeg)
        return sizes.get(shape) or sizes.setdefault(shape, decoded_size(found, min_side))

    pictures = [entry for entry in first.values() if entry[3].width]  # a .npy array has its bytes alone
    counts = Counter(size(entry[3]) for entry in pictures)
    candidates = [entry for entry in pictures if counts[size(entry[3])] > 1]
    links, owner = Links(), {}  # owner: pixel digest -> the first group of equal bytes that has it
    for entry, found_pixels in zip(candidates, pixels(candidates, False), strict=True):
        if found_pixels is not None:
            links.join(owner.setdefault(found_pixels, entry[3].digest), entry[3].digest)
    for jpeg, lossless in whole_matches(pictures, min_side, pixels):
        links.join(jpeg, lossless)
    groups = []
    for digests in links.components(same_bytes):
        members = [entry for digest in digests for entry in same_bytes.get(digest, [first[digest]])]
        copies = [Copy(split, path, label, found.digest) for split, path, label, found in members]
        groups.append(DuplicateGroup(tuple(sorted(copies, key=Copy.order))))
    return sorted(groups, key=lambda group: group.kept.order())


class FilePixels:
    """``find_groups``' ``pixels`` for a folder: a digest remembered in the file index, else the file decoded (in
    ``bad_files.threads``) and its digest recorded there. A file that cannot be decoded is recorded as bad (the
    next start's check names it) and added to ``problems`` (None: left to the loader, which skips it)."""

    def __init__(
        self, indexes: dict[str, FileIndex], min_side: int | None, problems: Problems | None, progress: bool
    ) -> None:
        self.indexes, self.min_side, self.problems, self.progress = indexes, min_side, problems, progress

    def decode(self, entry: Entry, whole: bool) -> tuple[str | None, str]:
        """(the pixel digest as ``"<scale>:<hex>"``, "") or (None, why it cannot be decoded)."""
        path, found, side = entry[1], entry[3], None if whole else self.min_side
        try:
            return bombs_refused(lambda p: pixel_digest(decode.read_file(p), found, side), path), ""
        except READ_ERRORS as exc:
            return None, reason(exc, path)

    def __call__(self, entries: list[Entry], whole: bool) -> list[str | None]:
        """The digests (hex, without the scale) of ``entries``' pictures as this run decodes them, or ``whole``."""
        prefixes: dict[tuple[int, int, int], str] = {}  # (width, height, jpeg) -> "<scale>:" of this run

        def kept(found: Found) -> str | None:
            if whole:
                return found.whole or None
            shape = (found.width, found.height, found.jpeg)
            prefix = prefixes.get(shape) or prefixes.setdefault(shape, f"{scale_of(found, self.min_side)}:")
            return found.pixels.partition(":")[2] if found.pixels.startswith(prefix) else None

        remembered = [kept(entry[3]) for entry in entries]
        todo = [entry for entry, digest in zip(entries, remembered, strict=True) if digest is None]
        with threads(len(todo)) as pool:
            decoded = pool.map(lambda entry: self.decode(entry, whole), todo)
            what = "comparing whole pictures" if whole else "comparing pixels"
            made = dict(zip((e[1] for e in todo), tracked(decoded, what, len(todo), self.progress), strict=True))
        for split, path, _, _ in todo:
            digest, why = made[path]
            index, now = self.indexes[split], self.indexes[split].get(path)  # now: with what this start added
            if digest is None:
                index.record(path, Found(BAD + why))  # named at this start, and by the next one's check
                if self.problems is not None:
                    self.problems.add(index.root, unreadable=[(path, why)])
            elif now is not None:
                index.record(
                    path, now._replace(whole=digest.partition(":")[2]) if whole else now._replace(pixels=digest)
                )
        fresh = {path: digest.partition(":")[2] for path, (digest, _) in made.items() if digest is not None}
        return [fresh.get(e[1]) if digest is None else digest for e, digest in zip(entries, remembered, strict=True)]


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


def found_at_start(
    root: Path,
    sets: dict[str, datasets.DatasetFolder],
    indexes: dict[str, FileIndex],
    cfg: DataConfig,
    problems: Problems,
    progress: bool = False,
) -> list[DuplicateGroup] | None:
    """The groups a start acts on (the main process's): a packed folder's, as pack-shards recorded them (None, and
    a line, for a pack made before it did), else found from what the checks kept. A file decoded again at another
    image size's scale that fails now is named with the other problems (data.on_bad_file=skip: left to the loader,
    which skips it, since the other processes could not leave it out)."""
    if is_packed(root):
        from .shards import read_manifest  # the shards part: is_packed says it is there (core/parts.py)

        groups = packed_groups(read_manifest(root), root)
        if groups is None:
            print(f"duplicates: not checked: {root} was packed before pack-shards recorded them; pack it again")
        return groups
    named = problems if cfg.on_bad_file == "error" else None
    return folder_groups(sets, indexes, square_side(cfg), named, progress)


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
