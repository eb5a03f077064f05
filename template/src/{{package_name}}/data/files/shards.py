"""Shards: a data folder packed once into a few large tar files (``pack-shards``), read by index.

For folders too large or too slow to list (network file systems, millions of
small files): ``pack-shards`` checks every file as training would, then writes
each split as WebDataset tar shards plus one manifest, ``shards.json``, that
lists every sample in the folder's order with its label and where its bytes
lie in which shard. Pointing ``data.root`` at the packed folder then trains
on the same samples, in the same order, with the same labels and the same
decoded pixels: samplers, augmentation, exact resume and DDP see a dataset
that only reads its bytes from elsewhere. Reading needs no extra library
(``os.pread`` at the manifest's offsets); writing uses ``webdataset``
(the ``shards`` extra), so the shards are also ordinary WebDataset shards.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from ...core.errors import UserError
from ..decoding.decode import ImageFiles
from .bad_files import Checked
from .layout import MANIFEST

FORMAT = "torch-scaffold shards"  # what a manifest says it is: a foreign shards.json is refused by it
VERSION = 1  # of the layout below; a manifest of another version is refused, naming the fix (pack again)
REPACK = "pack the folder again with pack-shards"


def is_packed(root: Path) -> bool:
    """Whether ``data.root`` is a folder that pack-shards wrote (its manifest is there).

    Tar files without a manifest are a pack that did not finish (the manifest
    is written last) or someone else's: refused, rather than read as a folder.
    """
    if (root / MANIFEST).is_file():
        return True
    if root.is_dir() and not (root / "train").is_dir() and any(root.glob("*.tar")):
        raise UserError(f"{root} holds .tar shards but no {MANIFEST} (an unfinished or foreign pack): {REPACK}")
    return False


def digest(classes: list[str], samples: list[list[Any]]) -> str:
    """The image list's fingerprint: class names, then each sample's path, label and size, in order."""
    listed = json.dumps([classes, [sample[:2] + sample[4:] for sample in samples]], separators=(",", ":"))
    return hashlib.sha256(listed.encode()).hexdigest()


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest, refused with the fix when it is foreign, of another version, edited, or its shards changed."""
    path = root / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} cannot be read ({exc.__class__.__name__}): {REPACK}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UserError(f"{path} was not written by pack-shards (no 'format: {FORMAT}'): {REPACK}")
    if manifest.get("version") != VERSION:
        raise UserError(
            f"{path} is shard format version {manifest.get('version')}; this project reads version {VERSION}: {REPACK}"
        )
    for split, entry in manifest["splits"].items():
        if digest(manifest["classes"], entry["samples"]) != entry["digest"]:
            raise UserError(f"{path}: the {split} image list does not match its digest (edited or damaged): {REPACK}")
        for shard in entry["shards"]:
            size = (root / shard["file"]).stat().st_size if (root / shard["file"]).is_file() else None
            if size != shard["bytes"]:  # rewritten by another pack, truncated by a full disk, or gone
                found = "is missing" if size is None else f"has {size} bytes, not the {shard['bytes']} packed"
                raise UserError(f"shard {root / shard['file']} {found} (a stale or partial pack): {REPACK}")
    return manifest


def packed_splits(root: Path) -> list[str]:
    return list(read_manifest(root)["splits"])


def decode_npy(data: bytes) -> np.ndarray:
    """A ``.npy`` sample's bytes as ``folders.load_npy`` reads the file: an H x W x C array."""
    array = np.load(io.BytesIO(data), allow_pickle=False)
    return np.repeat(array[:, :, None], 3, axis=2) if array.ndim == 2 else array


