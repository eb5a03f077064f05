"""A project follows release 0.10.0's move with its edits: the last files beside the package's folders go into them.

``extensions.py`` (the user's own file) moves to ``models/``, ``slurm.py`` to
``training/`` (``python -m <package>.training.slurm``), the answers'
``project_defaults.yaml`` to ``core/``, and nothing else changes
(``migrations/moves_0_10.py`` made the move; copier.yml's ``_migrations``
v0.10.0 run ``migrations/move_modules.py`` on an update across it).

The two releases, tagged in a temporary copy as ``make tags`` tags releases,
are this repository's template just before the move (the parent of the commit
that moved ``slurm.py``) and this checkout, at the move's version or a later
one: the update users make, with the migrations as they are now. Before that
commit exists (the branch that brings the script), they are this checkout and
this checkout moved by the script. A user edits each moved file (a backbone of their own in
``extensions.py``, a function in ``slurm.py`` with a relative import, a line in
``project_defaults.yaml``) and adds a module and a test of their own that
import them; the update must carry every edit to the new paths with no
conflict, leave nothing at the old ones, and the project's tests must pass.
A project from before v0.2.0 crosses both moves in one update.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from torch_scaffold.releases import current_version

from .conftest import REPO, TEMPLATE_FILES, check, generate, git, run_in
from .lifecycle import commit, conflict_markers
from .test_update_layout import BEFORE_TAG, previous_template
from .test_update_move import extract, release, replace_once, update  # the v0.2.0 move's helpers serve this one too

PACKAGE = "x_pkg"
# This checkout's tag in the temporary copy: the move's release (copier.yml's _migrations v0.10.0), or a later one.
MOVE = f"v{max(Version(current_version(REPO)), Version('0.10.0'))}"
SRC = f"src/{PACKAGE}"
OLD_SLURM = "template/src/{{package_name}}/slurm.py"  # the move deletes it: the commit that did is the move
OUR_BACKBONE = (  # in custom_backbone, before its `return None`
    '    if name == "ours_tiny":  # ours\n'
    "        return nn.Sequential(nn.Flatten(), nn.LazyLinear(16), nn.ReLU()), 16\n"
)
OUR_PARTITION = '''

def our_partition(name: str) -> str:
    """Ours: the partition a job asks for, checked."""
    from .core.errors import UserError

    if name not in ("gpu", "preempt"):
        raise UserError(f"no partition {name}: use gpu or preempt")
    return name
'''
OUR_DEFAULTS_LINE = "# ours: the lab's note on these defaults\n"
OUR_MODULE = '"""Our own backbones, by name."""\n\nfrom .extensions import custom_backbone\n\nOURS = custom_backbone\n'
OUR_TEST = """import pytest

from x_pkg import extensions
from x_pkg.core.errors import UserError
from x_pkg.our_models import OURS
from x_pkg.slurm import our_partition


def test_ours() -> None:
    assert OURS is extensions.custom_backbone and OURS("ours_tiny")[1] == 16
    assert our_partition("gpu") == "gpu"
    with pytest.raises(UserError, match="no partition cpu"):
        our_partition("cpu")
