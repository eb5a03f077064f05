"""The generated project's ``audit`` on injected defects in real photographs, beside what users run instead.

A clean set of real photos (``defects.py``: ``real_photos.py``'s ten photographs, train, val and a held-out
test split that share no pixel) gets, with a seed, exact copies of val files in train/ (same bytes, same pixels as
a PNG), near copies (resized, re-compressed, cropped, flipped, recoloured), a share of the training files moved to
a wrong class folder (``--shares``: 5 % and 10 %) and a handful of images of no class. Real weights throughout:
EfficientNet-Lite0's ImageNet weights (``imagenet_weights.py``), ``model.pretrained_weights`` of the project.

Side by side, on each injected set:

  audit:        ``python -m <package> audit`` (in this process: ``package.cli.main``), its CSVs scored;
  start check:  the exact duplicates every training start finds (``data/files/duplicates.py``), called without training;
  Datalab:      cleanlab's Datalab (label, near-duplicate and outlier issues) on the features and out-of-sample
                probabilities the audit left in its folder: the same inputs;
  cleanvision:  its exact and near duplicates (md5 of the pixels; equal perceptual hashes);
  imagededup:   its PHash (default distance 10), and its CNN given the same weights (default similarity 0.9;
                its own MobileNetV3 would be a download);
  by hand:      what a user wires up for the same findings: the network's features, a 5-fold cross-validated
                logistic regression, Datalab, cleanvision's exact duplicates; timed step by step.

Each tool is scored by precision and recall per kind of defect (``audit_tools.score``), and timed in seconds per
1,000 images (imports apart, done before any timing). The audit's own features are swept over cosine thresholds
(what each would have found). Then what the fixes buy: the project's ``train`` with the pretrained weights
(``finetune.py``'s settings) on the clean set, on the injected set, and on the injected set fixed as the audit's
CSVs say (train's side of every duplicate pair across splits dropped, outliers dropped, label issues moved to the
suggested class, or dropped with ``--fix-labels drop``): val accuracy (the split the copies leak into) against the
held-out test accuracy (of ``best.pt``, which val chose).

Randomness: the seed draws the injection, the training (``train.seed``) and the by-hand folds; the audit's folds
are its own (fixed). It prints a table and its expected duration first, and writes every run to ``--out``.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/data_audit.py [--seeds 0 1 2] [--shares 0.05 0.1]

It needs the ``bench`` extra (``make bench-env``: cleanlab, cleanvision, imagededup, the weights' package).
``--quick`` (a few photos a class, one share, one seed, 32 px, one epoch) only checks that it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from audit_tools import (  # sibling scripts: benchmarks/ is on the path of a script run from it
    LABEL_FILTERS,
    OUTLIER_IQR,
    Flags,
    audit_flags,
    by_hand,
    cleanvision_flags,
    datalab_flags,
    imagededup_flags,
    imagededup_import,
    label_sweep,
    network_and_transform,
    outlier_sweep,
    pairs_of,
    read_arrays,
    relative,
    score,
    similarity_sweep,
)
from defects import Plan, Truth, inject, make_clean
from generated import import_generated
from imagenet_weights import convert
from startup import cpu_name

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "audit_bench"
TOOLS = ("audit", "start check", "Datalab", "cleanvision", "imagededup PHash", "imagededup CNN", "by hand")
DOCS = (REPO / "README.md", REPO / "benchmarks" / "README.md")  # where --paste puts the tables
THRESHOLDS = (0.8, 0.85, 0.875, 0.9, 0.925, 0.95, 0.97)
# Seconds on the idle 2-core EPYC at the full run's sizes, for the duration printed at the start.
SECONDS_PER_TRAINING, SECONDS_PER_SET = 70, 120


def settings(args: argparse.Namespace, root: Path, out: Path, seed: int) -> list[str]:
    """The ``--set`` pairs of every run of the project (audit and train): the data, the weights, finetune.py's
    sizes."""
    return [item for pair in overrides(args, root, out, seed) for item in ("--set", pair)]


def overrides(args: argparse.Namespace, root: Path, out: Path, seed: int) -> list[str]:
    return [
        f"data.root={root}",
        f"data.image_size={args.size}",
        f"data.batch_size={args.batch}",
        f"model.pretrained_weights={args.weights}",
        f"train.seed={seed}",
        f"train.out_dir={out}",
        "train.progress=false",
        "data.cache_dir=none",
    ]


def project_command(args: argparse.Namespace, command: list[str]) -> tuple[float, str]:
    """``package.cli.main(command)`` with the project's default config; seconds, and what it printed."""
    config = args.project / "configs" / "default.yaml"
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()) as said, contextlib.redirect_stderr(io.StringIO()) as errors:
        status = args.cli.main([command[0], "--config", str(config), *command[1:]])
    if status:
        raise SystemExit(f"{command[0]} failed:\n{said.getvalue()[-3000:]}\n{errors.getvalue()[-3000:]}")
    return time.perf_counter() - started, said.getvalue()


