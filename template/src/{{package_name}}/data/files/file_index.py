"""What the per-file checks found, remembered between runs: a second start opens no file it has checked.

One JSON file per split in the cache folder (``store.cache_folder``; with
``data.cache_dir: none``, in the run folder's ``file_index/``, so that a
restarted or requeued run does not check again: ``index_folder``)
maps each file, by its path below the split, to the (size, mtime_ns) it had
when checked and what the check found (``Found``): its verdict, a digest of
its bytes, the picture's stored size, and, once the exact-duplicate check
(``duplicates.py``) needed it, a digest of its decoded pixels. A file whose
size or mtime changed, or that is new, is checked again; one that is gone is
dropped when the index is saved. The digest of (path, size, mtime_ns) of the
samples, in order, is part of the decoded cache's key (``store.CacheKey``): a
changed file makes a new cache, never a stale one.

A first start of a million files checks for minutes: what it found is kept
as it goes, every ``PART_FILES`` files or ``PART_SECONDS`` seconds, in a part
file of its own beside the index (``<name>.part-<host>-<pid>-<time>.json``,
each written atomically), so that a start killed mid-check resumes where it
stopped. The next whole save folds the parts it read into the index and
removes them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import time
from pathlib import Path
from typing import NamedTuple

from ...core.files import folder_key, write_chunks
from ...core.progress import tracked
from ..decoding import decode
from ..decoding.decode import DECODE_VERSION

# Bump when the file's layout or a verdict's meaning changes: old indexes are then ignored. 2: a bad file's verdict
# holds the reason alone (1 held the whole message, its way out included: a report listing it said that twice).
# 3: every file read whole (2 opened only the header under data.on_bad_file=error), its digests and picture size
# beside its verdict (the exact-duplicate check, duplicates.py).
INDEX_FORMAT = 3
READ = "read"  # the whole file loads, by the decode contract
BAD = "bad: "  # prefix of a verdict that names why the file cannot be read
MISSING = (-1, -1)  # a file listed by the scan that was gone when stat'ed: checked (and reported) as unreadable
DIGEST_CHARS = 24  # hex digits kept of a SHA-256: 96 bits, no accidental match among billions of files
PART_FILES = 20_000  # files checked between two part files at most (about 2 MB of JSON)
PART_SECONDS = 30.0  # seconds of checking between two part files at most: what a kill can cost
RUN_FOLDER = "file_index"  # in train.out_dir: where the index is kept with data.cache_dir=none


class Found(NamedTuple):
    """What the checks found of one file: kept in the index, so that a second start opens no unchanged file."""

    verdict: str  # READ, or BAD + why
    digest: str = ""  # of the file's bytes ("" for a bad file)
    width: int = 0  # the picture as stored (before the EXIF turn); 0 for a .npy array or a bad file
    height: int = 0
    jpeg: int = 0  # 1: the decode contract may decode it at 1/2, 1/4 or 1/8 of that size (decode.reduces)
    pixels: str = ""  # "<scale>:<digest>" of its pixels as decoded at that scale (duplicates.py)
    whole: str = ""  # a JPEG decoded at reduced scale: the digest of its whole picture, once compared whole

    def entry(self, size: int, mtime: int) -> list:
        """The index's JSON list; a bad file's holds its verdict alone."""
        if self.verdict.startswith(BAD):
            return [size, mtime, self.verdict]
        return [size, mtime, self.verdict, self.digest, self.width, self.height, self.jpeg, self.pixels, self.whole]

    @classmethod
    def of(cls, entry: list) -> Found:
        """``entry``'s Found (without its size and mtime); a bad file's entry holds its verdict alone."""
        return cls(*entry[2:])


def bytes_digest(data: bytes) -> str:
    """The digest of a file's bytes: equal for two files only when they hold the same bytes."""
    return hashlib.sha256(data).hexdigest()[:DIGEST_CHARS]