"""
# (old path, new path) under the package
MOVED = [("extensions.py", "models/extensions.py"), ("slurm.py", "training/slurm.py"),
         ("project_defaults.yaml", "core/project_defaults.yaml")]  # fmt: skip


def version_at(commit_id: str) -> str:
    found = re.search(r'^version = "([^"]+)"', git(REPO, "show", f"{commit_id}:pyproject.toml"), re.MULTILINE)
    assert found is not None, f"no version in pyproject.toml at {commit_id}"
    return found.group(1)


def copy_checkout(dest: Path) -> None:
    """This checkout's template files (uncommitted changes too), as make_template_repo copies them."""
    dest.mkdir(parents=True)
    for name in TEMPLATE_FILES:
        shutil.copy2(REPO / name, dest / name)
    for folder in ("template", "migrations"):
        shutil.copytree(REPO / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def the_two_releases(before: Path, moved: Path) -> str:
    """The template before the move and at it (this checkout, moved), as two folders of files; the version the
    first one had."""
    copy_checkout(moved)
    mover = git(REPO, "log", "-1", "--format=%H", "--diff-filter=D", "--", OLD_SLURM).strip()
    if mover:
        extract(f"{mover}^", before)
        return version_at(f"{mover}^")
    if not (REPO / OLD_SLURM).is_file():
        pytest.fail(f"this checkout has moved {OLD_SLURM} but no commit in its history did: commit the move")
    copy_checkout(before)
    script = [sys.executable, str(moved / "migrations" / "moves_0_10.py"), "--template-only", str(moved)]
    check(subprocess.run(script, capture_output=True, text=True))
    return version_at("HEAD")


Moved = tuple[Path, Path, Path, subprocess.CompletedProcess[str], dict[str, str]]


@pytest.fixture(scope="module")
def moved(tmp_path_factory: pytest.TempPathFactory) -> Moved:
    """The template repository (both releases), the moved release's files, and the user's project: generated
    at the release before the move, edited, committed, updated across it (what update printed, the edited texts)."""
    root = tmp_path_factory.mktemp("move_0_10")
    files_before, files_moved, template = root / "before", root / "moved", root / "template"
    previous = f"v{the_two_releases(files_before, files_moved)}"
    template.mkdir()
    git(template, "init", "--quiet", "--initial-branch=main")
    release(template, files_before, previous)
    project = generate(template, root / "project", vcs_ref=previous, package_name=PACKAGE)
    git(project, "init", "--quiet", "--initial-branch=main")
    commit(project, f"generated at {previous}")
    src = project / SRC
    replace_once(src / "extensions.py", "    return None\n", OUR_BACKBONE + "    return None\n")
    replace_once(src / "slurm.py", '\n\nif __name__ == "__main__":', OUR_PARTITION + '\n\nif __name__ == "__main__":')
    (src / "project_defaults.yaml").write_text((src / "project_defaults.yaml").read_text() + OUR_DEFAULTS_LINE)
    (src / "our_models.py").write_text(OUR_MODULE)
    (project / "tests" / "test_ours.py").write_text(OUR_TEST)
    edited = {old: (src / old).read_text() for old, _ in MOVED}
    commit(project, "our edits")
    release(template, files_moved, MOVE)
    return template, files_moved, project, update(project), edited


def test_every_edit_reaches_the_new_path_and_nothing_stays_behind(moved: Moved) -> None:
    _, files_moved, project, result, edited = moved
    assert result.returncode == 0, result.stdout + result.stderr  # 1 would mean conflicts
    edited_files = ", ".join(sorted(new for _, new in MOVED))  # the user edited all three
    assert f"moving 3 edited file(s) to the v0.10.0 layout: {edited_files}" in result.stdout + result.stderr
    assert f"_commit: {MOVE}" in (project / ".copier-answers.yml").read_text()
    assert conflict_markers(project) == []
    src = project / SRC
    for old, new in MOVED:
        assert not (src / old).exists(), f"{old} stayed beside {new}"
    # extensions.py is the user's: moved as it was, never merged (it imports nothing of the package).
    assert (src / "models" / "extensions.py").read_text() == edited["extensions.py"]
    # slurm.py: the user's function, its import spelled from training/, in the template's moved file.
    slurm = (src / "training" / "slurm.py").read_text()
    assert OUR_PARTITION.replace("from .core", "from ..core") in slurm
    assert "\nfrom ..core.errors import UserError\n" in slurm and "\nfrom .run_lock import RunLock\n" in slurm
    assert (src / "core" / "project_defaults.yaml").read_text() == edited["project_defaults.yaml"]
    # Ours: kept, their imports following the move; nothing of the template left beside the folders.
    assert (src / "our_models.py").read_text() == OUR_MODULE.replace("from .extensions", "from .models.extensions")
    ours = (project / "tests" / "test_ours.py").read_text()
    assert "from x_pkg.models import extensions\n" in ours and "from x_pkg.training.slurm import our_partition" in ours
    package = files_moved / "template" / "src" / "{{package_name}}"
    names = {p.name.removesuffix(".jinja") for p in package.iterdir() if p.name != "__pycache__"} | {"our_models.py"}
    assert sorted(p.name for p in src.iterdir() if p.name != "__pycache__") == sorted(names)


def renames(project: Path) -> dict[str, str]:
    """What ``git status`` shows as renamed in the index: old path -> new path."""
    status = git(project, "status", "--porcelain", "--untracked-files=all")
    return dict(line[3:].split(" -> ") for line in status.splitlines() if line.startswith("R"))


def test_git_status_shows_each_move_as_a_rename(moved: Moved) -> None:
    """Issue 59: after the update, ``git status`` showed the old extensions.py deleted and staged beside an
    untracked models/extensions.py. Each move is staged as ``git mv`` stages one."""
    _, _, project, _, _ = moved
    # v0.10.0's moves among them (an update to this release crosses v0.13.0's moves too, each a rename as well)
    assert {f"{SRC}/{old}": f"{SRC}/{new}" for old, new in MOVED}.items() <= renames(project).items()
    untracked = [line for line in git(project, "status", "--porcelain").splitlines() if line.startswith("??")]
    assert not [line for line in untracked if any(new in line for _, new in MOVED)], untracked


def test_the_moved_project_passes_its_tests(moved: Moved) -> None:
    _, _, project, _, _ = moved
    # The user's test, the layout and import-direction checks, the answers' defaults (read from core/), the
    # model's use of extensions, and Slurm's checks that run without Slurm (the slurm-marked jobs need one).
    tests = ["tests/test_ours.py", "tests/test_structure.py", "tests/test_config.py", "tests/test_model.py",
             "tests/test_slurm.py"]  # fmt: skip
    out = check(run_in(project, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests))
    assert " passed" in out and "failed" not in out


def test_an_unedited_project_gets_the_new_layout(moved: Moved, tmp_path: Path) -> None:
    template, _, _, _, _ = moved
    previous = git(template, "tag", "--sort=version:refname").split()[0]
    project = generate(template, tmp_path / "plain", vcs_ref=previous, package_name=PACKAGE)
    git(project, "init", "--quiet", "--initial-branch=main")
    commit(project, f"generated at {previous}")
    result = update(project)
    assert result.returncode == 0, result.stdout + result.stderr
    # Nothing edited, nothing named as edited (core/project_defaults.yaml, rendered from the answers, was).
    assert "edited file" not in result.stdout + result.stderr
    fresh = generate(template, tmp_path / "fresh", vcs_ref=MOVE, package_name=PACKAGE)
    for old, new in MOVED:
        assert not (project / SRC / old).exists(), old
        assert (project / SRC / new).read_text() == (fresh / SRC / new).read_text(), new
    # copier removed and wrote these files itself: staged as renames all the same
    # v0.10.0's moves among them (an update to this release crosses v0.13.0's moves too, each a rename as well)
    assert {f"{SRC}/{old}": f"{SRC}/{new}" for old, new in MOVED}.items() <= renames(project).items()


# In data.py before v0.2.0 (data/folders.py since): a function of the user's that imports from extensions.py.
OUR_DATA_FUNCTION = """

def our_transforms() -> list:  # ours
    from .extensions import extra_train_transforms

    return extra_train_transforms()
"""


def test_an_update_from_before_the_first_move_crosses_both(moved: Moved, tmp_path: Path) -> None:
    """v0.2.0's step keeps the user's data.py aside for data/folders.py; v0.10.0's then moves what it imports."""
    _, files_moved, _, _, _ = moved
    template = previous_template(tmp_path / "template")
    project = generate(template, tmp_path / "project", vcs_ref=BEFORE_TAG, package_name=PACKAGE)
    git(project, "init", "--quiet", "--initial-branch=main")
    commit(project, f"generated at {BEFORE_TAG}")
    src = project / SRC
    (src / "data.py").write_text((src / "data.py").read_text() + OUR_DATA_FUNCTION)
    replace_once(src / "extensions.py", "    return None\n", OUR_BACKBONE + "    return None\n")
    extensions = (src / "extensions.py").read_text()
    commit(project, "our edits")
    release(template, files_moved, MOVE)
    result = update(project)
    # data.py changed much since: the user's lines at its end meet the template's there, a conflict named as such
    assert result.returncode in (0, 1), result.stdout + result.stderr
    # Of v0.10.0's three files the user edited extensions.py alone: the others are not called edited.
    assert "moving 1 edited file(s) to the v0.10.0 layout: models/extensions.py\n" in result.stdout + result.stderr
    assert set(conflict_markers(project)) <= {f"{SRC}/data/folders.py"}, result.stdout
    assert not (src / "data.py").exists() and not (src / "extensions.py").exists()
    folders = (src / "data" / "folders.py").read_text()
    # The user's side, merged or between the markers, imports extensions where it is now.
    assert OUR_DATA_FUNCTION.replace("from .extensions", "from ..models.extensions").strip() in folders
    assert "\nfrom ..models import extensions\n" in folders  # the template's own import, merged
    assert (src / "models" / "extensions.py").read_text() == extensions
    assert renames(project)[f"{SRC}/extensions.py"] == f"{SRC}/models/extensions.py"
    unmerged = git(project, "diff", "--name-only", "--diff-filter=U").split()
    assert unmerged == [f"{SRC}/data/folders.py"] if conflict_markers(project) else not unmerged  # still to resolve
