"""Where a checkpoint came from: template version and answers, project commit, library versions, the data.

Every checkpoint carries it, ``evaluate`` prints it in one line, and a resume
compares the data's fingerprint: exactness needs the same files, so a change
is reported (not refused: adding data to a run can be what you want).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

import torch
import torchvision
import yaml

PROJECT = Path(__file__).resolve().parents[3]  # src/<package>/core/provenance.py -> the project folder


def template_answers() -> dict[str, Any]:
    """The copier answers the project was generated with (``_commit`` is the template version); {} if absent."""
    answers = PROJECT / ".copier-answers.yml"
    try:
        loaded = yaml.safe_load(answers.read_text()) if answers.is_file() else {}
    except (OSError, yaml.YAMLError):
        return {}
    return {str(k): v for k, v in loaded.items() if isinstance(v, str | int | float | bool)} if loaded else {}


def git_commit() -> dict[str, Any]:
    """The project's commit and whether the work tree had changes; empty when it is no git repository."""
    try:

        def git(*args: str) -> str:
            run = subprocess.run(["git", *args], cwd=PROJECT, capture_output=True, text=True, timeout=10, check=True)
            return run.stdout.strip()

        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return {}


def data_fingerprint(dataset: Any) -> dict[str, dict[str, Any]]:
    """Per class: how many files, and a hash of their paths (relative to the split) and sizes."""
    root = Path(dataset.root)
    prefix = os.path.join(str(root), "")  # the scan's paths start so: a cut costs 20x less than os.path.relpath
    files: dict[str, list[str]] = {name: [] for name in dataset.classes}
    size = getattr(
        dataset, "file_size", os.path.getsize
    )  # a packed split knows its files' sizes (data/files/shards.py)
    for path, target in getattr(dataset, "samples", []):
        relative = path[len(prefix) :] if path.startswith(prefix) else os.path.relpath(path, root)
        files[dataset.classes[target]].append(f"{relative}\t{size(path)}")
    return {
        name: {"count": len(lines), "hash": hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:16]}
        for name, lines in files.items()
    }


def list_digests(files: dict[str, str | None]) -> dict[str, dict[str, str]]:
    """``data.exclude`` and ``data.relabel`` (data/file_lists.py): each list's file and the SHA-256 of its bytes, so
    that a checkpoint says which files its run left out or relabelled even after the list is written again."""
    record = {}
    for key, name in files.items():
        if name:
            try:
                digest = hashlib.sha256(Path(name).read_bytes()).hexdigest()[:16]
            except OSError:  # read at the start a moment ago: gone since, the digest is unknown
                digest = "unreadable"
            record[key] = {"file": str(name), "sha256": digest}
    return record


def lists_changed(saved: dict[str, Any], now: dict[str, Any]) -> str | None:
    """Which of the lists changed since a checkpoint was written, in words; None when none did."""
    changed = [f"data.{key}" for key in ("exclude", "relabel") if saved.get(key) != now.get(key)]
    return f"{' and '.join(changed)} changed" if changed else None


def provenance(train_set: Any, val_set: Any, lists: dict[str, str | None] | None = None) -> dict[str, Any]:
    """The record; ``lists``: the config's ``data.exclude`` and ``data.relabel`` files, recorded by digest."""
    return {
        "template": template_answers(),
        "git": git_commit(),
        "torch": str(torch.__version__),  # a TorchVersion object would not load with weights_only=True
        "torchvision": str(torchvision.__version__),
        "data": {"train": data_fingerprint(train_set), "val": data_fingerprint(val_set)},
        "lists": list_digests(lists or {}),
        # Which decoder made the training pixels: nvjpeg (data/loading/gpu_decode.py) or cpu; a resume keeps it.
        "decoder": getattr(train_set, "decoder", "cpu"),
    }


def data_changes(saved: dict[str, Any], now: dict[str, Any]) -> str | None:
    """What changed in the data since a checkpoint was written, in words; None when nothing did."""
    added = removed = changed = 0
    for split in ("train", "val"):
        before, after = saved.get(split, {}), now.get(split, {})
        for name in set(before) | set(after):
            old, new = before.get(name, {"count": 0, "hash": ""}), after.get(name, {"count": 0, "hash": ""})
            added += max(new["count"] - old["count"], 0)
            removed += max(old["count"] - new["count"], 0)
            changed += old["count"] == new["count"] and old["hash"] != new["hash"]
    if not (added or removed or changed):
        return None
    parts = [f"{added} file(s) added", f"{removed} removed", f"{changed} class folder(s) with files changed"]
    return ", ".join(parts)


def one_line(record: dict[str, Any]) -> str:
    """For ``evaluate``: template version, project commit, libraries, data size."""
    if not record:
        return "provenance: not recorded (a checkpoint from an older template)"
    version = record.get("template", {}).get("_commit", "unknown")
    git = record.get("git") or {}
    commit = f"{git['commit'][:10]}{' (dirty)' if git.get('dirty') else ''}" if git else "no git"
    train = record.get("data", {}).get("train", {})
    images = sum(entry["count"] for entry in train.values())
    lists = "".join(
        f", data.{key} {entry['file']} ({entry['sha256']})" for key, entry in (record.get("lists") or {}).items()
    )
    return (
        f"provenance: template {version}, project commit {commit}, torch {record.get('torch')}, "
        f"torchvision {record.get('torchvision')}, trained on {images} images in {len(train)} classes{lists}"
    )