def scale_of(found: Found, min_side: int | None) -> int:
    """1, or the 2, 4 or 8 libjpeg decodes a JPEG at under the decode contract (Pillow's ``draft`` rule: the
    largest that keeps both sides at least ``min_side``; decode.py)."""
    if not found.jpeg or not min_side:
        return 1
    fits = min(found.width // min_side, found.height // min_side)
    return next(scale for scale in (8, 4, 2, 1) if fits >= scale or scale == 1)


def pixel_digest(data: bytes, found: Found, min_side: int | None) -> str:
    """``"<scale>:<digest>"`` of the picture the decode contract makes of ``data`` for a run whose evaluation resize
    has ``min_side`` (the pixels every path reads: decode.open_rgb): equal for two files with the same pixels."""
    image = decode.open_rgb(data, min_side)
    digest = hashlib.sha256(f"{image.width}x{image.height}\n".encode())
    digest.update(image.tobytes())
    return f"{scale_of(found, min_side)}:{digest.hexdigest()[:DIGEST_CHARS]}"


def index_folder(cache: Path | None, setting: str, run_dir: Path | None) -> Path | None:
    """Where a start keeps its file index: the cache folder (``store.cache_folder``), else, with
    ``data.cache_dir=none``, the run folder's ``file_index/`` (``run_dir``: train.out_dir, or the checkpoint's run
    for ``evaluate``); None: nowhere (a folder that cannot be made, or no run)."""
    if cache is not None:
        return cache
    return run_dir / RUN_FOLDER if setting == "none" and run_dir is not None else None


def read_entries(path: Path) -> dict[str, list] | None:
    """The entries of an index or part file; None when absent, unreadable or of another format."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    # A verdict of another decode contract (decode.py) may say "reads" of a file that this one refuses.
    if not isinstance(saved, dict) or (saved.get("format"), saved.get("decode")) != (INDEX_FORMAT, DECODE_VERSION):
        return None
    files = saved.get("files", {})
    return files if isinstance(files, dict) else None


class FileIndex:
    """The split's remembered checks (``known``, ``record``), this start's (size, mtime_ns) of each file."""

    def __init__(self, root: Path, folder: Path | None, keep: bool = True) -> None:
        self.root = Path(root)
        self.keep = keep  # False: read what was found, never write it (a process that is not the node's checker)
        self.prefix = os.path.join(str(root), "")  # the scan's paths start so (ImageFolder joins root and names)
        # Where it is kept: None (data.cache_dir=none outside a run) remembers nothing between runs.
        self.path = folder / f"{folder_key(self.root)}.files.json" if folder is not None else None
        self.parts: list[Path] = []  # the part files read or written by this start: folded in by the next save
        self.saved: dict[str, list] = self.load()  # relative path -> [size, mtime_ns, *Found.entry]
        self.now: dict[str, tuple[int, int]] = {}  # relative path -> (size, mtime_ns), stat'ed at this start
        self.found: dict[str, Found] = {}  # relative path -> what was found, for the files of this start
        self.changed = False
        self.fresh: dict[str, list] = {}  # entries checked since the last part file (``keep_checked``)
        self.part_started = time.monotonic()

    def load(self) -> dict[str, list]:
        """The saved entries and those of the part files beside them (a check cut short); none when absent,
        unreadable or of another format (they are then made again)."""
        if self.path is None:
            return {}
        saved = read_entries(self.path) or {}
        parts = []
        with contextlib.suppress(OSError):  # no folder yet: no parts
            parts = [(part.stat().st_mtime_ns, part) for part in self.path.parent.glob(f"{self.path.stem}.part-*.json")]
        for _, part in sorted(parts):  # the later part wins, as the later check
            entries = read_entries(part)
            if entries is not None:
                saved.update(entries)
                self.parts.append(part)
        return saved

    def stat(self, paths: list[str], show: bool = False) -> None:
        """The (size, mtime_ns) of each file now: a file stat'ed before it is checked is checked again if it changes."""
        for path in tracked(paths, f"reading file dates in {self.root}", len(paths), show):
            try:
                info = os.stat(path)
                self.now[self.relative(path)] = (info.st_size, info.st_mtime_ns)
            except OSError:
                self.now[self.relative(path)] = MISSING

    def relative(self, path: str) -> str:
        """The path below the split; a plain cut for the scan's own paths (``os.path.relpath`` costs 20x more)."""
        return path[len(self.prefix) :] if path.startswith(self.prefix) else os.path.relpath(path, self.root)

    def known(self, path: str) -> Found | None:
        """What was found, if the file is unchanged (a bad file stays bad until it changes)."""
        name = self.relative(path)
        entry, now = self.saved.get(name), self.now.get(name)
        if entry is None or now is None or now == MISSING or tuple(entry[:2]) != now:
            return None
        found = self.found[name] = Found.of(entry)
        return found

    def record(self, path: str, found: Found) -> None:
        """What a check found (``Found``); also a pixel digest made again at another scale (duplicates.py)."""
        name = self.relative(path)
        self.found[name] = found
        self.changed = True
        if self.keep and name in self.now:
            self.fresh[name] = found.entry(*self.now[name])

    def keep_checked(self) -> None:
        """During a check: what it found since the last part file, written as a new one every ``PART_FILES`` files
        or ``PART_SECONDS`` seconds (atomically: a kill leaves whole parts), for a start cut short to resume from."""
        if not self.keep or self.path is None or not self.fresh:
            return
        if len(self.fresh) < PART_FILES and time.monotonic() - self.part_started < PART_SECONDS:
            return
        kept = {"format": INDEX_FORMAT, "decode": DECODE_VERSION, "root": str(self.root), "files": self.fresh}
        writer = f"{socket.gethostname()}-{os.getpid()}-{time.time_ns()}"  # a requeued job may get the same pid
        part = self.path.with_name(f"{self.path.stem}.part-{writer}.json")
        with contextlib.suppress(OSError):  # a full or read-only disk: the whole save at the end tries again
            part.parent.mkdir(parents=True, exist_ok=True)
            write_chunks(part, [json.dumps(kept, separators=(",", ":")).encode()])
            self.parts.append(part)
        self.fresh, self.part_started = {}, time.monotonic()

    def get(self, path: str) -> Found | None:
        """What this start found of a file (checked now, or remembered); None for a file no check saw."""
        return self.found.get(self.relative(path))

    def save(self) -> None:
        """Keep the verdicts of this start's files (the gone ones dropped), the part files folded in; atomic, the
        last writer wins."""
        if not self.keep or self.path is None or not self.now:
            return  # nowhere to keep it, or nothing stat'ed (a process that checked nothing)
        if not (self.changed or self.parts or set(self.saved) - set(self.now)):
            return  # nothing new: no check, no part to fold in, no file gone
        files = {name: found.entry(*self.now[name]) for name, found in self.found.items() if name in self.now}
        for name, entry in self.saved.items():  # unchanged files this start did not need to check (e.g. val)
            if name not in files and tuple(entry[:2]) == self.now.get(name):
                files[name] = entry
        kept = {"format": INDEX_FORMAT, "decode": DECODE_VERSION, "root": str(self.root), "files": files}
        text = json.dumps(kept, separators=(",", ":"))
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)  # the run folder's file_index/ (cache_dir=none)
            write_chunks(self.path, [text.encode()])
        except OSError:  # a full or read-only disk: the checks are made again next time (the parts kept, if any)
            return
        for part in self.parts:  # folded in: a later start reads the whole index alone
            with contextlib.suppress(OSError):
                part.unlink()
        self.parts, self.fresh = [], {}

    def digest(self, paths: list[str], show: bool = False) -> str:
        """A hash of (path, size, mtime_ns) of ``paths``, in their order: the decoded cache's key."""
        names = [self.relative(path) for path in paths]
        missing = [path for path, name in zip(paths, names, strict=True) if name not in self.now]
        if missing:  # a process that checked nothing (another local rank) stats the files here
            self.stat(missing, show)
        digest = hashlib.sha256()
        for name in names:
            size, mtime = self.now[name]
            digest.update(f"{name}\t{size}\t{mtime}\n".encode())
        return digest.hexdigest()[:24]
