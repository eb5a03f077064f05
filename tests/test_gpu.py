"""Training and resuming on CUDA; a checkpoint written there is evaluated on the CPU."""

from pathlib import Path

import pytest
import torch

from .conftest import check, x_pkg

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_train_resume_on_cuda_and_evaluate_on_cpu(project: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    check(x_pkg(project, "sample-data", str(data), "--train-per-class", "16", "--val-per-class", "4"))
    settings = [f"data.root={data}", "train.device=cuda", f"train.out_dir={tmp_path / 'run'}", "train.progress=false"]
    base = ["train", "--config", "configs/default.yaml", *[arg for kv in settings for arg in ("--set", kv)]]
    check(x_pkg(project, *base, "--set", "train.epochs=1"))
    check(x_pkg(project, *base, "--set", "train.epochs=2", "--resume", "auto"))
    state = torch.load(tmp_path / "run" / "last.pt", map_location="cpu", weights_only=True)
    assert state["epoch"] == 2
    checkpoint = str(tmp_path / "run" / "last.pt")
    report = check(x_pkg(project, "evaluate", "--checkpoint", checkpoint, "--set", "train.device=cpu"))
    assert "top-1" in report
