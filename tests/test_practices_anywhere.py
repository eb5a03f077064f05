"""The practices are checked wherever a project goes: pre-commit in a fresh clone, and the CI workflow's job.

Both install ``torch-scaffold`` from the template repository the project records (``_src_path``) at the release
it is on (``_commit``): pre-commit as a ``repo:``/``rev:`` hook served by the template's own
``.pre-commit-hooks.yaml``, CI by cloning it at that release. Here the template is a ``file://`` git URL to a
tagged copy of this repository (the template and the package), so a clone in another folder, with an empty
pre-commit cache, reaches it as one on another machine reaches the team's git server.

No test may download: pip runs with ``PIP_NO_INDEX`` and takes torch-scaffold's dependencies (copier, flake8,
torchfix) and its build backend from this environment (on ``PYTHONPATH`` for pre-commit's hook environment, a
``.pth`` file for CI's). What is installed from the template repository is torch-scaffold itself, at the tag.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from .conftest import BIN, generate, git, make_template_repo

RELEASE = "v1.0.0"
PLANTED = "import torch\n\nx = torch.zeros(2).cuda()\n"  # TSC103
# This environment's packages: what pip would otherwise download for torch-scaffold (copier, flake8, torchfix,
# setuptools to build it).
SITE_PACKAGES = sysconfig.get_paths()["purelib"]
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The template's git URL, and a project generated from it at RELEASE, committed."""
    root = tmp_path_factory.mktemp("served")
    # The name ends in .git: copier takes a file:// address for a git URL by that, as it does a hosted one.
    repo = make_template_repo(root / "torch-scaffold.git", tag=RELEASE, package=True)
    url = f"file://{repo}"
    project = generate(url, root / "project", vcs_ref=RELEASE)  # type: ignore[arg-type]
    git(project, "init", "--quiet", "--initial-branch=main")
    git(project, "add", "-A")
    git(project, "commit", "--quiet", "-m", "Generated project")
    return url, project


def clone(project: Path, dest: Path) -> Path:
    """A fresh clone in another folder, as a teammate's machine gets the project."""
    subprocess.run(["git", "clone", "--quiet", str(project), str(dest)], check=True, capture_output=True)
    return dest


def run(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)  # fmt: skip


