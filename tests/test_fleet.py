"""The fleet walk-through of issue 60, as one test: three projects from older releases, edited, checked,
reported, updated, and reported again.

The releases are this repository's own: v0.10.0 and v0.11.1 from its history (the commits ``make tags`` tags)
and this checkout as its release (``pyproject.toml``'s version), tagged in a temporary template repository as a
team's server holds them. A platform lead's fleet:

- alpha, from v0.11.1 with the default answers, its batch size edited in ``configs/default.yaml``;
- beta, from v0.11.1 with resnet18 and AdamW, a ``.cuda()`` added to a template file (``core/device.py``);
- gamma, from v0.10.0 with ``timm/efficientnet_b0``, a backbone of its own in ``models/extensions.py`` (the
  project's file, never drift) and the team's notes in ``configs/default.yaml``.

``status --json --check`` must give each its release, the releases it is behind, its answers, the template files
it edited and the practices' findings; after ``torch-scaffold update``, the newest release, every edit kept,
and the planted finding still reported (an update does not clean a project's own code).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from torch_scaffold.releases import current_version

from .conftest import BIN, HANG_S, REPO, generate, git
from .lifecycle import commit, conflict_markers, substitute
from .test_update_move import extract_release, release
from .test_update_move_0_10 import copy_checkout

NEWEST = f"v{current_version(REPO)}"
PLANTED = "\n\ndef ours_on_gpu(x):  # ours: the lab's shortcut\n    return x.cuda()\n"
BACKBONE = '    if name == "ours_tiny":  # ours\n        return nn.Sequential(nn.Flatten(), nn.LazyLinear(16)), 16\n'
NOTE = "# ours: the greenhouse photos, 12 classes\n"


def scaffold(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "torch-scaffold"), *map(str, args)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=HANG_S)  # fmt: skip


def fleet_status(*args: str | Path) -> tuple[int, dict]:
    result = scaffold("status", "--json", *args)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


def start(template: Path, dest: Path, release_tag: str, **answers: str) -> Path:
    """A project as a team member starts one: generated at a release, committed."""
    generate(template, dest, vcs_ref=release_tag, project_name=dest.name.title(), **answers)
    git(dest, "init", "--quiet", "--initial-branch=main")
    commit(dest, f"Generated from torch-scaffold {release_tag}")
    return dest


@pytest.mark.slow
def test_a_fleet_from_older_releases_is_checked_reported_and_updated(tmp_path: Path) -> None:
    files = {tag: tmp_path / "releases" / tag for tag in ("v0.10.0", "v0.11.1", NEWEST)}
    extract_release("0.10.0", files["v0.10.0"])
    extract_release("0.11.1", files["v0.11.1"])
    copy_checkout(files[NEWEST])
    template = tmp_path / "torch-scaffold"
    template.mkdir()
    git(template, "init", "--quiet", "--initial-branch=main")
    for tag in ("v0.10.0", "v0.11.1"):
        release(template, files[tag], tag)

    alpha = start(template, tmp_path / "alpha", "v0.11.1")
    beta = start(template, tmp_path / "beta", "v0.11.1", model="resnet18", optimizer="adamw")
    gamma = start(template, tmp_path / "gamma", "v0.10.0", model="timm/efficientnet_b0")
    release(template, files[NEWEST], NEWEST)  # the newest release comes out after the projects started

    # Edited: a config value, a template file with a bad practice, the project's own file and a config comment.
    substitute(alpha / "configs" / "default.yaml", r"^(  batch_size:) 32$", r"\1 48")
    device = beta / "src" / "beta" / "core" / "device.py"
    device.write_text(device.read_text() + PLANTED)
    substitute(
        gamma / "src" / "gamma" / "models" / "extensions.py", r"^    return None\n", BACKBONE + "    return None\n"
    )
    config = gamma / "configs" / "default.yaml"
    config.write_text(NOTE + config.read_text())
    for project in (alpha, beta, gamma):
        commit(project, "our edits")

    # Checked: the practices check finds the planted .cuda() in the file beta edited.
    checked = scaffold("check", device)
    assert checked.returncode == 1 and "core/device.py" in checked.stdout and "TSC103" in checked.stdout

    # Reported: releases, releases behind, answers, edited files, findings; exit 3 (findings outrank behind).
    code, before = fleet_status("--check", alpha, beta, gamma)
    assert code == 3 and before["exit_status"] == 3, json.dumps(before, indent=1)
    rows = {Path(row["path"]).name: row for row in before["projects"]}
    assert {name: (row["release"], row["releases_behind"], row["newest"]) for name, row in rows.items()} == {
        "alpha": ("v0.11.1", 1, NEWEST),
        "beta": ("v0.11.1", 1, NEWEST),
        "gamma": ("v0.10.0", 2, NEWEST),
    }
    assert rows["gamma"]["newer_releases"] == ["v0.11.1", NEWEST]
    assert {name: (row["answers"]["model"], row["answers"]["optimizer"]) for name, row in rows.items()} == {
        "alpha": ("simple_cnn", "sgd"),
        "beta": ("resnet18", "adamw"),
        "gamma": ("timm/efficientnet_b0", "sgd"),
    }
    assert all(row["parts"]["ci_workflow"] is True for row in rows.values())
    edited = {name: [change["path"] for change in row["edited"]] for name, row in rows.items()}
    assert edited == {
        "alpha": ["configs/default.yaml"],
        "beta": ["src/beta/core/device.py"],
        "gamma": ["configs/default.yaml"],  # not models/extensions.py: the project's own file
    }
    assert [finding["path"] for finding in rows["beta"]["practices"]["findings"]] == ["src/beta/core/device.py"]
    assert {name: row["state"] for name, row in rows.items()} == {
        "alpha": "behind",
        "beta": "findings",
        "gamma": "behind",
    }

    # Updated: each to the newest release, every edit carried, no conflict.
    for project in (alpha, beta, gamma):
        updated = scaffold("update", project)
        assert updated.returncode == 0, f"{project.name}: {updated.stdout}{updated.stderr}"
        assert conflict_markers(project) == [], project.name
        commit(project, f"torch-scaffold {NEWEST}")
    assert "  batch_size: 48\n" in (alpha / "configs" / "default.yaml").read_text()
    assert device.read_text().endswith(PLANTED)
    assert BACKBONE in (gamma / "src" / "gamma" / "models" / "extensions.py").read_text()
    assert NOTE in (gamma / "configs" / "default.yaml").read_text()

    # Reported again: all on the newest release; beta's own code still has its finding.
    code, after = fleet_status("--check", alpha, beta, gamma)
    rows = {Path(row["path"]).name: row for row in after["projects"]}
    assert code == 3 and {name: row["state"] for name, row in rows.items()} == {
        "alpha": "newest",
        "beta": "findings",
        "gamma": "newest",
    }, json.dumps(after, indent=1)
    assert all((row["release"], row["releases_behind"]) == (NEWEST, 0) for row in rows.values())
    assert {name: [change["path"] for change in row["edited"]] for name, row in rows.items()} == edited
    assert after["summary"] == {"projects": 3, "conflict": 0, "error": 0, "findings": 1, "behind": 0, "newest": 2}
    table = scaffold("status", alpha, beta, gamma)  # without --check: a green fleet
    assert table.returncode == 0, table.stdout
    assert table.stdout.splitlines()[-1] == "3 projects: 3 newest, 0 behind, 0 conflict"
