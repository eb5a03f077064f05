"""The audit's stages after the embedding pass, at ImageNet's shape: seconds and peak memory per stage.

``features_only(files)`` makes ``files`` synthetic unit embeddings, 1,280 wide, in 1,000 classes (each class a
random direction, each file its class's direction plus noise; 4 % of the files in val/, ImageNet's share), with
defects planted: 5 % of the training files moved to another class, 0.1 % of the val files copied into train/
(a little noise added) and 0.05 % files of no class (random directions); and random grey thumbnails, as the
loader pass keeps them (so the thumbnails' search and the pixel check cost what they cost; random pictures
match nothing). Then, as ``commands/audit/audit.py`` runs them, each stage timed and its peak resident memory read
(``/proc/self/status`` VmHWM, reset before each stage):

  labels       the k-fold linear head and cleanlab's label check (``commands/audit/linear_head.py``,
               ``label_checks.py``): first, as it needs no graph;
  search       the one neighbour graph of the embeddings (``commands/audit/neighbours.py``: FAISS on the CPU where
               installed, else blocked products with topk; ``--search`` picks), and untimed after it, the share
               of the exact nearest it found for ``RECALL_SAMPLE`` files and how far its cosines are from true;
  outliers     cleanlab's scores on the same graph;
  near copies  the candidates from that graph and the thumbnails' own search, then the pixel check (last: the
               longest stage).

What each stage found of the planted defects is printed beside (recall; precision for labels and outliers).

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/audit_scale.py --features-only --files 128000 1280000

``benchmarks/scale.py`` (the whole audit of an ImageNet-shaped folder) can call ``features_only`` for its
features-only mode. ``--quick`` (3,000 files, 50 classes) only checks that it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
PACKAGE = "audit_scale_bench"
VAL_SHARE, MOVED, COPIED, NO_CLASS = 0.04, 0.05, 0.001, 0.0005
RECALL_SAMPLE = 1_000  # files whose exact nearest the search's are compared with
NOISE = 1.0  # a file's distance from its class's direction, relative to it (unit vectors: cosine ~0.5 in class)


def reset_peak() -> None:
    """The peak resident memory counted again from now (Linux: 5 to clear_refs resets VmHWM)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def peak_gb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def synthetic(files: int, classes: int, width: int, seed: int = 0) -> dict[str, Any]:
    """The embeddings (float16, unit rows, as the pass keeps them), labels, splits and the planted defects."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    centres = torch.nn.functional.normalize(torch.randn(classes, width, generator=generator), dim=1)
    val = int(files * VAL_SHARE)
    train = files - val
    truth = rng.integers(0, classes, files)
    truth[:train].sort()  # listed class by class, as a folder is
    truth[train:].sort()
    features = torch.empty(files, width, dtype=torch.float16)
    for top in range(0, files, 65_536):
        part = slice(top, min(top + 65_536, files))
        rows = centres[torch.as_tensor(truth[part])]
        noise = torch.randn(rows.shape, generator=generator) * (NOISE / width**0.5)
        features[part] = torch.nn.functional.normalize(rows + noise, dim=1).half()
    strangers = rng.choice(train, max(1, int(files * NO_CLASS)), replace=False)
    features[torch.as_tensor(strangers)] = torch.nn.functional.normalize(
        torch.randn(len(strangers), width, generator=generator), dim=1
    ).half()
    copied = rng.choice(np.setdiff1d(np.arange(val), strangers), max(1, int(files * COPIED)), replace=False)
    sources = train + copied  # val files copied into train: the copy a slightly noisy train file
    targets_in_train = rng.choice(np.setdiff1d(np.arange(train), strangers), len(copied), replace=False)
    noise = torch.randn(len(copied), width, generator=generator) * (0.1 / width**0.5)
    features[torch.as_tensor(targets_in_train)] = torch.nn.functional.normalize(
        features[torch.as_tensor(sources)].float() + noise, dim=1
    ).half()
    truth[targets_in_train] = truth[sources]
    labels = truth.copy()
    candidates = np.setdiff1d(np.arange(train), np.concatenate([strangers, targets_in_train]))
    moved = rng.choice(candidates, int(train * MOVED), replace=False)
    labels[moved] = (truth[moved] + rng.integers(1, classes, len(moved))) % classes
    thumbs = torch.randint(0, 256, (files, 1, 32, 32), dtype=torch.uint8, generator=generator)
    return {
        "features": features,
        "labels": labels,
        "splits": ["train"] * train + ["val"] * val,
        "moved": set(moved.tolist()),
        "strangers": set(strangers.tolist()),
        "copies": {(int(s), int(t)) for s, t in zip(sources, targets_in_train, strict=True)},
        "thumbs": thumbs,
    }


STAGES = ("labels", "search", "outliers", "near copies")  # in the order run


def features_only(
    package: str,
    files: int,
    classes: int = 1000,
    width: int = 1280,
    search: str = "auto",
    out: Path | None = None,
    stages: tuple[str, ...] = STAGES,
) -> dict[str, Any]:
    """Every stage after embedding (or those of ``stages``; the search always) on ``files`` synthetic embeddings:
    seconds, peak GB and what it found."""
    import torch

    near = importlib.import_module(f"{package}.commands.audit.near_copies")
    neighbours = importlib.import_module(f"{package}.commands.audit.neighbours")
    findings = importlib.import_module(f"{package}.commands.audit.findings")
    checks = importlib.import_module(f"{package}.commands.audit.label_checks")
    if search == "exact":
        neighbours.faiss_module = lambda: None  # the blocked products, FAISS or not
    reset_peak()
    started = time.perf_counter()
    made = synthetic(files, classes, width)
    result: dict[str, Any] = {"files": files, "classes": classes, "width": width}
    result["make"] = {"seconds": time.perf_counter() - started, "peak_gb": peak_gb()}
    names = [f"c{i}" for i in range(classes)]
    audit_files = findings.AuditFiles([f"f{i}" for i in range(files)], made["splits"], made["labels"], names)
    thumbs = near.Thumbnails(made["thumbs"], torch.ones(files), torch.zeros(files, 2))
    device = torch.device("cpu")
    folder = Path(out or tempfile.mkdtemp(prefix="audit-scale-"))

    def stage(name: str, run: Any) -> Any:
        reset_peak()
        begun = time.perf_counter()
        value = run()
        result[name] = {"seconds": time.perf_counter() - begun, "peak_gb": peak_gb()}
        seconds, peak = result[name]["seconds"], result[name]["peak_gb"]
        print(f"  {files:>9,} files  {name:<12} {seconds:8.1f} s  {peak:5.2f} GB peak", flush=True)
        return value

    if "labels" in stages:  # first: it needs no graph, so a run stopped during the search still has its figures
        checked = stage(
            "labels", lambda: checks.label_issues(audit_files, made["features"], "synthetic", True, device, folder)
        )
        flagged = {int(row.path[1:]) for row in checked.findings}
        result["labels"] |= score(flagged, made["moved"])
        result["labels"]["method"] = checked.findings[0].extra["method"] if checked.findings else ""
        del checked  # its probabilities (a memory-mapped file) closed before the next stage
        print(json.dumps({"labels": result["labels"]}), flush=True)
    if stages == ("labels",):  # the label check alone: no graph needed
        result["total_seconds"], result["total_peak_gb"] = result["labels"]["seconds"], peak_total()
        return result
    k = max(near.NEIGHBOURS, checks.OUTLIER_NEIGHBOURS) + 1
    graph = stage("search", lambda: neighbours.search(made["features"], made["splits"], k, device, show=True))
    result["search"]["method"] = graph.method
    result["search"] |= search_recall(neighbours, made["features"], graph, k)
    codes = near.earlier_pairs(graph, near.SHORTLIST_COSINE)  # the copies the graph proposes to the pixel check
    found = {(int(c) // files, int(c) % files) for c in codes}
    result["search"]["copies_proposed"] = len(made["copies"] & found) / len(made["copies"])
    print(f"  search: {result['search']['copies_proposed']:.3f} of the planted copies proposed", flush=True)
    if "outliers" in stages:
        rows = stage("outliers", lambda: checks.outliers(audit_files, graph, "synthetic"))
        result["outliers"] |= score({int(row.path[1:]) for row in rows}, made["strangers"])
        print(json.dumps({"outliers": result["outliers"]}), flush=True)
    if "near copies" in stages:  # last: its pixel check is the longest stage
        pairs = stage("near copies", lambda: near.near_copies(graph, thumbs, made["splits"], show=True))
        result["near copies"]["candidates_recall"] = result["search"]["copies_proposed"]
        result["near copies"]["pairs"] = len(pairs)
    result["total_seconds"] = sum(result[name]["seconds"] for name in STAGES if name in result)
    result["total_peak_gb"] = peak_total()
    return result


def compare_search(package: str, files: int, width: int = 1280, classes: int = 1000) -> dict[str, Any]:
    """The neighbour search three ways on the same synthetic embeddings (one split, k = 11): blocked products
    with topk (float32 on the CPU), FAISS's exact index, FAISS's inverted file (as ``neighbours`` builds it
    from ``APPROXIMATE_FROM`` files); seconds, and the share of the exact 11 nearest each approximate way finds."""
    import torch

    neighbours = importlib.import_module(f"{package}.commands.audit.neighbours")
    made = synthetic(files, classes, width)
    vectors, splits, device = made["features"], ["train"] * files, torch.device("cpu")
    result: dict[str, Any] = {"files": files, "width": width}
    real, threshold = neighbours.faiss_module, neighbours.APPROXIMATE_FROM
    graphs = {}
    for name, faiss_on, approximate_from in (("exact", False, threshold), ("faiss exact", True, files + 1),
                                             ("faiss ivf", True, 0)):  # fmt: skip
        neighbours.faiss_module = real if faiss_on else (lambda: None)
        neighbours.APPROXIMATE_FROM = approximate_from
        reset_peak()
        begun = time.perf_counter()
        graphs[name] = neighbours.search(vectors, splits, 11, device)
        result[name] = {"seconds": time.perf_counter() - begun, "peak_gb": peak_gb()}
        truth, found = graphs["exact"].index[:, 0], graphs[name].index[:, 0]
        same = (found[:, :, None] == truth[:, None, :]).any(2).float().mean().item()
        result[name]["recall_of_exact"] = same
        print(f"  {files:>9,} files  {name:<12} {result[name]['seconds']:8.1f} s  recall {same:.4f}", flush=True)
    neighbours.faiss_module, neighbours.APPROXIMATE_FROM = real, threshold
    return result


def search_recall(neighbours: Any, features: Any, graph: Any, k: int, sample: int = RECALL_SAMPLE) -> dict[str, Any]:
    """How much of the exact search the graph holds, on ``sample`` evenly spaced files (untimed): the share of
    each split's true ``k`` nearest found, and the largest gap between a found pair's cosine and its true one."""
    import torch

    asked = torch.arange(0, len(features), max(1, len(features) // sample))[:sample]
    truth = neighbours.exact(features, graph.starts, k, torch.device("cpu"), [features[asked]])[0]
    found = graph.index[asked]
    right = (found.flatten(1)[:, :, None] == truth.index.flatten(1)[:, None, :]).any(1)
    valid = truth.index.flatten(1) >= 0
    recall = float(right[valid].float().mean())
    pairs = found >= 0
    rows = features[asked].float()[:, None, None, :].expand(-1, found.shape[1], found.shape[2], -1)[pairs]
    true = (rows * features[found[pairs]].float()).sum(1)
    gap = float((graph.similarity[asked][pairs] - true).abs().max()) if pairs.any() else 0.0
    print(f"  search: {recall:.3f} of the exact {k} nearest found ({len(asked)} files), cosine gap {gap:.1e}")
    return {"recall_of_exact": recall, "cosine_gap": gap, "recall_sample": len(asked)}


def peak_total() -> float:
    """The process's peak resident memory over its whole life (getrusage; VmHWM was reset per stage)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def score(flagged: set[int], planted: set[int]) -> dict[str, Any]:
    right = len(flagged & planted)
    return {
        "flagged": len(flagged),
        "precision": right / len(flagged) if flagged else None,
        "recall": right / len(planted) if planted else None,
    }


