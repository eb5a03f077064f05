"""``data.cache_dir``: decoded images in a file on local disk, mapped by every later start and every process.

A first start decodes the images once and writes them to one file (a
temporary file in the same folder, fsync, ``os.replace``: a crash leaves no
half file). Every later start, a restart, a sweep trial and each rank of the
node map that file (``torch.from_file``) instead of decoding again: the node
holds one copy, in its page cache, not one per process. A ``flock`` on
``<name>.lock`` lets one process fill while the others wait, then map what it
wrote. Loader workers receive (path, size) by pickle, never the pixels.

The file's name holds its key (``CacheKey``): the folder, the kind of images,
their side, the files' digest (``file_index.FileIndex.digest``), the cache
format and the decode contract's version (``decode.DECODE_VERSION``). Another size, changed files or a new
format find no file and fill a new one; a cache of the folder's earlier files
is removed once no process maps it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import struct
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import torchvision

from ...core import PACKAGE
from ...core.files import folder_key, write_chunks
from ..decoding.decode import DECODE_VERSION

CACHE_FORMAT = 1  # bump when the file layout or the decoded pixels change: older files are then never read
MAGIC = b"TSCACHE1"  # the file's last 8 bytes; the 8 before them: the header's length
FREE_SHARE = 0.5  # of the cache folder's free space, at most: a cache must never fill the disk


def versions() -> str:
    """The cache format and decode contract, in each file's name: ``drop_stale`` knows a file no start will read."""
    return f"v{CACHE_FORMAT}.{DECODE_VERSION}"


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


@dataclasses.dataclass(frozen=True)
class CacheKey:
    """Everything the cached pixels depend on; a file made for another key is never read."""

    root: str  # the split's folder
    kind: str  # squares (the batch path) | resized (the per-sample path's evaluation resize)
    side: int  # pixels: the square's side, or the shorter side of the evaluation resize
    files: str  # FileIndex.digest of the samples, in order
    data_format: str  # data.format: image | npy

    def fields(self) -> dict[str, Any]:
        # The decode contract's version (decode.py): pixels decoded another way are made again, never mixed in.
        made_by = {
            "format": CACHE_FORMAT,
            "decode": DECODE_VERSION,
            "torch": str(torch.__version__),
            "torchvision": torchvision.__version__,
        }
        return {**dataclasses.asdict(self), **made_by}

    def file_name(self) -> str:
        fields = hashlib.sha256(json.dumps(self.fields(), sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.prefix()}{versions()}-{self.files[:12]}-{fields}.bin"

    def prefix(self) -> str:
        """What every cache of this split and kind is named from: the folder, then the kind."""
        return f"{folder_key(Path(self.root))}-{self.kind}-"


class MappedBlock:
    """Bytes ``[0, size)`` of a cache file as a uint8 tensor, mapped copy-on-write (a stray write stays private).

    Pickles as (path, size): a loader worker maps the same pages. Each holder
    keeps a shared ``flock`` on the file, so that no start removes it as stale
    while it is mapped.
    """

    def __init__(self, path: str, size: int) -> None:
        self.path, self.size = path, size
        self.handle = open(path, "rb")  # noqa: SIM115  # held open for the lock, as long as the mapping lives
        fcntl.flock(self.handle, fcntl.LOCK_SH)
        # shared=False: MAP_PRIVATE; pages are read from the page cache, one copy for every process of the node.
        self.tensor = torch.from_file(path, shared=False, size=size, dtype=torch.uint8)

    def __reduce__(self) -> tuple[Any, tuple[str, int]]:
        return MappedBlock, (self.path, self.size)


@dataclasses.dataclass
class Stored:
    """A cache file, mapped: its data and, per chunk written, (start, shape, dtype)."""

    block: MappedBlock
    chunks: list[tuple[int, list[int], str]]


def cache_chunks(tensors: Iterable[torch.Tensor], key: CacheKey, align: int) -> Iterator[Any]:
    """The file's bytes: each tensor (an image, or a batch of squares) from ``align``ed starts, then the header."""
    chunks, at = [], 0
    for tensor in tensors:
        pad = -at % align  # so that a float .npy image can be viewed in place
        if pad:
            yield bytes(pad)
        data = tensor.contiguous().view(-1).view(torch.uint8).numpy()
        chunks.append((at + pad, list(tensor.shape), str(tensor.dtype).removeprefix("torch.")))
        yield data
        at += pad + data.size
    header = json.dumps({"key": key.fields(), "size": at, "chunks": chunks}, separators=(",", ":")).encode()
    yield header
    yield struct.pack("<Q", len(header)) + MAGIC


def open_cache(path: Path, key: CacheKey) -> Stored | None:
    """The file mapped, if it is whole and made for ``key``; None otherwise (it is then filled again)."""
    try:
        with open(path, "rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            if end < 16:
                return None
            handle.seek(end - 16)
            tail = handle.read(16)
            if tail[8:] != MAGIC:
                return None
            (length,) = struct.unpack("<Q", tail[:8])
            handle.seek(max(end - 16 - length, 0))
            header = json.loads(handle.read(length))
        if header.get("key") != key.fields() or header["size"] + length + 16 != end:
            return None
        return Stored(MappedBlock(str(path), header["size"]), [tuple(chunk) for chunk in header["chunks"]])
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def exclusive(path: Path, report: bool) -> Iterator[None]:
    """Hold ``path``'s flock: one process fills a cache, the others wait here, then map what it wrote."""
    with open(path, "a+b") as handle:  # created if absent, never truncated
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if report:
                print(f"data: another process is filling {path.with_suffix('.bin')}: waiting", file=sys.stderr)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def drop_stale(folder: Path, key: CacheKey) -> None:
    """Remove this split's caches that no process maps and none will read again: of earlier files (another
    digest), or of another cache format or decode contract (a template update: they would fill the disk); other
    sizes stay."""
    prefix = key.prefix()
    for path in folder.glob(f"{prefix}*.bin"):
        if path.name.removeprefix(prefix).startswith(f"{versions()}-{key.files[:12]}"):
            continue
        with contextlib.suppress(OSError), open(path, "rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while any process maps it (LOCK_SH)
            path.unlink()


class CacheStore:
    """The cache folder: ``obtain`` maps a key's file, filling it first when no process has."""

    def __init__(self, folder: Path, report: bool = True) -> None:
        self.folder, self.report = folder, report

    def obtain(self, key: CacheKey, tensors: Any, align: int, estimate: int) -> Stored | None:
        """The mapped file for ``key``; ``tensors()`` gives what to write when it is missing. None: keep it in
        memory (no room on disk, or the disk refused: said in one line)."""
        path = self.folder / key.file_name()
        found = open_cache(path, key)
        if found is not None:
            return found
        free = shutil.disk_usage(self.folder).free
        if estimate > FREE_SHARE * free:
            return self.refused(f"it would take {estimate / 2**20:,.0f} MB of the {free / 2**20:,.0f} MB free")
        try:
            with exclusive(path.with_suffix(".lock"), self.report):
                found = open_cache(path, key)  # another process filled it while this one waited
                if found is None:
                    write_chunks(path, cache_chunks(tensors(), key, align))
                    drop_stale(self.folder, key)
                    found = open_cache(path, key)
        except OSError as error:
            return self.refused(error.strerror or str(error))
        return found

    def refused(self, why: str) -> None:
        if self.report:
            print(
                f"warning: the decoded images are not kept in {self.folder} ({why}): this process holds them in "
                "memory and the next start decodes them again; set data.cache_dir to a folder with room",
                file=sys.stderr,
            )
        return None
