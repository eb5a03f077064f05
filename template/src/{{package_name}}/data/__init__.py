"""From image files to model-ready training batches: three rooms, two files that assemble them, and this front door.

- ``files/``: what the data set is: its files and their checks, the index kept between starts, copies, shards;
- ``decoding/``: how a file becomes a picture: the decode contract, TorchCodec;
- ``loading/``: how pictures become batches: loaders and samplers, the batch path, caches and where the images
  live, GPU decoding, augmentation and mixing;
- ``folders.py`` assembles the data sets and loaders from the three rooms; ``batches.py`` is the one iterable of
  model-ready batches the trainer loops over.

Rooms import downward only (loading -> files -> decoding -> the core). training/, commands/ and cli.py import data
from here (``from ..data import build_training_data``), never from a room (tests/test_structure.py checks both).
Each name is imported when first asked for (PEP 562), so that a command that needs no torch (``sample-data``)
starts without it. Imports the core (and ``models/extensions.py`` for your transforms); nothing of training,
models or outputs.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Each name the rest of the package uses -> the module under data/ that defines it; a module's own name -> itself.
FRONT_DOOR = {
    **dict.fromkeys(
        (
            *("NPY_EXTENSIONS", "build_training_data", "build_transform", "checked_splits", "load_npy"),
            "split_dataset",
        ),
        "folders",
    ),
    "TrainingBatches": "batches",
    **dict.fromkeys(("DECODE_VERSION", "IMAGE_EXTENSIONS", "ImageFiles", "square_side"), "decoding.decode"),
    **dict.fromkeys(
        ("READ_ERRORS", "BadFileError", "bombs_refused", "extension_list", "leave_out", "listing", "reason"),
        "files.bad_files",
    ),
    **dict.fromkeys(("DuplicateGroup", "left_out"), "files.duplicates"),
    **dict.fromkeys(("FileIndex", "index_folder"), "files.file_index"),
    **dict.fromkeys(
        ("align_classes", "check_data_root", "check_split", "has_split", "is_packed", "warn_missing_classes"),
        "files.layout",
    ),
    **dict.fromkeys(
        (
            "EXCLUDE_NAME",
            "RELABEL_NAME",
            "FileLists",
            "ListUse",
            "key_of",
            "read_lists",
            "write_exclude",
            *("write_relabel",),
        ),
        "files.file_lists",
    ),
    # The shards part's (core/parts.py): only where is_packed found a pack, so the part is there.
    **dict.fromkeys(("PackedFiles", "PackedFolder", "packed_loader"), "files.shards"),
    "packed_splits": "files.layout",
    **dict.fromkeys(("CLASSES", "write_sample_data"), "files.sample_data"),
    **dict.fromkeys(("build_loader", "stop_workers"), "loading.loaders"),
    "cache_folder": "loading.store",
    "balanced_class_weights": "loading.samplers",
    "duplicates": "files.duplicates",  # pack-shards records the copies with the module's functions
    "shards": "files.shards",  # and writes the manifest its constants name
}


def __getattr__(name: str) -> Any:
    """``from ..data import name``: the name from its module, which is imported now if it was not yet."""
    home = FRONT_DOOR.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}: add it to FRONT_DOOR")
    module = import_module(f"{__name__}.{home}")
    value = module if home.rpartition(".")[2] == name else getattr(module, name)
    globals()[name] = value  # found once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *FRONT_DOOR})