def main() -> None:
    from generated import import_generated
    from startup import cpu_name

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features-only", action="store_true", help="the stages after embedding (the only mode)")
    parser.add_argument("--files", type=int, nargs="+", default=[128_000])
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--search", choices=["auto", "exact"], default="auto", help="exact: blocked products")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "audit_scale.json")
    parser.add_argument("--quick", action="store_true", help="3,000 files, 50 classes: that it runs")
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES), help="search: unless labels alone")
    parser.add_argument("--compare-search", action="store_true", help="the three searches at --files, timed")
    args = parser.parse_args()
    if args.quick:
        args.files, args.classes = [3000], 50
    import torch

    print(f"audit_scale: {cpu_name()}, {torch.get_num_threads()} torch threads, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="audit-scale-") as tmp:
        import_generated(Path(tmp) / "project", "Audit Scale", PACKAGE, {"model": "timm/efficientnet_lite0"})
        runs = []
        for files in args.files:
            if args.compare_search:
                runs.append(compare_search(PACKAGE, files, args.width, args.classes))
                continue
            stages = tuple(args.stages)
            runs.append(features_only(PACKAGE, files, args.classes, args.width, args.search, Path(tmp), stages))
            print(json.dumps(runs[-1], indent=1), flush=True)
    report = {"cpu": cpu_name(), "threads": torch.get_num_threads(), "load_at_end": os.getloadavg(), "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
