"""The real ``_migrations`` of copier.yml, run by ``copier update`` from the version before them.

v0.1.0 moved ``train.mixup_alpha`` and ``train.cutmix_alpha`` (augmentation) to
``data:``. The fixture's v0.0.1 is this checkout with the two keys written back
under ``train:`` in the template's configs, and without copier.yml's
``_migrations`` (the code is not reverted: nothing runs it before the update).
A project made from it, with a user's own config and search space naming the
old keys, is updated to v0.1.0 (this checkout): every config follows the move,
the merge is clean, the user's values are kept, and the configs load.
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

OLD, NEW = "v0.0.1", "v0.1.0"
MOVES = [("train.mixup_alpha", "data.mixup_alpha"), ("train.cutmix_alpha", "data.cutmix_alpha")]
USER_CONFIG = "# our mixing run\ntrain:\n  mixup_alpha: 0.4\n  epochs: 3\n"
USER_SPACE = "params:\n  train.cutmix_alpha:\n    type: float\n    low: 0.5\n    high: 1.0\n"


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
        if name == "default.yaml":
            expected = expected.replace("  epochs: 15\n", "  epochs: 40\n")
        assert (project / "configs" / name).read_text() == expected, name
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


def test_a_changed_value_in_default_yaml_is_a_named_conflict(two_versions: Path, tmp_path: Path) -> None:
    """Both sides wrote the moved line (the user's value, the template's default): the update shows the two,
    and the config, until resolved, is refused with the conflict's line (not a YAML parser's riddle)."""
    project = generate(two_versions, tmp_path / "x", vcs_ref=OLD)
    git(project, "init", "--quiet", "--initial-branch=main")
    commit(project, f"Generated from torch-scaffold {OLD}")
    substitute(project / "configs" / "default.yaml", r"^(  mixup_alpha:) 0.0", r"\1 0.1")
    commit(project, "more mixing")
    result = copier_cli("update", "--trust", "--defaults", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert conflict_markers(project) == ["configs/default.yaml"]
    text = (project / "configs" / "default.yaml").read_text()
    assert re.search(r"^<<<<<<< before updating\n  mixup_alpha: 0\.1 .*\n=======\n  mixup_alpha: 0\.0 ", text, re.M)
    line = text[: text.index("<<<<<<<")].count("\n") + 1
    load = "from x_pkg.core.config import load_config; load_config('configs/default.yaml')"
    refused = run_in(project, sys.executable, "-c", load)
    assert f"configs/default.yaml has unresolved merge conflict markers at line {line}" in refused.stderr
