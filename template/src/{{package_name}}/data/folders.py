"""Folder datasets, transforms and loaders.

Images stay uint8 from disk to device (4x less to copy than float32); the
model converts and normalizes them with its own buffers (see models/classifier.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import Dataset
from torchvision import datasets
from torchvision.transforms import v2

from ..core.config import DataConfig, TrainConfig
from ..core.device import select_device
from ..core.distributed import World
from ..core.progress import meter
from ..core.waiting import StartChecks
from ..models import extensions
from .decoding.decode import IMAGE_EXTENSIONS, ImageFiles, square_side
from .files import duplicates, start_checks
from .files.bad_files import (
    Checked,
    Problems,
    check_every_file,
    check_link_loops,
    leave_out,
    stray_files,
)
from .files.file_index import FileIndex, index_folder
from .files.file_lists import ListUse, read_lists
from .files.layout import (
    SPLITS,
    align_classes,
    check_class_folders,
    check_data_root,
    has_split,
    is_packed,
    warn_missing_classes,
)
from .files.start_checks import CheckedSplits
from .loading.cache import keeps_in_memory
from .loading.loaders import loader_workers, worker_start
from .loading.pipeline import batch_path, fill_workers
from .loading.placement import Cached, Placement, measured_facts, place, recorded_decoder
from .loading.store import CacheStore, cache_folder

if TYPE_CHECKING:  # the gpu_decode part's: a name for the annotations alone (core/parts.py)
    from .loading.decode_race import DecodeRace

NPY_EXTENSIONS = (".npy",)
BAD_FILES = "bad_files.txt"  # in train.out_dir: every problem file, where the start's line names only some


def load_npy(path: str) -> np.ndarray:
    """DatasetFolder loader for H x W x C (or H x W) arrays; pickles are refused."""
    array = np.load(path, allow_pickle=False)
    if array.ndim == 2:
        array = np.repeat(array[:, :, None], 3, axis=2)
    return array


AUGMENT_POLICIES = {
    "none": lambda: [],
    "trivialaugment": lambda: [v2.TrivialAugmentWide()],
    "randaugment": lambda: [v2.RandAugment()],
    "autoaugment": lambda: [v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET)],
}


def build_transform(cfg: DataConfig, train: bool) -> v2.Compose:
    """P1 + transforms v2: random crop, flip, policy and erasing for training, a fixed crop for evaluation.

    Every random choice draws from torch's CPU generator, which ``SeededSamples``
    seeds per sample: the policies compose with exact resume.
    """
    size = cfg.image_size
    if train and cfg.augment:
        erasing = [v2.RandomErasing(p=cfg.random_erasing)] if cfg.random_erasing > 0 else []
        steps: list[Any] = [
            v2.ToImage(),
            v2.RandomResizedCrop(size, scale=(cfg.crop_scale_min, 1.0), antialias=True),
            # data.flip=false: p=0 still draws its number, so every later random draw stays the same.
            v2.RandomHorizontalFlip(p=0.5 if cfg.flip else 0.0),
            *AUGMENT_POLICIES[cfg.auto_augment](),  # on uint8 images, as the policies were designed
            *(extensions.extra_train_transforms() if cfg.extra_train_transforms else []),  # yours
            *erasing,  # last, as in torchvision's references: it erases what the rest produced
        ]
    else:
        # Pillow resizes and crops a decoded image (torchvision a .npy array): Pillow alone then gives a
        # deployed model the pixels predict gives it (docs/export.md; torchvision's own kernel differs by 1).
        resize = v2.Resize(round(size / cfg.eval_crop_ratio), eval_interpolation(cfg), antialias=True)
        fixed = [resize, v2.CenterCrop(size)]
        steps = [*fixed, v2.ToImage()] if cfg.format == "image" else [v2.ToImage(), *fixed]
    return v2.Compose([*steps, v2.ToPureTensor()])


def eval_interpolation(cfg: DataConfig) -> v2.InterpolationMode:
    """``data.interpolation`` of the evaluation resize: the pretrained weights' own (models/preprocessing.py)."""
    return v2.InterpolationMode(cfg.interpolation or "bilinear")  # null only in a config not yet filled


