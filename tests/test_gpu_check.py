"""The GPU suites on the CPU: a skip fails under make gpu-check's switch, and the suites are green on 1, 2 and
8 GPUs by their own collection and parameters (tests/gpu/fake_gpus.py).

No GPU runs here: what a GPU machine decides is proven with ``torch.cuda`` faked, as the generated project's
test_cuda_logic.py does for the package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO

GPU_TOOLS = REPO / "tests" / "gpu"


def test_under_the_switch_a_gpu_test_that_skips_fails(project: Path) -> None:
    """Without CUDA every GPU test skips, and pytest exits 0: green having checked nothing. Under
    ``TORCH_SCAFFOLD_GPU_CHECK=1`` (make gpu-check sets it) each of those skips fails, naming why; the
    generated project's conftest and this repository's alike."""
    suites = [(project, ["tests/test_gpu.py", "-k", "auto_precision or second_gpu"]), (REPO, ["tests/test_gpu.py"])]
    for cwd, selection in suites:
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", "-m", "gpu", *selection]
        env = {**os.environ, "PYTHONPATH": str(project / "src"), "GPU_PROJECT": str(project)}
        env.pop("TORCH_SCAFFOLD_GPU_CHECK", None)
        quiet = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert quiet.returncode == 0 and "skipped" in quiet.stdout and "error" not in quiet.stdout, quiet.stdout
        env["TORCH_SCAFFOLD_GPU_CHECK"] = "1"
        red = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert red.returncode != 0 and " skipped" not in red.stdout.splitlines()[-1], red.stdout
        assert "skipped under TORCH_SCAFFOLD_GPU_CHECK=1, where a skip has checked nothing" in red.stdout
        assert "needs a CUDA device" in red.stdout


# --- the GPU suites with the device count faked -------------------------------------------------------------


def violations(report: dict[str, Any]) -> list[str]:
    """What would fail on a machine with ``report['gpus']`` GPUs, from tests/gpu/fake_gpus.py's records.

    Every test that needs more GPUs than there are skips saying so, and no other test skips. A test on one GPU
    pins ``train.parallel=none`` in every CUDA configuration it makes; a test on several asks for DataParallel
    (``dp``) where DataParallel runs, with a batch that every GPU takes an equal share of, and for DDP
    (``ddp``) under torchrun, with no more processes than GPUs. A test whose source starts runs recorded one.
    """
    gpus, found = report["gpus"], []
    for name, test in report["tests"].items():
        needs = test["gpus"]
        if needs > gpus:
            if not test.get("skipped", "").endswith(f"needs {needs} GPUs, this machine has {gpus}"):
                found.append(f"{name}: needs {needs} GPUs but was not skipped on {gpus}: {test.get('skipped')}")
            continue
        if "skipped" in test:
            found.append(f"{name}: skipped on {gpus} GPUs: {test['skipped']}")
        if test["starts_runs"] and not test["runs"]:
            found.append(f"{name}: starts a run, but none was recorded before its first CUDA call")
        for run in test["runs"]:
            found.extend(f"{name}: {problem}" for problem in run_problems(run, needs, gpus))
    return found


def run_problems(run: dict[str, Any], needs: int, gpus: int) -> list[str]:
    """One configuration's problems on ``gpus`` GPUs, in a test that needs ``needs``."""
    if "spawn" in run or not run["device"].startswith("cuda"):
        return []
    if run["nproc"] > 1:
        ok = needs >= 2 and run["nproc"] <= gpus and run["parallel"] == "ddp"
        return [] if ok else [f"torchrun of {run['nproc']} processes, parallel={run['parallel']}, on {gpus} GPUs"]
    if "refused" in run:  # compile with DataParallel is refused by design; a batch too small for the GPUs is not
        return [f"refused on {gpus} GPUs: {run['refused']}"] if needs == 1 or "batch" in run["refused"] else []
    if needs == 1:
        return (
            [] if run["parallel"] == "none" else [f"parallel={run['parallel']} (DataParallel over {run['replicas']})"]
        )
    if not run["replicas"]:
        return []
    spread = run["parallel"] == "dp" and len(run["replicas"]) == gpus and run["batch_size"] % gpus == 0
    return (
        []
        if spread
        else [f"DataParallel over {run['replicas']} with parallel={run['parallel']}, batch {run['batch_size']}"]
    )


