"""The ``evaluate`` and ``predict`` commands: a trained checkpoint put to use."""

from __future__ import annotations

import csv
import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..core.checkpoint import load_model_state, read_checkpoint
from ..core.config import Config, DataConfig, load_config
from ..core.device import Compute, configure_backends, resolve_precision, select_device
from ..core.errors import UserError
from ..data import (
    IMAGE_EXTENSIONS,
    NPY_EXTENSIONS,
    READ_ERRORS,
    BadFileError,
    FileIndex,
    FileLists,
    ImageFiles,
    ListUse,
    align_classes,
    bombs_refused,
    build_loader,
    build_transform,
    cache_folder,
    check_split,
    checked_splits,
    extension_list,
    index_folder,
    is_packed,
    leave_out,
    left_out,
    listing,
    load_npy,
    packed_splits,
    read_lists,
    reason,
    split_dataset,
    square_side,
)
from ..models.classifier import ImageClassifier, build_model
from ..models.preprocessing import with_trained_preprocessing
from .engine import evaluate
from .metrics import format_metrics

if TYPE_CHECKING:  # the shards part's reader: a name for the annotations alone (core/parts.py)
    from ..data import PackedFiles


@dataclasses.dataclass
class Loaded:
    model: ImageClassifier
    config: Config
    classes: list[str]
    device: torch.device
    precision: str
    weights_note: str = ""  # which weights were loaded: the moving average or the trained ones
    provenance: dict[str, Any] = dataclasses.field(default_factory=dict)  # where the checkpoint came from


def load_trained(
    checkpoint: str | Path,
    config: str | Path | list[str] | None = None,
    overrides: tuple[str, ...] = (),
    raw_weights: bool = False,
) -> Loaded:
    """The checkpoint's model in eval mode, on the configured device.

    Without ``--config`` the config stored in the checkpoint is used, with
    any ``--set`` overrides on top. Where the checkpoint holds a moving
    average of the weights (``train.ema_decay``), those are used, as training
    evaluated them; ``raw_weights`` picks the trained ones.
    """
    state = read_checkpoint(checkpoint)
    cfg = load_config(config, overrides, base=None if config else state.get("config", {}))
    # The preprocessing the config leaves null is the checkpoint's: what its run trained and evaluated with.
    cfg = with_trained_preprocessing(cfg, state.get("config", {}))
    classes = list(state["classes"])
    device = select_device(cfg.train.device)
    configure_backends(device, cfg.train.deterministic)
    # The weights come from the checkpoint; a pretrained file need not exist any more.
    plain = dataclasses.replace(cfg.model, pretrained_weights=None, freeze_backbone=False)
    model = build_model(plain, len(classes), cfg.data.image_size)
    average = state.get("model_ema")
    weights = state["model"] if raw_weights or average is None else average
    load_model_state(model, weights, checkpoint, models=(state.get("config", {}).get("model"), cfg.model))
    if average is None:
        note = ""  # trained weights, the only ones there are: nothing to say
    elif raw_weights:
        note = "weights: trained (--raw-weights), not their moving average"
    else:
        note = "weights: the moving average of training (train.ema_decay); --raw-weights uses the trained ones"
    model.to(device).eval()
    precision = resolve_precision(cfg.train.precision, device, cfg.model.name)
    return Loaded(model, cfg, classes, device, precision, note, state.get("provenance") or {})


def kept_index_folder(data: DataConfig, run_dir: Path, root: Path) -> Path | None:
    """Where the training start kept its file index (data/files/file_index.py), for evaluate to take the split's checks
    from instead of reading every file again: data.cache_dir, or with none, the checkpoint's run folder where its
    run kept one (``run_dir``, train.out_dir; evaluate makes no folder of its own); None: nowhere (checked then)."""
    if is_packed(root):
        return None
    cache = cache_folder(data.cache_dir, False)
    folder = index_folder(cache, data.cache_dir, run_dir)
    return folder if cache is not None or (folder is not None and folder.is_dir()) else None


