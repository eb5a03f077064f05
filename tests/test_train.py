"""The generated project's command line trains on any ImageFolder tree and says what is wrong in one line.

Training on the sample data, resuming, evaluating and predicting through ``python -m <package>`` are the
project's own tests (test_training.py in-process, test_exit.py as subprocesses), run once by test_generate.py.
"""

from pathlib import Path

import torch
from PIL import Image

from .conftest import check, x_pkg

SMALL = ["--set", "data.image_size=32", "--set", "data.batch_size=16", "--set", "train.progress=false"]


def train(project: Path, data: Path, out_dir: str, epochs: int, *extra: str) -> str:
    settings = [f"data.root={data}", f"train.epochs={epochs}", f"train.out_dir={out_dir}"]
    sets = [arg for kv in settings for arg in ("--set", kv)]
    return check(x_pkg(project, "train", "--config", "configs/default.yaml", *sets, *SMALL, *extra))


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