def folder_dataset(
    root: Path,
    cfg: DataConfig,
    train: bool,
    allow_empty: bool = False,
    progress: bool = False,
    check_files: bool = True,
    index: FileIndex | None = None,
    **said: Problems | ListUse | None,
) -> datasets.DatasetFolder:
    """P1: ImageFolder for images, DatasetFolder with a loader for .npy files.

    Images are read by the decode contract (``decode.py``): upright, RGB, 8 bits,
    JPEGs larger than needed decoded at a reduced scale.
    ``check_files=False`` skips the per-file checks (stray files, every file
    read whole once): under torchrun one process per node makes them (``checked_splits`` decides which).
    ``index`` (``file_index.py``) remembers what the checks found: a second start checks only what changed.
    ``said["problems"]``: where the stray and unreadable files found go, to be said with those of the other splits
    (``Problems.settle``); without it they are said here, for this split alone.
    ``said["lists"]``: ``data.exclude``'s files of this split are left out as soon as it is listed (file_lists.py):
    they are neither checked nor indexed.
    """
    problems: Problems | None = said.get("problems")  # type: ignore[assignment]
    lists: ListUse | None = said.get("lists")  # type: ignore[assignment]
    npy = cfg.format == "npy"
    extensions = NPY_EXTENSIONS if npy else IMAGE_EXTENSIONS
    check_link_loops(root)  # torchvision's folder walk follows links: a loop would never end
    check_class_folders(root, extensions, allow_empty)
    alone = problems is None
    problems = Problems(extensions) if problems is None else problems
    if check_files:
        problems.add(root, strays=stray_files(root, extensions))
    loader = Checked(load_npy if npy else ImageFiles(square_side(cfg)))  # the evaluation resize's side, at least
    transform = build_transform(cfg, train)
    scanned = Counted(extensions, meter(f"scanning {root}", None, progress))  # the walk's progress, file by file
    try:
        if npy:
            dataset = datasets.DatasetFolder(
                str(root), loader=loader, is_valid_file=scanned, transform=transform, allow_empty=allow_empty
            )
        else:
            dataset = datasets.ImageFolder(
                str(root), transform=transform, loader=loader, is_valid_file=scanned, allow_empty=allow_empty
            )
    finally:
        scanned.shown.close()
    if lists is not None:
        lists.leave_out(dataset, root.name)
    index = index or FileIndex(root, None)
    if check_files:
        index.stat([path for path, _ in dataset.samples], progress)  # before the checks read the files
        # Every new or changed file read whole once; its digests kept for duplicates.py.
        bad = check_every_file(dataset, index, progress, square_side(cfg), npy)
        problems.add(root, unreadable=bad)
        if cfg.on_bad_file == "skip":
            leave_out(dataset, [path for path, _ in bad])  # said once, by the main process (Problems.settle)
    if alone:
        problems.settle(cfg.on_bad_file)  # a file that is no image stops the run before it writes
    return dataset


def split_dataset(root: Path, split: str, cfg: DataConfig, train: bool, **options: Any) -> datasets.DatasetFolder:
    """One split of ``data.root``: its class folders, or the same samples read from shards when ``data.root``
    is a folder that ``pack-shards`` wrote (data/files/shards.py; it was checked file by file when packed)."""
    if is_packed(root):
        from .files.shards import PackedFolder  # the shards part: is_packed says it is there (core/parts.py)

        packed = PackedFolder(root, split, build_transform(cfg, train), cfg.format, square_side(cfg))
        if options.get("lists") is not None:
            options["lists"].leave_out(packed, split)  # the samples keep the paths they had in the folder
        return packed  # type: ignore[return-value]
    return folder_dataset(root / split, cfg, train, **options)


class Counted:
    """The scan's filter: a file counts when its name ends in an accepted extension, in any case (as
    torchvision's own filter); each file it is shown moves the scan's progress."""

    def __init__(self, extensions: tuple[str, ...], shown: Any) -> None:
        self.extensions, self.shown = extensions, shown

    def __call__(self, path: str) -> bool:
        self.shown.update()
        return path.lower().endswith(self.extensions)


@dataclass(frozen=True)
class TrainingData:
    """What a training run reads: the two sets, and where the training images live (one owner for both)."""

    train: Dataset  # on the batch path a SquareImages (pipeline.on_batch_path), else the folder per sample
    val: Dataset
    placement: Placement  # placement.choose's decision: TrainingBatches.build makes the batch stream from it