def run_evaluate(
    loaded: Loaded,
    split: str = "val",
    progress: bool = False,
    per_sample: bool = False,
    excluded: bool = True,
) -> dict[str, Any]:
    """``engine.evaluate`` on one split; ``per_sample`` also keeps each file's loss and prediction (``samples``,
    with ``dataset``, whose ``samples`` name the files in the same order), for the top-losses picture.
    ``data.exclude``'s files are left out as training leaves them out (``excluded=False``: kept, to compare), and
    ``data.relabel``'s read under their class; ``lists`` in the result says what they did."""
    cfg = loaded.config
    root = Path(cfg.data.root)
    check_split(root, split)  # a subfolder, or a split that pack-shards packed
    read = read_lists(cfg.data)  # a malformed list: one line, before the split is listed
    lists = ListUse(read if excluded else FileLists(frozenset(), read.relabel, read.files), root)
    # What the training start's checks found: each file is read once, here, to be evaluated.
    folder = kept_index_folder(cfg.data, Path(cfg.train.out_dir), root)
    index = FileIndex(root / split, folder)
    dataset = split_dataset(root, split, cfg.data, train=False, allow_empty=True, index=index, lists=lists)
    # The copies a training start leaves out (data/files/duplicates.py), left out here too.
    if cfg.data.duplicates == "drop":
        indexed = cfg.data if folder is None else dataclasses.replace(cfg.data, cache_dir=str(folder))  # no images kept
        leave_out(dataset, left_out(checked_splits(root, indexed, say_lists=False).groups or []))
    align_classes(dataset, {name: index for index, name in enumerate(loaded.classes)})
    lists.relabel(dataset, split)
    loader = build_loader(dataset, cfg.data, cfg.train.seed, loaded.device, train=False)  # file order: no shuffle
    compute = Compute(loaded.device, loaded.precision)
    extra = cfg.train.extra_metrics  # models/extensions.py's metrics, unless the config turns them off
    result = evaluate(
        loaded.model,
        loader,
        compute,
        len(loaded.classes),
        progress=progress,
        per_sample=per_sample,
        extra_metrics=extra,
    )
    result["lists"] = lists
    if per_sample:
        result["samples"]["target"] = torch.as_tensor(dataset.targets, dtype=torch.long)
        result["dataset"] = dataset
    return result


def format_report(result: dict[str, Any], classes: Sequence[str] = ()) -> str:
    """The totals, and a line of the metrics models/extensions.py adds; per-class accuracy is the recall column of
    the table that follows, so it is printed once."""
    totals = f"images {result['count']}  loss {result['val_loss']:.4f}  top-1 {100 * result['val_acc']:.2f}%"
    added = format_metrics(result.get("metrics", {}), classes)
    return f"{totals}\n{added}" if added else totals


def expand_inputs(paths: Sequence[str | Path], data_format: str) -> list[tuple[Path, PackedFiles | None]]:
    """Files as given; folders replaced by the sample files below them (recursively, sorted, hidden ones left out);
    a folder pack-shards wrote by every sample of its splits, under the path it had there, with its shards' reader."""
    extensions = NPY_EXTENSIONS if data_format == "npy" else IMAGE_EXTENSIONS
    found: list[tuple[Path, PackedFiles | None]] = []
    for path in map(Path, paths):
        if not path.is_dir():
            found.append((path, None))  # run_predict names it if it is missing
            continue
        if is_packed(path):  # no files to list: the manifest names the samples, in the folder's order
            from ..data import PackedFolder, packed_loader  # the shards part: is_packed says it is there

            for split in packed_splits(path):
                packed = PackedFolder(path, split, None, data_format)  # its reader alone: no decoding here
                found += [(Path(sample), packed_loader(packed.loader)) for sample, _ in packed.samples]
            continue
        inside = sorted(
            Path(folder) / name
            for folder, _, names in os.walk(path, followlinks=True)
            for name in names
            if name.lower().endswith(extensions) and not name.startswith(".")
        )
        if not inside:
            raise UserError(f"{path} holds no {extension_list(extensions)} files: give files, or a folder of them")
        found += [(file, None) for file in inside]
    return found


