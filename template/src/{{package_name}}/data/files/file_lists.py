"""``data.exclude`` and ``data.relabel``: files a run leaves out, or reads under another class, with none moved.

The audit writes both lists beside its CSVs (``write_exclude``, ``write_relabel``): ``exclude.txt``, the val/ and
test/ member of every pair across splits (exact or near copies), one path a line; ``relabel.csv``, the path and
suggested class of each label issue above the audit's score. Training, ``evaluate`` and the audit read them
through the config (``read_lists``), so the choice lives in the run's config.yaml and, by digest, in its
provenance, and the files on disk stay where they are.

A path is relative to ``data.root`` (``val/cat/0001.jpg``): a list stays true when the data moves, and a packed
``data.root`` (pack-shards) lists its samples under the same paths. An absolute path, or one that starts with
``data.root`` as the config writes it, is read as the same file. Leaving out happens right after a split's folder
is listed, before its files are checked or indexed (``folders.folder_dataset``): every process of a torchrun job
reads the same list and leaves out the same files, the sampler and caches see a shorter list, the class indices
(from the folders) stay; a relabel names a class of train/, so no index moves.
"""

from __future__ import annotations

import csv
import io
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from torchvision import datasets

from ...core.config import DataConfig
from ...core.errors import UserError
from .bad_files import leave_out, listing

EXCLUDE_NAME, RELABEL_NAME = "exclude.txt", "relabel.csv"  # what the audit writes
SPLIT_NAMES = ("train", "val", "test")
EXAMPLE = "e.g. val/cat/0001.jpg, relative to data.root"


@dataclass(frozen=True)
class FileLists:
    """The two lists, by path relative to ``data.root`` (``split/class/.../file``, with ``/``)."""

    exclude: frozenset[str] = frozenset()
    relabel: dict[str, str] = field(default_factory=dict)  # path -> the class it is read under
    files: dict[str, str] = field(default_factory=dict)  # "exclude" / "relabel" -> the list file, as configured

    def __bool__(self) -> bool:
        return bool(self.files)


def read_lists(cfg: DataConfig) -> FileLists:
    """Both lists of the config, checked line by line: a malformed one is one error line naming the line."""
    root = Path(cfg.root)
    exclude = frozenset(read_exclude(Path(cfg.exclude), root)) if cfg.exclude else frozenset()
    relabel = read_relabel(Path(cfg.relabel), root) if cfg.relabel else {}
    files = {key: str(value) for key, value in (("exclude", cfg.exclude), ("relabel", cfg.relabel)) if value}
    return FileLists(exclude, relabel, files)


def list_text(path: Path, key: str) -> str:
    """The list file's text; missing, unreadable or not text: one line."""
    try:
        return path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise UserError(
            f"data.{key} {path} not found: point it at the list audit wrote (<audit folder>/"
            f"{EXCLUDE_NAME if key == 'exclude' else RELABEL_NAME}), or set data.{key}: null"
        ) from None
    except OSError as exc:
        raise UserError(f"data.{key} {path} cannot be read ({exc.strerror}): fix its permissions") from None
    except UnicodeDecodeError:
        raise UserError(f"data.{key} {path} is not a text file: give the list audit wrote") from None


def relative(line: str, root: Path, where: str) -> str:
    """A list's path as a path relative to ``data.root``; ``where`` names the file and line for the error."""
    text = line.strip().replace("\\", "/")
    if os.path.isabs(text):
        text = os.path.relpath(text, os.path.abspath(root))
    else:
        prefix = os.path.normpath(str(root)).replace("\\", "/") + "/"
        text = text[len(prefix) :] if text.startswith(prefix) and prefix != "./" else text
    text = os.path.normpath(text).replace("\\", "/")
    parts = text.split("/")
    if parts[0] not in SPLIT_NAMES or len(parts) < 3:
        raise UserError(
            f"{where}: {line.strip()!r} is not a file of data.root's train/, val/ or test/ (one path a line, "
            f"{EXAMPLE}): give the list audit wrote, or fix that line"
        )
    return text


