"""Unreadable and stray files in a data folder: stop naming them, or skip and report.

Every new or changed file is read whole once, before training, and what was
found is kept in the file index (``file_index.py``) with the digests of its
bytes and pixels for the exact-duplicate check (``duplicates.py``).
``data.on_bad_file: error`` (the default) stops before training when a file
cannot be read or is no sample, naming every such file of every split at once
(``Problems``: a count, the first few, the full list in a file); ``skip``
leaves out those that cannot be read, listing them (under torchrun the node's
checker reads them, and rank 0's list reaches every rank: ``folders.checked_splits``).

A first start reads every file: on every core this process may use
(``core/machine.py``), in loader worker processes (``examined``; threads
would take turns at the GIL, where a small file spends most of its time), and
what it found is kept as it goes (``FileIndex.keep_checked``).
"""

from __future__ import annotations

import functools
import io
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import DataLoader
from torchvision import datasets

from ...core.errors import UserError
from ...core.files import write_atomically
from ...core.machine import cpu_cores
from ...core.progress import tracked
from ...core.workers import start_worker, stop_workers, worker_start
from ..decoding import decode
from .file_index import BAD, READ, FileIndex, Found, bytes_digest, pixel_digest

# DecompressionBomb*: a header that claims more pixels than Pillow's limit (Image.MAX_IMAGE_PIXELS), the
# mark of a file made to exhaust memory; the warning Pillow gives below twice the limit is raised as an error.
READ_ERRORS = (
    OSError,
    UnidentifiedImageError,
    ValueError,
    SyntaxError,
    Image.DecompressionBombError,
    Image.DecompressionBombWarning,
)
SHOWN = 5
THREADS = 8  # files read and decoded at once by the duplicate check's threads, at most (and no more than the cores)
FILES_PER_PROCESS = 2_000  # files a check's worker process is started for, at least (it starts in about 0.1 s)
CHUNK = 64  # files a worker reads in one task: few round trips, and the order kept


class BadFileError(UserError):
    """A file in the data folder that cannot be read as a sample; ``why``: the reason alone, without the file's name
    and the way out (what the file index remembers, and a report of several files lists)."""

    def __init__(self, message: str, why: str = "") -> None:
        super().__init__(message)
        self.why = why or message


class Checked:
    """Wrap a DatasetFolder loader so that a bad file names itself and the way out.

    A class, not a closure: the dataset that holds it must pickle, since loader
    workers of a DDP process start from a forkserver (``data.worker_start``).
    """

    def __init__(self, loader: Callable[[str], Any]) -> None:
        self.loader = loader
        self.__name__ = f"checked_{getattr(loader, '__name__', 'loader')}"

    def __call__(self, path: str) -> Any:
        return self.guarded(self.loader, path)

    def tensor(self, path: str) -> Any:
        """The image as a uint8 tensor (``decode.ImageFiles.tensor``: the batch path), its errors named alike."""
        return self.guarded(self.loader.tensor, path)

    def read_bytes(self, path: str) -> bytes:
        """The file's bytes as stored (the nvJPEG path decodes them later), its errors named alike."""
        return self.guarded(self.loader.read_bytes, path)

    @staticmethod
    def guarded(read: Callable[[str], Any], path: str) -> Any:
        try:
            return bombs_refused(read, path)
        except READ_ERRORS as exc:
            why = reason(exc, path)
            raise BadFileError(
                f"{path} cannot be read ({why}): replace or remove it, or set data.on_bad_file=skip", why
            ) from None


def bombs_refused(read: Callable[[str], Any], path: str) -> Any:
    """``read(path)``, with the warning Pillow gives below twice its pixel limit raised as an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        return read(path)


def reason(exc: BaseException, path: str) -> str:
    """The error's kind and whole message (a cut one showed notes.jp for notes.jpg), without the path twice."""
    # Pillow names the open file object: a file's with the path inside, the bytes' (bad_files.examine) by address.
    text = re.sub(r"\s*<_io\.\w+ (?:name=.*?|object at 0x[0-9a-f]+)>", "", str(exc))
    message = " ".join(text.replace(repr(path), "").replace(path, "").split()).strip(" :")
    return f"{exc.__class__.__name__}: {message}" if message else exc.__class__.__name__


def extension_list(extensions: tuple[str, ...]) -> str:
    """Every extension accepted, as the check accepts them: in any case."""
    return "/".join(extensions) + " (any case)"


