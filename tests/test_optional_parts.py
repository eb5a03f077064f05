"""The optional parts (copier's ``optional_parts`` answer): a project without them, and one that adds one later.

copier.yml's ``_exclude`` leaves a part's files out, rendered with the answer; the generated
``core/parts.py`` says which parts a project holds, and kept code imports none of them at import time.
The slow tests (a lean project's whole suite, the updates) are marked ``project_suite``: make test-project.
"""

from __future__ import annotations

import ast
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from .answer_rows import longest_package_name
from .conftest import BIN, REPO, check, copier_cli, generate, git, run_in, run_project_suite
from .lifecycle import commit, conflict_markers
from .test_update_move import extract_release, release

PARTS = ("audit", "sweeps", "slurm", "mlflow", "shards", "gpu_decode")
NEW_PARTS = ("shards", "gpu_decode")  # asked since v0.16.0: a project made before had them (migrations/add_parts.py)
# copier.yml's _exclude: false where copier update renders a project's older release, whose copier.yml defines
# neither name, so that render keeps the parts, as the release did.
IF_LEFT_OUT = "{{% if optional_parts is defined and '{part}' not in optional_parts %}}"
IF_LEFT_OUT_SINCE_0_16 = "{{% if parts_since_0_16 is defined and '{part}' not in optional_parts %}}"
PARTS_PY = REPO / "template" / "src" / "{{package_name}}" / "core" / "parts.py"
# What each part leaves out of a project named x_pkg: its modules, tests, configs and doc page.
LEFT_OUT = {
    "audit": ["src/x_pkg/commands/audit", "tests/test_audit.py", "tests/test_plain_copies.py", "docs/audit.md"],
    "sweeps": [
        "src/x_pkg/sweeps",
        "src/x_pkg/commands/sweep.py",
        "configs/sweep.yaml",
        "tests/test_sweep.py",
        "tests/test_sweep_gpu.py",
        "tests/test_sweep_torchrun.py",
        "tests/test_sweep_trials.py",
        "docs/sweeps.md",
    ],
    "slurm": ["slurm/train.sbatch", "src/x_pkg/training/slurm.py", "tests/test_slurm.py", "docs/slurm.md"],
    "mlflow": ["src/x_pkg/outputs/tracking.py", "tests/test_tracking.py", "docs/mlflow.md"],
    "shards": [
        "src/x_pkg/data/files/shards.py",
        "src/x_pkg/commands/pack_shards.py",
        "tests/test_shards.py",
        "tests/test_shards_decode.py",
        "tests/test_shards_duplicates.py",
        "tests/test_shards_lists.py",
        "docs/shards.md",
    ],
    "gpu_decode": [
        "src/x_pkg/data/loading/gpu_decode.py",
        "src/x_pkg/data/loading/decode_race.py",
        "tests/test_gpu_decode.py",
        "tests/test_gpu_decode_files.py",
        "tests/test_gpu_decode_gpu.py",
        "tests/test_gpu_decode_prefetch.py",
        "docs/gpu_decode.md",
    ],
}


def left_out_if(part: str) -> str:
    """The condition of copier.yml's _exclude lines for ``part``."""
    return (IF_LEFT_OUT_SINCE_0_16 if part in NEW_PARTS else IF_LEFT_OUT).format(part=part)


def copier_config() -> dict:
    return yaml.safe_load((REPO / "copier.yml").read_text())


def parts_table() -> dict[str, tuple[str, ...]]:
    """core/parts.py's PARTS, read without importing the template's package."""
    for node in ast.parse(PARTS_PY.read_text()).body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "PARTS":
            return ast.literal_eval(node.value)  # type: ignore[arg-type]
    raise AssertionError("core/parts.py has no PARTS table")


