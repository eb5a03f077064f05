"""What each tool flags in an injected set (``defects.py``), and how that scores against the set's truth.

The tools, each read into one ``Flags``: the generated project's ``audit`` (its CSVs, AUDIT-CONTRACT's columns);
cleanlab's Datalab run directly on the arrays the audit left (``features.npy``, ``pred_probs.npy``: the same inputs);
cleanvision and imagededup, the image-dedup libraries; and the pipeline a user writes by hand for the same findings
(the pretrained network's features, a cross-validated logistic regression, Datalab, cleanvision for the exact
copies). Every path is relative to the set's root (``train/<class>/<file>``), as ``truth.json`` names them.

Scoring: a duplicate is a pair of files. Exact pairs are scored against the exact copies; near pairs against every
copy (an exact copy listed as near is not wrong), precision counted over the pairs that cross splits (the clean
set's own overlapping crops of one cell, within a split, are real near duplicates that nobody injected: counted
apart). Label issues are scored against the moved files, the images of no class left out of both sides (counted
apart: flagging them is no error); outliers against the images of no class.
"""

from __future__ import annotations

import copy
import csv
import json
import time
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
from defects import NEAR_KINDS, Truth  # sibling script: benchmarks/ is on the path

KINDS = ("exact", "near", "label", "outlier")
CSV_FILES = {"exact": "exact_duplicates.csv", "near": "near_duplicates.csv", "label": "label_issues.csv",
             "outlier": "outliers.csv"}  # fmt: skip
DATALAB_TYPES = {"label": {}, "near_duplicate": {}, "outlier": {}}  # what the audit's model checks find


@dataclass
class Flags:
    """One tool's findings: duplicate pairs, label issues (path -> suggested class, '' if none) and outliers."""

    tool: str
    checks: tuple[str, ...]  # the kinds it looks for (KINDS)
    exact: set[frozenset[str]] = field(default_factory=set)
    near: set[frozenset[str]] = field(default_factory=set)
    label: dict[str, str] = field(default_factory=dict)
    outlier: set[str] = field(default_factory=set)
    seconds: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)  # seconds of its steps, where they are apart


def relative(path: str | Path, root: Path) -> str:
    """``path`` (absolute or relative, as the tool wrote it) relative to the set's root."""
    path = Path(path)
    for base in (root, root.resolve()):
        if path.is_absolute() and path.is_relative_to(base):
            return path.relative_to(base).as_posix()
    return path.as_posix()


def pairs_of(groups: Iterable[Iterable[str]]) -> set[frozenset[str]]:
    """Every pair within each group of files."""
    return {frozenset(pair) for group in groups for pair in combinations(sorted(set(group)), 2)}


# The audit: its CSVs and arrays.


def audit_flags(folder: Path, root: Path, seconds: float) -> Flags:
    """The audit's CSVs in ``folder``; a kind without its CSV was not checked."""
    flags = Flags("audit", tuple(kind for kind in KINDS if (folder / CSV_FILES[kind]).is_file()), seconds=seconds)
    for kind in flags.checks:
        with (folder / CSV_FILES[kind]).open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        for row in rows:
            path = relative(row["path"], root)
            if kind in ("exact", "near"):
                getattr(flags, kind).add(frozenset((path, relative(row["duplicate_of"], root))))
            elif kind == "label":
                flags.label[path] = row.get("suggested_class", "")
            else:
                flags.outlier.add(path)
    return flags


@dataclass(frozen=True)
class Arrays:
    """What the audit computed, as it left it: one row per file (train, val, test), labels as class indices."""

    paths: list[str]
    labels: np.ndarray
    classes: list[str]
    features: np.ndarray
    mirrored: np.ndarray | None  # the mirror images' features, where the audit wrote them
    probabilities: np.ndarray
    probability_rows: np.ndarray  # the rows pred_probs covers (all, or train's)


