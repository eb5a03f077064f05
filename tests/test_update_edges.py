"""copier update's edge cases, each through ``torch-scaffold update`` and plain ``copier update``.

A template file the user deleted stays deleted, even when the next version
changes it; ``-d KEY=VALUE`` changes an answer during an update; an update
across two versions runs both versions' migrations, in order, once, and the
next update does nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from .conftest import check, copier_cli, generate, git, make_template_repo, run_in
from .lifecycle import V1, V2, add_rename, commit, make_user_project, make_versioned_template
from .test_scaffold_cli import scaffold

V3 = "v3.0.0"
V3_RENAME = "v3.0.0:\n  - [train.grad_clip_norm, train.max_grad_norm]\n"
USER_FINETUNE = "# our fine-tuning run\ntrain:\n  epochs: 3\n  log_every: 5\n  grad_clip_norm: 1.0\n"
WAYS = ["torch-scaffold", "copier"]


def update(project: Path, way: str, *data: str) -> str:
    """One update by either command; its output (migrations print theirs); fails the test if the update failed."""
    flags = [arg for item in data for arg in ("-d", item)]
    if way == "torch-scaffold":
        result = scaffold("update", project, *flags)
    else:
        result = copier_cli("update", "--trust", "--defaults", *flags, cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def changed_files(project: Path) -> list[str]:
    git(project, "add", "-A")
    return git(project, "diff", "--cached", "--name-only").split()


@pytest.fixture(scope="module")
def three_versions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The v1.0.0 and v2.0.0 of tests/lifecycle.py, then v3.0.0, which renames a second config key."""
    repo = make_versioned_template(tmp_path_factory.mktemp("three") / "repo")
    for path in (repo / "template").rglob("*"):
        if path.is_file() and "grad_clip_norm" in (text := path.read_text()):
            path.write_text(text.replace("grad_clip_norm", "max_grad_norm"))
    add_rename(repo, V3_RENAME)
    commit(repo, V3, tag=V3)
    return repo


@pytest.mark.parametrize("way", WAYS)
def test_migrations_of_skipped_versions_run_in_order_once(three_versions: Path, tmp_path: Path, way: str) -> None:
    project = make_user_project(three_versions, tmp_path / "x")
    (project / "configs" / "finetune.yaml").write_text(USER_FINETUNE)
    commit(project, "grad clipping in our run")

    output = update(project, way)
    assert [line for line in output.splitlines() if line.startswith("migration:")] == [
        "migration: renamed train.log_every to train.log_interval in configs/default.yaml",
        "migration: renamed train.log_every to train.log_interval in configs/finetune.yaml",
        "migration: renamed train.grad_clip_norm to train.max_grad_norm in configs/default.yaml",
        "migration: renamed train.grad_clip_norm to train.max_grad_norm in configs/finetune.yaml",
    ]
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == V3
    default = yaml.safe_load((project / "configs" / "default.yaml").read_text())["train"]
    assert default["log_interval"] == 20 and default["max_grad_norm"] == 0.0 and default["epochs"] == 40
    assert not {"log_every", "grad_clip_norm"} & set(default)
    assert (project / "configs" / "finetune.yaml").read_text() == USER_FINETUNE.replace(
        "log_every", "log_interval"
    ).replace("grad_clip_norm", "max_grad_norm")
    load = "from x_pkg.core.config import load_config; t = load_config('configs/finetune.yaml').train"
    out = check(run_in(project, sys.executable, "-c", f"{load}; print(t.log_interval, t.max_grad_norm)"))
    assert out.split() == ["5", "1.0"]

    commit(project, "template v3.0.0")
    again = update(project, way)
    assert "migration:" not in again
    assert changed_files(project) == []


def plain_project(template: Path, dest: Path, vcs_ref: str) -> Path:
    project = generate(template, dest, vcs_ref=vcs_ref)
    git(project, "init", "--quiet", "--initial-branch=main")
    commit(project, "Generated")
    return project


@pytest.mark.parametrize("way", WAYS)
def test_a_deleted_template_file_stays_deleted_when_the_template_changes_it(
    versioned_template: Path, tmp_path: Path, way: str
) -> None:
    """copier reads the deletion as the user's edit (README, "For teams"); v2.0.0 changes README.md."""
    project = plain_project(versioned_template, tmp_path / "x", V1)
    git(project, "rm", "--quiet", "README.md")
    commit(project, "we keep our docs elsewhere")
    update(project, way)
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == V2
    assert not (project / "README.md").exists()
    assert (project / "src" / "x_pkg" / "callbacks.py").is_file()  # the rest of v2.0.0 arrived
    assert git(project, "diff", "--name-only", "--diff-filter=U") == ""
    commit(project, "template v2.0.0")
    status = scaffold("status", project)
    assert status.returncode == 0, status.stderr
    assert "  deleted   README.md" in status.stdout.splitlines()  # where a team sees it