def read_exclude(path: Path, root: Path) -> list[str]:
    """``data.exclude``: one path a line; blank lines and lines starting with # are skipped."""
    lines = list_text(path, "exclude").splitlines()
    return [
        relative(line, root, f"data.exclude {path} line {number}")
        for number, line in enumerate(lines, 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]


def read_relabel(path: Path, root: Path) -> dict[str, str]:
    """``data.relabel``: a CSV with the columns ``path`` and ``suggested_class`` (others, e.g. ``class`` and
    ``score``, are for the reader); a path given two classes is refused."""
    reader = csv.DictReader(io.StringIO(list_text(path, "relabel")))
    if not {"path", "suggested_class"} <= set(reader.fieldnames or ()):
        raise UserError(
            f"data.relabel {path} has no path and suggested_class columns (its header: "
            f"{','.join(reader.fieldnames or []) or 'none'}): give the relabel.csv audit wrote, or a CSV with the "
            "header path,suggested_class"
        )
    found: dict[str, str] = {}
    try:
        for row in reader:
            where = f"data.relabel {path} line {reader.line_num}"
            name = (row.get("suggested_class") or "").strip()
            if not name or not (row.get("path") or "").strip():
                raise UserError(f"{where}: a path and a suggested_class are needed on every line, {EXAMPLE}")
            file = relative(row["path"], root, where)
            if found.get(file, name) != name:
                raise UserError(f"{where}: {file} is given two classes, {found[file]} and {name}: keep one")
            found[file] = name
    except csv.Error as exc:
        raise UserError(f"data.relabel {path} line {reader.line_num} is no CSV ({exc}): fix that line") from None
    return found


def key_of(sample: str, root: Path) -> str:
    """A dataset's sample path (``data.root``/split/class/file, as listed) relative to ``data.root``."""
    prefix = os.path.join(str(root), "")
    text = sample[len(prefix) :] if sample.startswith(prefix) else os.path.relpath(sample, root)
    return text.replace("\\", "/")


@dataclass
class ListUse:
    """What the lists did to the splits read, to be said once: the files left out and relabelled by split, and the
    listed files that no split read held (``missing``)."""

    lists: FileLists
    root: Path
    held: set[str] = field(default_factory=set)  # listed paths found in a split read
    splits: list[str] = field(default_factory=list)  # the splits read
    left: Counter = field(default_factory=Counter)  # split -> files left out
    moved: Counter = field(default_factory=Counter)  # split -> files read under another class

    def leave_out(self, dataset: datasets.DatasetFolder, split: str) -> None:
        """The split's listed files out of ``dataset`` (right after the folder is listed: before any check)."""
        self.splits.append(split)
        if not self.lists:
            return
        keys = {path: key_of(path, self.root) for path, _ in dataset.samples}
        self.held |= {key for key in keys.values() if key in self.lists.exclude or key in self.lists.relabel}
        gone = [path for path, key in keys.items() if key in self.lists.exclude]
        leave_out(dataset, gone)
        self.left[split] += len(gone)

    def relabel(self, dataset: datasets.DatasetFolder, split: str) -> None:
        """The split's listed files read under their suggested class (after ``align_classes``: train/'s indices)."""
        if not self.lists.relabel:
            return
        index = dataset.class_to_idx
        unknown = sorted({name for name in self.lists.relabel.values() if name not in index})
        if unknown:
            raise UserError(
                f"data.relabel {self.lists.files['relabel']} names class(es) that train/ has no folder of: "
                f"{listing(unknown)}; relabel only to an existing class ({listing(list(index))})"
            )
        samples = []
        for path, target in dataset.samples:
            name = self.lists.relabel.get(key_of(path, self.root))
            new = target if name is None else index[name]
            self.moved[split] += new != target
            samples.append((path, new))
        dataset.samples = dataset.imgs = samples
        dataset.targets = [target for _, target in samples]

    def missing(self, key: str) -> list[str]:
        """The paths of list ``key`` (exclude, relabel), in the splits read, that none of them held (moved, renamed
        or deleted since the list was written)."""
        listed = self.lists.exclude if key == "exclude" else set(self.lists.relabel)
        return sorted(path for path in set(listed) - self.held if path.split("/", 1)[0] in self.splits)

    def lines(self) -> list[str]:
        """The start's lines: how many files each list changed, by split, and a warning naming its stale paths."""
        said = []
        for key, counts in (("exclude", self.left), ("relabel", self.moved)):
            if key not in self.lists.files:
                continue
            file = self.lists.files[key]
            parts = ", ".join(f"{counts[split]} of {split}/" for split in self.splits if counts[split]) or "none"
            done = "left out" if key == "exclude" else "read under the class the list gives them"
            said.append(f"data.{key} {file}: {sum(counts.values())} file(s) {done} ({parts}); no file moved")
            stale = self.missing(key)
            if stale:
                said.append(
                    f"warning: data.{key} {file} names {len(stale)} file(s) that data.root does not hold (moved, "
                    f"renamed or deleted since?): {listing(stale)}; they are ignored: audit again to write it afresh"
                )
        return said


def write_exclude(path: Path, keys: set[str]) -> Path:
    """The audit's ``exclude.txt``: one path a line (relative to ``data.root``), sorted; written whole or not."""
    return write_list(path, "".join(f"{key}\n" for key in sorted(keys)))


def write_relabel(path: Path, rows: dict[str, tuple[str, str, float]]) -> Path:
    """The audit's ``relabel.csv``: path, suggested_class, then the folder's class and the score, by path."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["path", "suggested_class", "class", "score"])
    for key in sorted(rows):
        suggested, label, score = rows[key]
        writer.writerow([key, suggested, label, f"{score:.6f}"])
    return write_list(path, text.getvalue())


def write_list(path: Path, text: str) -> Path:
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(text)
        partial.replace(path)  # whole or not at all: a list read back is never half a list
    except OSError as exc:
        raise UserError(f"cannot write {path} ({exc.strerror}): pass audit --out a writable folder") from None
    return path