def test_pre_commit_in_a_fresh_clone_installs_the_check_at_the_projects_release(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, project = served
    work = clone(project, tmp_path / "elsewhere" / "clone")
    config = yaml.safe_load((work / ".pre-commit-config.yaml").read_text())
    assert {"repo": url, "rev": RELEASE, "hooks": [{"id": "torch-scaffold-check"}]} in config["repos"]
    cache = tmp_path / "pre-commit-cache"  # empty: nothing installed before on this "machine"
    env = {**OFFLINE, "PRE_COMMIT_HOME": str(cache), "PYTHONPATH": SITE_PACKAGES, "HOME": str(tmp_path),
           "PATH": f"{BIN}:/usr/bin:/bin", "VIRTUALENV_NO_PERIODIC_UPDATE": "1"}  # fmt: skip
    installed = run(work, str(BIN / "pre-commit"), "install", env=env)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    good = work / "src" / "x_pkg" / "ours.py"
    good.write_text('"""Ours."""\n\nimport torch\n\n\ndef on(device: torch.device) -> torch.Tensor:\n'
                    "    return torch.zeros(2).to(device)\n")  # fmt: skip
    git(work, "add", "-A")
    committed = run(work, "git", "commit", "--quiet", "-m", "ours", env=env)
    assert committed.returncode == 0, committed.stdout + committed.stderr
    hook_line = next(
        line for line in (committed.stdout + committed.stderr).splitlines() if "torch-scaffold check" in line
    )
    assert hook_line.endswith("Passed"), committed.stdout + committed.stderr
    # pre-commit installed the hook from the template's URL at the project's release, nothing else.
    with sqlite3.connect(cache / "db.db") as db:
        assert {ref for repo, ref in db.execute("SELECT repo, ref FROM repos") if repo.startswith(url)} == {RELEASE}

    (work / "bad.py").write_text(PLANTED)
    git(work, "add", "bad.py")
    refused = run(work, "git", "commit", "--quiet", "-m", "bad", env=env)
    assert refused.returncode != 0 and "bad.py:3:5: TSC103" in refused.stdout + refused.stderr, refused.stdout
    assert git(work, "log", "-1", "--format=%s").strip() == "ours"

    # A template the clone cannot reach (moved, or a folder on someone else's disk): the commit is refused, not
    # let through unchecked.
    config_file = work / ".pre-commit-config.yaml"
    config_file.write_text(config_file.read_text().replace(url, "file:///nowhere/torch-scaffold.git"))
    git(work, "add", "-A")
    unreachable = run(
        work, "git", "commit", "--quiet", "-m", "moved", env={**env, "PRE_COMMIT_HOME": str(tmp_path / "c2")}
    )
    assert unreachable.returncode != 0 and "/nowhere/torch-scaffold.git" in unreachable.stdout + unreachable.stderr


def ci_practices_job(project: Path) -> tuple[str, str]:
    """The generated workflow's practices job: its install script and its check command."""
    job = yaml.safe_load((project / ".github" / "workflows" / "ci.yml").read_text())["jobs"]["practices"]
    named = {step.get("name", step.get("uses")): step for step in job["steps"]}
    assert "actions/checkout@v5" in named and "actions/setup-python@v6" in named  # no PyTorch: none installed
    install = named["Install torch-scaffold at this project's template release"]["run"]
    return install, named["Practices (torch-scaffold check)"]["run"].strip()


def bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A step's script as GitHub Actions runs it: ``bash --noprofile --norc -eo pipefail``."""
    return run(cwd, "bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script, env=env)


def test_the_ci_job_installs_the_check_at_the_projects_release_and_fails_without_it(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, project = served
    install, check_command = ci_practices_job(project)
    assert check_command == "torch-scaffold check ."
    work = clone(project, tmp_path / "runner" / "work")
    # setup-python's fresh interpreter; pip, and what pip would download, from this environment (the .pth file)
    runner = tmp_path / "runner" / "python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(runner)], check=True, capture_output=True)
    (next((runner / "lib").glob("python*/site-packages")) / "offline.pth").write_text(SITE_PACKAGES + "\n")
    (tmp_path / "runner" / "temp").mkdir()
    env = {**OFFLINE, "PATH": f"{runner / 'bin'}:/usr/bin:/bin", "RUNNER_TEMP": str(tmp_path / "runner" / "temp"),
           "HOME": str(tmp_path), "PYTHONPATH": ""}  # fmt: skip

    installed = bash(install, work, env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    source = tmp_path / "runner" / "temp" / "torch-scaffold"
    assert git(source, "describe", "--tags").strip() == RELEASE  # the project's release, from its recorded URL
    assert git(source, "remote", "get-url", "origin").strip() == url
    assert (runner / "bin" / "torch-scaffold").is_file()

    # One run over the whole project (each takes a while): the planted line is its one finding, the rest is clean.
    (work / "bad.py").write_text(PLANTED)
    found = bash(check_command, work, env)
    assert found.returncode == 1 and "bad.py:3:5: TSC103" in found.stdout, found.stdout + found.stderr
    assert found.stdout.splitlines()[-1] == "torch-scaffold check: 1 finding (TSC103: 1)", found.stdout
    # The tool missing: the job fails (command not found), it does not pass unchecked.
    missing = bash(check_command, work, {**env, "PATH": "/usr/bin:/bin"})
    assert missing.returncode == 127

    # A template recorded as a folder on one machine: the install step fails and says what to set.
    answers = work / ".copier-answers.yml"
    answers.write_text(answers.read_text().replace(f"_src_path: {url}", f"_src_path: {url.removeprefix('file://')}"))
    local = bash(install, work, {**env, "RUNNER_TEMP": str(tmp_path / "elsewhere")})
    assert local.returncode == 1
    assert "::error::_src_path in .copier-answers.yml is a folder" in local.stderr and "git URL" in local.stderr