def read_arrays(folder: Path, root: Path) -> Arrays:
    """``features.npy``, ``features_mirrored.npy`` (where written), ``pred_probs.npy`` and ``arrays.json``: its
    ``paths``, ``splits`` and ``labels`` (class names), one per row, and ``classes``."""
    meta = json.loads((folder / "arrays.json").read_text())
    classes = list(meta["classes"])
    paths = [relative(path, root) for path in meta["paths"]]
    labels = np.array([classes.index(label) for label in meta["labels"]])
    mirrored = folder / "features_mirrored.npy"
    probabilities = np.load(folder / "pred_probs.npy")
    train = np.flatnonzero(np.array(meta["splits"]) == "train")
    covered = np.arange(len(paths)) if len(probabilities) == len(paths) else train  # all rows, or train's
    if len(covered) != len(probabilities):
        raise SystemExit(f"pred_probs.npy has {len(probabilities)} rows; arrays.json names {len(paths)} files")
    features = np.load(folder / "features.npy")
    return Arrays(
        paths, labels, classes, features, np.load(mirrored) if mirrored.is_file() else None, probabilities, covered
    )


# cleanlab's Datalab, on given features and out-of-sample probabilities.


def datalab_flags(tool: str, arrays: Arrays, types: dict[str, Any] | None = None) -> Flags:
    """Datalab's label, near-duplicate and outlier issues on ``arrays``: timed from its construction to its
    issues (what it adds to the arrays)."""
    from cleanlab import Datalab

    started = time.perf_counter()
    rows = arrays.probability_rows
    lab = Datalab(data={"label": arrays.labels[rows]}, label_name="label", verbosity=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if len(rows) == len(arrays.paths):
            lab.find_issues(
                features=arrays.features,
                pred_probs=arrays.probabilities,
                # A copy each call: cleanlab 2.9 stores the arrays into the dict it is given, and a later call with the
                # same dict found the first call's issues again (measured: rolled probabilities, the same 15 issues).
                issue_types=copy.deepcopy(types or DATALAB_TYPES),
            )
            whole = lab
        else:  # probabilities for train only: label issues there, duplicates and outliers over every file
            lab.find_issues(pred_probs=arrays.probabilities, issue_types={"label": {}})
            whole = Datalab(data={"label": arrays.labels}, label_name="label", verbosity=0)
            whole.find_issues(features=arrays.features, issue_types={"near_duplicate": {}, "outlier": {}})
    flags = Flags(tool, ("near", "label", "outlier"), seconds=time.perf_counter() - started)
    label = lab.get_issues("label")
    for position in np.flatnonzero(label["is_label_issue"].to_numpy()):
        flags.label[arrays.paths[rows[position]]] = arrays.classes[int(label["predicted_label"].iloc[position])]
    near = whole.get_issues("near_duplicate")
    for position in np.flatnonzero(near["is_near_duplicate_issue"].to_numpy()):
        for other in near["near_duplicate_sets"].iloc[position]:
            flags.near.add(frozenset((arrays.paths[position], arrays.paths[int(other)])))
    outlier = whole.get_issues("outlier")
    flags.outlier = {arrays.paths[i] for i in np.flatnonzero(outlier["is_outlier_issue"].to_numpy())}
    return flags


# The image-dedup libraries, on the files.


def image_files(root: Path) -> list[Path]:
    return sorted(path for path in root.glob("*/*/*") if path.is_file())


def cleanvision_flags(root: Path) -> Flags:
    """cleanvision's exact (md5 of the pixels) and near (equal perceptual hash) duplicates, its defaults."""
    from cleanvision import Imagelab

    started = time.perf_counter()
    imagelab = Imagelab(filepaths=[str(path) for path in image_files(root)])
    imagelab.find_issues({"exact_duplicates": {}, "near_duplicates": {}}, verbose=False)
    flags = Flags("cleanvision", ("exact", "near"), seconds=time.perf_counter() - started)
    for kind in ("exact", "near"):
        sets = imagelab.info[f"{kind}_duplicates"]["sets"]
        setattr(flags, kind, pairs_of([relative(path, root) for path in group] for group in sets))
    return flags


def imagededup_import() -> Any:
    """imagededup's methods. Importing them builds its default CNN, whose MobileNetV3 weights torchvision
    downloads: offline that import fails. The download is skipped (weights=None) for the import only; the CNN
    used here is given the same EfficientNet-Lite0 weights as the audit."""
    from unittest import mock

    import torchvision.models

    real = torchvision.models.mobilenet_v3_small
    with mock.patch.object(torchvision.models, "mobilenet_v3_small", lambda weights=None, **kw: real(**kw)):
        import imagededup.methods
    return imagededup.methods


def imagededup_flags(root: Path, network: Any = None, transform: Any = None) -> Flags:
    """imagededup's PHash (its default distance, 10), or with ``network`` its CNN (its default similarity, 0.9).
    Its hashes and embeddings call exact and near copies alike: every pair it finds is scored as near."""
    methods = imagededup_import()
    started = time.perf_counter()
    if network is None:
        found = methods.PHash(verbose=False).find_duplicates(image_dir=str(root), recursive=True)
    else:
        from imagededup.utils.models import CustomModel

        model = CustomModel(name="efficientnet_lite0", model=network, transform=transform)
        found = methods.CNN(verbose=False, model_config=model).find_duplicates(image_dir=str(root), recursive=True)
    tool = "imagededup PHash" if network is None else "imagededup CNN"
    flags = Flags(tool, ("near",), seconds=time.perf_counter() - started)
    flags.near = {frozenset((key, other)) for key, others in found.items() for other in others}
    return flags


# What a user writes by hand for the audit's findings, each step a library's.


def network_and_transform(weights: Path, size: int) -> tuple[Any, Any]:
    """timm's efficientnet_lite0 with the weights file, headless, and its evaluation crop at ``size``
    (``finetune.py``'s linear probe does the same)."""
    import timm
    import torch
    from torchvision.transforms import v2

    network = timm.create_model("efficientnet_lite0", num_classes=0)
    state = torch.load(weights, map_location="cpu", weights_only=True)
    network.load_state_dict({key: value for key, value in state.items() if not key.startswith("classifier.")})
    transform = v2.Compose([
        v2.ToImage(), v2.Resize(int(size / 0.875), interpolation=v2.InterpolationMode.BICUBIC), v2.CenterCrop(size),
        v2.ToDtype(torch.float32, scale=True), v2.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    ])  # fmt: skip
    return network.eval(), transform


def by_hand(root: Path, weights: Path, size: int, seed: int) -> Flags:
    """The pretrained network's features of every file (torchvision's ImageFolder, the EXIF tag applied), a
    5-fold cross-validated logistic regression for out-of-sample probabilities (scikit-learn), Datalab's label,
    near-duplicate and outlier issues on them, and cleanvision's exact duplicates: timed from the network's
    construction to the last finding, step by step."""
    import torch
    from cleanvision import Imagelab
    from PIL import Image, ImageOps
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from torchvision import datasets

    started = time.perf_counter()
    network, transform = network_and_transform(weights, size)
    splits = [split for split in ("train", "val", "test") if (root / split).is_dir()]
    sets = [
        datasets.ImageFolder(
            root / split, transform, loader=lambda p: ImageOps.exif_transpose(Image.open(p)).convert("RGB")
        )
        for split in splits
    ]
    to_index = sets[0].class_to_idx
    paths = [relative(path, root) for dataset in sets for path, _ in dataset.samples]
    labels = np.array([to_index[dataset.classes[target]] for dataset in sets for _, target in dataset.samples])
    with torch.inference_mode():
        features = torch.cat(
            [network(images) for dataset in sets for images, _ in torch.utils.data.DataLoader(dataset, 64)]
        )
    features = torch.nn.functional.normalize(features, dim=1).numpy()
    parts = {"features": time.perf_counter() - started}
    mark = time.perf_counter()
    folds = StratifiedKFold(5, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a class of fewer than 5 files in a quick run
        probabilities = cross_val_predict(
            LogisticRegression(max_iter=1000), features, labels, cv=folds, method="predict_proba"
        )
    parts["cross-validation"] = time.perf_counter() - mark
    arrays = Arrays(paths, labels, list(to_index), features, None, probabilities, np.arange(len(paths)))
    flags = datalab_flags("by hand", arrays)
    parts["Datalab"] = flags.seconds
    mark = time.perf_counter()
    imagelab = Imagelab(filepaths=[str(root / path) for path in paths])
    imagelab.find_issues({"exact_duplicates": {}}, verbose=False)
    flags.exact = pairs_of(
        [relative(path, root) for path in group] for group in imagelab.info["exact_duplicates"]["sets"]
    )
    parts["cleanvision"] = time.perf_counter() - mark
    flags.checks, flags.parts, flags.seconds = KINDS, parts, time.perf_counter() - started
    return flags


# Scoring.


def split_of(path: str) -> str:
    return path.split("/", 1)[0]


def crosses(pair: frozenset[str]) -> bool:
    return len({split_of(path) for path in pair}) > 1


def ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def score(flags: Flags, truth: Truth) -> dict[str, Any]:
    """Precision and recall of each kind ``flags`` checks, by the truth's kinds (copies by transform)."""
    exact_truth = {frozenset((row["path"], row["source"])): f"exact ({row['same']})" for row in truth.exact}
    near_truth = {frozenset((row["path"], row["source"])): row["transform"] for row in truth.near}
    copies = exact_truth | near_truth
    result: dict[str, Any] = {"tool": flags.tool, "seconds": flags.seconds, "parts": flags.parts}
    if "exact" in flags.checks:
        result["exact"] = pair_score(flags.exact, exact_truth, Verdicts(exact_truth, {}), cross_only=False)
    if "near" in flags.checks:
        result["near"] = pair_score(flags.near, near_truth, Verdicts(copies, truth.regions), cross_only=True)
    found = flags.exact | flags.near
    result["copies_found"] = {"any": ratio(len(found & copies.keys()), len(copies))}
    no_class = {row["path"] for row in truth.no_class}
    moved = {row["path"]: row["true_class"] for row in truth.mislabelled}
    if "label" in flags.checks:
        considered = set(flags.label) - no_class
        right = considered & moved.keys()
        precision, recall = ratio(len(right), len(considered)), ratio(len(right), len(moved))
        result["label"] = {
            "flagged": len(considered),
            "precision": precision,
            "recall": recall,
            "f1": 2 * precision * recall / (precision + recall) if precision and recall else 0.0,
            "suggestion_right": ratio(sum(flags.label[path] == moved[path] for path in right), len(right)),
            "no_class_flagged": len(set(flags.label) & no_class),
        }
    if "outlier" in flags.checks:
        right = flags.outlier & no_class
        result["outlier"] = {
            "flagged": len(flags.outlier),
            "precision": ratio(len(right), len(flags.outlier)),
            "recall": ratio(len(right), len(no_class)),
            "moved_flagged": len(flags.outlier & moved.keys()),
        }
    return result


OVERLAP = 0.5  # two crops of one photo whose regions overlap this much (intersection over union) are duplicates


@dataclass(frozen=True)
class Verdicts:
    """Whether a flagged pair is a duplicate: an injected copy and its source, or two cuts of one photo that share
    most of their pixels (a copy of one val file is also a copy of the val files cut over it). Two cuts that share
    a few pixels are neither right nor wrong (left out of precision); no shared pixel is wrong."""

    copies: dict[frozenset[str], str]
    regions: dict[str, list[Any]]  # path -> [photo, top, left, height, width]

    def overlap(self, a: str, b: str) -> float:
        if a not in self.regions or b not in self.regions or self.regions[a][0] != self.regions[b][0]:
            return 0.0
        (top_a, left_a, h_a, w_a), (top_b, left_b, h_b, w_b) = self.regions[a][1:], self.regions[b][1:]
        rows = max(0, min(top_a + h_a, top_b + h_b) - max(top_a, top_b))
        cols = max(0, min(left_a + w_a, left_b + w_b) - max(left_a, left_b))
        return rows * cols / (h_a * w_a + h_b * w_b - rows * cols)

    def __call__(self, pair: frozenset[str]) -> str:
        """``right``, ``partial`` (a few pixels shared) or, sharing none, ``same photo`` or ``other photo``."""
        if pair in self.copies:
            return "right"
        a, b = sorted(pair)
        shared = self.overlap(a, b)
        if shared >= OVERLAP:
            return "right"
        if shared > 0:
            return "partial"
        same = a in self.regions and b in self.regions and self.regions[a][0] == self.regions[b][0]
        return "same photo" if same else "other photo"


def pair_score(
    flagged: set[frozenset[str]], kinds: dict[frozenset[str], str], verdict: Verdicts, cross_only: bool
) -> dict[str, Any]:
    """Recall of the injected pairs, by kind of copy; precision over the flagged pairs (those across splits when
    ``cross_only``: leakage; those within a split are counted apart), by ``verdict``."""
    recall = {}
    for kind in dict.fromkeys(kinds.values()):
        wanted = {pair for pair, k in kinds.items() if k == kind}
        recall[kind] = ratio(len(wanted & flagged), len(wanted))
    result: dict[str, Any] = {"recall": ratio(len(set(kinds) & flagged), len(kinds)), "recall_by_kind": recall}
    groups = {"across": {pair for pair in flagged if crosses(pair)}, "within": {p for p in flagged if not crosses(p)}}
    for name, pairs in groups.items() if cross_only else [("all", flagged)]:
        said = Counter(verdict(pair) for pair in pairs)
        wrong = said["same photo"] + said["other photo"]
        key = "" if name in ("across", "all") else "within_split_"
        result[f"{key}flagged"] = len(pairs)
        result[f"{key}precision"] = ratio(said["right"], said["right"] + wrong)
        # As on a data set whose photos are all distinct: other cuts of the same photo left out, as ``partial``.
        result[f"{key}precision_distinct"] = ratio(said["right"], said["right"] + said["other photo"])
        result[f"{key}verdicts"] = dict(said)
    return result


def similarity_sweep(arrays: Arrays, truth: Truth, thresholds: Iterable[float]) -> dict[str, Any]:
    """From the audit's own features: every pair of files across splits above a cosine similarity (the larger of
    the plain and the mirrored, where the audit wrote mirrored features), scored as ``pair_score`` scores the
    audit's near duplicates: what each threshold would have found, and each copy's similarity to its source."""
    unit = arrays.features / np.linalg.norm(arrays.features, axis=1, keepdims=True)
    similarity = unit @ unit.T
    if arrays.mirrored is not None:
        mirrored = arrays.mirrored / np.linalg.norm(arrays.mirrored, axis=1, keepdims=True)
        similarity = np.maximum(similarity, unit @ mirrored.T)
        similarity = np.maximum(similarity, similarity.T)
    splits = np.array([split_of(path) for path in arrays.paths])
    across = np.triu(splits[:, None] != splits[None, :], 1)
    position = {path: i for i, path in enumerate(arrays.paths)}
    copies = {(position[row["path"]], position[row["source"]]): row.get("transform", f"exact ({row.get('same')})")
              for row in [*truth.exact, *truth.near]}  # fmt: skip
    verdict = Verdicts(
        {frozenset((arrays.paths[a], arrays.paths[b])): k for (a, b), k in copies.items()}, truth.regions
    )
    # Each pair across splits judged once: right, partial, or wrong (no shared pixel).
    rows, cols = np.nonzero(across & (similarity >= min(thresholds)))
    judged = [verdict(frozenset((arrays.paths[a], arrays.paths[b]))) for a, b in zip(rows, cols, strict=True)]
    values = similarity[rows, cols]
    right = np.array([v == "right" for v in judged], dtype=bool)
    wrong = np.array([v in ("same photo", "other photo") for v in judged], dtype=bool)
    other = np.array([v == "other photo" for v in judged], dtype=bool)
    sweep = []
    for threshold in thresholds:
        above = values >= threshold
        kinds = {kind: float(np.mean([similarity[a, b] >= threshold for (a, b), k in copies.items() if k == kind]))
                 for kind in dict.fromkeys(copies.values())}  # fmt: skip
        near_only = [similarity[a, b] >= threshold for (a, b), k in copies.items() if k in NEAR_KINDS]
        sweep.append({
            "threshold": threshold,
            "flagged": int(above.sum()),
            "wrong": int((above & wrong).sum()),
            "wrong_other_photo": int((above & other).sum()),
            "precision": ratio(int((above & right).sum()), int((above & (right | wrong)).sum())),
            "precision_distinct": ratio(int((above & right).sum()), int((above & (right | other)).sum())),
            "recall_near": float(np.mean(near_only)) if near_only else None,
            "recall_by_kind": kinds,
        })  # fmt: skip
    return {
        "sweep": sweep,
        "copies": [{"kind": k, "similarity": float(similarity[a, b])} for (a, b), k in copies.items()],
    }


LABEL_FILTERS = ("prune_by_noise_rate", "prune_by_class", "both", "confident_learning", "predicted_neq_given")
OUTLIER_IQR = (1.0, 1.5, 1.7, 2.0, 3.0)  # Q3 + this x IQR of the neighbour distance: 1.7 is Datalab's and the audit's


def label_sweep(arrays: Arrays, truth: Truth) -> dict[str, Any]:
    """From the audit's own out-of-sample probabilities: what each of cleanlab's ``filter_by`` rules would flag
    (precision and recall of the moved files, images of no class left out), and the average precision of the
    self-confidence ranking (threshold-free)."""
    from cleanlab.filter import find_label_issues
    from sklearn.metrics import average_precision_score

    rows = arrays.probability_rows
    paths = [arrays.paths[i] for i in rows]
    no_class = {row["path"] for row in truth.no_class}
    moved = {row["path"] for row in truth.mislabelled}
    keep = np.array([path not in no_class for path in paths])
    labels, probabilities = arrays.labels[rows], arrays.probabilities
    wanted = np.array([path in moved for path in paths])
    result: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for rule in LABEL_FILTERS:
            flagged = find_label_issues(labels, probabilities, filter_by=rule) & keep
            right = int((flagged & wanted).sum())
            result[rule] = {"flagged": int(flagged.sum()), "precision": ratio(right, int(flagged.sum())),
                            "recall": ratio(right, int(wanted.sum()))}  # fmt: skip
    confidence = probabilities[np.arange(len(rows)), labels]
    result["average_precision_self_confidence"] = float(average_precision_score(wanted[keep], -confidence[keep]))
    return result


def outlier_sweep(arrays: Arrays, truth: Truth) -> dict[str, Any]:
    """From the audit's own features: cleanlab's ``OutOfDistribution`` (10 nearest neighbours) with the quartile
    rule at several multipliers, and the average precision of its score for the images of no class."""
    from cleanlab.outlier import OutOfDistribution
    from sklearn.metrics import average_precision_score

    scores = OutOfDistribution({"k": min(10, len(arrays.paths) - 1)}).fit_score(features=arrays.features)
    distance = -np.log(np.clip(scores, np.finfo(np.float64).tiny, None))
    wanted = np.array([path in {row["path"] for row in truth.no_class} for path in arrays.paths])
    q1, q3 = np.percentile(distance, [25, 75])
    result: dict[str, Any] = {"average_precision": float(average_precision_score(wanted, distance))}
    for multiple in OUTLIER_IQR:
        flagged = distance > q3 + multiple * (q3 - q1)
        right = int((flagged & wanted).sum())
        result[f"iqr_{multiple}"] = {"flagged": int(flagged.sum()), "precision": ratio(right, int(flagged.sum())),
                                     "recall": ratio(right, int(wanted.sum()))}  # fmt: skip
    ranked = np.argsort(-distance)[: int(wanted.sum())]
    result["recall_in_top_as_many"] = ratio(int(wanted[ranked].sum()), int(wanted.sum()))
    return result