def test_the_question_core_parts_and_the_exclusions_name_the_same_parts() -> None:
    """One list of parts: the question's choices and default (every part: a project made or updated without the
    answer keeps them all), core/parts.py's table, and an _exclude line for each file a part owns."""
    question = copier_config()["optional_parts"]
    assert question["multiselect"] is True
    assert list(question["choices"].values()) == list(PARTS) == question["default"]
    assert list(parts_table()) == list(PARTS)
    exclusions = "\n".join(copier_config()["_exclude"])
    for part, owned in parts_table().items():
        for path in owned:
            line = f"{left_out_if(part)}src/{{{{ package_name }}}}/{path}{{% endif %}}"
            assert line in exclusions, f"copier.yml's _exclude lacks {line}"
    globs = {"sweeps": "test_sweep", "shards": "test_shards", "gpu_decode": "test_gpu_decode"}  # tests/<glob>*.py
    for part, paths in LEFT_OUT.items():  # every file listed here has its exclusion (a test_sweep* glob included)
        for path in paths:
            name = path.replace("src/x_pkg/", "src/{{ package_name }}/").removesuffix("/train.sbatch")
            if part in globs and name.startswith(f"tests/{globs[part]}"):
                name = f"tests/{globs[part]}*.py"
            assert f"{left_out_if(part)}{name}{{% endif %}}" in exclusions, path
    assert copier_config()["parts_since_0_16"] == {"type": "bool", "when": False, "default": True}


