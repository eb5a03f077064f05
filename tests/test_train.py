"""The generated project trains on sample data and on any ImageFolder tree, and resumes."""

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from .conftest import check, x_pkg

SMALL = ["--set", "data.image_size=32", "--set", "data.batch_size=16", "--set", "train.progress=false"]


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def sample_data(project: Path) -> Path:
    sizes = ["--train-per-class", "24", "--val-per-class", "8", "--image-size", "32"]
    out = check(x_pkg(project, "sample-data", "data/small", *sizes))
    assert "wrote 128 images of 4 classes" in out
    return project / "data" / "small"


def train(project: Path, data: Path, out_dir: str, epochs: int, *extra: str) -> str:
    settings = [f"data.root={data}", f"train.epochs={epochs}", f"train.out_dir={out_dir}"]
    sets = [arg for kv in settings for arg in ("--set", kv)]
    return check(x_pkg(project, "train", "--config", "configs/default.yaml", *sets, *SMALL, *extra))


def test_train_two_epochs_then_resume_a_third(project: Path, sample_data: Path) -> None:
    # Through the console entry point, as a user runs it; exactness of resume is the project's own test_training.py.
    train(project, sample_data, "runs/resumed", 2)
    run = project / "runs" / "resumed"
    assert [row["epoch"] for row in metrics(run)] == [1, 2]
    for row in metrics(run):
        assert {"epoch", "train_loss", "val_loss", "val_acc", "lr", "images_per_second"} <= set(row)
    state = torch.load(run / "last.pt", map_location="cpu", weights_only=True)
    assert {"model", "optimizer", "scheduler", "epoch", "classes", "config"} <= set(state)
    assert state["epoch"] == 2
    with Image.open(run / "train_batch.png") as grid:
        assert grid.format == "PNG"

    out = train(project, sample_data, "runs/resumed", 3, "--resume", "auto")
    assert "resumed from runs/resumed/last.pt after epoch 2" in out
    resumed = metrics(run)
    assert [row["epoch"] for row in resumed] == [1, 2, 3]
    steps = resumed[0]["global_step"]
    assert [row["global_step"] for row in resumed] == [steps, 2 * steps, 3 * steps]  # the step count continues
    state = torch.load(run / "last.pt", map_location="cpu", weights_only=True)
    assert state["epoch"] == 3
    assert state["scheduler"]["last_epoch"] == 3 * steps
    assert set(state["model"]) == set(torch.load(run / "best.pt", map_location="cpu", weights_only=True)["model"])

    report = check(x_pkg(project, "evaluate", "--checkpoint", "runs/resumed/last.pt"))
    assert "top-1" in report
    image = next((sample_data / "val" / "cross").iterdir())
    prediction = check(x_pkg(project, "predict", "--checkpoint", "runs/resumed/best.pt", str(image)))
    assert prediction.startswith(f"{image}: ")


def test_trains_on_any_image_folder(project: Path, tmp_path: Path) -> None:
    """Odd class names, mixed sizes, formats and colour modes; a class missing from val/."""
    root = tmp_path / "mine"
    specs = {"Zebra crossing": ("RGB", "jpg"), "ant": ("L", "png"), "b-2": ("RGBA", "png")}
    for index, (name, (mode, ext)) in enumerate(specs.items()):
        for split, count in (("train", 6), ("val", 0 if name == "ant" else 2)):
            folder = root / split / name
            folder.mkdir(parents=True)
            for n in range(count):
                size = (20 + 7 * n, 30 - n)
                color = (80 * index, 255 - 80 * index, 40 * n, 255)[: len(mode)] if mode != "L" else 90 * index
                Image.new(mode, size, color).save(folder / f"{n}.{ext}")
    train(project, root, str(tmp_path / "run"), 2)
    state = torch.load(tmp_path / "run" / "last.pt", map_location="cpu", weights_only=True)
    assert state["classes"] == ["Zebra crossing", "ant", "b-2"]


def test_bad_input_is_one_line(project: Path, tmp_path: Path) -> None:
    result = x_pkg(project, "train", "--set", f"data.root={tmp_path / 'none'}")
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
