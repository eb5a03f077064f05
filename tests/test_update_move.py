"""A project generated at v0.1.0 follows the v0.2.0 move into folders, and the release after it, with its edits.

The previous release and the move release are this repository's own history
(the commits ``make tags`` finds for them), tagged in a temporary copy with
its functions; a third release changes two of the moved files. (This checkout
was the move release only until its next change: moves only, by design.) A
user edits two modules that move (``data.py``, ``trainer.py``) and a config,
and adds a module and a test of their own that import moved modules. The
update across the move must carry every edit to the new paths with no
conflict and delete nothing; the update after it merges as any update does:
the template's change and the user's edit side by side, a line both changed
shown as a named conflict. The project's own tests pass after the move.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from torch_scaffold.releases import changelog_versions, release_commit

from .conftest import REPO, TEMPLATE_FILES, check, generate, git, run_in
from .lifecycle import commit, conflict_markers

PACKAGE = "x_pkg"
PREVIOUS, MOVE = "0.1.0", "0.2.0"  # the release before the move, and the move (copier.yml's _migrations v0.2.0)
SRC = f"src/{PACKAGE}"
# (old path, new path, text in the old file, the user's replacement): one edit in each of two moved modules.
EDITS = [
    ("data.py", "data/folders.py", "max(0, min(8, cores", "max(0, min(4, cores"),  # ours: at most 4 workers
    ("trainer.py", "training/trainer.py", "                progress.step += 1\n",
     "                progress.step += 1\n                # ours: a step is done\n"),
]  # fmt: skip
CONFIG_EDIT = ("  epochs: 15\n", "  epochs: 20  # ours\n")
OUR_MODULE = '"""Our own transforms."""\n\nfrom .data import build_transform\n\nOURS = build_transform\n'
OUR_TEST = (
    "from x_pkg.data import build_transform\nfrom x_pkg.our_augment import OURS\n\n\n"
    "def test_ours() -> None:\n    assert OURS is build_transform\n"
)


def extract_release(version: str, dest: Path) -> None:
    """The template's files at ``version``, from this repository's history (the commit ``make tags`` tags)."""
    versions = changelog_versions(REPO)
    commit_id = release_commit(REPO, version, versions.get(version))
    if commit_id is None:
        pytest.fail(f"this test needs release {version}'s commit in the history (a full clone of main)")
    extract(commit_id, dest)


def extract(commit_id: str, dest: Path) -> None:
    """The template's files at ``commit_id``, from this repository's history."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit_id, "template", "migrations", *TEMPLATE_FILES],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")


def previous_release(dest: Path) -> str:
    """The template at the release before the move, as the first commit of a new template repository."""
    extract_release(PREVIOUS, dest)
    git(dest, "init", "--quiet", "--initial-branch=main")
    tag = f"v{PREVIOUS}"
    commit(dest, f"template {tag}", tag=tag)
    return tag


def release(template: Path, files_from: Path, tag: str) -> None:
    """``files_from``'s template files as the next commit of ``template``, tagged ``tag``."""
    for name in (*TEMPLATE_FILES, "template", "migrations"):
        subprocess.run(["rm", "-rf", str(template / name)], check=True)
        subprocess.run(["cp", "-a", str(files_from / name), str(template / name)], check=True)
    commit(template, f"template {tag}", tag=tag)


def replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not once in {path}"
    path.write_text(text.replace(old, new))


def update(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torch_scaffold", "update", str(project)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def moved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    """The user's project, generated at the previous release, edited, then updated across the move."""
    root = tmp_path_factory.mktemp("move")
    template = root / "template"
    before = previous_release(template)
    project = generate(template, root / "project", vcs_ref=before, package_name=PACKAGE)
    git(project, "init", "--quiet", "--initial-branch=main")
    commit(project, f"generated at {before}")
    for old, _, text, edit in EDITS:
        replace_once(project / SRC / old, text, edit)
    replace_once(project / "configs" / "default.yaml", *CONFIG_EDIT)
    (project / SRC / "our_augment.py").write_text(OUR_MODULE)
    (project / "tests" / "test_ours.py").write_text(OUR_TEST)
    commit(project, "our edits")
    extract_release(MOVE, root / "move")
    release(template, root / "move", f"v{MOVE}")
    return template, project, update(project)


def test_the_move_carries_every_edit_to_the_new_paths_without_a_conflict(
    moved: tuple[Path, Path, subprocess.CompletedProcess[str]],
) -> None:
    _, project, result = moved
    assert result.returncode == 0, result.stdout + result.stderr  # 1 would mean conflicts
    assert f"_commit: v{MOVE}" in (project / ".copier-answers.yml").read_text()
    assert conflict_markers(project) == []
    for old, new, _, edit in EDITS:
        assert not (project / SRC / old).exists(), f"{old} stayed beside {new}"
        assert edit in (project / SRC / new).read_text(), f"the edit of {old} did not reach {new}"
    assert CONFIG_EDIT[1] in (project / "configs" / "default.yaml").read_text()
    # Ours: kept, with the import of the moved module rewritten; nothing else of the template left behind.
    assert "from .data.folders import build_transform" in (project / SRC / "our_augment.py").read_text()
    assert "from x_pkg.data.folders import build_transform" in (project / "tests" / "test_ours.py").read_text()
    flat = sorted(p.name for p in (project / SRC).glob("*.py"))
    assert flat == ["__init__.py", "__main__.py", "cli.py", "extensions.py", "our_augment.py", "slurm.py"]


def test_the_moved_project_passes_its_tests(moved: tuple[Path, Path, subprocess.CompletedProcess[str]]) -> None:
    _, project, _ = moved
    # The user's test, the layout and import-direction checks, and the config's: the quick ones (the whole suite
    # of a default project runs in test_generate).
    tests = ["tests/test_ours.py", "tests/test_structure.py", "tests/test_config.py", "tests/test_model.py"]
    out = check(run_in(project, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests))
    assert " passed" in out and "failed" not in out


def test_the_release_after_the_move_merges_as_usual(
    moved: tuple[Path, Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    template, project, _ = moved
    commit(project, "the move")
    # The next release changes a moved file far from the user's edit, and the very line the user edited in another.
    source = template / "template" / "src" / "{{package_name}}"
    replace_once(source / "data" / "folders.py", '"""Folder datasets, transforms and loaders.', '"""Folder datasets.')
    replace_once(source / "training" / "trainer.py", EDITS[1][2], EDITS[1][2] + "                # theirs\n")
    commit(template, "template v9.0.0", tag="v9.0.0")
    result = update(project)
    assert result.returncode == 1, result.stdout + result.stderr  # one conflict to resolve
    folders, trainer = project / SRC / "data" / "folders.py", project / SRC / "training" / "trainer.py"
    assert '"""Folder datasets.' in folders.read_text() and EDITS[0][3] in folders.read_text()  # both, merged
    assert conflict_markers(project) == [f"{SRC}/training/trainer.py"]
    assert f"{SRC}/training/trainer.py" in result.stdout  # named
    assert "# ours: a step is done" in trainer.read_text() and "# theirs" in trainer.read_text()
