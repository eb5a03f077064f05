"""copier update carries template v2.0.0 into an edited v1.0.0 project, by API and by command.

The user's edits stay, the template's changes arrive, user-owned files are not
overwritten, the renamed config key is migrated, and the project still lints
and passes its own tests. Then the two ways an update stops: a genuine conflict
(inline markers) and uncommitted work (refused).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from copier import run_update

from .conftest import BIN, check, copier_cli, git, run_in
from .lifecycle import (
    CALLBACKS_MODULE,
    TEMPLATE_FINETUNE,
    USER_DEPENDENCY,
    USER_EXTENSION,
    USER_FINETUNE,
    USER_MODULE,
    USER_README,
    V1,
    V2,
    V2_README_LINE,
    conflict_markers,
    make_user_project,
    substitute,
)


def update_with_api(project: Path) -> str:
    run_update(project, defaults=True, overwrite=True, unsafe=True, quiet=True)
    return ""


def update_with_cli(project: Path) -> str:
    result = copier_cli("update", "--trust", "--defaults", cwd=project)
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def updates(versioned_template: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """Two identical edited v1.0.0 projects, one updated by ``run_update``, one by ``copier update``."""
    projects = {
        way: make_user_project(versioned_template, tmp_path_factory.mktemp(way) / "x") for way in ("api", "cli")
    }
    return {
        "api": (projects["api"], update_with_api(projects["api"])),
        "cli": (projects["cli"], update_with_cli(projects["cli"])),
    }


@pytest.fixture(params=["api", "cli"])
def updated(request: pytest.FixtureRequest, updates: dict[str, tuple[Path, str]]) -> tuple[Path, str]:
    """An edited v1.0.0 project after ``copier update``, and what the update printed."""
    return updates[request.param]


def test_answers_record_v2_and_the_new_question(updated: tuple[Path, str]) -> None:
    project, _ = updated
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert answers["_commit"] == V2
    assert answers["license"] == "MIT"  # the new question, answered with its default
    assert answers["package_name"] == "x_pkg"  # earlier answers kept


def test_user_edits_are_kept(updated: tuple[Path, str]) -> None:
    project, _ = updated
    assert (project / "src" / "x_pkg" / "my_metrics.py").read_text() == USER_MODULE
    config = yaml.safe_load((project / "configs" / "default.yaml").read_text())
    assert config["train"]["epochs"] == 40
    assert (project / "README.md").read_text().endswith(USER_README)
    assert USER_DEPENDENCY in (project / "pyproject.toml").read_text()


def test_template_changes_arrive(updated: tuple[Path, str]) -> None:
    project, _ = updated
    config = yaml.safe_load((project / "configs" / "default.yaml").read_text())
    assert config["data"]["batch_size"] == 64  # edited file
    assert V2_README_LINE in (project / "README.md").read_text()
    assert 'license = "MIT"' in (project / "pyproject.toml").read_text()  # the new question's answer, rendered
    assert (project / "src" / "x_pkg" / "callbacks.py").read_text() == CALLBACKS_MODULE  # new file
    assert (project / "tests" / "test_callbacks.py").is_file()
    assert not (project / "src" / "x_pkg" / "legacy.py").exists()  # removed file
    assert conflict_markers(project) == []


def test_user_owned_files_are_not_overwritten(updated: tuple[Path, str], versioned_template: Path) -> None:
    project, _ = updated
    extensions = (project / "src" / "x_pkg" / "models" / "extensions.py").read_text()
    assert extensions.endswith(USER_EXTENSION) and "TEMPLATE_V2" not in extensions
    finetune = (project / "configs" / "finetune.yaml").read_text()
    assert TEMPLATE_FINETUNE not in finetune
    assert finetune == USER_FINETUNE.replace("log_every", "log_interval")  # only the migration touched it


def test_migration_renames_the_config_key(updated: tuple[Path, str]) -> None:
    project, output = updated
    default = (project / "configs" / "default.yaml").read_text()
    assert "log_every" not in default
    assert yaml.safe_load(default)["train"]["log_interval"] == 20
    assert "log_every" not in (project / "configs" / "finetune.yaml").read_text()
    if output:  # the command shows the migration's own report; the API run is quiet
        assert "migration: renamed train.log_every to train.log_interval in configs/default.yaml" in output
        assert "in configs/finetune.yaml" in output
    load = "from x_pkg.core.config import load_config as lc; print(lc('configs/finetune.yaml').train.log_interval)"
    assert check(run_in(project, sys.executable, "-c", load)).strip() == "5"


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}


def test_api_and_command_updates_give_the_same_files(updates: dict[str, tuple[Path, str]]) -> None:
    """So the project's (long) test suite below runs once, on the API-updated copy."""
    api, cli = files(updates["api"][0]), files(updates["cli"][0])
    assert api.keys() == cli.keys()
    assert [name for name in api if api[name] != cli[name]] == []


def test_updated_project_lints_and_passes_its_tests(updates: dict[str, tuple[Path, str]]) -> None:
    project, _ = updates["api"]
    check(run_in(project, str(BIN / "ruff"), "check", "--no-cache", "."))
    check(run_in(project, str(BIN / "ruff"), "format", "--check", "--no-cache", "."))
    # Only what an update can change: the config (edited defaults, the renamed key), the new module and its test,
    # the layout checks that read every module (the user's own included) and short trainings through the renamed
    # key. Everything else is the same code as a fresh project's, whose whole suite test_generate.py runs once.
    merged = ["test_config", "test_callbacks", "test_structure", "test_practices", "test_training"]
    tests = [f"tests/{name}.py" for name in merged]
    out = check(run_in(project, sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests))
    assert " passed" in out and " failed" not in out


def test_a_fresh_v2_project_gets_the_template_versions_of_user_files(versioned_template: Path, tmp_path: Path) -> None:
    from .conftest import generate

    project = generate(versioned_template, tmp_path / "x", vcs_ref=V2)
    assert (project / "configs" / "finetune.yaml").read_text() == TEMPLATE_FINETUNE
    assert "TEMPLATE_V2" in (project / "src" / "x_pkg" / "models" / "extensions.py").read_text()


def test_conflicting_edit_ends_in_inline_markers(versioned_template: Path, tmp_path: Path) -> None:
    project = make_user_project(versioned_template, tmp_path / "x")
    substitute(project / "configs" / "default.yaml", r"^(  batch_size:) 32$", r"\1 48")  # v2 makes it 64
    git(project, "commit", "--quiet", "-am", "bigger batches")
    run_update(project, defaults=True, overwrite=True, unsafe=True, quiet=True)
    text = (project / "configs" / "default.yaml").read_text()
    assert "<<<<<<< before updating\n  batch_size: 48\n=======\n  batch_size: 64\n>>>>>>> after updating" in text
    assert git(project, "diff", "--name-only", "--diff-filter=U").split() == ["configs/default.yaml"]
    assert conflict_markers(project) == ["configs/default.yaml"]


def test_dirty_project_is_refused(versioned_template: Path, tmp_path: Path) -> None:
    project = make_user_project(versioned_template, tmp_path / "x")
    with (project / "README.md").open("a") as readme:
        readme.write("\nNot committed yet.\n")
    result = copier_cli("update", "--trust", "--defaults", cwd=project)
    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert "Destination repository is dirty; cannot continue. Please commit or stash your local changes" in message
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == V1
    assert subprocess.run(["git", "diff", "--quiet", "--", "src"], cwd=project).returncode == 0