def examine(path: str, npy: bool = False, min_side: int | None = None) -> Found:
    """Read the file once, whole: its bytes' digest, its picture decoded by the contract (the pixels' digest kept for
    the exact-duplicate check, duplicates.py); BAD and why where it cannot be read, or is no image.

    One read and one decode, kept in the file index: a file damaged after its header is named at start with every
    other problem, not by a later run (or epoch) that reads it.
    """
    try:
        data = decode.read_file(path)
    except OSError as exc:  # gone since the scan, or no permission
        return Found(BAD + reason(exc, path))
    digest = bytes_digest(data)
    try:
        if npy:  # an array: its bytes are all there is to compare; loaded as folders.load_npy loads it
            np.load(io.BytesIO(data), allow_pickle=False)
            return Found(READ, digest)
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)  # the bomb's warning refused, as loaders do
            header = decode.sniff(data)  # a JPEG's or PNG's stored size from its first bytes; else Pillow's header
            if header is None:
                with Image.open(io.BytesIO(data)) as image:
                    header = decode.Header(image.format or "", *image.size)
            found = Found(READ, digest, header.width, header.height, int(header.format == "JPEG"))
            return found._replace(pixels=pixel_digest(data, found, min_side))
    except READ_ERRORS as exc:
        return Found(BAD + reason(exc, path))


