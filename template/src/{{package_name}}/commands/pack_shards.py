"""``pack-shards DATA_ROOT OUT_DIR``: pack an ImageFolder into WebDataset tar shards, once (data/files/shards.py
reads them).

The files are listed and checked exactly as training checks them
(``folders.folder_dataset``: stray files, every file read, ``data.on_bad_file``), so
the shards hold the samples a run from the folder would use, in its order,
with train/'s labels. Each sample is written as the file's own bytes (no
re-encoding: the pixels stay the folder's) and a ``.cls`` member with its
label, the WebDataset convention; the manifest, written last, lists where
every sample's bytes lie, so reading needs no tar library and no scan.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from ..core.config import DataConfig
from ..core.errors import UserError
from ..core.optional import require
from ..core.progress import meter
from ..data import DECODE_VERSION, check_data_root, checked_splits, duplicates, shards, warn_missing_classes

SPLITS = ("train", "val", "test")  # test/ is packed when there: training evaluates it at the end
DEFAULT_SHARD_BYTES = 256 * 2**20  # WebDataset suggests 100 MB to a few GB: few files, each read sequentially


def shard_bytes(text: str) -> int:
    """``--shard-size``: bytes, or with a unit: 500M, 1G, 64MB."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]?)i?b?\s*", text.lower())
    if not match or float(match.group(1)) <= 0:
        raise UserError(f"--shard-size {text!r}: give a size such as 256M or 1G")
    return int(float(match.group(1)) * 1024 ** " kmg".index(match.group(2) or " "))


def member_offsets(path: Path) -> dict[str, tuple[int, int]]:
    """Each member's name -> (offset of its bytes, size), read from the tar headers just written."""
    with tarfile.open(path) as tar:
        return {member.name: (member.offset_data, member.size) for member in tar}


def write_split(wds: Any, dataset: Any, out: Path, split: str, max_bytes: int) -> dict[str, Any]:
    """Pack one split in the dataset's order; returns its manifest entry (samples, shards, digest)."""
    pattern = str(out / f"{split}-%06d.tar")
    # Fixed mtime: packing the same folder twice writes the same bytes; an int, as a float mtime costs each member a
    # PAX header (1 KB more a member: more than a small PNG). The opener keeps paths literal (webdataset's own
    # would read a "pipe:" prefix as a command).
    written: list[str] = []  # each shard's file as the writer closes it: shard n is written[n]
    writer = wds.ShardWriter(
        pattern, maxsize=max_bytes, maxcount=10**9, verbose=0, mtime=0, opener=open_new, post=written.append
    )
    what, total, started = f"packing {split}", len(dataset.samples), time.perf_counter()
    progress = meter(what, total, unit="images")  # a bar on a terminal, count-and-rate lines in a log
    members = []  # (relative path, label, shard number, member name)
    try:
        for index, (path, target) in enumerate(dataset.samples):
            extension = os.path.splitext(path)[1].lower().lstrip(".") or "bin"
            key = f"{index:09d}"  # the folder's order; a key without dots, as WebDataset readers split on them
            data = Path(path).read_bytes()  # the file as it is: decoded later exactly as the folder's file
            writer.write({"__key__": key, extension: data, "cls": str(target).encode()})
            members.append((os.path.relpath(path, dataset.root), target, writer.shard - 1, f"{key}.{extension}"))
            progress.update()
    finally:
        writer.close()
        progress.close()
    rate = total / max(time.perf_counter() - started, 1e-9)
    print(f"{what}: {total}/{total} images ({rate:,.0f}/s)", flush=True)  # the total, in a terminal and a log alike
    files = [Path(name) for name in written]
    offsets = [member_offsets(file) for file in files]
    samples = [
        [relative.replace(os.sep, "/"), target, shard, *offsets[shard][name]]
        for relative, target, shard, name in members
    ]
    return {
        "shards": [{"file": file.name, "bytes": file.stat().st_size} for file in files],
        "samples": samples,
        "digest": "",  # filled in by pack_shards, with the classes
    }


def open_new(name: str) -> Any:
    return open(name, "xb")  # never over a file: the output folder was checked empty


def check_out_dir(out: Path, root: Path) -> None:
    """A new or empty folder, outside the splits (else training from the folder would list the shards)."""
    resolved = out.resolve()
    for split in SPLITS:
        if resolved.is_relative_to((root / split).resolve()):
            raise UserError(f"{out} is inside {root / split}: write the shards outside the data's splits")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty folder: choose a new folder for the shards, or remove it")


def pack_shards(data_root: str, out_dir: str, cfg: DataConfig, max_bytes: int = DEFAULT_SHARD_BYTES) -> str:
    """Check and pack ``data_root``'s splits into ``out_dir``; returns the summary line."""
    wds = require("webdataset", "shards", "pack-shards")
    root, out = Path(data_root), Path(out_dir)
    check_data_root(root)
    check_out_dir(out, root)
    terminal = sys.stderr.isatty()
    started = time.perf_counter()
    # The checks of a training start (folders.checked_splits): every stray or unreadable file of every split named at
    # once, stopping the pack (data.on_bad_file=skip: left out); the exact duplicates found, kept in the manifest.
    checked = checked_splits(root, cfg, terminal)
    sets, train = checked.sets, checked.sets["train"]
    for split in SPLITS[1:]:
        if split in sets:
            warn_missing_classes(sets[split])  # labelled with train/'s classes (checked_splits), as training does
    out.mkdir(parents=True, exist_ok=True)
    try:
        splits = {split: write_split(wds, dataset, out, split, max_bytes) for split, dataset in sets.items()}
    except BaseException:
        shutil.rmtree(out)  # no half pack left behind to be mistaken for one (it was empty before)
        raise
    for entry in splits.values():
        entry["digest"] = shards.digest(train.classes, entry["samples"])
    manifest = {
        "format": shards.FORMAT,
        "version": shards.VERSION,
        "decode": DECODE_VERSION,  # the decode contract its files were checked by (they are decoded when read)
        "data_format": cfg.format,
        "on_bad_file": cfg.on_bad_file,
        "source": str(root.resolve()),
        "packed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "classes": list(train.classes),
        "splits": splits,
        # Every group of exact duplicates (duplicates.py), a list of [split, path, class, bytes digest], the kept
        # file first; found with the pixels of data.image_size at packing (a JPEG decoded at reduced scale).
        "duplicates": duplicates.recorded(checked.groups or [], root, list(train.classes)),
    }
    temporary = out / f".{shards.MANIFEST}.partial"
    temporary.write_text(json.dumps(manifest, separators=(",", ":")))
    os.replace(temporary, out / shards.MANIFEST)  # last, and whole: its presence means the pack is complete
    seconds = time.perf_counter() - started
    images = sum(len(entry["samples"]) for entry in splits.values())
    shard_count = sum(len(entry["shards"]) for entry in splits.values())
    size = sum(shard["bytes"] for entry in splits.values() for shard in entry["shards"])
    return (
        f"packed {images} images of {len(train.classes)} classes ({', '.join(splits)}) into {shard_count} shard(s), "
        f"{size / 2**20:,.1f} MB, in {out} in {seconds:.1f} s ({images / max(seconds, 1e-9):,.0f} images/s); "
        f"train with --set data.root={out}"
    )