def build_datasets(
    cfg: DataConfig, run: TrainConfig, progress: bool = False, world: World | None = None
) -> tuple[datasets.DatasetFolder, datasets.DatasetFolder]:
    """The train and val sets of ``build_training_data`` (evaluation, tests): where the images live aside, and no
    list written into ``train.out_dir`` (the lines say what was found)."""
    data = build_training_data(cfg, run, progress, world)
    return data.train, data.val  # type: ignore[return-value]


def checked_splits(
    root: Path,
    cfg: DataConfig,
    progress: bool = False,
    world: World | None = None,
    out_dir: Path | None = None,
    say_lists: bool = True,
) -> CheckedSplits:
    """train/, val/ and test/ (where there) listed and checked as a start checks them, then their exact duplicates.

    Every stray and unreadable file of every split is said at once (``bad_files.Problems``): the run stops
    naming them (data.on_bad_file=error), or leaves them out (skip), with the full list in
    ``out_dir/bad_files.txt`` where the line names only some (kept even when the run stops there; the run folder
    also keeps the file index where data.cache_dir is none). The per-file checks are made by each node's local
    rank 0 whatever data.on_bad_file says, test/ by those alone (evaluated by the main process at the end), the
    duplicates (duplicates.py) by the main process; the other ranks wait while they progress (core/waiting.py).
    ``data.exclude``, ``data.relabel`` (files/file_lists.py): every split's, said by the main process (``say_lists``).
    """
    world = world or World()
    checks = StartChecks(world, cfg.check_patience)
    # The one place that decides which process checks the files: a bad file stops the node's local rank 0 (under
    # skip, a rank that cannot hear rank 0's list, in a world without a process group, checks for itself too).
    check_files = world.local_rank == 0 or (cfg.on_bad_file == "skip" and not checks.shared)
    packed = is_packed(root)  # a folder pack-shards wrote (shards.py): no train/ and val/ to check or index
    if not packed:
        check_data_root(root)
    # None: data.cache_dir=none, it cannot be made, or the data is packed (its index is the shards' manifest).
    folder = None if packed else cache_folder(cfg.cache_dir, world.is_main)
    kept_in = None if packed else index_folder(folder, cfg.cache_dir, out_dir)  # with cache_dir=none: the run's
    splits = [split for split in duplicates.SPLITS if split in SPLITS or (check_files and has_split(root, split))]
    # The node's checker alone writes what the checks found; the others read it, and keep nothing.
    indexes = {split: FileIndex(root / split, kept_in, keep=check_files) for split in splits}
    problems = Problems(NPY_EXTENSIONS if cfg.format == "npy" else IMAGE_EXTENSIONS)
    lists = ListUse(read_lists(cfg), root)  # data.exclude and data.relabel: read before any file is listed
    said = {"progress": progress, "check_files": check_files, "problems": problems, "lists": lists}  # said below
    with checks.posting():  # a checker's progress, posted for the ranks that wait for it
        sets = {"train": split_dataset(root, "train", cfg, train=True, index=indexes["train"], **said)}
        for split in splits[1:]:
            sets[split] = split_dataset(root, split, cfg, train=False, allow_empty=True, index=indexes[split], **said)
            # Labelled with train/'s classes: a class missing from val/ must not shift the labels of the others,
            # and one that train/ lacks is said now (for test/: not after training).
            align_classes(sets[split], sets["train"].class_to_idx)
        for split, dataset in sets.items():
            lists.relabel(dataset, split)  # train/'s class indices, so that no index moves
        for line in lists.lines() if world.is_main and say_lists else []:
            print(line, flush=True)
        groups = duplicates.found_at_start(root, sets, indexes, cfg, problems, progress) if world.is_main else None
        problems.settle(cfg.on_bad_file, out_dir / BAD_FILES if out_dir is not None else None, world.is_main)
    checks.wait()  # every node's checks done (and rank 0's duplicates), waited for while they progress
    start_checks.skipped(sets, problems, cfg, world)  # under skip: rank 0's unreadable files, left out everywhere
    return CheckedSplits(sets, indexes, folder, groups)