class InThisThread:
    """``ThreadPoolExecutor``'s ``map``, in the calling thread: where threads would only take turns."""

    def __enter__(self) -> InThisThread:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def map(self, function: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        return map(function, items)


def threads(files: int) -> ThreadPoolExecutor | InThisThread:
    """Threads to read and decode ``files`` (Pillow's decoders and hashlib release the GIL): half the CPU cores, at
    most ``THREADS``; none on 2 cores, where measured they only took turns (a small file spends most of its time
    in Python, holding the GIL)."""
    count = min(THREADS, cpu_cores() // 2, files)
    return ThreadPoolExecutor(count) if count > 1 else InThisThread()


class Examiner:
    """The check's "dataset" for a DataLoader whose sampler yields the paths themselves: ``examine`` in a worker.

    Only the paths of each task travel to the workers (a million of them
    pickled to each worker would cost more than the check), and the answers,
    small tuples, come back in order.
    """

    def __init__(self, npy: bool, min_side: int | None) -> None:
        self.npy, self.min_side = npy, min_side

    def __getitem__(self, path: str) -> Found:
        return examine(path, self.npy, self.min_side)


def as_list(found: list[Found]) -> list[Found]:
    """The DataLoader's collate: a task's answers as they are (no tensors)."""
    return found


def examined(paths: list[str], npy: bool, min_side: int | None) -> Iterator[Found]:
    """``examine`` of each path, in order: in this process for a few thousand files, else in one loader worker a core
    this process may use (``cpu_cores``: its affinity, as taskset, cgroups and Slurm set it), ``FILES_PER_PROCESS``
    files a worker at least. The workers are the loader's own: they ignore stop signals, end with this process
    however it ends, and fork from a forkserver under torchrun (``core/workers.py``); closing this generator
    (the check done, or stopped) ends them."""
    processes = min(cpu_cores(), len(paths) // FILES_PER_PROCESS)
    if processes < 2:  # one core, or too few files to pay for the workers' start
        yield from (examine(path, npy, min_side) for path in paths)
        return
    loader = DataLoader(
        Examiner(npy, min_side),  # type: ignore[arg-type]
        batch_size=CHUNK,
        sampler=paths,  # type: ignore[arg-type]
        num_workers=processes,
        collate_fn=as_list,
        multiprocessing_context=worker_start(processes),
        worker_init_fn=functools.partial(start_worker, os.getpid()),
        prefetch_factor=4,  # tasks queued a worker: none waits for the main process's bookkeeping
        persistent_workers=True,  # held by the loader, so that stop_workers ends them on every way out
        generator=torch.Generator(),  # the workers' seed from its own generator: torch's global one stays untouched
    )
    try:
        for found in loader:
            yield from found
    finally:
        stop_workers(loader)


def check_every_file(
    dataset: datasets.DatasetFolder,
    index: FileIndex,
    progress: bool,
    min_side: int | None = None,
    npy: bool = False,
) -> list[tuple[str, str]]:
    """Read every new or changed file of ``dataset`` once, whole (``examine``, on every core: ``examined``); returns
    the unreadable files, each with why. ``index`` remembers what was found as the check goes: an unchanged file
    is not opened again at the next start (a bad one is reported again), nor by a start that resumes a check cut
    short."""
    paths = [path for path, _ in dataset.samples]
    found = {path: index.known(path) for path in paths}
    todo = [path for path, known in found.items() if known is None]
    read = examined(todo, npy, min_side)
    try:
        for path, result in zip(todo, tracked(read, f"checking {dataset.root}", len(todo), progress), strict=True):
            index.record(path, result)
            index.keep_checked()  # a part file now and then: a kill loses at most its last seconds
            found[path] = result
    finally:
        read.close()  # the workers end here, the check done or stopped
    index.save()  # before a bad file stops the run: the next start checks only what changed
    return [(path, entry.verdict.removeprefix(BAD)) for path, entry in found.items() if entry.verdict.startswith(BAD)]


def leave_out(dataset: datasets.DatasetFolder, paths: Iterable[str]) -> None:
    """``dataset`` without ``paths`` (unreadable files under data.on_bad_file=skip; duplicates.py's left-out copies)."""
    gone = set(paths)
    if gone:
        kept = [(p, t) for p, t in dataset.samples if p not in gone]
        dataset.samples = dataset.imgs = kept
        dataset.targets = [t for _, t in kept]


def check_link_loops(root: Path) -> None:
    """Name a symbolic link that points back to a folder above it: a walk that follows links would not end."""

    def visit(folder: str, above: frozenset[tuple[int, int]]) -> None:
        with os.scandir(folder) as entries:
            for entry in entries:
                if not entry.is_dir(follow_symlinks=True):
                    continue
                info = entry.stat(follow_symlinks=True)
                key = (info.st_dev, info.st_ino)
                if key in above:
                    raise UserError(
                        f"{entry.path} is a symbolic link back to {os.path.realpath(entry.path)}, a folder that "
                        "holds it: the data folder would never end; remove the link"
                    )
                visit(entry.path, above | {key})

    info = root.stat()
    visit(str(root), frozenset({(info.st_dev, info.st_ino)}))


def stray_files(root: Path, extensions: tuple[str, ...]) -> list[Path]:
    """Files in class folders that the dataset would silently ignore (hidden files aside)."""
    strays = []
    for folder, _, names in os.walk(root):
        if Path(folder) == root:
            continue
        strays += [Path(folder) / n for n in names if not n.startswith(".") and not n.lower().endswith(extensions)]
    return sorted(strays)


def listing(paths: list[Path] | list[str]) -> str:
    shown = ", ".join(str(p) for p in paths[:SHOWN])
    return shown + (f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else "")


@dataclass
class Problems:
    """Every stray and unreadable file of every split a start checks, said together: a count, the first few by name,
    and, where the line cannot name them all, the full list in a file, instead of one problem per run.

    ``settle`` stops the run in one line (data.on_bad_file=error) or warns that the files are left out (skip).
    """

    extensions: tuple[str, ...] = ()
    strays: list[Path] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    roots: list[str] = field(default_factory=list)  # the split folders with problems, in the order found

    def add(self, root: Path | str, strays: Sequence[Path] = (), unreadable: Sequence[tuple[str, str]] = ()) -> None:
        self.strays += strays
        self.unreadable += unreadable
        if (strays or unreadable) and str(root) not in self.roots:
            self.roots.append(str(root))

    def __bool__(self) -> bool:
        return bool(self.strays or self.unreadable)

    def where(self, paths: Iterable[str | Path]) -> str:
        """The split folders holding ``paths``: e.g. ``data/train and data/val``."""
        paths = [str(path) for path in paths]
        held = [root for root in self.roots if any(path.startswith(os.path.join(root, "")) for path in paths)]
        return " and ".join(held) if len(held) < 3 else ", ".join(held[:-1]) + f" and {held[-1]}"

    def write(self, listed: Path) -> bool:
        """The full list, a line a file (its path, a tab, the problem); False where it cannot be written."""
        lines = [f"{path}\tnot {extension_list(self.extensions)}" for path in self.strays]
        lines += [f"{path}\t{why}" for path, why in self.unreadable]
        try:
            listed.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(listed, lambda handle: handle.write(("\n".join(lines) + "\n").encode()))
        except OSError:
            return False
        return True

    def settle(self, on_bad_file: str, listed: Path | None = None, report: bool = True) -> None:
        """Stop the run naming every problem (``error``), or say which files are left out (``skip``; ``report``: the
        process that speaks, which also writes the full list to ``listed`` where the line names only some).

        A refused run leaves that list, and nothing else, in ``listed``'s folder (``train.out_dir``).
        """
        if not self:
            return
        cut = len(self.strays) > SHOWN or len(self.unreadable) > SHOWN  # the line names the first SHOWN of each
        total = len(self.strays) + len(self.unreadable)
        written = cut and listed is not None and report and self.write(listed)
        full = f"; all {total} listed in {listed}" if written else ""
        strays = f"{len(self.strays)} file(s) in {self.where(self.strays)}"
        kinds = extension_list(self.extensions)
        named = [f"{path} ({why})" for path, why in self.unreadable]
        unreadable = f"{len(named)} file(s) in {self.where(path for path, _ in self.unreadable)}"
        if on_bad_file == "error":
            parts = [f"{strays} are not {kinds}: {listing(self.strays)}"] if self.strays else []
            parts += [f"{unreadable} cannot be read as images: {listing(named)}"] if named else []
            if self.strays and named:
                fix = "move the stray files out of the class folders and replace or remove the unreadable ones"
            else:
                fix = "move them out of the class folders" if self.strays else "replace or remove them"
            raise BadFileError("; ".join(parts) + f"{full}; {fix}, or set data.on_bad_file=skip to leave them out")
        if report and self.strays:
            ignored = f"{len(self.strays)} file(s) that are not samples ({kinds})"
            print(f"warning: ignored {ignored}: {listing(self.strays)}{full}")
        if report and named:
            print(f"warning: skipped {len(named)} unreadable file(s): {listing(named)}{full}")
