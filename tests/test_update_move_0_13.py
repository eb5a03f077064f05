"""A project follows release 0.13.0's move with its edits: data/'s modules into three rooms, the audit's beside it.

``data/``'s flat modules move into ``files/``, ``decoding/`` and ``loading/``;
``data/findings.py``, ``near_copies.py`` and ``label_checks.py`` join the audit
command and its report in ``commands/audit/`` (``migrations/moves_0_13.py``
made the move; copier.yml's ``_migrations`` v0.13.0 run
``migrations/move_modules.py`` on an update across it).

The project is generated at v0.12.2, the last release before the move (from
this repository's history, as ``make tags`` tags it), and updated to this
checkout. The user edits three moved files (a function with relative imports
in ``data/cache.py`` and in ``data/findings.py``, a line in
``commands/audit.py``) and adds a module and a test that import moved modules,
by import and by dotted name; the update must carry every edit to the new
paths with no conflict, leave nothing at the old ones, and the project's tests
must pass.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from torch_scaffold.releases import current_version

from .conftest import REPO, check, generate, git, run_in
from .lifecycle import commit, conflict_markers
from .test_update_move import extract_release, release, replace_once, update
from .test_update_move_0_10 import copy_checkout

PACKAGE = "x_pkg"
BEFORE = "0.12.2"  # the last release before the move
MOVE = f"v{max(Version(current_version(REPO)), Version('0.13.0'))}"  # this checkout: the move's release or later
SRC = f"src/{PACKAGE}"
OUR_CACHE = '''

def our_extensions() -> tuple[str, ...]:
    """Ours: the image extensions and our own, beside the cache."""
    from .decode import IMAGE_EXTENSIONS

    return (*IMAGE_EXTENSIONS, ".ours")
'''
OUR_FINDINGS = '''

def our_match() -> float:
    """Ours: the near-copy threshold, refused where it is no share (both imported relatively)."""
    from ..core.errors import UserError
    from .near_copies import MATCH

    if not 0 < MATCH < 1:
        raise UserError(f"MATCH {MATCH} is no share")
    return MATCH
'''
OUR_AUDIT_LINE = "# ours: the lab's note on the audit\n"
# Ours, in data/ (whose own files may use its rooms: test_structure.py), importing a module that moves into one.
OUR_MODULE = '''"""Our own data helpers."""

from . import shards
from .decode import IMAGE_EXTENSIONS

OURS = (IMAGE_EXTENSIONS, shards.MANIFEST)
'''
OUR_TEST = """from x_pkg.data.cache import MemoryCache, our_extensions
from x_pkg.data.findings import our_match
from x_pkg.data.our_data import OURS


def test_ours(monkeypatch) -> None:
    monkeypatch.setattr("x_pkg.data.decode.read_file", lambda path: b"ours")
    from x_pkg.data import decode

    assert decode.read_file("any") == b"ours" and MemoryCache is not None
    assert ".ours" in our_extensions() and 0 < our_match() < 1 and OURS[1].endswith(".json")