def run_audit(args: argparse.Namespace, root: Path, folder: Path, seed: int) -> Flags:
    seconds, said = project_command(args, ["audit", *settings(args, root, folder / "run", seed), "--out", str(folder)])
    flags = audit_flags(folder, root, seconds)
    flags.parts = {"summary": said.strip().splitlines()[-12:]}  # type: ignore[dict-item]  # its printed table's tail
    return flags


def start_check(args: argparse.Namespace, root: Path, seed: int) -> Flags:
    """The exact duplicates every training start finds (``data/folders.py``'s ``checked_splits``, which the
    audit calls too), without training: a first start's cost (``data.cache_dir: none``, no file index kept)."""
    config = importlib.import_module(f"{PACKAGE}.core.config")
    folders = importlib.import_module(f"{PACKAGE}.data.folders")
    preprocessing = importlib.import_module(f"{PACKAGE}.models.preprocessing")
    weights = importlib.import_module(f"{PACKAGE}.models.weights")
    started = time.perf_counter()
    cfg = config.load_config([args.project / "configs" / "default.yaml"], overrides(args, root, root / "run", seed))
    expected = weights.resolve_weights(cfg.model)  # the evaluation resize the weights ask for, as a start fills it
    cfg = preprocessing.with_preprocessing(cfg, expected.expected if expected is not None else None).config
    groups = folders.checked_splits(root, cfg.data).groups or []
    flags = Flags("start check", ("exact",), seconds=time.perf_counter() - started)
    flags.exact = pairs_of([relative(copy.path, root) for copy in group.files] for group in groups)
    return flags


def train(args: argparse.Namespace, root: Path, out: Path, seed: int) -> dict[str, Any]:
    """The project's train with the weights: last and best val accuracy, and best.pt's held-out test accuracy."""
    seconds, said = project_command(
        args, ["train", *settings(args, root, out, seed), "--set", f"train.epochs={args.epochs}"]
    )
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    test = json.loads((out / "test_metrics.json").read_text())
    images = sum(1 for path in (root / "train").glob("*/*") if path.is_file())
    warned = [line for line in said.splitlines() if "duplicate" in line.lower()]
    return {
        "train_images": images,
        "val_acc_last": rows[-1]["val_acc"],
        "val_acc_best": max(row["val_acc"] for row in rows),
        "test_acc": test["test_acc"],
        "seconds": seconds,
        "start_lines_on_duplicates": warned,
    }


