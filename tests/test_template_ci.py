"""This repository's own CI (.github/workflows/ci.yml): make test, each whole-suite project as a job of its own, the
GPU check where a runner has a GPU; every workflow file actionlint-clean, the generated project's too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .answer_rows import whole_suite_jobs
from .conftest import BIN, REPO

WORKFLOW = REPO / ".github" / "workflows" / "ci.yml"


def jobs() -> dict[str, dict]:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]


def runs(job: dict) -> list[str]:
    return [line.strip() for step in job["steps"] for line in step.get("run", "").splitlines() if line.strip()]


def actionlint(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "actionlint"), "-no-color", *args], cwd=cwd, capture_output=True, text=True)


def test_make_test_runs_on_every_push_and_pull_request_with_pip_caching() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as True
    assert triggers["push"] is None and triggers["pull_request"] is None  # every branch, no filter
    assert runs(jobs()["test"]) == ["make test"]
    assert runs(jobs()["project"]) == ["make test-project"]
    assert runs(jobs()["bench"]) == ["make test-bench"]
    ci_run = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci_run[-3:] == ["make test", "make test-project", "make test-bench"]  # the same targets, in CI's order
    setup = yaml.safe_load((REPO / ".github" / "actions" / "cpu-venv" / "action.yml").read_text())["runs"]["steps"]
    python = next(step for step in setup if step.get("uses", "").startswith("actions/setup-python"))
    assert python["with"]["cache"] == "pip" and "constraints.txt" in python["with"]["cache-dependency-path"]
    for name in ("test", "project", "bench", "whole-suite"):
        assert {"uses": "./.github/actions/cpu-venv"} in jobs()[name]["steps"], name


def test_each_whole_suite_project_is_a_job_of_its_own_from_the_listing_script() -> None:
    listing, suites = jobs()["answer-rows"], jobs()["whole-suite"]
    assert "python tests/answer_rows.py" in " ".join(runs(listing))
    assert suites["needs"] == "answer-rows"
    assert suites["strategy"]["matrix"] == {"include": "${{ fromJSON(needs.answer-rows.outputs.jobs) }}"}
    (step,) = [step for step in suites["steps"] if "pytest" in step.get("run", "")]
    assert step["env"]["TEST"] == "${{ matrix.test }}" and '"$TEST"' in step["run"] and "-m slow" in step["run"]


def test_the_listed_jobs_are_the_whole_suite_tests_pytest_collects() -> None:
    """What the CI matrix and make test-answers run is what pytest finds: a new row, or a new whole-suite test, is
    in the list without anyone adding it (and a renamed test cannot leave the list naming nothing)."""
    listed = json.loads(subprocess.run([sys.executable, "tests/answer_rows.py"], cwd=REPO, capture_output=True,
                                       text=True, check=True).stdout)  # fmt: skip
    assert listed == whole_suite_jobs() and len({job["name"] for job in listed}) == len(listed)

    class Collected:
        def __init__(self) -> None:
            self.ids: list[str] = []

        def pytest_collection_finish(self, session: pytest.Session) -> None:
            self.ids = [item.nodeid for item in session.items]  # after -m and -k chose

    files = [str(REPO / "tests" / name) for name in ("test_matrix.py", "test_other_answers.py")]
    args = ["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-m", "slow", "-k", "whole_suite"]
    collected = Collected()
    assert pytest.main([*args, f"--rootdir={REPO}", *files], plugins=[collected]) == 0
    assert sorted(collected.ids) == sorted(job["test"] for job in listed)
    makefile = (REPO / "Makefile").read_text()
    assert "$$($(BIN)/python tests/answer_rows.py --tests)" in makefile.split("\ntest-answers:", 1)[1].split("\n\n")[0]


def test_the_gpu_check_runs_only_where_a_gpu_runner_is_said_to_exist() -> None:
    gpu = jobs()["gpu-check"]
    assert gpu["runs-on"] == ["self-hosted", "gpu"]
    assert "vars.GPU_RUNNER" in gpu["if"] and "workflow_dispatch" in gpu["if"]  # never queued where none exists
    assert runs(gpu) == ["make gpu-project gpu-wheels gpu-check"]


def test_the_workflows_pass_actionlint() -> None:
    result = actionlint()
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_generated_workflow_passes_actionlint(project: Path) -> None:
    result = actionlint(".github/workflows/ci.yml", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_finds_what_is_wrong(tmp_path: Path) -> None:
    """The check can fail: a job that needs one that does not exist, on a runner label no one declared."""
    shutil.copytree(REPO / ".github", tmp_path / ".github")
    broken = WORKFLOW.read_text().replace("needs: answer-rows", "needs: answer-row").replace("gpu]", "gpux]")
    (tmp_path / ".github" / "workflows" / "ci.yml").write_text(broken)
    result = actionlint(".github/workflows/ci.yml", cwd=tmp_path)
    assert result.returncode == 1
    assert 'needs job "answer-row" which does not exist' in result.stdout
    assert '"gpux" is unknown' in result.stdout and "[runner-label]" in result.stdout
