"""Shared fixtures: a tagged git copy of the template, and projects generated from it.

copier needs the template to be a git repository with version tags (for
``_commit`` in the answers file and, later, ``copier update``), so the tests
build one in a temporary folder from this checkout's files.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "torch-scaffold tests",
    "GIT_AUTHOR_EMAIL": "tests@torch-scaffold.invalid",
    "GIT_COMMITTER_NAME": "torch-scaffold tests",
    "GIT_COMMITTER_EMAIL": "tests@torch-scaffold.invalid",
}
TEMPLATE_FILES = ("copier.yml", "PRACTICES.md", "CHANGELOG.md", ".pre-commit-hooks.yaml")  # beside template/
# The package torch-scaffold, which pre-commit and a generated project's CI install from the template repository.
PACKAGE_FILES = ("pyproject.toml", "README.md", "generator")
DEFAULT_ANSWERS = {"project_name": "X", "project_slug": "x", "package_name": "x_pkg"}
# Seconds before a subprocess counts as hung. Only a true hang (a process that never exits) reaches it: a
# loaded machine makes runs slower, never this slow (a generated project's whole suite took 8 min on a busy
# 2-core machine). Never a speed target: no test fails because the machine is busy.
HANG_S = 3600
# Set by make gpu-check (tests/gpu/check.py): there a GPU test that skips has checked nothing, so it fails.
GPU_CHECK = os.environ.get("TORCH_SCAFFOLD_GPU_CHECK") == "1"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[pytest.TestReport]:
    """Under ``TORCH_SCAFFOLD_GPU_CHECK=1`` a ``gpu`` test that skips (no CUDA, say) fails, naming why it skipped."""
    report = yield
    if GPU_CHECK and report.skipped and item.get_closest_marker("gpu") and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under TORCH_SCAFFOLD_GPU_CHECK=1, where a skip has checked nothing: {reason}"
    return report


# make test's costliest files (CPU-seconds, tests/cpu_accounting.py), most first. xdist's --dist loadfile hands
# files out in collection order; alphabetical order left the copier-update files (test_update*) for the end, where
# fewer busy workers than cores made the run 40 s longer. Handed out first, they run beside the many small files.
COSTLIEST_FIRST = (
    "test_update_edges.py",
    "test_scaffold_cli.py",
    "test_gpu_check.py",
    "test_matrix.py",
    "test_status.py",
    "test_update_move_0_10.py",
    "test_update_move_0_13.py",
    "test_migrations.py",
    "test_update.py",
    "test_change_guide.py",
    "test_questions.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The costliest files first (``COSTLIEST_FIRST``); every other file, and each file's tests, in their order."""
    rank = {name: place for place, name in enumerate(COSTLIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="session", autouse=True)
def git_identity() -> Iterator[None]:
    """copier commits and tags in temporary repositories; git needs to know who does."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in GIT_IDENTITY.items():
            patch.setenv(key, value)
        patch.setenv("GIT_CONFIG_GLOBAL", os.devnull)  # no user settings (signing, hooks) leak in
        yield


@pytest.fixture(scope="session", autouse=True)
def started_processes_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The processes the tests start (copier, torchrun jobs, generated projects' suites) keep their temporary
    files here (TMPDIR), deleted with the session; pytest's own folders stay where they were. torchrun leaves a
    log folder in the temporary folder after every job: they piled up in /tmp before."""
    tmp_path_factory.getbasetemp()
    folder = Path(tempfile.mkdtemp(prefix="started-"))  # short: a forkserver's socket path must fit 108 bytes
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(folder))
        yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The generated projects' runs keep their file index and decoded images (data.cache_dir: auto, under
    XDG_CACHE_HOME) in a temporary folder, never in the user's ~/.cache."""
    folder = tmp_path_factory.mktemp("xdg_cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(folder))
        yield folder


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_template_repo(dest: Path, tag: str = "v1", package: bool = False) -> Path:
    """Copy copier.yml, template/, migrations/ and the files they include into a fresh git repository tagged ``tag``;
    with ``package``, the package torch-scaffold too, as in this repository."""
    dest.mkdir(parents=True)
    for name in TEMPLATE_FILES:
        shutil.copy2(REPO / name, dest / name)
    for name in PACKAGE_FILES if package else ():
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "template", dest / "template", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # copier.yml's _migrations run scripts from the template's own checkout.
    shutil.copytree(REPO / "migrations", dest / "migrations", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    git(dest, "init", "--quiet", "--initial-branch=main")
    git(dest, "add", "-A")
    git(dest, "commit", "--quiet", "-m", f"template {tag}")
    git(dest, "tag", tag)
    return dest


@pytest.fixture(scope="session")
def template_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_template_repo(tmp_path_factory.mktemp("template") / "repo")


# Projects rendered in this test process, by (template, commit, answers): a pristine copy of each first render. A
# second project of the same template commit and answers is that copy (copier renders the same bytes again: about
# 3 CPU-seconds a project, and the update tests make dozens of such projects). Removed when the process ends.
RENDERED: dict[tuple[str, str, str], Path] = {}


def generate(template: Path, dest: Path, vcs_ref: str = "v1", **answers: object) -> Path:
    """copier's Python API, non-interactive, as a user's script would call it; the default names unless
    ``project_name`` is answered. A render of a clean template commit is kept (``RENDERED``) and copied after."""
    from copier import run_copy  # here: the GPU suite runs where copier is not (make gpu-check, GPU_PROJECT)

    # A given project_name derives the slug and package name, as for a user (the defaults name "X"'s).
    data = {**({} if "project_name" in answers else DEFAULT_ANSWERS), **answers}
    key = render_key(template, vcs_ref, data)
    if key is not None and key in RENDERED:
        shutil.copytree(RENDERED[key], dest, symlinks=True, dirs_exist_ok=True)
        return dest
    run_copy(str(template), dest, data=data, defaults=True, unsafe=True, quiet=True, vcs_ref=vcs_ref)
    if key is not None:
        RENDERED[key] = Path(tempfile.mkdtemp(prefix="rendered-", dir=rendered_root())) / "project"
        shutil.copytree(dest, RENDERED[key], symlinks=True)
    return dest


def render_key(template: Path, vcs_ref: str, data: dict[str, object]) -> tuple[str, str, str] | None:
    """What a render depends on: the template, the commit ``vcs_ref`` names, the answers. None (not kept) where
    the template is no git repository or has uncommitted changes (copier renders those too)."""
    try:
        commit = git(template, "rev-parse", "--verify", "--quiet", f"{vcs_ref}^{{commit}}").strip()
        dirty = git(template, "status", "--porcelain", "--untracked-files=all")
    except (subprocess.CalledProcessError, OSError):
        return None
    if not commit or dirty:
        return None
    return str(Path(template).resolve()), commit, json.dumps(data, sort_keys=True, default=str)


@functools.cache
def rendered_root() -> Path:
    """A folder for this process's kept renders, removed when the process ends."""
    root = Path(tempfile.mkdtemp(prefix="torch-scaffold-renders-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def copier_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real ``copier`` command, with no terminal and no stdin, as in CI."""
    return subprocess.run(
        [str(BIN / "copier"), *args], cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=HANG_S
    )


@pytest.fixture(scope="session")
def versioned_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A template repository tagged v1.0.0 and v2.0.0 (tests/lifecycle.py says what changed)."""
    from .lifecycle import make_versioned_template

    return make_versioned_template(tmp_path_factory.mktemp("versioned") / "repo")


@pytest.fixture(scope="session")
def project(template_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project of the issue's command line: copier copy --trust --defaults -d ... <template> DEST."""
    dest = tmp_path_factory.mktemp("generated") / "x"
    result = copier_cli(
        "copy", "--trust", "--defaults",
        "-d", "project_name=X", "-d", "project_slug=x", "-d", "package_name=x_pkg",
        str(template_repo), str(dest),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return dest


def run_in(project: Path, *args: str, timeout: int = HANG_S) -> subprocess.CompletedProcess[str]:
    """Run a command in a generated project, its package importable from src/ as after an install."""
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        list(args), cwd=project, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout
    )


# The generated README's test command (its "Tests" section, and the CI workflow's Test step): the tests that run a
# project's whole suite run exactly it, so the time and disk they report are what a user's command takes.
PROJECT_TEST_COMMAND = "python -m pytest -n auto"


def run_project_suite(project: Path, *pytest_args: str) -> str:
    """The project's whole suite by its README's command (quiet, no cache folder left in the project); its output."""
    command = PROJECT_TEST_COMMAND.split()[1:]  # after "python": this environment's interpreter runs it
    out = check(run_in(project, sys.executable, *command, "-q", "-p", "no:cacheprovider", *pytest_args))
    assert " passed" in out and " failed" not in out
    return out


def x_pkg(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m x_pkg ARGS`` in the default generated project."""
    return run_in(project, sys.executable, "-m", "x_pkg", *args)


def check(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout
