"""``torch-scaffold status`` tells the truth: a conflict is never green, the releases behind are counted, and the
JSON a nightly job reads holds every fact the table shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torch_scaffold import fleet
from torch_scaffold.conflicts import find_conflicts
from torch_scaffold.fleet import EXIT
from torch_scaffold.releases import release_tags, releases_after

from .conftest import generate, git
from .lifecycle import V1, V2, commit, make_user_project, substitute
from .test_scaffold_cli import scaffold

JSON_KEYS = {
    "path", "state", "error", "template", "release", "newest", "releases_behind", "newer_releases", "answers",
    "parts", "edited", "conflicts", "practices",
}  # fmt: skip


def status_json(*args: str | Path) -> tuple[int, dict]:
    result = scaffold("status", "--json", *args)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


@pytest.fixture
def conflicted(versioned_template: Path, tmp_path: Path) -> Path:
    """The conflict of the issue: ``torch-scaffold update`` named it and exited 1, git shows UU."""
    project = make_user_project(versioned_template, tmp_path / "delta")
    substitute(project / "configs" / "default.yaml", r"^(  batch_size:) 32$", r"\1 48")  # v2 makes it 64
    commit(project, "bigger batches")
    updated = scaffold("update", project)
    assert updated.returncode == 1 and "configs/default.yaml" in updated.stdout, updated.stdout + updated.stderr
    assert "UU configs/default.yaml" in git(project, "status", "--porcelain").splitlines()
    return project


def test_a_conflict_after_update_is_its_own_state_and_never_green(
    conflicted: Path, versioned_template: Path, tmp_path: Path
) -> None:
    one = scaffold("status", conflicted)
    assert one.returncode == EXIT["conflict"] == 4, one.stdout + one.stderr
    lines = one.stdout.splitlines()
    assert lines[1] == f"release:   {V2} (newest)"  # copier recorded the new release: only the conflict says no
    assert "conflicts (1): resolve the markers, `git add` the files, commit:" in lines
    assert lines[lines.index("conflicts (1): resolve the markers, `git add` the files, commit:") + 1].split() == [
        "unmerged+markers",
        "configs/default.yaml",
    ]
    assert lines[-1] == "state:     conflict" and "newest" not in lines[-1]

    newest = generate(versioned_template, tmp_path / "newest", vcs_ref=V2)
    behind = generate(versioned_template, tmp_path / "behind", vcs_ref=V1)
    table = scaffold("status", newest, behind, conflicted)
    assert table.returncode == 4, table.stdout  # the worst state wins: a conflict outranks behind
    row = next(line for line in table.stdout.splitlines() if line.startswith(str(conflicted)))
    assert row.endswith("conflict: resolve configs/default.yaml, then commit")
    assert table.stdout.splitlines()[-1] == "3 projects: 1 newest, 1 behind, 1 conflict"

    code, document = status_json(newest, conflicted)
    assert code == 4 and document["exit_status"] == 4
    delta = document["projects"][1]
    assert delta["state"] == "conflict"
    assert delta["conflicts"] == {"unmerged": ["configs/default.yaml"], "markers": ["configs/default.yaml"]}

    # `git add` clears the index, not the file: the markers still make it a conflict.
    git(conflicted, "add", "-A")
    assert scaffold("status", conflicted).returncode == 4
    code, document = status_json(conflicted)
    assert document["projects"][0]["conflicts"] == {"unmerged": [], "markers": ["configs/default.yaml"]}
    # Resolved (their 64, our 48: we keep ours) and committed: newest, green.
    config = conflicted / "configs" / "default.yaml"
    lines = config.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("<<<<<<<"))
    end = next(i for i, line in enumerate(lines) if line.startswith(">>>>>>>"))
    middle = next(i for i in range(start, end) if lines[i].startswith("======="))
    config.write_text("".join([*lines[:start], *lines[start + 1 : middle], *lines[end + 1 :]]))
    assert "batch_size: 48" in config.read_text() and "<<<<<<<" not in config.read_text()
    commit(conflicted, "resolved")
    resolved = scaffold("status", conflicted)
    assert resolved.returncode == 0 and resolved.stdout.splitlines()[-1] == "state:     newest", resolved.stdout


def test_status_json_has_every_fact_for_a_nightly_job(versioned_template: Path, tmp_path: Path) -> None:
    oldest = generate(versioned_template, tmp_path / "oldest", vcs_ref="v0.0.0", model="resnet18", optimizer="adamw")
    drifted = make_user_project(versioned_template, tmp_path / "drifted")
    code, document = status_json(oldest, drifted, tmp_path / "nothing")
    assert code == 1 and document["exit_status"] == 1  # behind, and one unreadable
    assert document["summary"] == {"projects": 3, "conflict": 0, "error": 1, "findings": 0, "behind": 2, "newest": 0}
    first, second, missing = document["projects"]
    assert set(first) == set(second) == set(missing) == JSON_KEYS
    assert first["path"] == str(oldest) and first["template"] == str(versioned_template)
    # v0.0.0 is two releases behind: v1.0.0 and v2.0.0, the template's tags, oldest first.
    assert (first["release"], first["newest"], first["releases_behind"]) == ("v0.0.0", V2, 2)
    assert first["newer_releases"] == [V1, V2] and second["newer_releases"] == [V2]
    assert first["answers"]["model"] == "resnet18" and first["answers"]["optimizer"] == "adamw"
    every_part = {
        "ci_workflow": True,
        **dict.fromkeys(["audit", "sweeps", "slurm", "mlflow", "shards", "gpu_decode"], True),
    }
    assert first["parts"] == every_part and first["edited"] == [] and first["practices"] is None
    assert second["edited"] == [
        {"path": "README.md", "change": "modified"},
        {"path": "configs/default.yaml", "change": "modified"},
        {"path": "pyproject.toml", "change": "modified"},
    ]
    assert second["conflicts"] == {"unmerged": [], "markers": []} and second["state"] == "behind"
    assert missing["state"] == "error" and "has no .copier-answers.yml" in missing["error"]
    assert all(missing[key] is None for key in JSON_KEYS - {"path", "state", "error"})


def test_status_check_adds_the_practices_findings(versioned_template: Path, tmp_path: Path) -> None:
    project = generate(versioned_template, tmp_path / "x", vcs_ref=V2)
    engine = project / "src" / "x_pkg" / "training" / "engine.py"
    engine.write_text(engine.read_text() + "\n\ndef ours(x):\n    return x.cuda()\n")  # a template file, badly
    code, document = status_json("--check", project)
    assert code == EXIT["findings"] == 3
    (row,) = document["projects"]
    assert row["state"] == "findings" and row["practices"]["counts"] == {"TSC103": 1}
    (finding,) = row["practices"]["findings"]
    assert finding["path"] == "src/x_pkg/training/engine.py" and finding["code"] == "TSC103"
    assert finding["line"] == len(engine.read_text().splitlines())
    assert row["edited"] == [{"path": "src/x_pkg/training/engine.py", "change": "modified"}]
    text = scaffold("status", "--check", project)
    assert text.returncode == 3 and "practices: 1 findings (TSC103: 1)" in text.stdout
    assert text.stdout.splitlines()[-1] == "state:     findings"
    assert scaffold("status", project).returncode == 0  # without --check: newest, the findings not looked for


def test_conflicts_are_found_in_git_and_outside_it(tmp_path: Path) -> None:
    """Markers in any text file, the same pattern as the pre-commit hook; look-alikes are not conflicts."""
    (tmp_path / "notes.md").write_text("Title\n=======\n\n    <<<<<<<<<< not a marker\n")
    (tmp_path / "a.py").write_text("x = 1\n<<<<<<< before updating\nx = 2\n=======\nx = 3\n>>>>>>> after updating\n")
    (tmp_path / "b.yaml.rej").write_text("@@ rejected hunk\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "c.txt").write_text("<<<<<<< not the project's text\n")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\0\n<<<<<<< \n")  # binary
    found = find_conflicts(tmp_path)  # not under git: the files themselves
    assert found.unmerged == [] and found.markers == ["a.py", "b.yaml.rej"]
    git(tmp_path, "init", "--quiet", "--initial-branch=main")
    (tmp_path / ".gitignore").write_text("*.rej\ndata/\n")
    assert find_conflicts(tmp_path).markers == ["a.py"]  # what git ignores is not read
    (tmp_path / "sub").mkdir()  # a project in a folder of a larger repository: its own files, named from there
    (tmp_path / "sub" / "d.py").write_text(">>>>>>> theirs\n")
    assert find_conflicts(tmp_path / "sub").markers == ["d.py"]
    assert find_conflicts(tmp_path).markers == ["a.py", "sub/d.py"]
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub" / "d.py").write_text("y = 2\n")
    assert not find_conflicts(tmp_path)


def test_releases_are_the_templates_version_tags_as_copier_reads_them(tmp_path: Path) -> None:
    """PEP 440 order (v0.9.0 before v0.10.0), no prereleases, no other tags; a describe string counts from its tag."""
    git(tmp_path, "init", "--quiet", "--initial-branch=main")
    for tag in ("v0.10.0", "v0.9.0", "v0.11.0rc1", "latest", "v0.11.1"):
        git(tmp_path, "commit", "--quiet", "--allow-empty", "-m", tag)
        git(tmp_path, "tag", tag)
    tags = release_tags(str(tmp_path))
    assert tags == ["v0.9.0", "v0.10.0", "v0.11.1"]
    assert releases_after("v0.9.0", tags) == ["v0.10.0", "v0.11.1"]
    assert releases_after("v0.10.0-3-g0123abc", tags) == ["v0.11.1"]  # generated from a commit after v0.10.0
    assert releases_after("v0.11.1-1-g0123abc", tags) == []  # after the newest release: nothing to update to
    assert releases_after("0123abc", tags) == tags  # a bare commit names no release: every release may be newer


def test_the_optional_parts_answer_shows_each_part_on_or_off() -> None:
    """Issue 60: the parts column names the optional parts a project holds; a lean project's are off, by name."""
    lean = fleet.parts({"ci_workflow": True, "optional_parts": ["mlflow"]})
    off = {"audit": False, "sweeps": False, "slurm": False, "shards": False, "gpu_decode": False}
    assert lean == {"ci_workflow": True, **off, "mlflow": True}
    assert "optional_parts" not in fleet.choices({"model": "resnet18", "optional_parts": ["mlflow"]})
    assert fleet.parts({"ci_workflow": False}) == {"ci_workflow": False}  # answered before the question


def test_parts_that_joined_the_question_later_are_on_in_a_project_of_an_older_release() -> None:
    """A v0.15 project's answer cannot name shards or gpu_decode (they became choices in v0.16.0), yet its
    release made their files: shown on until its update records them; in a v0.16 project the answer decides."""
    answer = {"optional_parts": ["audit"]}
    older = fleet.parts(answer, "v0.15.1-2-gabc1234")
    assert older["shards"] and older["gpu_decode"] and older["audit"] and not older["sweeps"]
    newer = fleet.parts(answer, "v0.16.0")
    assert not newer["shards"] and not newer["gpu_decode"] and newer["audit"]
    assert fleet.parts(answer, "0123abc") == fleet.parts(answer)  # a bare commit: the answer alone