@pytest.mark.xfail(strict=True, reason="copier 9.19: a deleted file makes an edited _skip_if_exists file conflict")
def test_a_deleted_template_file_leaves_user_owned_files_alone(versioned_template: Path, tmp_path: Path) -> None:
    """Known copier behaviour, kept visible: strict, so this fails the day copier stops doing it."""
    project = make_user_project(versioned_template, tmp_path / "x")  # it edits models/extensions.py, which v2 changes
    git(project, "rm", "--quiet", "README.md")
    commit(project, "we keep our docs elsewhere")
    result = scaffold("update", project)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("way", WAYS)
def test_changing_answers_during_an_update(versioned_template: Path, tmp_path: Path, way: str) -> None:
    project = plain_project(versioned_template, tmp_path / "x", V2)
    assert (project / ".github" / "workflows" / "ci.yml").is_file()

    output = update(project, way, "ci_workflow=false")
    assert not (project / ".github").exists()
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["ci_workflow"] is False
    if way == "torch-scaffold":
        assert f"Applied the changed answers (ci_workflow) to {project} at template version {V2}." in output
    commit(project, "no CI")

    update(project, way, "model=resnet18")
    defaults = "src/x_pkg/core/project_defaults.yaml"  # the answers' defaults that config.py reads
    docs = ["docs/config.md", "docs/training.md"]  # the reference's row of the default; the recipe tables' note
    assert changed_files(project) == [".copier-answers.yml", "configs/default.yaml", *docs, defaults]
    assert yaml.safe_load((project / defaults).read_text())["model"]["name"] == "resnet18"
    diff = git(project, "diff", "--cached", "--unified=0", "--", "configs/default.yaml", *docs)
    removed = [line for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert [line.split("#")[0].strip() for line in added if "name:" in line] == ["+  name: resnet18"]
    # the config's model.name and the configuration reference's row of its default, then the recipe section's
    # note that its tables measured another model
    note = added[-2:]
    assert note[0].startswith("+This project's answers (resnet18, sgd, cosine) were not") and "measured here" in note[1]
    assert len(removed) == len(added) - 2 == 2
    assert all("simple_cnn" in line for line in removed) and all("resnet18" in line for line in added[:-2])
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert answers["model"] == "resnet18" and answers["ci_workflow"] is False and answers["_commit"] == V2


def test_a_malformed_answer_is_one_line(versioned_template: Path, tmp_path: Path) -> None:
    project = make_user_project(versioned_template, tmp_path / "x")
    for data, message in [("model", "is malformed: write -d KEY=VALUE"), ("optimizer=lion", "Invalid choice")]:
        result = scaffold("update", project, "-d", data)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == V1


OLD_SPACE = """# the space every project got before configs/sweep.yaml followed the answers
params:
  optim.lr: {type: float, low: 0.01, high: 0.5, log: true}
  model.blocks_per_stage: {type: int, low: 1, high: 3}
"""


def test_an_existing_sweep_space_is_kept_and_a_deleted_one_comes_back_for_the_answers(tmp_path: Path) -> None:
    """configs/sweep.yaml became rendered from the answers (sweep.yaml.jinja). It is the project's file
    (_skip_if_exists): an update keeps it as it is, and deleting it (committed) brings the one for the answers."""
    repo = make_template_repo(tmp_path / "repo", tag="v0.0.0")
    configs = repo / "template" / "configs"
    rendered = (configs / "sweep.yaml.jinja").read_text()
    (configs / "sweep.yaml.jinja").unlink()
    (configs / "sweep.yaml").write_text(OLD_SPACE)  # v1: one plain file for every project
    commit(repo, V1, tag=V1)
    (configs / "sweep.yaml").unlink()
    (configs / "sweep.yaml.jinja").write_text(rendered)
    commit(repo, V2, tag=V2)
    project = generate(repo, tmp_path / "x", vcs_ref=V1, optimizer="adamw", model="resnet18")
    git(project, "init", "--quiet", "--initial-branch=main")
    commit(project, "generated")
    space = project / "configs" / "sweep.yaml"

    update(project, "copier")
    assert space.read_text() == OLD_SPACE  # the project's file: not rewritten, not deleted
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == V2
    commit(project, "updated")

    git(project, "rm", "--quiet", "configs/sweep.yaml")
    commit(project, "take the template's space")
    update(project, "copier")
    params = yaml.safe_load(space.read_text())["params"]
    assert "model.blocks_per_stage" not in params and params["optim.lr"]["high"] <= 0.02  # resnet18, adamw
