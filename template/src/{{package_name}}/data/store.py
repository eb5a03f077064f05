"""``data.cache_dir``: the folder on local disk where a start keeps what the next one can reuse.

``auto`` is ``$XDG_CACHE_HOME/<package>`` (``~/.cache/<package>``). What
is written there is written whole or not at all (a temporary file in the
same folder, fsync, ``os.replace``), so a crash, or another process writing
the same file at the same time, never leaves half a file: the last whole one wins.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core import PACKAGE


def cache_folder(setting: str, report: bool = True) -> Path | None:
    """``auto``: ``$XDG_CACHE_HOME/<package>`` (``~/.cache/<package>``); ``none``: nothing kept on disk."""
    if setting == "none":
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(base) / PACKAGE if setting == "auto" else Path(setting).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        if report:
            print(
                f"warning: data.cache_dir {folder} cannot be made ({error.strerror}): nothing is kept between runs; "
                "set data.cache_dir to a folder on local disk",
                file=sys.stderr,
            )
        return None
    return folder


def folder_key(root: Path) -> str:
    """The data folder's own part of every name in the cache folder (its real path, hashed)."""
    return hashlib.sha256(os.path.realpath(root).encode()).hexdigest()[:16]


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` survive a power cut, not only a crash."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, chunks: Iterable[Any]) -> None:
    """Write ``chunks`` (bytes or buffers) to a temporary file beside ``path``, fsync, then rename it there."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_folder(path.parent)
