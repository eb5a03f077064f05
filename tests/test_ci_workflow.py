"""The generated project's CI: an optional GitHub Actions workflow (copier question ci_workflow) and pre-commit."""

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .conftest import BIN, check, generate, git, run_in

WORKFLOW = Path(".github/workflows/ci.yml")


def steps(project: Path) -> list[dict]:
    workflow = yaml.safe_load((project / WORKFLOW).read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as True
    assert {"push", "pull_request"} <= set(triggers)
    assert set(workflow["jobs"]) == {"test", "practices"}  # practices: tests/test_practices_anywhere.py
    job = workflow["jobs"]["test"]
    assert job["runs-on"].startswith("ubuntu")
    return job["steps"]


def commands(project: Path) -> list[str]:
    return [line.strip() for step in steps(project) for line in step.get("run", "").splitlines() if line.strip()]


def test_workflow_by_default_lints_and_tests_on_cpu(project: Path) -> None:
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert answers["ci_workflow"] is True
    setup = next(step for step in steps(project) if step.get("uses", "").startswith("actions/setup-python"))
    assert setup["with"]["python-version"] == answers["python_version"]
    run = commands(project)
    install = [line for line in run if "pip install" in line]
    assert any("torch" in line and "--index-url https://download.pytorch.org/whl/cpu" in line for line in install)
    assert any('-e ".[dev]"' in line for line in install)
    assert "ruff check ." in run and "ruff format --check ." in run
    assert any(line.startswith("python -m pytest") for line in run)
    assert run.index("ruff check .") < next(i for i, line in enumerate(run) if "pytest" in line)


def test_the_readme_gives_the_workflows_cpu_only_install_as_one_line(project: Path) -> None:
    """A CPU-only machine installs as CI does: PyTorch's CPU wheels, then the project (the README's Install)."""
    install = (project / "README.md").read_text().split("\n### 1. Install\n", 1)[1].split("\n### ", 1)[0]
    (line,) = [line for line in install.splitlines() if "download.pytorch.org/whl/cpu" in line]
    (step,) = [step for step in steps(project) if "download.pytorch.org/whl/cpu" in step.get("run", "")]
    ci = [line.strip() for line in step["run"].splitlines() if line.strip() and "--upgrade pip" not in line]
    assert line.split(" && ") == ci


def test_the_cpu_only_install_takes_torch_torchvision_and_torchcodec_from_one_index_and_holds_them(
    project: Path,
) -> None:
    """Issue 59: a CPU-only torch beside PyPI's CUDA torchvision cannot be imported. The three come from one index,
    and the project's own install (from PyPI) is held to those builds by a constraint pip reads from pip freeze."""
    (step,) = [step for step in steps(project) if "download.pytorch.org/whl/cpu" in step.get("run", "")]
    lines = [line.strip() for line in step["run"].splitlines() if line.strip() and "--upgrade pip" not in line]
    assert (
        lines[0]
        == "python -m pip install torch torchvision torchcodec --index-url https://download.pytorch.org/whl/cpu"
    )
    assert lines[1].startswith("python -m pip freeze | grep ") and lines[1].endswith("> torch-build.txt")
    assert lines[2] == 'python -m pip install -e ".[dev]" --constraint torch-build.txt'
    assert not any("--extra-index-url" in line for line in lines)  # a second index is what let pip mix builds
    frozen = "torch==2.13.0+cpu\ntorchvision==0.28.0+cpu\ntorchcodec==0.11.0+cpu\ntorch-fidelity==0.3.0\nnumpy==2.4.6\n"
    kept = subprocess.run(lines[1].split(" > ")[0].split(" | ", 1)[1], shell=True, input=frozen, capture_output=True,
                          text=True).stdout  # fmt: skip
    assert kept.split() == ["torch==2.13.0+cpu", "torchvision==0.28.0+cpu", "torchcodec==0.11.0+cpu"]
    assert "torch-build.txt" in (project / ".gitignore").read_text().split()


def test_workflow_lint_commands_pass_on_the_generated_project(project: Path) -> None:
    """The Lint step's own commands, run as CI would (ruff from this environment)."""
    lint = [line for line in commands(project) if line.startswith("ruff")]
    assert len(lint) == 2
    for line in lint:
        program, *args = shlex.split(line)
        check(run_in(project, str(BIN / program), *args, "--no-cache"))


@pytest.mark.parametrize("python_version", ["3.10", "3.13"])
def test_workflow_uses_the_oldest_supported_python(template_repo: Path, tmp_path: Path, python_version: str) -> None:
    dest = generate(template_repo, tmp_path / "p", python_version=python_version)
    setup = next(step for step in steps(dest) if step.get("uses", "").startswith("actions/setup-python"))
    assert setup["with"]["python-version"] == python_version


def test_no_workflow_when_declined(template_repo: Path, tmp_path: Path) -> None:
    dest = generate(template_repo, tmp_path / "p", ci_workflow=False)
    assert not (dest / ".github").exists()
    assert (dest / "pyproject.toml").is_file()
    assert yaml.safe_load((dest / ".copier-answers.yml").read_text())["ci_workflow"] is False
    assert (dest / ".pre-commit-config.yaml").is_file()  # pre-commit is independent of the CI service


def pre_commit_hooks(project: Path) -> dict[str, dict]:
    config = yaml.safe_load((project / ".pre-commit-config.yaml").read_text())
    return {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}


def test_pre_commit_hooks_are_local_but_the_practices_check_from_the_template(project: Path) -> None:
    """The usual checks use the project's own tools, so they need nothing pre-commit would install; the practices
    check is served by the template repository at the project's release (tests/test_practices_anywhere.py runs it)."""
    config = yaml.safe_load((project / ".pre-commit-config.yaml").read_text())
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    local, template = config["repos"]
    assert local["repo"] == "local"
    assert template == {
        "repo": answers["_src_path"],
        "rev": answers["_commit"],
        "hooks": [{"id": "torch-scaffold-check"}],
    }
    hooks = pre_commit_hooks(project)
    assert set(hooks) == {
        "ruff-check", "ruff-format", "check-yaml", "check-added-large-files", "no-conflict-markers",
        "torch-scaffold-check",
    }  # fmt: skip
    # Nothing pre-commit would install for the local ones: system tools of the project's environment, or its grep.
    assert {hook["language"] for hook in local["hooks"]} == {"system", "pygrep"}
    assert not any("additional_dependencies" in hook for hook in local["hooks"])


def run_hook(hook: dict, files: list[Path], cwd: Path, path: str) -> subprocess.CompletedProcess[str]:
    """A system hook as pre-commit runs it: its entry split as a shell would, the files appended."""
    env = {"PATH": path, "HOME": str(cwd)}
    return subprocess.run([*shlex.split(hook["entry"]), *map(str, files)], cwd=cwd, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)  # fmt: skip


def test_pre_commit_system_hooks_run_from_the_project_environment(project: Path, tmp_path: Path) -> None:
    hooks, path = pre_commit_hooks(project), f"{BIN}:/usr/bin:/bin"
    yamls = sorted((project / "configs").rglob("*.yaml"))
    assert run_hook(hooks["check-yaml"], yamls, project, path).returncode == 0
    broken = tmp_path / "broken.yaml"
    broken.write_text("train:\n  epochs: [3\n")
    assert run_hook(hooks["check-yaml"], [broken], project, path).returncode != 0
    big = tmp_path / "weights.pt"
    big.write_bytes(b"0" * (2**20 + 1))
    assert run_hook(hooks["check-added-large-files"], yamls, project, path).returncode == 0
    refused = run_hook(hooks["check-added-large-files"], [*yamls, big], project, path)
    assert refused.returncode == 1 and str(big) in refused.stderr
    python_files = sorted((project / "src").rglob("*.py"))
    assert run_hook(hooks["ruff-check"], python_files, project, path).returncode == 0


MARKED = "batch_size: 32\n<<<<<<< before updating\n  lr: 0.1\n=======\n  lr: 0.2\n>>>>>>> after updating\n"
LOOK_ALIKES = "Title\n=======\n\n    <<<<<<<<<< not a marker\n`<<<<<<< before updating` quoted in prose\n"


def conflict_hook(project: Path) -> dict:
    config = yaml.safe_load((project / ".pre-commit-config.yaml").read_text())
    (local,) = [repo for repo in config["repos"] if repo["repo"] == "local"]
    (hook,) = [hook for hook in local["hooks"] if hook["id"] == "no-conflict-markers"]
    return hook


def pygrep(entry: str, text: str) -> list[int]:
    """The lines pre-commit's ``language: pygrep`` reports: ``re.search`` of the entry on each line."""
    pattern = re.compile(entry.encode())
    return [number for number, line in enumerate(text.encode().splitlines(keepends=True), 1) if pattern.search(line)]


def test_pre_commit_refuses_conflict_markers_without_a_download(project: Path) -> None:
    """A local pygrep hook, since check-merge-conflict only looks during a git merge and copier's are not."""
    hook = conflict_hook(project)
    assert hook["language"] == "pygrep" and hook["types"] == ["text"]
    assert pygrep(hook["entry"], MARKED) == [2, 6]
    assert pygrep(hook["entry"], LOOK_ALIKES) == []
    clean = [p for p in project.rglob("*") if p.is_file() and ".git" not in p.parts]
    assert [str(p) for p in clean if pygrep(hook["entry"], p.read_text(errors="replace"))] == []


def conflict_step(project: Path) -> str:
    (step,) = [step for step in steps(project) if "conflict markers" in step.get("name", "")]
    return step["run"]


def test_ci_fails_on_conflict_markers_before_installing_anything(project: Path, tmp_path: Path) -> None:
    """The step's own script, run by bash in a git clone of the project, clean and then with markers."""
    names = [step.get("name", step.get("uses", "")) for step in steps(project)]
    assert names.index(next(n for n in names if "conflict markers" in n)) < names.index("actions/setup-python@v6")
    clone = tmp_path / "clone"
    shutil.copytree(project, clone, ignore=shutil.ignore_patterns(".git"))
    git(clone, "init", "--quiet", "--initial-branch=main")
    git(clone, "add", "-A")
    script = conflict_step(project)
    clean = subprocess.run(["bash", "-e", "-c", script], cwd=clone, capture_output=True, text=True)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    (clone / "configs" / "default.yaml").write_text(MARKED)
    (clone / "notes.md").write_text(LOOK_ALIKES)
    git(clone, "add", "-A")
    marked = subprocess.run(["bash", "-e", "-c", script], cwd=clone, capture_output=True, text=True)
    assert marked.returncode == 1
    assert marked.stdout.splitlines() == [
        "configs/default.yaml:2:<<<<<<< before updating",
        "configs/default.yaml:6:>>>>>>> after updating",
    ]
    assert "Resolve the conflict markers above" in marked.stderr
