"""benchmarks/scale.py's data set: every file its own picture, made again the same from (seed, class, split, index),
with the planted copies the only copies (issue 57: a class of near-identical files gave the audit's pixel check
thousands of look-alike pairs that no photo data set has)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .test_benchmarks import load_benchmark


def highpass(picture: np.ndarray) -> np.ndarray:
    """A picture's grey levels less their 5 x 5 mean, flattened: its fine detail."""
    grey = picture.mean(2)
    return (grey - sliding_window_view(np.pad(grey, 2, mode="edge"), (5, 5)).mean((2, 3))).ravel()


def test_each_picture_is_its_own_and_made_again_the_same() -> None:
    scale = load_benchmark("scale")
    first = np.asarray(scale.picture(0, 7, "train", 3, 32), dtype=float)
    assert np.array_equal(first, np.asarray(scale.picture(0, 7, "train", 3, 32)))  # from its seed alone
    others = [(0, 7, "train", 4), (0, 7, "val", 3), (1, 7, "train", 3), (0, 8, "train", 3)]
    for seed, label, split, index in others:  # another index, split, seed or class: another picture
        other = np.asarray(scale.picture(seed, label, split, index, 32), dtype=float)
        assert other.shape == (32, 32, 3) and np.abs(first - other).mean() > 10, (seed, label, split, index)


def test_the_planted_copies_are_the_only_files_alike(tmp_path: Path) -> None:
    scale = load_benchmark("scale")
    root = scale.write_data(tmp_path / "data", 56, 4, 32, 2, seed=0)  # 4 classes of 12 train and 2 val files
    files = sorted(root.glob("*/*/*.jpg"))
    copies = [path for path in files if path.name == "copy.jpg"]
    assert len(files) == 56 + 2 and len(copies) == 2
    for copy in copies:  # a val file of its own class, byte for byte
        assert copy.read_bytes() == (root / "val" / copy.parent.name / "00000.jpg").read_bytes()
    kept = [path for path in files if path not in copies]
    detail = np.stack([highpass(np.asarray(scale.Image.open(path), dtype=float)) for path in kept])
    detail = (detail - detail.mean(1, keepdims=True)) / detail.std(1, keepdims=True)
    correlation = detail @ detail.T / detail.shape[1]
    np.fill_diagonal(correlation, 0)
    # Their fine detail (what the audit's pixel check correlates) shared by no two files: at most 0.19 here; the
    # files of a class of the older data (a colour and a stripe of its own, with noise) shared 0.47.
    assert correlation.max() < 0.35
    assert json.loads((root / "shape.json").read_text())["kind"] == scale.DATA_KIND
