"""A generated project is complete, rendered, lint-clean, installable, and passes its own tests."""

import ast
import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from .conftest import BIN, PROJECT_TEST_COMMAND, REPO, check, generate, run_in, run_project_suite

MODULES = """__init__ __main__ cli models/extensions training/slurm
core/config core/errors core/distributed data/folders
data/files/sample_data data/batches models/classifier training/optim training/engine training/trainer training/inference
core/checkpoint training/run_state outputs/reporting outputs/tracking outputs/writers commands/sweep sweeps/__init__
sweeps/space sweeps/study sweeps/report"""
EXPECTED = [
    ".copier-answers.yml",
    ".gitignore",
    "README.md",
    "docs/config.md",
    "pyproject.toml",
    "configs/default.yaml",
    "configs/sweep.yaml",
    "slurm/train.sbatch",
    "tests/conftest.py",
    *(f"src/x_pkg/{name}.py" for name in MODULES.split()),
]


def test_cli_copy_makes_every_file(project: Path) -> None:
    for name in EXPECTED:
        assert (project / name).is_file(), name
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert answers["_commit"] == "v1"
    assert answers["package_name"] == "x_pkg"
    assert answers["_src_path"]


RUN_OUTPUTS = {"data", "runs", "__pycache__", ".pytest_cache", ".ruff_cache"}  # made by other tests, git-ignored


def test_nothing_is_left_unrendered(project: Path) -> None:
    """Every file copier wrote; the shared project also holds what other tests trained in it."""
    for path in project.rglob("*"):
        if path.is_file() and not RUN_OUTPUTS & set(path.relative_to(project).parts):
            assert not path.name.endswith(".jinja"), path
            text = path.read_text()
            assert "{{" not in text and "{%" not in text, path


def test_api_copy_matches_cli_copy(template_repo: Path, project: Path, tmp_path: Path) -> None:
    dest = generate(template_repo, tmp_path / "x")
    for name in EXPECTED:
        if name != ".copier-answers.yml":
            assert (dest / name).read_text() == (project / name).read_text(), name


def test_readme_layout_is_the_generated_tree(project: Path) -> None:
    """The generated README's "Layout" lists exactly the package's files, parsed by the project's own test."""
    spec = importlib.util.spec_from_file_location("layout_check", project / "tests" / "test_structure.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    listed, on_disk = module.layout_files((project / "README.md").read_text()), module.package_files()
    assert listed == on_disk, f"README only: {sorted(listed - on_disk)}; on disk only: {sorted(on_disk - listed)}"


def test_ruff_is_clean(project: Path) -> None:
    check(run_in(project, str(BIN / "ruff"), "check", "--no-cache", "."))
    check(run_in(project, str(BIN / "ruff"), "format", "--check", "--no-cache", "."))


@pytest.mark.project_suite
def test_project_tests_pass(project: Path) -> None:
    # The project's whole suite by the README's command, a pytest-xdist worker per core (its process-level tests:
    # torchrun, signals, sweeps mostly wait on children). Its own target, make test-project (which .ci/run and CI
    # run beside make test): 375 to 395 of make test's 840 CPU-seconds, which would take make test past 10 minutes
    # on the slower 2-core CPUs here (benchmarks/README.md, "For maintainers: test-suite timing").
    run_project_suite(project)


def test_readme_and_ci_run_the_tests_by_one_command(project: Path) -> None:
    """The README's "Tests" command is the CI workflow's Test step, and the one the whole-suite tests here run."""
    readme = (project / "README.md").read_text()
    assert f"## Tests\n\n```bash\n{PROJECT_TEST_COMMAND}\n```" in readme
    workflow = yaml.safe_load((project / ".github" / "workflows" / "ci.yml").read_text())
    assert {"name": "Test", "run": PROJECT_TEST_COMMAND} in workflow["jobs"]["test"]["steps"]
    dev = next(line for line in (project / "pyproject.toml").read_text().splitlines() if line.startswith("dev = "))
    assert '"pytest-xdist>=' in dev  # what -n needs, in the extra that README and CI install


def test_the_project_suite_runs_with_everything_its_readme_installs(project: Path) -> None:
    """``make test`` runs the generated suite in this environment: it must hold every package the generated ``dev``
    extra brings (the README's install command), extras included. A package missing here (TorchCodec was) means the
    template's tests never run the code path users' installs take."""
    section = (project / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
    # One extra a line, `name = [...]  # why` (tomllib is Python 3.11+; this repository supports 3.10).
    extras = {name: ast.literal_eval(value) for name, value in re.findall(r"^(\w+) = (\[.*\])", section, re.M)}
    wanted, seen = list(extras["dev"]), set()
    missing = []
    while wanted:
        requirement = Requirement(wanted.pop())
        if requirement.name == "x":  # the project itself, with extras: what they bring is wanted too
            wanted += [line for extra in requirement.extras - seen for line in extras[extra]]
            seen |= requirement.extras
            continue
        try:
            importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(requirement.name)
    assert seen >= {"decode"}, seen  # the extras were followed
    assert not missing, f"add {missing} to the dev extra of this repository's pyproject.toml (and constraints.txt)"


def test_project_installs_with_its_console_script(project: Path, tmp_path: Path) -> None:
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    check(run_in(project, *pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), "."))
    (wheel,) = (tmp_path / "dist").glob("x-0.1.0-*.whl")
    site = tmp_path / "site"
    check(run_in(project, *pip, "install", "--no-deps", "--target", str(site), str(wheel)))
    env_run = subprocess.run(
        [str(site / "bin" / "x"), "--help"],
        env={"PYTHONPATH": str(site), "PATH": str(BIN)},
        capture_output=True,
        text=True,
    )
    assert env_run.returncode == 0, env_run.stderr
    assert "sample-data" in env_run.stdout
    # The answers' defaults are package data: the installed package reads them, not the checkout's file.
    code = "import x_pkg.core.config as c; print(c.__file__, c.Config().optim.name)"
    defaults = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(site)}, cwd=tmp_path,
                              capture_output=True, text=True)  # fmt: skip
    assert defaults.returncode == 0, defaults.stderr
    assert defaults.stdout.split() == [str(site / "x_pkg" / "core" / "config.py"), "sgd"]