"""
MOVED = {  # the files the user edits: old path -> new path, under the package
    "data/cache.py": "data/loading/cache.py",
    "data/findings.py": "commands/audit/findings.py",
    "commands/audit.py": "commands/audit/audit.py",
}


Moved = tuple[Path, Path, subprocess.CompletedProcess[str], dict[str, str]]


@pytest.fixture(scope="module")
def moved(tmp_path_factory: pytest.TempPathFactory) -> Moved:
    """The template repository (both releases), and the user's project generated at v0.12.2, edited, committed and
    updated across the move (what update printed, the edited texts)."""
    root = tmp_path_factory.mktemp("move_0_13")
    files_before, files_moved, template = root / "before", root / "moved", root / "template"
    extract_release(BEFORE, files_before)
    copy_checkout(files_moved)
    template.mkdir()
    git(template, "init", "--quiet", "--initial-branch=main")
    release(template, files_before, f"v{BEFORE}")
    project = generate(template, root / "project", vcs_ref=f"v{BEFORE}", package_name=PACKAGE)
    git(project, "init", "--quiet", "--initial-branch=main")
    commit(project, f"generated at v{BEFORE}")
    src = project / SRC
    (src / "data" / "cache.py").write_text((src / "data" / "cache.py").read_text() + OUR_CACHE)
    (src / "data" / "findings.py").write_text((src / "data" / "findings.py").read_text() + OUR_FINDINGS)
    replace_once(src / "commands" / "audit.py", "\ndef run_audit(", f"\n{OUR_AUDIT_LINE}def run_audit(")
    (src / "data" / "our_data.py").write_text(OUR_MODULE)
    (project / "tests" / "test_ours.py").write_text(OUR_TEST)
    edited = {old: (src / old).read_text() for old in MOVED}
    commit(project, "our edits")
    release(template, files_moved, MOVE)
    return template, project, update(project), edited


def test_every_edit_reaches_the_new_path_and_nothing_stays_behind(moved: Moved) -> None:
    _, project, result, _ = moved
    said = result.stdout + result.stderr
    assert result.returncode == 0, said  # 1 would mean conflicts
    assert f"moving 3 edited file(s) to the v0.13.0 layout: {', '.join(sorted(MOVED.values()))}" in said
    assert f"_commit: {MOVE}" in (project / ".copier-answers.yml").read_text()
    assert conflict_markers(project) == []
    src = project / SRC
    for old in ("data/cache.py", "data/findings.py", "data/decode.py", "commands/audit.py", "commands/audit_report.py"):
        assert not (src / old).exists(), f"{old} stayed behind"
    cache = (src / "data" / "loading" / "cache.py").read_text()
    assert OUR_CACHE.replace("from .decode", "from ..decoding.decode") in cache  # spelled from its new room
    findings = (src / "commands" / "audit" / "findings.py").read_text()
    assert OUR_FINDINGS.replace("from ..core", "from ...core") in findings  # near_copies moved with it
    assert OUR_AUDIT_LINE in (src / "commands" / "audit" / "audit.py").read_text()
    ours = (src / "data" / "our_data.py").read_text()
    assert "from .decoding.decode import IMAGE_EXTENSIONS\n" in ours and "from .files import shards\n" in ours
    test = (project / "tests" / "test_ours.py").read_text()
    assert (
        "from x_pkg.data.loading.cache import MemoryCache" in test and '"x_pkg.data.decoding.decode.read_file"' in test
    )


def test_the_moved_project_passes_its_tests(moved: Moved) -> None:
    _, project, _, _ = moved
    # The user's test, the rooms and import-direction checks, the decode contract and the data's own tests.
    tests = ["tests/test_ours.py", "tests/test_structure.py", "tests/test_decode.py", "tests/test_data.py"]
    out = check(run_in(project, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests))
    assert " passed" in out and "failed" not in out


def test_an_unedited_project_gets_the_new_layout(moved: Moved, tmp_path: Path) -> None:
    template, _, _, _ = moved
    project = generate(template, tmp_path / "plain", vcs_ref=f"v{BEFORE}", package_name=PACKAGE)
    git(project, "init", "--quiet", "--initial-branch=main")
    commit(project, f"generated at v{BEFORE}")
    result = update(project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "edited file" not in result.stdout + result.stderr
    fresh = generate(template, tmp_path / "fresh", vcs_ref=MOVE, package_name=PACKAGE)
    for folder in ("data", "commands"):
        mine = sorted(p.relative_to(project).as_posix() for p in (project / SRC / folder).rglob("*.py"))
        theirs = sorted(p.relative_to(fresh).as_posix() for p in (fresh / SRC / folder).rglob("*.py"))
        assert mine == theirs, folder
        for name in theirs:
            assert (project / name).read_text() == (fresh / name).read_text(), name
