"""What ``pip install`` of this repository puts in site-packages: ``torch_scaffold``, and no ``generator``.

The folder is ``generator/`` (the layout the README promises); a top-level
import package of that generic name would collide with others in
site-packages, so pyproject.toml maps it to ``torch_scaffold``, in wheels and
in editable installs alike.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import HANG_S, REPO


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files a build reads, copied, so that building leaves no build/ or egg-info in the checkout."""
    dest = tmp_path_factory.mktemp("source") / "torch-scaffold"
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "generator", dest / "generator", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def build(source: Path, hook: str, out: Path) -> Path:
    """PEP 517's build hook of the backend pyproject.toml names, in a fresh process."""
    code = f"import setuptools.build_meta as backend; print(backend.{hook}({str(out)!r}))"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=source, capture_output=True, text=True, check=True, timeout=HANG_S
    )
    return out / result.stdout.strip().splitlines()[-1]


def top_level(names: list[str]) -> set[str]:
    return {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}


def test_the_wheel_installs_torch_scaffold_and_no_generator(source_copy: Path, tmp_path: Path) -> None:
    wheel = build(source_copy, "build_wheel", tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert top_level(names) == {"torch_scaffold"}, sorted(names)
    assert {"torch_scaffold/cli.py", "torch_scaffold/lint/plugin.py"} <= set(names)
    assert "torch-scaffold = torch_scaffold.cli:main" in entry_points
    assert "TSC = torch_scaffold.lint.plugin:PracticesChecker" in entry_points


def test_the_editable_install_maps_torch_scaffold_to_the_generator_folder(source_copy: Path, tmp_path: Path) -> None:
    wheel = build(source_copy, "build_editable", tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        texts = {name: archive.read(name).decode() for name in archive.namelist() if name.endswith((".py", ".pth"))}
    assert not any(name.split("/")[0] == "generator" for name in texts)
    finder = next(text for name, text in texts.items() if name.endswith("_finder.py"))
    mapping = next(line for line in finder.splitlines() if line.startswith("MAPPING"))
    assert f"'torch_scaffold': {str(source_copy / 'generator')!r}" in mapping and "'generator'" not in mapping
    assert not any(str(source_copy) == line.strip() for text in texts.values() for line in text.splitlines())


def test_this_environment_imports_torch_scaffold_from_the_checkout() -> None:
    """``make env``'s editable install: the code runs from generator/, under its installed name only."""
    code = "import importlib.util as u, torch_scaffold as t; print(t.__file__, u.find_spec('generator'))"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=Path("/"), capture_output=True, text=True, check=True, timeout=HANG_S
    )
    path, spec = result.stdout.split()
    assert Path(path) == REPO / "generator" / "__init__.py" and spec == "None"