@pytest.fixture(scope="module")
def lean(template_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with every optional part off."""
    return generate(template_repo, tmp_path_factory.mktemp("lean") / "x", optional_parts=[])


def test_a_lean_project_leaves_every_part_out(lean: Path, project: Path) -> None:
    answers = yaml.safe_load((lean / ".copier-answers.yml").read_text())
    assert answers["optional_parts"] == []
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["optional_parts"] == list(PARTS)
    for part, paths in LEFT_OUT.items():
        for path in paths:
            assert (project / path).exists(), f"the default project lacks {path}"
            assert not (lean / path).exists(), f"{path} is in a project without the {part} part"
    assert "mlflow" not in (lean / "configs" / "default.yaml").read_text()
    readme = (lean / "README.md").read_text()
    assert "| `audit` |" not in readme and "| `sweep` |" not in readme and "docs/slurm.md" not in readme
    assert "| `pack-shards` |" not in readme and "docs/gpu_decode.md" not in readme
    assert "| `audit` |" in (project / "README.md").read_text()
    assert "| `pack-shards` |" in (project / "README.md").read_text()


def test_a_lean_project_says_in_one_line_how_to_add_a_part(lean: Path) -> None:
    """A part's command, its config key or value, or a data.root that pack-shards wrote, ends with the copier command
    that adds the part (no torch imported first, but for the data.root, found as training starts)."""
    packed = lean.parent / "packed"  # a folder pack-shards wrote, as its manifest says
    packed.mkdir(exist_ok=True)
    (packed / "shards.json").write_text("{}")
    refusals = [
        (["audit"], "the audit command is part of the audit part"),
        (["train", "--set", "train.mlflow=true"], "train.mlflow is part of the mlflow part"),
        (["pack-shards", "in", "out"], "the pack-shards command is part of the shards part"),
        (["train", "--set", "data.decoder=nvjpeg"], "data.decoder=nvjpeg is part of the gpu_decode part"),
        (["train", "--set", f"data.root={packed}"], f"{packed}, a folder pack-shards wrote, is part of the shards"),
    ]
    for args, said in refusals:
        result = run_in(lean, sys.executable, "-m", "x_pkg", *args)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert said in result.stderr and 'copier update --trust --defaults -d "optional_parts=[' in result.stderr


def line_count(project: Path) -> int:
    """Lines of Python in src/ and tests/: the code a team owns."""
    return sum(len(p.read_text().splitlines()) for folder in ("src", "tests") for p in (project / folder).rglob("*.py"))


def test_a_lean_project_holds_less_code_by_what_the_parts_own(lean: Path, project: Path) -> None:
    """The parts' files are all that goes: the kept code is the same in both projects (no branch on the answer)."""
    owned = sum(
        len(p.read_text().splitlines())
        for paths in LEFT_OUT.values()
        for path in paths
        if path.startswith(("src/", "tests/"))
        for p in ([project / path] if path.endswith(".py") else (project / path).rglob("*.py"))
    )
    assert line_count(lean) == line_count(project) - owned > 0
    for path in (lean / "src").rglob("*.py"):
        assert path.read_text() == (project / path.relative_to(lean)).read_text(), path


@pytest.mark.project_suite
def test_a_lean_project_passes_its_own_suite_and_lint(template_repo: Path, tmp_path: Path) -> None:
    """Every part off, the longest package name tests/test_lint.py uses: ruff clean, and its whole suite passes."""
    lean = generate(template_repo, tmp_path / "p", project_name="Texture Classifier",
                    package_name=longest_package_name(0), optional_parts=[])  # fmt: skip
    check(run_in(lean, str(BIN / "ruff"), "check", "--no-cache", "."))
    check(run_in(lean, str(BIN / "ruff"), "format", "--check", "--no-cache", "."))
    run_project_suite(lean)


def committed(project: Path) -> Path:
    git(project, "init", "--quiet", "--initial-branch=main")
    git(project, "add", "-A")
    git(project, "commit", "--quiet", "-m", "generated")
    return project


@pytest.mark.project_suite
def test_copier_update_adds_a_part_cleanly(template_repo: Path, tmp_path: Path) -> None:
    """The command a lean project names for a part, run as it says: the part's files, tests and config keys
    arrive with no conflict, and its tests pass with the project's shared ones."""
    lean = committed(generate(template_repo, tmp_path / "x", optional_parts=[]))
    refused = run_in(lean, sys.executable, "-m", "x_pkg", "train", "--set", "train.mlflow=true")
    command = shlex.split(refused.stderr.strip().split("made without: ", 1)[1])
    assert command[:2] == ["copier", "update"], refused.stderr
    check(copier_cli(*command[1:], cwd=lean))
    status = git(lean, "status", "--porcelain")
    assert not any(line[:2] in ("UU", "AA", "DU", "UD") for line in status.splitlines()), status
    assert not conflict_markers(lean)
    assert yaml.safe_load((lean / ".copier-answers.yml").read_text())["optional_parts"] == ["mlflow"]
    assert all((lean / path).exists() for path in LEFT_OUT["mlflow"])
    assert yaml.safe_load((lean / "configs" / "default.yaml").read_text())["train"]["mlflow"] is False
    for part in ("audit", "sweeps", "slurm", *NEW_PARTS):
        assert not any((lean / path).exists() for path in LEFT_OUT[part]), part
    tests = ["tests/test_tracking.py", "tests/test_config.py", "tests/test_docs.py", "tests/test_structure.py"]
    out = check(run_in(lean, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests))
    assert " passed" in out and " failed" not in out


@pytest.mark.project_suite
def test_updating_a_v0_14_0_project_keeps_every_part(tmp_path: Path) -> None:
    """A project from v0.14.0, the release before the question, takes its default, every part: the update to this
    checkout records the answer, deletes no file and adds no conflict."""
    template = tmp_path / "template"
    extract_release("0.14.0", template)
    git(template, "init", "--quiet", "--initial-branch=main")
    commit(template, "template v0.14.0", tag="v0.14.0")
    project = committed(generate(template, tmp_path / "x", vcs_ref="v0.14.0"))
    assert "optional_parts" not in (project / ".copier-answers.yml").read_text()
    release(template, REPO, "v0.15.0")
    check(copier_cli("update", "--trust", "--defaults", cwd=project))
    status = git(project, "status", "--porcelain").splitlines()
    assert not [line for line in status if line[:2].strip() in ("D", "UU", "AA", "DU", "UD")], status
    assert not conflict_markers(project)
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["optional_parts"] == list(PARTS)
    for paths in LEFT_OUT.values():
        assert all((project / path).exists() for path in paths), paths


@pytest.mark.project_suite
def test_updating_a_v0_15_1_project_keeps_shards_and_gpu_decode(tmp_path: Path) -> None:
    """A project from v0.15.1, whose answer names the parts then offered (here the audit alone): the update to this
    checkout keeps shards and GPU decode, which it had (migrations/add_parts.py adds them to its answer), keeps the
    parts it left out out, deletes no file and adds no conflict."""
    template = tmp_path / "template"
    extract_release("0.15.1", template)
    git(template, "init", "--quiet", "--initial-branch=main")
    commit(template, "template v0.15.1", tag="v0.15.1")
    project = committed(generate(template, tmp_path / "x", vcs_ref="v0.15.1", optional_parts=["audit"]))
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["optional_parts"] == ["audit"]
    release(template, REPO, "v0.16.0")
    out = check(copier_cli("update", "--trust", "--defaults", cwd=project))
    status = git(project, "status", "--porcelain").splitlines()
    assert not [line for line in status if line[:2].strip() in ("D", "UU", "AA", "DU", "UD")], status
    assert not conflict_markers(project)
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["optional_parts"] == ["audit", *NEW_PARTS]
    for part in ("audit", *NEW_PARTS):
        assert all((project / path).exists() for path in LEFT_OUT[part]), (part, out)
    for part in ("sweeps", "slurm", "mlflow"):
        assert not any((project / path).exists() for path in LEFT_OUT[part]), part