def test_the_rules_find_what_fails_on_many_gpus() -> None:
    """The checker is able to fail: each flaw the issue found, as a record, is reported."""
    unpinned = {"device": "cuda", "parallel": "auto", "batch_size": 8, "nproc": 1, "replicas": list(range(8))}
    too_small = {**unpinned, "batch_size": 4, "refused": "data.batch_size 4 is smaller than the 8 GPUs"}
    uneven = {**unpinned, "parallel": "dp", "batch_size": 12}
    tests = {
        "one_gpu": {"gpus": 1, "starts_runs": True, "runs": [unpinned]},
        "small_batch": {"gpus": 1, "starts_runs": True, "runs": [too_small]},
        "dp": {"gpus": 2, "starts_runs": True, "runs": [uneven]},
        "ran_nothing": {"gpus": 1, "starts_runs": True, "runs": []},
        "two_gpus_on_one": {"gpus": 2, "starts_runs": True, "runs": []},
    }
    assert [found.split(":")[0] for found in violations({"gpus": 8, "tests": tests})] == list(tests)
    assert len(violations({"gpus": 1, "tests": {"x": tests["two_gpus_on_one"]}})) == 1
    pinned = {**unpinned, "parallel": "none", "replicas": []}
    assert violations({"gpus": 8, "tests": {"one_gpu": {"gpus": 1, "starts_runs": True, "runs": [pinned]}}}) == []


def fake_gpu_suite(tmp_path: Path, gpus: int, cwd: Path, project: Path, *selection: str) -> dict[str, Any]:
    """A GPU suite's pytest run with tests/gpu/fake_gpus.py on ``gpus`` faked GPUs: its report."""
    report = tmp_path / f"report-{gpus}.json"
    env = {
        **os.environ,
        "FAKE_GPUS": str(gpus),
        "FAKE_GPUS_REPORT": str(report),
        "GPU_PROJECT": str(project),
        "PYTHONPATH": os.pathsep.join([str(GPU_TOOLS), str(project / "src")]),
        "TORCH_SCAFFOLD_GPU_CHECK": "1",  # as make gpu-check runs them: the GPU-count skip is the only one allowed
    }
    env.pop("TORCH_SCAFFOLD_REQUIRE_NVJPEG", None)  # its probe decodes on the GPU: before any configuration
    command = [sys.executable, "-m", "pytest", "-p", "fake_gpus", "-p", "no:cacheprovider", "-q", "-m", "gpu"]
    result = subprocess.run(
        [*command, "-p", "no:randomly", *selection], cwd=cwd, env=env, capture_output=True, text=True, timeout=1800
    )
    assert report.exists(), result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(report.read_text())


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_the_projects_gpu_suite_is_green_on_any_gpu_count(project: Path, tmp_path: Path, gpus: int) -> None:
    """The generated project's ``-m gpu`` suite, collected and started with ``gpus`` GPUs faked."""
    report = fake_gpu_suite(tmp_path, gpus, project, project)
    tests = report["tests"]
    assert len(tests) >= 30 and sum(test["gpus"] == 2 for test in tests.values()) >= 5, sorted(tests)
    assert sum(bool(test["runs"]) for test in tests.values()) >= 25  # the records are there to be checked
    assert violations(report) == []


@pytest.mark.parametrize("gpus", [1, 8])
def test_the_templates_gpu_suite_is_green_on_any_gpu_count(project: Path, tmp_path: Path, gpus: int) -> None:
    report = fake_gpu_suite(tmp_path, gpus, REPO, project, "tests/test_gpu.py")
    assert [test["runs"] for test in report["tests"].values()] != [[]], report  # its training command was seen
    assert violations(report) == []
