"""The ``audit`` command: what in ``data.root`` would mislead a run, one CSV and one picture per kind of finding.

The checks that need no model run always: class balance, from the folders
alone, and exact duplicates (``exact_duplicate_findings``: data/files/duplicates.py,
the check of every training start). Near duplicates,
label issues and outliers need a network's embeddings: those of the pretrained
weights the config names (``model.pretrained_weights``), or of a trained
checkpoint (``--checkpoint``); without either they would mean nothing, and the
audit says so in one line. The audit reads the files and writes only into its
own folder: it never moves or deletes a file. Beside the CSVs it writes the two
lists that act on them without moving one (``write_lists``): ``exclude.txt`` and
``relabel.csv``, for ``data.exclude`` and ``data.relabel`` (data/file_lists.py,
docs/audit.md).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torchvision import datasets

from ...core.config import Config, DataConfig, ModelConfig, TrainConfig, load_config
from ...core.device import configure_backends, resolve_precision, select_device
from ...core.errors import UserError
from ...data import (
    EXCLUDE_NAME,
    RELABEL_NAME,
    DuplicateGroup,
    build_transform,
    checked_splits,
    key_of,
    listing,
    read_lists,
    write_exclude,
    write_relabel,
)
from ...models.classifier import build_model
from ...models.embeddings import embedded, without_head
from ...models.preprocessing import with_preprocessing
from ...models.weights import resolve_weights
from ...training.inference import load_trained
from .audit_pass import available_memory, check_memory, one_pass
from .audit_report import save_pictures, summary_table, write_arrays
from .findings import (
    FILES,
    RELABEL_SCORE,
    AuditFiles,
    Finding,
    class_balance,
    leaking,
    near_duplicates,
    to_relabel,
    write_csv,
)
from .near_copies import NEIGHBOURS
from .neighbours import search


@dataclasses.dataclass(frozen=True)
class Embedder:
    """The network whose embeddings the model-based checks compare, and what to call them."""

    model: nn.Module
    device: torch.device
    precision: str
    source: str  # e.g. "the embeddings of model.pretrained_weights DEFAULT (ResNet18_Weights.IMAGENET1K_V1)"


@dataclasses.dataclass(frozen=True)
class Audited:
    """The files audited and the datasets that read them (for the pictures): train, val, test, as present."""

    files: AuditFiles
    sets: dict[str, datasets.DatasetFolder]

    def image(self, path: str) -> torch.Tensor:
        """A file's pixels as the evaluation transform makes them (uint8, channels first)."""
        split = self.files.splits[self.files.paths.index(path)]
        dataset = self.sets[split]
        return dataset[[p for p, _ in dataset.samples].index(path)][0]


