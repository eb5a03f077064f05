"""The real config migrations (``migrations/renames.yaml``), run by ``copier update`` from the version before them.

v0.1.0 moved ``train.mixup_alpha`` and ``train.cutmix_alpha`` (augmentation) to
``data:``. The fixture's v0.0.1 is this checkout with the two keys written back
under ``train:`` in the template's configs, the strong recipe's random erasing
at its earlier 0.25, and without copier.yml's ``_migrations`` (the code is not
reverted: nothing runs it before the update). A project made from it, with a
user's own config and search space naming the old keys, and edits on the lines
next to where the keys left and arrived, is updated to v0.1.0 (this checkout):
every config follows the move, only the user's real conflicts conflict, the
user's values are kept, and the configs load.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, check, copier_cli, generate, git, make_template_repo, run_in
from .lifecycle import commit, conflict_markers, substitute
from .test_scaffold_cli import scaffold

OLD, NEW = "v0.0.1", "v0.1.0"
MOVES = [("train.mixup_alpha", "data.mixup_alpha"), ("train.cutmix_alpha", "data.cutmix_alpha")]
USER_CONFIG = "# our mixing run\ntrain:\n  mixup_alpha: 0.4\n  epochs: 3\n"
USER_SPACE = "params:\n  train.cutmix_alpha:\n    type: float\n    low: 0.5\n    high: 1.0\n"
# The user's edits in default.yaml on the lines next to the moved keys: where they leave (train: ends with them in
# v0.0.1) and where they arrive (after data.sampler). Each conflicted when the keys moved before copier's merge.
NEIGHBOUR_EDITS = [(r"^(  collective_timeout:) 300", r"\1 600"), (r"^(  sampler:) uniform", r"\1 balanced")]


def load_migration_script() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("rename_config_key", REPO / "migrations" / "rename_config_key.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = make_template_repo(tmp_path_factory.mktemp("moved") / "repo", tag="v0.0.0")
    rename_key = load_migration_script().rename_key
    configs = [
        repo / "template" / "configs" / "default.yaml.jinja",
        repo / "template" / "configs" / "recipes" / "strong.yaml.jinja",
    ]
    new_texts = {path: path.read_text() for path in configs}
    for path in configs:  # the keys back where v0.0.1 had them
        text = path.read_text()
        for old, new in MOVES:
            text = rename_key(text, new, old)
        assert "mixup_alpha" in text.split("\ntrain:")[1], path
        path.write_text(text)
    # and a line v0.1.0 changed next to where the keys arrive, as it really did: the untouched strong.yaml of a
    # v0.0.1 project came out of the update with conflict markers (random_erasing: 0.25 against 0.1)
    substitute(configs[1], r"^(  random_erasing:) 0\.1$", r"\1 0.25")
    new_copier = (repo / "copier.yml").read_text()
    (repo / "copier.yml").write_text(new_copier.partition("\n_migrations:\n")[0] + "\n")
    commit(repo, OLD, tag=OLD)
    for path, text in new_texts.items():
        path.write_text(text)
    (repo / "copier.yml").write_text(new_copier)
    commit(repo, NEW, tag=NEW)
    return repo


@pytest.fixture(scope="module")
def updated(two_versions: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    project = generate(two_versions, tmp_path_factory.mktemp("project") / "x", vcs_ref=OLD)
    git(project, "init", "--quiet", "--initial-branch=main")
    commit(project, f"Generated from torch-scaffold {OLD}")
    assert yaml.safe_load((project / "configs" / "default.yaml").read_text())["train"]["mixup_alpha"] == 0.0
    substitute(project / "configs" / "default.yaml", r"^(  epochs:) 15$", r"\1 40")
    for pattern, replacement in NEIGHBOUR_EDITS:
        substitute(project / "configs" / "default.yaml", pattern, replacement)
    (project / "configs" / "mixing.yaml").write_text(USER_CONFIG)
    (project / "configs" / "space.yaml").write_text(USER_SPACE)
    commit(project, "Our changes")
    result = copier_cli("update", "--trust", "--defaults", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    return project, result.stdout + result.stderr


def test_every_config_follows_the_move(updated: tuple[Path, str]) -> None:
    project, output = updated
    reported = [line for line in output.splitlines() if line.startswith("migration:")]
    assert reported == [
        f"migration: moved {old} to {new} in configs/{name}"
        for old, new in MOVES
        for name in (["default.yaml", "mixing.yaml", "recipes/strong.yaml"] if "mixup" in old else
                     ["default.yaml", "recipes/strong.yaml", "space.yaml"])
    ]  # fmt: skip
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == NEW
    assert conflict_markers(project) == []
    assert git(project, "diff", "--name-only", "--diff-filter=U") == ""  # nothing recorded as unmerged either
    for path in (project / "configs").rglob("*.yaml"):
        assert not re.search(r"train\.(mixup|cutmix)_alpha", path.read_text()), path
        train = yaml.safe_load(path.read_text()).get("train") or {}
        assert not {"mixup_alpha", "cutmix_alpha"} & set(train), path


def test_user_values_are_kept_and_the_template_matches(
    updated: tuple[Path, str], two_versions: Path, tmp_path: Path
) -> None:
    project, _ = updated
    fresh = generate(two_versions, tmp_path / "fresh", vcs_ref=NEW)
    for name in ("default.yaml", "recipes/strong.yaml"):
        expected = (fresh / "configs" / name).read_text()
        if name == "default.yaml":  # the user's three edits, the two next to the moved keys included
            expected = expected.replace("  epochs: 15\n", "  epochs: 40\n")
            for pattern, replacement in NEIGHBOUR_EDITS:
                expected = re.sub(pattern, replacement, expected, count=1, flags=re.M)
        assert (project / "configs" / name).read_text() == expected, name  # strong.yaml: the template's, untouched
    assert (
        project / "configs" / "mixing.yaml"
    ).read_text() == "# our mixing run\ntrain:\n  epochs: 3\ndata:\n  mixup_alpha: 0.4\n"
    assert yaml.safe_load((project / "configs" / "space.yaml").read_text())["params"]["data.cutmix_alpha"]["low"] == 0.5


def test_the_migrated_configs_load(updated: tuple[Path, str]) -> None:
    project, _ = updated
    code = (
        "from x_pkg.core.config import load_config as load; "
        "m = load(['configs/default.yaml', 'configs/mixing.yaml']); "
        "s = load(['configs/default.yaml', 'configs/recipes/strong.yaml']); "
        "print(m.data.mixup_alpha, m.train.epochs, s.data.mixup_alpha, s.data.cutmix_alpha)"
    )
    assert check(run_in(project, sys.executable, "-c", code)).split() == ["0.4", "3", "0.2", "1.0"]


def test_the_migration_is_idempotent_and_keeps_a_lone_section_out() -> None:
    rename_key = load_migration_script().rename_key
    once = rename_key(USER_CONFIG.replace("  epochs: 3\n", ""), *MOVES[0])
    assert once == "# our mixing run\ndata:\n  mixup_alpha: 0.4\n"  # no empty train: left, which would read as null
    assert rename_key(once, *MOVES[0]) == once


def old_project(two_versions: Path, dest: Path) -> Path:
    project = generate(two_versions, dest, vcs_ref=OLD)
    git(project, "init", "--quiet", "--initial-branch=main")
    commit(project, f"Generated from torch-scaffold {OLD}")
    return project


def test_a_changed_value_of_a_moved_key_moves_with_it(two_versions: Path, tmp_path: Path) -> None:
    """The user changed the moved line's value and the template only moved it: the value arrives at the new place."""
    project = old_project(two_versions, tmp_path / "x")
    substitute(project / "configs" / "default.yaml", r"^(  mixup_alpha:) 0.0", r"\1 0.1")
    commit(project, "more mixing")
    result = copier_cli("update", "--trust", "--defaults", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert conflict_markers(project) == []
    fresh = generate(two_versions, tmp_path / "fresh", vcs_ref=NEW)
    expected = re.sub(r"^(  mixup_alpha:) 0.0", r"\1 0.1", (fresh / "configs" / "default.yaml").read_text(), flags=re.M)
    assert (project / "configs" / "default.yaml").read_text() == expected
    assert yaml.safe_load(expected)["data"]["mixup_alpha"] == 0.1


@pytest.mark.parametrize("way", ["copier", "torch-scaffold"])
def test_a_real_conflict_is_recorded_and_how_each_command_reports_it(
    two_versions: Path, tmp_path: Path, way: str
) -> None:
    """The user and the template changed the same line: a conflict, inline and unmerged in git's index, in that file
    only. What the READMEs say of the two commands: `torch-scaffold update` names the file and exits 1; plain
    `copier update` exits 0 without naming it, and `git status` shows it as unmerged. Until it is resolved, the
    config is refused with the conflict's line (not a YAML parser's riddle)."""
    project = old_project(two_versions, tmp_path / "x")
    substitute(project / "configs" / "recipes" / "strong.yaml", r"^(  random_erasing:) 0.25", r"\1 0.3")
    commit(project, "more erasing")
    if way == "copier":
        result = copier_cli("update", "--trust", "--defaults", cwd=project)
        said = [line for line in (result.stdout + result.stderr).splitlines() if not line.startswith("migration:")]
        assert result.returncode == 0 and not [line for line in said if "strong.yaml" in line or "onflict" in line]
    else:
        result = scaffold("update", project)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Resolve the <<<<<<< markers in: configs/recipes/strong.yaml;" in result.stdout
    assert conflict_markers(project) == ["configs/recipes/strong.yaml"]
    assert git(project, "diff", "--name-only", "--diff-filter=U").split() == ["configs/recipes/strong.yaml"]
    assert "both modified:   configs/recipes/strong.yaml" in git(project, "status")
    text = (project / "configs" / "recipes" / "strong.yaml").read_text()
    both = "<<<<<<< before updating\n  random_erasing: 0.3\n=======\n  random_erasing: 0.1\n>>>>>>> after updating\n"
    assert both in text
    assert text.split(both, 1)[1].startswith("  mixup_alpha: 0.2\n  cutmix_alpha: 1.0\noptim:")  # moved all the same
    line = text[: text.index("<<<<<<<")].count("\n") + 1
    load = "from x_pkg.core.config import load_config; load_config('configs/recipes/strong.yaml')"
    refused = run_in(project, sys.executable, "-c", load)
    assert f"configs/recipes/strong.yaml has unresolved merge conflict markers at line {line}" in refused.stderr
