"""Unreadable and stray files in a data folder: stop with the file's name, or skip and report.

``data.on_bad_file: error`` (the default) stops at the first file that cannot
be read, naming it; ``skip`` checks every file once before training and
leaves out those that cannot be read, listing them.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError
from torchvision import datasets

from ..core.errors import UserError
from ..core.progress import tracked
from .file_index import BAD, HEADER, READ, FileIndex

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
    text = re.sub(r"\s*<_io\.\w+ name=.*?>", "", str(exc))  # Pillow names the open file object, path inside
    message = " ".join(text.replace(repr(path), "").replace(path, "").split()).strip(" :")
    return f"{exc.__class__.__name__}: {message}" if message else exc.__class__.__name__


def extension_list(extensions: tuple[str, ...]) -> str:
    """Every extension accepted, as the check accepts them: in any case."""
    return "/".join(extensions) + " (any case)"


def check_headers(dataset: datasets.DatasetFolder, progress: bool, index: FileIndex | None = None) -> None:
    """Open every image's header (no decoding: fast) so that a file that is no image stops the run at once.

    A file damaged after its header still stops training when it is read,
    naming itself. ``index`` remembers what was found: an unchanged file is
    not opened again at the next start (a bad one is reported again).
    """
    index = index or FileIndex(Path(dataset.root), None)
    bad = []
    paths = [path for path, _ in dataset.samples]
    for path in tracked(paths, f"checking {dataset.root}", len(paths), progress):
        verdict = index.known(path, HEADER)
        if verdict is None:
            verdict = header_verdict(path)
            index.record(path, verdict)
        if verdict.startswith(BAD):
            bad.append(f"{path} ({verdict.removeprefix(BAD)})")
    index.save()  # before a bad file stops the run: the next start checks only what changed
    if bad:
        raise BadFileError(
            f"{len(bad)} file(s) in {dataset.root} cannot be read as images: {listing(bad)}; "
            "replace or remove them, or set data.on_bad_file=skip to leave them out"
        )


def header_verdict(path: str) -> str:
    """HEADER when the image's header opens, else BAD and why."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path):
                return HEADER
    except READ_ERRORS as exc:
        return BAD + reason(exc, path)


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


def check_strays(root: Path, extensions: tuple[str, ...], on_bad_file: str) -> None:
    strays = stray_files(root, extensions)
    if not strays:
        return
    if on_bad_file == "error":
        raise BadFileError(
            f"{len(strays)} file(s) in {root} are not {extension_list(extensions)}: {listing(strays)}; "
            "move them out of the class folders, or set data.on_bad_file=skip"
        )
    print(f"warning: ignored {len(strays)} file(s) that are not samples: {listing(strays)}")


def drop_unreadable(
    dataset: datasets.DatasetFolder, progress: bool, report: bool = True, index: FileIndex | None = None
) -> list[str]:
    """Read every file once; keep only those that load. Returns the paths left out; ``report`` warns about them
    (the main process alone, under torchrun: every rank reads every file, one says so). ``index`` remembers what
    each read found: an unchanged file is not read again at the next start."""
    index = index or FileIndex(Path(dataset.root), None)
    bad = []
    paths = [path for path, _ in dataset.samples]
    for path in tracked(paths, f"checking {dataset.root}", len(paths), progress):
        verdict = index.known(path, READ)
        if verdict is None:
            try:
                dataset.loader(path)
                verdict = READ
            except BadFileError as error:
                verdict = BAD + error.why
            index.record(path, verdict)
        if verdict.startswith(BAD):
            bad.append(path)
    index.save()
    if bad:
        unreadable = set(bad)
        kept = [(p, t) for p, t in dataset.samples if p not in unreadable]
        dataset.samples = dataset.imgs = kept
        dataset.targets = [t for _, t in kept]
        if report:
            print(f"warning: skipped {len(bad)} unreadable file(s): {listing(bad)}")
    return bad
