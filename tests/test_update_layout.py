"""A project generated before the one-owner-per-job layout follows it safely with ``torch-scaffold update``.

The previous release is this repository's own history: the template as it was
at ``BEFORE_LAYOUT`` (the last commit before trainer.py was split into owners),
read with ``git archive``. A project generated from it gets a user's committed
edits in the three files the layout change rewrote most (``trainer.py``,
``data.py``, ``config.py``) plus a module of the user's own; the update to this
checkout's template must carry every edit or show it as a conflict in the file
that holds it, and delete nothing the user wrote.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from torch_scaffold.releases import current_version

from .conftest import REPO, TEMPLATE_FILES, generate, git, make_template_repo
from .lifecycle import commit, conflict_markers

BEFORE_LAYOUT = "2219489"  # main before issue 20 (one owner per job); a full clone of main has it
PACKAGE = "x_pkg"

# One edit per file, each a line a user really changes: (file, pattern, replacement, marker that must survive).
USER_EDITS = [
    ("trainer.py", r"^CURVES_EVERY = 30\.0", "CURVES_EVERY = 10.0  # ours: redraw more often", "ours: redraw"),
    ("data.py", r"max\(0, min\(8, ", "max(0, min(4, ", "min(4, "),  # ours: at most 4 loader workers
    ("config.py", r"^(\s+)log_every: int = 20\b", r"\1log_every: int = 50", "log_every: int = 50"),
]
# Where each file is after the move into folders (v0.2.0, migrations/move_modules.py).
NOW_AT = {"trainer.py": "training/trainer.py", "data.py": "data/folders.py", "config.py": "core/config.py"}
BEFORE_TAG = "v0.0.1"  # older than every release: updating from it runs every migration since, the move's too
Updated = tuple[Path, subprocess.CompletedProcess[str]]  # the project and what the update printed
USER_MODULE = '"""Our own augmentation, added after generation."""\n\nOURS = True\n'


def previous_template(dest: Path) -> Path:
    """The template files at BEFORE_LAYOUT, as a copier template repository tagged BEFORE_TAG."""
    try:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", BEFORE_LAYOUT, "template", *TEMPLATE_FILES],
            cwd=REPO,
            check=True,
            capture_output=True,
        ).stdout
    except subprocess.CalledProcessError as error:
        pytest.fail(f"this test needs the commit {BEFORE_LAYOUT} (a full clone of main): {error.stderr.decode()}")
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    git(dest, "init", "--quiet", "--initial-branch=main")
    commit(dest, "template before the layout change", tag=BEFORE_TAG)
    return dest


def with_current_template(repo: Path) -> None:
    """This checkout's template as its release (pyproject.toml's version) of the same repository."""
    current = make_template_repo(repo.parent / "current")
    for name in TEMPLATE_FILES:
        (repo / name).write_bytes((current / name).read_bytes())
    for folder in ("template", "migrations"):  # the migrations since BEFORE_TAG run from the new template
        subprocess.run(["rm", "-rf", str(repo / folder)], check=True)
        subprocess.run(["cp", "-a", str(current / folder), str(repo / folder)], check=True)
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "--allow-empty", "-m", "template after the layout change")
    git(repo, "tag", f"v{current_version(REPO)}")


def edit(project: Path) -> None:
    for name, pattern, replacement, _ in USER_EDITS:
        path = project / "src" / PACKAGE / name
        text, found = re.subn(pattern, replacement, path.read_text(), count=1, flags=re.MULTILINE)
        assert found == 1, f"{pattern!r} not found in {name} of the previous template"
        path.write_text(text)
    (project / "src" / PACKAGE / "our_augment.py").write_text(USER_MODULE)


@pytest.fixture(scope="module")
def updated(tmp_path_factory: pytest.TempPathFactory) -> Updated:
    root = tmp_path_factory.mktemp("layout")
    template = previous_template(root / "template")
    project = generate(template, root / "project", vcs_ref=BEFORE_TAG, package_name=PACKAGE)
    git(project, "init", "--quiet", "--initial-branch=main")
    commit(project, "generated before the layout change")
    edit(project)
    commit(project, "our edits")
    with_current_template(template)
    result = subprocess.run(
        [sys.executable, "-m", "torch_scaffold", "update", str(project)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    return project, result


def test_every_user_edit_is_carried_or_shown_as_a_conflict(
    updated: Updated,
) -> None:
    project, result = updated
    assert result.returncode in (0, 1), result.stderr  # 1: conflicts to resolve, named below
    conflicted = conflict_markers(project)
    for name, _, _, marker in USER_EDITS:
        path = project / "src" / PACKAGE / NOW_AT[name]
        relative = f"src/{PACKAGE}/{NOW_AT[name]}"
        assert not (project / "src" / PACKAGE / name).exists(), f"{name} stayed at its old place"
        # The update went through: the file is at its new version (or in conflict with it).
        assert path.is_file(), f"{relative} was deleted"
        carried = marker in path.read_text()
        shown = relative in conflicted and relative in result.stdout
        assert carried or shown, f"the edit {marker!r} in {relative} was lost silently:\n{result.stdout}"
        if relative in conflicted:
            # A conflict keeps the user's side in the file, between the markers.
            assert marker in path.read_text(), relative


def test_nothing_the_user_wrote_is_deleted(updated: Updated) -> None:
    project, _ = updated
    assert (project / "src" / PACKAGE / "our_augment.py").read_text() == USER_MODULE


def test_the_project_reaches_the_new_version(updated: Updated) -> None:
    project, result = updated
    answers = (project / ".copier-answers.yml").read_text()
    assert f"_commit: v{current_version(REPO)}" in answers, result.stdout + result.stderr