def run_audit(
    configs: list[str],
    overrides: list[str],
    checkpoint: str | None,
    out: str | None,
    similarity: float,
    max_files: int | None = None,
) -> str:
    """The whole audit; returns the summary table. ``configs``: the --config files; none: the checkpoint's config.
    ``max_files``: at most so many files, an even share of each split and class (``audit --max-files``)."""
    cfg, embedder, classes = audit_setup(configs, overrides, checkpoint)
    folder = Path(out) if out else Path(cfg.train.out_dir) / "audit"
    show = cfg.train.progress
    audited, groups = read_splits(cfg.data, show, max_files)
    if classes is not None and classes != audited.files.classes:
        raise UserError(
            f"{checkpoint} was trained on other classes ({listing(classes)}) than {cfg.data.root}/train/ holds "
            f"({listing(audited.files.classes)}): audit with a checkpoint of this data set, or without --checkpoint"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot make {folder} ({exc.strerror}): pass audit --out a writable folder") from None
    found: dict[str, list[Finding] | None] = {kind: None for kind in FILES}
    found["class_imbalance"] = class_balance(audited.files)
    found["exact_duplicate"] = exact_duplicate_findings(groups)
    notes = []
    if embedder is None:
        notes.append(
            "no model: near duplicates, label issues and outliers need a network's embeddings and were not checked: "
            "set model.pretrained_weights (e.g. DEFAULT) or pass --checkpoint"
        )
    else:
        notes += model_checks(embedder, audited, (cfg.data, cfg.train), folder, similarity, found)
    written = {kind: write_csv(folder, kind, rows) for kind, rows in found.items() if rows is not None}
    notes += write_lists(folder, found, cfg.data)
    notes += save_pictures(found, audited, folder, Path(cfg.data.root))
    return summary_table(audited.files, found, written, notes)


def write_lists(folder: Path, found: dict[str, list[Finding] | None], data: DataConfig) -> list[str]:
    """``exclude.txt`` (the val/ and test/ files of every copy across splits) and ``relabel.csv`` (the label issues
    above ``RELABEL_SCORE``), paths relative to ``data.root``; what ``data.exclude`` and ``data.relabel`` already
    list is kept in them (the audit did not see those files as they were), so a list written over the one the
    config names loses nothing. Returns the note that says how to use them."""
    root, before = Path(data.root), read_lists(data)
    excluded = set(before.exclude) | {key_of(row.path, root) for row in leaking(found)}
    relabel = {key: (name, "", 0.0) for key, name in before.relabel.items()}
    for row in to_relabel(found):
        relabel[key_of(row.path, root)] = (row.extra["suggested_class"], row.label, row.score)
    lists = write_exclude(folder / EXCLUDE_NAME, excluded), write_relabel(folder / RELABEL_NAME, relabel)
    checked = "" if found.get("label_issue") is not None else " (no label check ran: no model)"
    return [
        f"{lists[0]}: {len(excluded)} val/ and test/ file(s) that copy a file of an earlier split; {lists[1]}: "
        f"{len(relabel)} file(s) to read under the class suggested for them (label issues scored above "
        f"{RELABEL_SCORE}){checked}. To act on them, with no file moved: "
        f"--set data.exclude={lists[0]} --set data.relabel={lists[1]} (docs/audit.md)"
    ]


def audit_setup(
    configs: list[str], overrides: list[str], checkpoint: str | None
) -> tuple[Config, Embedder | None, list[str] | None]:
    """The config, the network that embeds the images (None: no weights and no checkpoint), and the checkpoint's
    classes. With a checkpoint its config is used unless ``configs`` names files, as evaluate does."""
    if checkpoint is not None:
        loaded = load_trained(checkpoint, configs or None, tuple(overrides))
        model = without_head(loaded.model)
        source = f"the embeddings of checkpoint {checkpoint}"
        cleanlab_first()
        return loaded.config, Embedder(model, loaded.device, loaded.precision, source), loaded.classes
    cfg = load_config(configs, overrides)
    weights = resolve_weights(cfg.model)  # an unknown name: one line, before any file is read
    cfg = with_preprocessing(cfg, weights.expected if weights is not None else None).config
    if weights is None:
        return cfg, None, None
    cleanlab_first()
    source = f"the embeddings of model.pretrained_weights {weights.label}"
    return cfg, pretrained_embedder(cfg.model, cfg.train, cfg.data.image_size, source), None


def cleanlab_first() -> None:
    """The audit extra, asked before minutes of embedding: missing, it is one line."""
    from .label_checks import cleanlab_installed

    cleanlab_installed()


def pretrained_embedder(model_cfg: ModelConfig, train: TrainConfig, image_size: int, source: str) -> Embedder:
    """The configured network with its pretrained weights and no head (P10): it returns embeddings."""
    device = select_device(train.device)
    configure_backends(device, train.deterministic)
    plain = dataclasses.replace(model_cfg, freeze_backbone=False)
    model = build_model(plain, 0, image_size).to(device).eval()  # no classes: the head is nn.Identity
    return Embedder(model, device, resolve_precision(train.precision, device, model_cfg.name), source)


def exact_duplicate_findings(groups: list[DuplicateGroup]) -> list[Finding]:
    """Files with the same bytes or pixels, from data/files/duplicates.py: the check every training start makes, from
    the same file index (after a start, no unchanged file is read again). One row a copy; ``duplicate_of`` is its
    group's first file (train/, else val/, else test/, by path: the one ``data.duplicates: drop`` keeps)."""
    return [
        Finding(
            "exact_duplicate",
            copy.split,
            copy.path,
            copy.label,
            1.0,
            {"duplicate_of": group.kept.path, "duplicate_split": group.kept.split, "same": group.same(copy)},
        )
        for group in groups
        for copy in group.copies
    ]


def read_splits(data: DataConfig, show: bool, max_files: int | None = None) -> tuple[Audited, list[DuplicateGroup]]:
    """train/, val/ and test/ listed and checked as a training start checks them (``folders.checked_splits``: bad
    files per ``data.on_bad_file``, one file index), with the exact duplicates those checks found; every file is
    read for them once. An empty split is one line and left out; val and test are labelled with train's classes.
    ``max_files``: every split thinned evenly to that many files in all (the samples are listed class by class,
    so every class keeps its share)."""
    root = Path(data.root)
    checked = checked_splits(root, data, show)
    sets: dict[str, datasets.DatasetFolder] = {}
    for split, dataset in checked.sets.items():
        if len(dataset.samples) == 0:
            print(f"audit: {root / split} holds no images: nothing of it audited", file=sys.stderr)
            continue
        dataset.transform = build_transform(data, train=False)  # train/'s was the training one: no random crops
        sets[split] = dataset
    total = sum(len(dataset.samples) for dataset in sets.values())
    if max_files is not None and 0 < max_files < total:
        for dataset in sets.values():
            share = max(1, len(dataset.samples) * max_files // total)
            keep = np.unique(np.linspace(0, len(dataset.samples) - 1, share).round().astype(int))
            dataset.samples = [dataset.samples[i] for i in keep]
            dataset.targets = [target for _, target in dataset.samples]
            if hasattr(dataset, "imgs"):
                dataset.imgs = dataset.samples
    if "train" not in sets:
        raise UserError(f"{root / 'train'} holds no images: put each class's images in {root / 'train'}/<class>/")
    samples = [(path, target, split) for split, dataset in sets.items() for path, target in dataset.samples]
    files = AuditFiles(
        [path for path, _, _ in samples],
        [split for _, _, split in samples],
        np.array([target for _, target, _ in samples], dtype=np.int64),
        list(sets["train"].classes),
    )
    return Audited(files, sets), checked.groups or []


def model_checks(
    embedder: Embedder,
    audited: Audited,
    sections: tuple[DataConfig, TrainConfig],
    folder: Path,
    similarity: float,
    found: dict[str, list[Finding] | None],
) -> list[str]:
    """Near duplicates, label issues and outliers from one pass over the files (embeddings and thumbnails) and
    one neighbour graph, into ``found``; the arrays written for whoever wants to look further
    (benchmarks/data_audit.py). Returns what to say about what was left out."""
    from .label_checks import OUTLIER_NEIGHBOURS, label_issues, outliers

    data, train = sections
    files, show, device = audited.files, train.progress, embedder.device
    check_memory(len(files), embedding_width(embedder, data), len(files.classes), device, available_memory())
    made = one_pass(audited.sets, embedder.model, (device, embedder.precision), data, train.seed, show)
    graph = search(made.features, files.splits, max(NEIGHBOURS, OUTLIER_NEIGHBOURS) + 1, device, show=show)
    found["near_duplicate"] = near_duplicates(files, graph, made.thumbs, similarity, device, show)
    checked = label_issues(files, made.features, embedder.source, show, device, folder)
    found["label_issue"] = checked.findings
    found["outlier"] = outliers(files, graph, embedder.source)
    write_arrays(folder, files, (made.features, checked.probabilities), embedder.source)
    return [checked.note] if checked.note else []


def embedding_width(embedder: Embedder, data: DataConfig) -> int:
    """How wide the network's embeddings are: one blank picture through it, before the pass."""
    blank = torch.zeros(1, 3, data.image_size, data.image_size, dtype=torch.uint8)
    return next(embedded(embedder.model, [blank], embedder.device, embedder.precision)).shape[1]
