"""The ``torch-scaffold`` command: new, update and status, as a user runs them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from torch_scaffold import cli

from .conftest import BIN, HANG_S, copier_cli, generate, git
from .lifecycle import V1, V2, make_user_project, substitute

PARTS = "audit,sweeps,slurm,mlflow,shards,gpu_decode"  # copier.yml's optional_parts, all on by default


def scaffold(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "torch-scaffold"), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=HANG_S,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


def test_new_generates_and_prints_next_steps(versioned_template: Path, tmp_path: Path) -> None:
    dest = tmp_path / "leaf"
    result = scaffold("new", dest, "--template", versioned_template, "--vcs-ref", V1,
                      "-d", "project_name=Leaf Disease", "-d", "image_size=32", "-d", "model=resnet18")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"Created {dest} from torch-scaffold {V1}" in result.stdout
    assert "python -m leaf_disease train --config configs/default.yaml" in result.stdout
    answers = yaml.safe_load((dest / ".copier-answers.yml").read_text())
    assert answers["image_size"] == 32 and answers["model"] == "resnet18" and answers["_commit"] == V1
    assert (dest / "src" / "leaf_disease" / "training" / "trainer.py").is_file()


def test_new_takes_the_newest_version_and_refuses_bad_answers(versioned_template: Path, tmp_path: Path) -> None:
    result = scaffold("new", tmp_path / "ok", "--template", versioned_template, "-d", "project_name=Ok")
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load((tmp_path / "ok" / ".copier-answers.yml").read_text())["_commit"] == V2
    answers = ["-d", "project_name=X", "-d", "package_name=class"]
    bad = scaffold("new", tmp_path / "bad", "--template", versioned_template, *answers)
    assert "would shadow a Python keyword" in one_line_error(bad)
    assert "malformed" in one_line_error(
        scaffold("new", tmp_path / "b2", "--template", versioned_template, "-d", "model")
    )


def test_new_checks_a_timm_answer_against_timms_registry(
    versioned_template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """copier's validator sees a timm/<name> answer's form only; `new` asks timm, installed here (the dev extra).

    In this process (the command's ``main``, as its console script calls it): each call as a new process paid
    timm's and torch's import again, about 4 CPU-seconds; the console script itself is tested above.
    """

    def new(dest: Path, model: str) -> tuple[int, str]:
        status = cli.main(["new", str(dest), "--template", str(versioned_template), "-d", "project_name=X",
                           "-d", f"model={model}"])  # fmt: skip
        return status, capsys.readouterr().err

    status, err = new(tmp_path / "bad", "timm/resnet_50")
    assert status == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "timm/resnet_50" in err and "did you mean timm/resnet50" in err
    assert not (tmp_path / "bad").exists()
    status, err = new(tmp_path / "tag", "timm/resnet50.no_such_tag")
    assert status == 1 and len(err.strip().splitlines()) == 1 and "has no model 'resnet50.no_such_tag'" in err, err
    status, err = new(tmp_path / "ok", "timm/resnet50.a1_in1k")
    assert status == 0, err


def test_update_refuses_a_project_outside_git_or_with_uncommitted_work(
    versioned_template: Path, tmp_path: Path
) -> None:
    loose = generate(versioned_template, tmp_path / "loose", vcs_ref=V1)
    assert "is not under git: run `git init" in one_line_error(scaffold("update", loose))
    project = make_user_project(versioned_template, tmp_path / "x")
    (project / "configs" / "mine.yaml").write_text("train:\n  epochs: 2\n")
    assert "has uncommitted changes: commit or stash them" in one_line_error(scaffold("update", project))
    assert "has no .copier-answers.yml" in one_line_error(scaffold("update", tmp_path))
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == V1


def test_update_moves_a_project_to_the_newest_version(versioned_template: Path, tmp_path: Path) -> None:
    project = make_user_project(versioned_template, tmp_path / "x")
    result = scaffold("update", project)
    assert result.returncode == 0, result.stderr
    assert f"Updated {project} from template version {V1} to {V2}." in result.stdout
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == V2
    git(project, "add", "-A")
    git(project, "commit", "--quiet", "-m", "template v2.0.0")
    again = scaffold("update", project)
    assert again.returncode == 0 and f"already on template version {V2}" in again.stdout


def test_update_names_the_conflicted_files(versioned_template: Path, tmp_path: Path) -> None:
    project = make_user_project(versioned_template, tmp_path / "x")
    substitute(project / "configs" / "default.yaml", r"^(  batch_size:) 32$", r"\1 48")
    git(project, "commit", "--quiet", "-am", "bigger batches")
    result = scaffold("update", project)
    assert result.returncode == 1
    assert "Resolve the <<<<<<< markers in: configs/default.yaml;" in result.stdout


@pytest.fixture
def drifted(versioned_template: Path, tmp_path: Path) -> Path:
    project = make_user_project(versioned_template, tmp_path / "x")
    (project / "src" / "x_pkg" / "legacy.py").unlink()
    return project


def test_status_shows_versions_and_changed_template_files(drifted: Path) -> None:
    result = scaffold("status", drifted)
    assert result.returncode == 1, result.stderr  # behind
    lines = result.stdout.splitlines()
    assert lines[1] == f"release:   {V1}, 1 release behind {V2}: run `torch-scaffold update {drifted}`"
    answers = "model=simple_cnn optimizer=sgd image_size=64 precision=auto python_version=3.11 scheduler=cosine"
    assert lines[2] == f"answers:   {answers}"
    on = " ".join(f"{part}=on" for part in ["ci_workflow", *PARTS.split(",")])
    assert lines[3:5] == [f"parts:     {on}", "conflicts: none"]
    assert lines[5] == "template files changed in this project (4):"
    changes = sorted(line.split() for line in lines[6:-1])
    assert changes == [
        ["deleted", "src/x_pkg/legacy.py"],
        ["modified", "README.md"],
        ["modified", "configs/default.yaml"],
        ["modified", "pyproject.toml"],
    ]  # not the user's own module, nor models/extensions.py and configs/finetune.yaml, which the user owns
    assert lines[-1] == "state:     behind"


def test_status_of_an_untouched_newest_project(versioned_template: Path, tmp_path: Path) -> None:
    project = generate(versioned_template, tmp_path / "x", vcs_ref=V2)
    result = scaffold("status", project)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == f"release:   {V2} (newest)"
    assert lines[4:] == ["conflicts: none", "template files changed in this project: none", "state:     newest"]


@pytest.mark.parametrize("content", ["_src_path: [unclosed", "- just\n- a list\n"])
def test_a_damaged_answers_file_is_one_line(tmp_path: Path, content: str) -> None:
    (tmp_path / ".copier-answers.yml").write_text(content)
    message = one_line_error(scaffold("status", tmp_path))
    assert ".copier-answers.yml" in message and "restore it from git" in message


def test_new_without_a_template_beside_the_package_says_what_to_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from torch_scaffold import cli

    monkeypatch.setattr(cli, "TEMPLATE_ROOT", tmp_path / "site-packages")
    assert cli.main(["new", str(tmp_path / "p"), "-d", "project_name=P"]) != 0
    assert "pass --template" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_a_project_made_from_a_relative_template_path_updates_from_inside(
    versioned_template: Path, tmp_path: Path
) -> None:
    """The first hour's blocker: ``new --template ./torch-scaffold`` recorded a path valid only where it was typed."""
    relative = f"./{versioned_template.name}"
    dest = tmp_path / "photo-sorter"
    made = scaffold("new", dest, "--template", relative, "--vcs-ref", V1, "-d", "project_name=Photo Sorter",
                    cwd=versioned_template.parent)  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert yaml.safe_load((dest / ".copier-answers.yml").read_text())["_src_path"] == str(versioned_template)
    git(dest, "init", "--quiet", "--initial-branch=main")
    git(dest, "add", "-A")
    git(dest, "commit", "--quiet", "-m", "Generated project")

    status = scaffold("status", ".", cwd=dest)
    assert status.returncode == 1, status.stderr  # behind
    assert (
        status.stdout.splitlines()[1] == f"release:   {V1}, 1 release behind {V2}: run `torch-scaffold update {dest}`"
    )

    plain = copier_cli("update", "--trust", "--defaults", cwd=dest)
    assert plain.returncode == 0, plain.stderr
    assert yaml.safe_load((dest / ".copier-answers.yml").read_text())["_commit"] == V2
    git(dest, "reset", "--quiet", "--hard")
    git(dest, "clean", "--quiet", "-fdx")

    updated = scaffold("update", ".", cwd=dest)
    assert updated.returncode == 0, updated.stderr
    assert f"from template version {V1} to {V2}." in updated.stdout


@pytest.mark.parametrize("recorded", ["./torch-scaffold", "/nowhere/torch-scaffold"])
def test_a_template_that_cannot_be_found_says_where_it_was_looked_for(
    versioned_template: Path, tmp_path: Path, recorded: str
) -> None:
    project = make_user_project(versioned_template, tmp_path / "x")
    answers = project / ".copier-answers.yml"
    answers.write_text(answers.read_text().replace(f"_src_path: {versioned_template}", f"_src_path: {recorded}"))
    git(project, "commit", "--quiet", "-am", "moved the template")
    where = project / recorded if recorded.startswith(".") else Path(recorded)
    for command in ("status", "update"):
        message = one_line_error(scaffold(command, ".", cwd=project))
        assert "the template this project records cannot be found" in message
        assert f"looked for at {where.resolve()}" in message and "set _src_path there" in message


def test_status_of_a_fleet_is_one_row_per_project_and_fails_when_one_is_behind(
    drifted: Path, versioned_template: Path, tmp_path: Path
) -> None:
    newest = generate(versioned_template, tmp_path / "newest", vcs_ref=V2, model="resnet18", optimizer="adamw",
                      ci_workflow=False)  # fmt: skip
    result = scaffold("status", drifted, newest)
    assert result.returncode == 1, result.stderr
    print(result.stdout)  # the README shows this table
    header, *rows, summary = result.stdout.splitlines()
    assert header.split() == [
        "project",
        "release",
        "newest",
        "behind",
        "model",
        "optimizer",
        "parts",
        "edited",
        "state",
    ]
    assert [row.split()[:9] for row in rows] == [
        [str(drifted), V1, V2, "1", "simple_cnn", "sgd", f"ci_workflow,{PARTS}", "4", "behind:"],
        [str(newest), V2, V2, "0", "resnet18", "adamw", PARTS, "0", "newest"],
    ]
    assert rows[0].endswith(f"behind: torch-scaffold update {drifted}")
    assert summary == "2 projects: 1 newest, 1 behind, 0 conflict"
    assert scaffold("status", newest, newest).returncode == 0


def test_status_of_a_fleet_names_an_unreadable_project_and_goes_on(versioned_template: Path, tmp_path: Path) -> None:
    newest = generate(versioned_template, tmp_path / "newest", vcs_ref=V2)
    result = scaffold("status", tmp_path / "nothing", newest)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert "error: " in lines[1] and "has no .copier-answers.yml" in lines[1]
    assert lines[2].split()[:4] == [str(newest), V2, V2, "0"]
    assert lines[-1] == "2 projects: 1 newest, 0 behind, 0 conflict, 1 error"


def test_copier_answer_errors_are_one_line_but_our_bugs_keep_their_traceback(
    versioned_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """copier raises a plain ValueError for a bad answer; only copier's own are turned into one line."""
    from torch_scaffold import cli, create

    template = ["--template", str(versioned_template), "-d", "project_name=X"]
    assert cli.main(["new", str(tmp_path / "a"), *template, "-d", "optimizer=lion"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("torch-scaffold new: Invalid choice for 'optimizer'") and len(err.splitlines()) == 1
    assert cli.main(["new", str(tmp_path / "b"), *template, "-d", "image_size=big"]) == 1
    assert len(capsys.readouterr().err.splitlines()) == 1

    def broken(*args: object) -> int:
        raise ValueError("a bug in torch-scaffold")

    monkeypatch.setattr(create, "create", broken)
    with pytest.raises(ValueError, match="a bug in torch-scaffold"):
        cli.main(["new", str(tmp_path / "c"), *template])