def test_the_package_shows_its_architecture_in_at_most_eight_names() -> None:
    """``ls src/<package>`` is the map (DESIGN.md): the folders and cli.py, at most 8 names besides __init__.py and
    __main__.py; a new module goes into the folder of its job. Moving one there is a release of its own, with its
    ``_migrations`` (migrations/move_modules.py)."""
    package = REPO / "template" / "src" / "{{package_name}}"
    names = sorted(p.name.removesuffix(".jinja") for p in package.iterdir() if p.name != "__pycache__")
    beside = [name for name in names if name not in ("__init__.py", "__main__.py")]
    assert len(beside) <= 8, f"{len(beside)} names in src/<package>: {beside}"


def test_data_shows_its_rooms_in_at_most_six_names() -> None:
    """``ls src/<package>/data`` is the map of the data's code (issue 58): its three rooms, the two files that
    assemble them and the front door; a new module goes into the room of its job."""
    data = REPO / "template" / "src" / "{{package_name}}" / "data"
    names = sorted(p.name for p in data.iterdir() if p.name != "__pycache__")
    assert len(names) <= 6, f"{len(names)} names in data/: {names}"
    assert {"files", "decoding", "loading", "__init__.py"} <= set(names)


def test_the_generated_conftest_names_every_template_test_module() -> None:
    """Its template_hooks fixture empties your hooks for the template's own tests alone: the list is the folder's."""
    conftest = (REPO / "template" / "tests" / "conftest.py.jinja").read_text()
    listed = set(re.findall(r'^        "(test_\w+)",$', conftest.split("TEMPLATE_TESTS = ", 1)[1], re.MULTILINE))
    on_disk = {p.name.removesuffix(".py.jinja") for p in (REPO / "template" / "tests").glob("test_*.py.jinja")}
    assert listed == on_disk


def test_template_code_is_plain_python() -> None:
    """Package files carry no Jinja, so they lint in place and merge cleanly on update.

    The one exception is data, not code: ``core/project_defaults.yaml``, the copier answers' defaults
    that config.py reads, rendered from the same answers as ``configs/default.yaml``.
    """
    package = REPO / "template" / "src" / "{{package_name}}"
    files = sorted(
        p
        for p in package.rglob("*")
        if "__pycache__" not in p.parts and not p.is_dir() and p.name != "project_defaults.yaml.jinja"
    )
    assert files and any(p.parent != package for p in files)  # subpackages (sweeps/) are checked too
    assert (package / "core" / "project_defaults.yaml.jinja").is_file()  # the one data file: the answers' defaults
    for path in files:
        assert path.suffix == ".py", path
        assert "{{" not in path.read_text() and "{%" not in path.read_text(), path
