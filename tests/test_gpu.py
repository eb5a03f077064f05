"""Training and resuming on CUDA; a checkpoint written there is evaluated on the CPU.

``GPU_PROJECT=DIR`` runs it on a project generated beforehand (``make gpu-project``; ``make gpu-check`` sets it):
a GPU machine without copier runs it so.
"""

import os
import sys
from pathlib import Path

import pytest
import torch

from .conftest import check, run_in

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture
def gpu_project(request: pytest.FixtureRequest) -> tuple[Path, str]:
    """(project, package): GPU_PROJECT's, or the default project generated here (needs copier)."""
    given = os.environ.get("GPU_PROJECT")
    project = Path(given).resolve() if given else request.getfixturevalue("project")
    return project, next((project / "src").glob("*/__init__.py")).parent.name


def test_train_resume_on_cuda_and_evaluate_on_cpu(gpu_project: tuple[Path, str], tmp_path: Path) -> None:
    project, package = gpu_project

    def x_pkg(project: Path, *args: str):
        return run_in(project, sys.executable, "-m", package, *args)

    data = tmp_path / "data"
    check(x_pkg(project, "sample-data", str(data), "--train-per-class", "16", "--val-per-class", "4"))
    settings = [f"data.root={data}", f"train.out_dir={tmp_path / 'run'}", "train.progress=false"]
    settings += ["train.device=cuda", "train.parallel=none"]  # one GPU, on a machine with any number
    base = ["train", "--config", "configs/default.yaml", *[arg for kv in settings for arg in ("--set", kv)]]
    check(x_pkg(project, *base, "--set", "train.epochs=1"))
    check(x_pkg(project, *base, "--set", "train.epochs=2", "--resume", "auto"))
    state = torch.load(tmp_path / "run" / "last.pt", map_location="cpu", weights_only=True)
    assert state["epoch"] == 2
    checkpoint = str(tmp_path / "run" / "last.pt")
    report = check(x_pkg(project, "evaluate", "--checkpoint", checkpoint, "--set", "train.device=cpu"))
    assert "top-1" in report