def build_training_data(
    cfg: DataConfig,
    run: TrainConfig,
    progress: bool = False,
    world: World | None = None,
    resume: str | None = None,
    lists: bool = False,
) -> TrainingData:
    """Train and val sets that share the training set's ``class_to_idx``.

    A class missing from val/ must not shift the labels of the others, so val
    is relabelled with the training indices. The per-file checks open every
    file: under torchrun only local rank 0 makes them, once per node, whatever
    ``data.on_bad_file`` says, while the others wait as long as it progresses.
    What they found is kept in ``data.cache_dir`` (``file_index.py``; with ``none``, in the run folder), as are
    the decoded images (``store.py``): a second start checks and decodes only what changed.
    Before training the start says the exact duplicates found and does what
    ``data.duplicates`` says (duplicates.py: ``drop`` leaves out the same files
    on every rank), and names the classes with few training images (class_counts.py).
    ``run``: the train section, whose device, out_dir and deterministic
    decide where the training images live (``placed``).
    ``progress``: this process reports the long phases (``core/progress.py``).
    ``resume``: train's ``--resume``, whose checkpoint says which decoder made
    its run's training images (``placement.recorded_decoder``).
    ``lists``: write the lists of what the checks found (bad_files.txt, duplicates.csv) into ``train.out_dir``
    (the train command's start; the lines say what was found either way).
    """
    world = world or World()
    out_dir = Path(run.out_dir) if lists else None
    checked = checked_splits(Path(cfg.root), cfg, progress, world, out_dir)
    start_checks.settle(checked, cfg, out_dir, world)  # duplicates acted on; what cannot train refused, or warned of
    train_set, val_set = checked.sets["train"], checked.sets["val"]
    warn_missing_classes(val_set)
    memory = keeps_in_memory(cfg, len(train_set) + len(val_set))
    # The one place the path is decided: uint8 squares here mean crops and flips per batch later (batches.py).
    batches = batch_path(cfg, train_set.transform)  # build_transform's steps: all batch-made, or per sample
    placement = placed(train_set, cfg, run, world, (batches, memory), resume)
    folder, indexes = checked.folder, checked.indexes
    cached = Cached(CacheStore(folder, world.is_main) if folder else None, indexes, progress)
    if batches and placement.where == "gpu-decode":  # the loader reads bytes; the GPU decodes (gpu_decode.py)
        from .loading.gpu_decode import EncodedImages  # the gpu_decode part: placement chose it, so it is there

        train_set = EncodedImages(train_set, square_side(cfg))  # type: ignore[assignment]
    elif batches:  # training images as uint8 squares, cropped and flipped later per batch
        kept = placement.where in ("device", "memory")
        workers = fill_workers(cfg.num_workers, world, len(train_set))
        train_set = cached.squares(train_set, cfg, kept, workers, worker_start(workers))  # type: ignore[assignment]
    elif memory:
        train_set = cached.resized(train_set, cfg, "train")  # type: ignore[assignment]
    if memory:
        val_set = cached.resized(val_set, cfg, "val")  # type: ignore[assignment]
    return TrainingData(train_set, val_set, placement)


def placed(
    train_set: datasets.DatasetFolder,
    cfg: DataConfig,
    run: TrainConfig,
    world: World,
    route: tuple[bool, bool],
    resume: str | None,
) -> Placement:
    """data.cache: device, memory or stream, by one rule (placement.py), printed when the training loader is made;
    ``route``: (the batch path, whether the host keeps the images); ``resume``: the decoder a resumed run keeps."""
    batches, memory = route
    device = world.device or select_device(run.device, world.local_rank)  # the trainer's, when it asks
    image_bytes = 3 * square_side(cfg) ** 2  # one uint8 square
    paths = [path for path, _ in train_set.samples]
    recorded = recorded_decoder(resume, run.out_dir)  # a resumed run decodes as it did: nvJPEG or the CPU
    choices = (cfg.cache, cfg.decoder)
    facts = measured_facts(choices, paths, image_bytes, batches, device, memory, recorded, run.deterministic)
    return place(facts, decoder_race(train_set, cfg, world, device), world)  # every process, under torchrun


def decoder_race(train_set: datasets.DatasetFolder, cfg: DataConfig, world: World, device: torch.device) -> Callable:
    """nvJPEG against this process's loader workers on the training files (decode_race.py), where ``place`` asks."""
    paths, workers = [path for path, _ in train_set.samples], loader_workers(cfg.num_workers, world, device)
    read, side = train_set.loader.read_bytes, square_side(cfg)  # the files' bytes, as the loader reads them

    def race() -> DecodeRace:
        from .loading import decode_race  # the gpu_decode part: placement.needs_race asks only where it is there

        return decode_race.race(paths, read, side, device, workers)

    return race