def fix(dirty: Path, audit: Path, out: Path, labels: str, truth: Truth) -> dict[str, Any]:
    """A copy of ``dirty`` changed as the audit's CSVs say, train/ only (val and test measure): the train file of
    each duplicate pair across splits dropped, outliers dropped, label issues moved to their suggested class (or
    dropped). What was done, and how much of it the truth calls right."""
    import csv

    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(dirty, out)

    def rows(name: str) -> list[dict[str, str]]:
        path = audit / name
        return list(csv.DictReader(path.open(newline=""))) if path.is_file() else []

    dropped, moved = set(), {}
    for row in rows("exact_duplicates.csv") + rows("near_duplicates.csv"):
        pair = [relative(row["path"], dirty), relative(row["duplicate_of"], dirty)]
        in_train = [path for path in pair if path.startswith("train/")]
        if len(in_train) == 1:  # across splits: the copy in train goes
            dropped.add(in_train[0])
    dropped |= {relative(row["path"], dirty) for row in rows("outliers.csv") if row["split"] == "train"}
    for row in rows("label_issues.csv"):
        path = relative(row["path"], dirty)
        if row["split"] == "train" and path not in dropped:
            if labels == "drop":
                dropped.add(path)
            elif row["suggested_class"] and row["suggested_class"] != row["class"]:
                moved[path] = row["suggested_class"]
    # A class folder left empty would stop training: its last file stays, as a user would keep it.
    for path in sorted(dropped):
        if last_but_one(out / path):
            (out / path).unlink()
        else:
            dropped.discard(path)
    for path, label in list(moved.items()):
        if last_but_one(out / path):
            (out / path).rename(out / "train" / label / Path(path).name)
        else:
            del moved[path]
    copies = {row["path"] for row in truth.exact + truth.near}
    wrong = {row["path"]: row["true_class"] for row in truth.mislabelled}
    no_class = {row["path"] for row in truth.no_class}
    return {
        "dropped": len(dropped),
        "dropped_copies": len(dropped & copies),
        "dropped_moved": len(dropped & wrong.keys()),
        "dropped_no_class": len(dropped & no_class),
        "dropped_clean": len(dropped - copies - wrong.keys() - no_class),
        "relabelled": len(moved),
        "relabelled_right": sum(wrong.get(path) == label for path, label in moved.items()),
        "relabelled_clean": len(moved.keys() - wrong.keys() - no_class),
    }


def last_but_one(path: Path) -> bool:
    """Whether ``path``'s folder holds another file besides it."""
    return any(other != path for other in path.parent.iterdir())


def one_set(args: argparse.Namespace, clean: Path, seed: int, share: float, tmp: Path) -> dict[str, Any]:
    """Inject, run every tool, score them; then train on the injected set and on it fixed by the audit."""
    root = tmp / f"set-{seed}-{share}"
    truth = inject(clean, root, Plan(**{**asdict(args.plan), "mislabelled": share}), seed)
    files = sum(1 for path in root.glob("*/*/*") if path.is_file())
    folder = tmp / f"audit-{seed}-{share}"
    flags = [run_audit(args, root, folder, seed)]
    if args.start_check:
        flags.append(start_check(args, root, seed))
    arrays = read_arrays(folder, root)
    with quiet():  # their progress bars and log lines
        if not args.audit_only:  # --audit-only: the audit alone (no bench extra needed), the others' minutes saved
            flags.append(datalab_flags("Datalab", arrays))
            flags.append(cleanvision_flags(root))
            flags.append(imagededup_flags(root))
            flags.append(imagededup_flags(root, *network_and_transform(args.weights, args.size)))
            flags.append(by_hand(root, args.weights, args.size, seed))
    scores = {flag.tool: score(flag, truth) | {"seconds_per_1000": 1000 * flag.seconds / files} for flag in flags}
    result: dict[str, Any] = {
        "seed": seed,
        "share": share,
        "files": files,
        "truth": {kind: len(rows) for kind, rows in asdict(truth).items()},
        "scores": scores,
        "audit_summary": flags[0].parts.get("summary"),
        "sweep": similarity_sweep(arrays, truth, THRESHOLDS),
    }
    with quiet():  # cleanlab's "Fitting OOD estimator" line
        result["label_sweep"], result["outlier_sweep"] = label_sweep(arrays, truth), outlier_sweep(arrays, truth)
    for tool, row in scores.items():
        print(f"  seed {seed} share {share:.2f} {tool:<17} {brief(row)}", flush=True)
    if args.epochs and seed in args.train_seeds:
        result["dirty"] = train(args, root, tmp / f"train-dirty-{seed}-{share}", seed)
        fixed = tmp / f"set-{seed}-{share}-fixed"
        result["fix"] = fix(root, folder, fixed, args.fix_labels, truth)
        result["fixed"] = train(args, fixed, tmp / f"train-fixed-{seed}-{share}", seed)
        for name in ("dirty", "fixed"):
            run = result[name]
            print(f"  seed {seed} share {share:.2f} {name:<6} val {run['val_acc_best']:.3f} test {run['test_acc']:.3f}")
        shutil.rmtree(fixed)
    shutil.rmtree(root)
    return result


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The libraries' progress bars (stderr) and log lines (imagededup's go to stdout) left out."""
    logging.disable(logging.INFO)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(logging.NOTSET)


def brief(row: dict[str, Any]) -> str:
    """One line of a tool's scores: precision/recall of each kind it checks, and its time."""

    def pr(part: dict[str, Any]) -> str:
        return "/".join("-" if part[key] is None else f"{part[key]:.2f}" for key in ("precision", "recall"))

    kinds = [f"{kind} {pr(row[kind])}" for kind in ("exact", "near", "label", "outlier") if kind in row]
    return ", ".join(kinds) + f"; {row['seconds']:.1f} s ({row['seconds_per_1000']:.0f} s / 1,000)"


