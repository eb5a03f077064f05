"""Atomic file writes: a crash leaves the old file or the new one, never half of one (checkpoints, caches, indexes).

Written to a temporary file in the same folder, flushed to the disk, renamed
over the target (``os.replace`` is atomic), then the folder itself flushed so
that the rename survives a power cut too.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO


def write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """``write(handle)`` into a temporary file beside ``path``, fsync, then rename it to ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)  # an interrupted write leaves nothing behind
        raise
    fsync_folder(path.parent)


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` survive a power cut, not only a crash."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_chunks(path: Path, chunks: Iterable[Any]) -> None:
    """Write ``chunks`` (bytes or buffers) to ``path`` atomically."""

    def write(handle: BinaryIO) -> None:
        for chunk in chunks:
            handle.write(chunk)

    write_atomically(path, write)


def folder_key(root: Path) -> str:
    """A data folder's own part of every name in the cache folder (caches, file indexes) (its real path, hashed)."""
    return hashlib.sha256(os.path.realpath(root).encode()).hexdigest()[:16]
