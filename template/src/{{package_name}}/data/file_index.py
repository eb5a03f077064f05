"""What the per-file checks found, remembered between runs: a second start opens no file it has checked.

One small JSON file per split in the cache folder (``store.cache_folder``)
maps each file, by its path below the split, to the (size, mtime_ns) it had
when checked and what the check found. A file whose size or mtime changed,
or that is new, is checked again; one that is gone is dropped when the index
is saved. The digest of (path, size, mtime_ns) of the samples, in order, is
part of the decoded cache's key (``store.CacheKey``): a changed file makes a
new cache, never a stale one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from ..core.progress import tracked
from .decode import DECODE_VERSION
from .store import folder_key, write_chunks

# Bump when the file's layout or a verdict's meaning changes: old indexes are then ignored. 2: a bad file's verdict
# holds the reason alone (1 held the whole message, its way out included: a report listing it said that twice).
INDEX_FORMAT = 2
HEADER = "header"  # the image header opens (data.on_bad_file=error's check)
READ = "read"  # the whole file loads (data.on_bad_file=skip's check); implies HEADER
BAD = "bad: "  # prefix of a verdict that names why the file cannot be read
MISSING = (-1, -1)  # a file listed by the scan that was gone when stat'ed: checked (and reported) as unreadable


class FileIndex:
    """The split's remembered checks (``known``, ``record``), this start's (size, mtime_ns) of each file."""

    def __init__(self, root: Path, folder: Path | None) -> None:
        self.root = Path(root)
        self.prefix = os.path.join(str(root), "")  # the scan's paths start so (ImageFolder joins root and names)
        # Where it is kept: None (data.cache_dir=none) remembers nothing between runs.
        self.path = folder / f"{folder_key(self.root)}.files.json" if folder is not None else None
        self.saved: dict[str, list] = self.load()  # relative path -> [size, mtime_ns, verdict]
        self.now: dict[str, tuple[int, int]] = {}  # relative path -> (size, mtime_ns), stat'ed at this start
        self.found: dict[str, str] = {}  # relative path -> verdict, for the files of this start
        self.changed = False

    def load(self) -> dict[str, list]:
        """The saved entries; none when absent, unreadable or of another format (they are then made again)."""
        if self.path is None:
            return {}
        try:
            saved = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        # A verdict of another decode contract (decode.py) may say "reads" of a file that this one refuses.
        if not isinstance(saved, dict) or (saved.get("format"), saved.get("decode")) != (INDEX_FORMAT, DECODE_VERSION):
            return {}
        return saved.get("files", {})

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

    def known(self, path: str, needed: str) -> str | None:
        """The remembered verdict, if the file is unchanged and was checked as ``needed`` (or found bad)."""
        name = self.relative(path)
        entry, now = self.saved.get(name), self.now.get(name)
        if entry is None or now is None or now == MISSING or tuple(entry[:2]) != now:
            return None
        verdict = entry[2]
        # A whole read answers a header check too; a bad file stays bad until it changes.
        if verdict.startswith(BAD) or verdict in (READ, needed):
            self.found[name] = verdict
            return verdict
        return None

    def record(self, path: str, verdict: str) -> None:
        """What a check found: HEADER, READ, or BAD + why."""
        name = self.relative(path)
        self.found[name] = verdict
        self.changed = True

    def save(self) -> None:
        """Keep the verdicts of this start's files (the gone ones dropped); atomic, the last writer wins."""
        if self.path is None or not self.now or not (self.changed or set(self.saved) - set(self.now)):
            return  # nowhere to keep it, nothing stat'ed (a process that checked nothing), or nothing new
        files = {name: [*self.now[name], verdict] for name, verdict in self.found.items() if name in self.now}
        for name, entry in self.saved.items():  # unchanged files this start did not need to check (e.g. val)
            if name not in files and tuple(entry[:2]) == self.now.get(name):
                files[name] = entry
        kept = {"format": INDEX_FORMAT, "decode": DECODE_VERSION, "root": str(self.root), "files": files}
        text = json.dumps(kept, separators=(",", ":"))
        with contextlib.suppress(OSError):  # a full or read-only disk: the checks are made again next time
            write_chunks(self.path, [text.encode()])

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