# The tables: means over the seeds, lowest and highest beside.


def spread(values: list[float | None]) -> str:
    known = [value for value in values if value is not None]
    if not known:
        return "-"
    digits = 0 if all(isinstance(value, int) for value in known) else 2  # counts: whole numbers
    if f"{min(known):.{digits}f}" == f"{max(known):.{digits}f}":  # no spread at the digits shown
        return f"{statistics.mean(known):.{digits}f}"
    dash = " to " if min(known) < 0 else "-"  # -0.11 to -0.03, not -0.11--0.03
    return f"{statistics.mean(known):.{digits}f} ({min(known):.{digits}f}{dash}{max(known):.{digits}f})"


def detection_table(sets: list[dict[str, Any]], share: float) -> str:
    """Rows: each kind of defect (recall) and each kind's precision, then seconds per 1,000 images; columns: tools."""
    runs = [run for run in sets if run["share"] == share]
    tools = [tool for tool in TOOLS if tool in runs[0]["scores"]]

    def cell(tool: str, *keys: str) -> str:
        values = []
        for run in runs:
            part: Any = run["scores"][tool]
            for key in keys:
                part = part.get(key) if isinstance(part, dict) else None
            values.append(part)
        return spread(values)

    def kinds(check: str) -> list[str]:  # the copies' kinds, from whichever tool checks them
        return list(
            dict.fromkeys(k for t in tools for k in runs[0]["scores"][t].get(check, {}).get("recall_by_kind", {}))
        )

    near_kinds, exact_kinds = kinds("near"), kinds("exact")
    lines = ["| defect | " + " | ".join(tools) + " |", "|---|" + "---:|" * len(tools)]
    rows: list[tuple[str, tuple[str, ...]]] = [
        *[(f"{kind} copy: recall", ("exact", "recall_by_kind", kind)) for kind in exact_kinds],
        ("exact duplicates: precision", ("exact", "precision")),
        *[(f"{kind} copy: recall (near)", ("near", "recall_by_kind", kind)) for kind in near_kinds],
        ("near duplicates: precision (across splits)", ("near", "precision")),
        ("near duplicates: precision, distinct photos", ("near", "precision_distinct")),
        ("every copy found (exact or near)", ("copies_found", "any")),
        (f"moved to a wrong class ({share:.0%}): recall", ("label", "recall")),
        ("label issues: precision", ("label", "precision")),
        ("label issues: F1", ("label", "f1")),
        ("label issues: suggested class right", ("label", "suggestion_right")),
        ("no class: recall (outliers)", ("outlier", "recall")),
        ("outliers: precision", ("outlier", "precision")),
    ]
    for name, keys in rows:
        lines.append(f"| {name} | " + " | ".join(cell(tool, *keys) for tool in tools) + " |")
    lines.append("| seconds per 1,000 images | " + " | ".join(cell(tool, "seconds_per_1000") for tool in tools) + " |")
    return "\n".join(lines)


