"""Unresolved conflicts in a project: files git holds as unmerged, and conflict markers left in any file.

``copier update`` writes its conflicts inline and records the files as unmerged in git's index (``git status``
shows ``UU``), as ``git merge`` does. ``git add`` clears the index whether or not the markers are gone, and a
project outside git has no index at all: so both are looked at, the index and the text of every file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .project import git

# The markers copier and git write (``<<<<<<< before updating``, ``>>>>>>> theirs``), alone or with a label:
# the same pattern as the generated project's pre-commit hook and CI step. ``=======`` alone is a Markdown
# heading underline, not a conflict.
MARKER = re.compile(rb"^(<<<<<<<|>>>>>>>)( |$)", re.MULTILINE)
# Folders of a project outside git that are not its text: environments, runs, data, caches.
NOT_SOURCE = {".git", ".venv", "venv", "runs", "data", "build", "dist", "__pycache__", ".ruff_cache", ".pytest_cache"}


@dataclass(frozen=True)
class Conflicts:
    unmerged: list[str] = field(default_factory=list)  # unmerged in git's index, relative to the project
    markers: list[str] = field(default_factory=list)  # files with a marker line, or copier's *.rej files

    @property
    def files(self) -> list[str]:
        return sorted({*self.unmerged, *self.markers})

    def __bool__(self) -> bool:
        return bool(self.unmerged or self.markers)


def find_conflicts(root: Path) -> Conflicts:
    inside_git = git(root, "rev-parse", "--is-inside-work-tree").returncode == 0
    unmerged = unmerged_files(root) if inside_git else []
    files = project_files(root) if inside_git else walk(root)
    return Conflicts(unmerged=unmerged, markers=[path for path in files if has_markers(root / path)])


def unmerged_files(root: Path) -> list[str]:
    """``--relative``: paths from the project's folder, and none outside it (a project inside a larger repo)."""
    return sorted(set(git(root, "diff", "--name-only", "--relative", "--diff-filter=U").stdout.split("\n")) - {""})


def project_files(root: Path) -> list[str]:
    """What git tracks or would add: ignored folders (runs, data, environments) are not read."""
    listing = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").stdout
    return sorted(set(listing.split("\0")) - {""})  # an unmerged file is listed once per side


def walk(root: Path) -> list[str]:
    return sorted(
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.is_file() and not NOT_SOURCE.intersection(path.relative_to(root).parts)
    )


def has_markers(path: Path) -> bool:
    if path.suffix == ".rej":  # copier's other conflict mode writes the rejected hunks beside the file
        return True
    try:
        data = path.read_bytes()
    except OSError:  # tracked but deleted from the work tree, or unreadable: no text to look at
        return False
    return b"\0" not in data[:8192] and MARKER.search(data) is not None  # a NUL: binary, not text