class PackedFiles:
    """A packed split's files: the path a sample had in the folder -> its bytes, read from its shard.

    Images are decoded from these bytes by the decode contract (``decode.ImageFiles``), as the folder's files.

    Pickles without open files (a DataLoader worker started by a forkserver
    opens its own), and a forked worker reopens them too: ``os.pread`` on a
    shared descriptor would be safe, but one per process keeps it obvious.
    """

    def __init__(self, root: Path, shards: list[str], index: dict[str, list[int]]) -> None:
        self.root, self.shards, self.index = str(root), shards, index
        self.__name__ = "packed_npy"  # Checked names its wrapper after the loader
        self.files: dict[int, int] = {}
        self.pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "files": {}}

    def descriptor(self, shard: int) -> int:
        if self.pid != os.getpid():  # a forked worker: the parent's descriptors stay the parent's
            self.files, self.pid = {}, os.getpid()
        if shard not in self.files:  # opened on first use, in the process that reads
            self.files[shard] = os.open(os.path.join(self.root, self.shards[shard]), os.O_RDONLY)
        return self.files[shard]

    def read_bytes(self, path: str) -> bytes:
        """The file's bytes as packed (TorchCodec and nvJPEG decode them as they would the file)."""
        shard, offset, size = self.index[path]
        data = os.pread(self.descriptor(shard), size, offset)
        if len(data) != size:  # raised as OSError: Checked names the sample and the way out
            raise OSError(f"shard {self.shards[shard]} ends before the sample's {size} bytes")
        return data

    def __call__(self, path: str) -> np.ndarray:
        """A packed ``.npy`` sample (the loader of a data.format=npy split)."""
        return decode_npy(self.read_bytes(path))

    def __del__(self) -> None:
        if self.pid == os.getpid():
            for descriptor in self.files.values():
                os.close(descriptor)


class PackedFolder(Dataset):
    """One split of a packed folder, as ``folders.folder_dataset`` gives the folder itself.

    The same ``samples`` (the paths the files had, under the packed folder),
    ``targets``, ``classes`` and ``class_to_idx``, in the same order; the loader
    reads the bytes from the shards instead of the files. What reads
    ``dataset.loader(path)`` or ``dataset[index]`` (the memory cache, the batch
    path, ``SeededSamples``) therefore gets the pixels the folder gives.
    """

    def __init__(self, root: Path, split: str, transform: Any, data_format: str, min_side: int | None = None) -> None:
        manifest = read_manifest(root)
        if split not in manifest["splits"]:
            raise UserError(
                f"{root} has no {split}/ split (it holds {', '.join(manifest['splits'])}): pack a folder with "
                f"{split}/ again with pack-shards, or choose another split"
            )
        if manifest["data_format"] != data_format:
            raise UserError(
                f"{root} holds data.format={manifest['data_format']} samples but data.format={data_format} was set: "
                f"set data.format={manifest['data_format']}"
            )
        entry = manifest["splits"][split]
        self.root = str(root / split)
        self.classes: list[str] = list(manifest["classes"])
        self.class_to_idx = {name: index for index, name in enumerate(self.classes)}
        paths = [os.path.join(self.root, sample[0]) for sample in entry["samples"]]
        self.samples = [(path, sample[1]) for path, sample in zip(paths, entry["samples"], strict=True)]
        self.imgs, self.targets = self.samples, [sample[1] for sample in entry["samples"]]
        # What provenance fingerprints, as it would the folder's files (os.path.getsize there). A dict's own
        # method: the wrappers that copy it (pipeline.SquareImages, cache.MemoryCache) pickle the sizes alone.
        self.file_size = {path: sample[4] for path, sample in zip(paths, entry["samples"], strict=True)}.__getitem__
        index = {path: sample[2:] for path, sample in zip(paths, entry["samples"], strict=True)}
        shards = [shard["file"] for shard in entry["shards"]]
        files = PackedFiles(root, shards, index)
        # Images by the decode contract, as the folder's (min_side: the evaluation resize's side); arrays as load_npy.
        self.loader = Checked(files if data_format == "npy" else ImageFiles(min_side, files))
        self.transform, self.target_transform = transform, None
        self.source = manifest["source"]  # the folder it was packed from (said at start)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path, target = self.samples[index]
        sample = self.loader(path)
        return (self.transform(sample) if self.transform else sample), target


def packed_loader(loader: Any) -> PackedFiles | None:
    """The packed split's reader behind a dataset's loader (``Checked`` wraps it, ``ImageFiles`` reads through it);
    None for a folder's."""
    inner = getattr(loader, "loader", loader)
    inner = getattr(inner, "reader", inner)
    return inner if isinstance(inner, PackedFiles) else None