def accuracy_table(sets: list[dict[str, Any]], clean: list[dict[str, Any]]) -> str:
    lines = [
        "| training set | train images | val accuracy (best) | held-out test accuracy | val - test |",
        "|---|---:|---:|---:|---:|",
    ]

    def row(name: str, runs: list[dict[str, Any]]) -> str:
        gap = [run["val_acc_best"] - run["test_acc"] for run in runs]
        cells = [spread([run["train_images"] for run in runs]), spread([run["val_acc_best"] for run in runs]),
                 spread([run["test_acc"] for run in runs]), spread(gap)]  # fmt: skip
        return f"| {name} | " + " | ".join(cells) + " |"

    lines.append(row("clean", clean))
    for share in dict.fromkeys(run["share"] for run in sets):
        runs = [run for run in sets if run["share"] == share and "dirty" in run]
        lines.append(row(f"injected ({share:.0%} moved)", [run["dirty"] for run in runs]))
        lines.append(row(f"injected, fixed by the audit's CSVs ({share:.0%})", [run["fixed"] for run in runs]))
    return "\n".join(lines)


def sweep_table(sets: list[dict[str, Any]]) -> str:
    """The audit's features at each threshold: pairs across splits flagged, precision, recall of near copies."""
    lines = [
        "| cosine threshold | pairs across splits | precision | precision, distinct photos | recall (near copies) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for index, threshold in enumerate(THRESHOLDS):
        points = [run["sweep"]["sweep"][index] for run in sets]
        cells = [
            spread([p[key] for p in points]) for key in ("flagged", "precision", "precision_distinct", "recall_near")
        ]
        lines.append(f"| {threshold} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_table(sets: list[dict[str, Any]]) -> str:
    """The README's short table: means over every seed and share (label issues by share), each cell from ``sets``."""
    tools = ["audit", "Datalab", "cleanvision", "imagededup PHash", "by hand"]
    names = ["audit", "Datalab on the audit's arrays", "cleanvision", "imagededup PHash", "by hand"]

    def mean(tool: str, *keys: str, share: float | None = None) -> float | None:
        values = []
        for run in sets:
            part: Any = run["scores"].get(tool, {})
            for key in keys:
                part = part.get(key) if isinstance(part, dict) else None
            if part is not None and share in (None, run["share"]):
                values.append(part)
        return statistics.mean(values) if values else None

    def pair(tool: str, kind: str, share: float | None = None) -> str:
        if kind not in sets[0]["scores"].get(tool, {}):
            return "-"  # not a check of this tool
        both = [mean(tool, kind, key, share=share) for key in ("precision", "recall")]
        return " / ".join("none flagged" if value is None else f"{value:.2f}" for value in both)

    def exact(tool: str) -> str:
        if tool == "audit" and "exact" not in sets[0]["scores"]["audit"]:
            tool = "start check"  # the audit's exact duplicates are the start's check (data/files/duplicates.py)
        return pair(tool, "exact") + (" (start check)" if tool == "start check" else "")

    lines = ["| precision / recall | " + " | ".join(names) + " |", "|---|" + "---:|" * len(tools)]
    lines.append("| exact copies of val files in train | " + " | ".join(exact(tool) for tool in tools) + " |")
    lines.append("| near copies (pairs across splits) | " + " | ".join(pair(tool, "near") for tool in tools) + " |")
    for share in dict.fromkeys(run["share"] for run in sets):
        cells = [pair(tool, "label", share) for tool in tools]
        lines.append(f"| files in a wrong class folder ({share:.0%}) | " + " | ".join(cells) + " |")
    lines.append("| images of no class (outliers) | " + " | ".join(pair(tool, "outlier") for tool in tools) + " |")
    seconds = [mean(tool, "seconds_per_1000") for tool in tools]
    cells = ["-" if v is None else f"{v:.1f}" if v < 10 else f"{v:.0f}" for v in seconds]
    lines.append("| seconds per 1,000 images | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rules_table(sets: list[dict[str, Any]]) -> str:
    """The audit's own arrays under other rules: cleanlab's label filters, the outlier quartile rule's multiple."""
    lines = ["| rule on the audit's arrays | flagged | precision | recall |", "|---|---:|---:|---:|"]
    for key, names in (("label_sweep", LABEL_FILTERS), ("outlier_sweep", [f"iqr_{m}" for m in OUTLIER_IQR])):
        for name in names:
            points = [run[key][name] for run in sets]
            cells = [spread([p[k] for p in points]) for k in ("flagged", "precision", "recall")]
            what = f"label issues: filter_by={name}" if key == "label_sweep" else f"outliers: Q3 + {name[4:]} x IQR"
            lines.append(f"| {what} | " + " | ".join(cells) + " |")
    average = spread([run["label_sweep"]["average_precision_self_confidence"] for run in sets])
    outliers = spread([run["outlier_sweep"]["average_precision"] for run in sets])
    lines.append(f"| average precision: label self-confidence {average}, outlier distance {outliers} | | | |")
    return "\n".join(lines)


def tables(report: dict[str, Any]) -> dict[str, str]:
    """Every table, from the report's runs alone (``--tables-from`` makes them again from a saved report)."""
    sets = report["sets"]
    made = {f"detection_{share}": detection_table(sets, share) for share in dict.fromkeys(r["share"] for r in sets)}
    made |= {"sweep": sweep_table(sets), "rules": rules_table(sets), "summary": summary_table(sets)}
    if report["clean"]:
        made["accuracy"] = accuracy_table(sets, report["clean"])
    return made


def drive(args: argparse.Namespace) -> None:
    trainings = len(args.train_seeds) * (1 + 2 * len(args.shares)) if args.epochs else 0
    minutes = (trainings * SECONDS_PER_TRAINING + len(args.seeds) * len(args.shares) * SECONDS_PER_SET) / 60
    plan = f"{len(args.seeds)} seeds x {len(args.shares)} shares, {trainings} trainings"
    load = f"load average now {os.getloadavg()[0]:.1f}"
    print(f"data_audit: {plan}: about {minutes:.0f} min on an idle 2-core EPYC ({load})", flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="data-audit-") as tmp_name:
        tmp = Path(tmp_name)
        args.weights = convert(args.cache / "efficientnet_lite0_in1k.pth")
        args.project = tmp / "project"
        answers = {"model": "timm/efficientnet_lite0"}
        package = import_generated(args.project, "Audit Bench", PACKAGE, answers, template=args.template)
        args.cli = sys.modules[f"{package.__name__}.cli"]
        if "audit" not in args.cli.COMMANDS:
            raise SystemExit(f"{args.template or REPO}: its generated project has no audit command (issue 52)")
        # The check every start makes since 0.12.0: data/files/duplicates.py, in data/files/ since 0.13.0.
        args.start_check = any(importlib.util.find_spec(f"{PACKAGE}.data.{room}") for room in ("files", "duplicates"))
        import cleanlab  # noqa: F401  # every tool's imports before any timing: the audit's cleanlab too

        if not args.audit_only:
            import cleanvision  # noqa: F401
        import matplotlib.figure  # noqa: F401  # the audit's pictures (the plots extra)
        import sklearn.linear_model  # noqa: F401
        import timm  # noqa: F401

        importlib.import_module(f"{PACKAGE}.commands.audit.audit")  # the audit's own modules, as the tools' above

        if not args.audit_only:
            imagededup_import()
        clean = make_clean(tmp / "clean", *args.per_class)
        report: dict[str, Any] = {
            "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "load_average_at_start": os.getloadavg()},
            "settings": {k: str(v) for k, v in vars(args).items() if k not in ("out", "cli")},
            "sets": [],
            "clean": [],
        }
        for seed in args.seeds:
            if args.epochs and seed in args.train_seeds:
                report["clean"].append(train(args, clean, tmp / f"train-clean-{seed}", seed) | {"seed": seed})
                print(f"  seed {seed} clean  val {report['clean'][-1]['val_acc_best']:.3f} "
                      f"test {report['clean'][-1]['test_acc']:.3f}", flush=True)  # fmt: skip
            for share in args.shares:
                report["sets"].append(one_set(args, clean, seed, share, tmp))
                write(args.out, report | {"unfinished": True})  # what is done so far, should the run be stopped
        report["tables"] = tables(report)
        report["load_average_at_end"] = os.getloadavg()
        report["minutes"] = (time.perf_counter() - started) / 60
        for name, text in report["tables"].items():
            print(f"\n{name}\n{text}")
        write(args.out, report)
        print(f"\n{report['minutes']:.1f} min; written to {args.out}")
        if args.paste:
            paste_tables(report)


def paste_tables(report: dict[str, Any], docs: tuple[Path, ...] = DOCS) -> None:
    """Each table of ``report`` into the docs, between ``<!-- data_audit: NAME -->`` and ``<!-- /data_audit -->``:
    the figures in the READMEs are the measured file's (``tests/test_benchmarks.py`` checks it)."""
    for doc in docs:
        text = doc.read_text()
        for name, table in report["tables"].items():
            start, end = f"<!-- data_audit: {name} -->\n", "<!-- /data_audit -->"
            if start in text:
                before, rest = text.split(start, 1)
                text = before + start + table + "\n" + end + rest.split(end, 1)[1]
        doc.write_text(text)


def write(out: Path, report: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--shares", type=float, nargs="+", default=[0.05, 0.1], help="training files moved")
    parser.add_argument("--per-class", type=int, nargs=3, default=[50, 40, 40], help="train, val, test photos a class")
    parser.add_argument("--size", type=int, default=96, help="data.image_size of the audit and the training")
    parser.add_argument("--epochs", type=int, default=10, help="of each training; 0: no training, the audit only")
    parser.add_argument("--train-seeds", type=int, nargs="*", help="the seeds that train too (default: every seed)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--fix-labels", choices=["relabel", "drop"], default="relabel")
    parser.add_argument("--template", type=Path, help="generate the project from this checkout (default: this one)")
    parser.add_argument("--cache", type=Path, default=REPO / ".bench", help="where the converted weights are kept")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "data_audit.json")
    parser.add_argument("--tables-from", type=Path, help="make the tables again from this saved report; no run")
    parser.add_argument("--paste", action="store_true", help="put the tables into README.md and benchmarks/README.md")
    parser.add_argument(
        "--audit-only", action="store_true", help="the audit and the start check alone: no other tool, no training"
    )
    parser.add_argument("--quick", action="store_true", help="a few photos a class, one seed, 32 px: that it runs")
    args = parser.parse_args()
    if args.tables_from:
        report = json.loads(args.tables_from.read_text())
        report["tables"] = tables(report)
        write(args.tables_from, report)
        if args.paste:
            paste_tables(report)
        print("\n\n".join(f"{name}\n{text}" for name, text in report["tables"].items()))
        return
    args.plan = Plan()
    args.train_seeds = args.seeds if args.train_seeds is None else args.train_seeds
    if args.quick:
        args.seeds, args.shares, args.per_class, args.size, args.epochs = [0], [0.1], [3, 4, 1], 32, 1
        args.train_seeds = [0]
        args.plan = Plan(exact_bytes=1, exact_pixels=1, near_each=1, plain_each=1, no_class=2)
    if args.audit_only:
        args.epochs = 0
    drive(args)


if __name__ == "__main__":
    main()