def write_predictions(predictions: list[tuple[Path, list[tuple[str, float]]]], topk: int, path: str | Path) -> Path:
    """One row per file: its path, then the class and probability of each rank."""
    path = Path(path)
    header = ["path", *(f"{kind}_{rank}" for rank in range(1, topk + 1) for kind in ("class", "probability"))]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            for file, ranked in predictions:
                writer.writerow([str(file), *(v for name, p in ranked for v in (name, f"{p:.6f}"))])
    except OSError as exc:
        raise UserError(f"cannot write {path} ({exc.strerror}): pass --csv a writable path") from None
    return path


def read_input(path: Path, cfg: DataConfig, packed: PackedFiles | None = None) -> Any:
    """A file's sample, or a packed one's from its shard (``packed``), decoded as training decodes it: an image
    by the decode contract (data/decoding/decode.py: upright, RGB, 8 bits), at the scale the evaluation resize needs."""
    if packed is None and not path.is_file():
        raise UserError(f"{path} not found: give the path of an existing file or folder")
    read = (packed or load_npy) if cfg.format == "npy" else ImageFiles(square_side(cfg), packed)
    try:
        return bombs_refused(read, str(path))
    except READ_ERRORS as exc:
        raise UnreadableInput(path, cfg.format, reason(exc, str(path))) from None


class UnreadableInput(BadFileError):
    """An input file that cannot be read; ``run_predict`` lists it and goes on with the others."""

    def __init__(self, path: Path, data_format: str, why: str) -> None:
        super().__init__(f"{path} is not a readable {data_format} file ({why}): replace or remove it")
        self.entry = f"{path} ({why})"


def predict_file(
    loaded: Loaded, path: str | Path, topk: int = 3, packed: PackedFiles | None = None
) -> list[tuple[str, float]]:
    """The ``topk`` most likely classes of one file (or packed sample), with their probabilities."""
    cfg = loaded.config
    image = build_transform(cfg.data, train=False)(read_input(Path(path), cfg.data, packed))
    batch = image.unsqueeze(0).to(loaded.device)  # P16: the model takes batches, so one image becomes a batch of one
    with torch.inference_mode():
        probabilities = loaded.model(batch).float().softmax(1)[0]
    values, indices = probabilities.topk(min(topk, len(loaded.classes)))
    return [(loaded.classes[i], p) for i, p in zip(indices.tolist(), values.tolist(), strict=True)]


def run_predict(
    loaded: Loaded, files: Sequence[str | Path], topk: int, csv_path: str | None, on_bad_file: str | None
) -> int:
    """The predict command: every readable file predicted and written; the unreadable ones named after.

    One damaged photo must not cost the predictions of the others, so a bad
    file is remembered and the loop goes on. ``on_bad_file`` decides the
    ending: ``error`` (the default, not the training config's
    ``data.on_bad_file``: a model trained with ``skip`` must not make a
    script's corrupt inputs pass unnoticed) exits with status 2 naming them,
    ``skip`` warns and exits 0. Either way the CSV holds every readable file.
    """
    on_bad_file = on_bad_file or "error"
    paths = expand_inputs(files, loaded.config.data.format)
    missing = [path for path, packed in paths if packed is None and not path.is_file()]
    if missing:  # a typo in the command line: said before any work, as every other argument mistake
        raise UserError(f"{listing(missing)} not found: give the path of an existing file or folder")
    predictions, unreadable = [], []
    for path, packed in paths:
        try:
            ranked = predict_file(loaded, path, topk, packed)
        except UnreadableInput as bad:
            unreadable.append(bad.entry)
            continue
        predictions.append((path, ranked))
        print(f"{path}: " + ", ".join(f"{name} {probability:.3f}" for name, probability in ranked))
    written = write_predictions(predictions, topk, csv_path) if csv_path else None
    if written:
        print(f"predictions: {written}")
    if not unreadable:
        return 0
    kind = loaded.config.data.format
    found = f"{len(unreadable)} of {len(paths)} file(s) are not a readable {kind} file: {listing(unreadable)}"
    kept = f"the other {len(predictions)} predictions are in {written}; " if written and predictions else ""
    if on_bad_file == "skip" and predictions:
        print(f"warning: skipped {found}", file=sys.stderr)
        return 0
    # skip with nothing readable at all is still an error: an empty result is no success.
    fix = "" if on_bad_file == "skip" else ", or pass --on-bad-file skip to leave them out with exit status 0"
    raise UserError(f"{found}; {kept}replace or remove them{fix}")
