"""copier.yml: answers are validated by copier, and derived defaults are sensible."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml

from .conftest import HANG_S, REPO, check, copier_cli, generate, run_in


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ({"package_name": "class"}, "would shadow a Python keyword"),
        ({"package_name": "torch"}, "would shadow"),
        ({"package_name": "torchvision"}, "would shadow"),
        ({"package_name": "os"}, "would shadow"),
        ({"package_name": "json"}, "would shadow"),
        ({"package_name": "9lives"}, "must be a lowercase Python identifier"),
        ({"package_name": "my-pkg"}, "must be a lowercase Python identifier"),
        ({"package_name": "a" * 41}, "has 41 characters, at most 40 are allowed"),
        ({"project_name": "  "}, "must not be empty"),
        ({"project_slug": "My Project"}, "project_slug must start with a letter"),
        ({"model": "resnet19"}, "torchvision classifier"),
        ({"model": "timm/Res Net"}, "is not a timm model name: write timm/<architecture>"),
        ({"model": "timm/"}, "is not a timm model name"),
        ({"image_size": 8}, "between 16 and 1024"),
        ({"optimizer": "lbfgs"}, "optimizer"),
    ],
)
def test_invalid_answers_are_refused(template_repo: Path, tmp_path: Path, answers: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate(template_repo, tmp_path / "bad", **answers)
    assert not (tmp_path / "bad" / "pyproject.toml").exists()


def test_slug_and_package_derive_from_the_name(template_repo: Path, tmp_path: Path) -> None:
    dest = tmp_path / "p"
    from copier import run_copy

    run_copy(str(template_repo), dest, data={"project_name": "My Cool  Project!"}, defaults=True, quiet=True)
    answers = yaml.safe_load((dest / ".copier-answers.yml").read_text())
    assert answers["project_slug"] == "my-cool-project"
    assert answers["package_name"] == "my_cool_project"
    assert (dest / "src" / "my_cool_project" / "cli.py").is_file()


# Names whose derived slug and package name once failed their own validators under --defaults (a copier traceback),
# with what they derive now: cut after the last whole word within 40 characters, "project" before a digit or an
# all non-ASCII name, "_project" after a reserved package name.
ODD_NAMES = [
    ("Hyperspectral Satellite Imagery Land Cover Classifier", "hyperspectral-satellite-imagery-land"),
    ("Pneumonia Detection From Chest X-Ray Images Using Deep Learning", "pneumonia-detection-from-chest-x-ray"),
    ("Supercalifragilisticexpialidocious" * 2, "supercalifragilisticexpialidocioussuperc"),
    ("3D Scanner", "project-3d-scanner"),
    ("2024", "project-2024"),
    ("日本語の画像分類", "project"),
    ("¿Qué? — Ça va!", "qu-a-va"),
    ("Test", "test"),
    ("Class", "class"),
]


@pytest.mark.parametrize(("name", "slug"), ODD_NAMES, ids=[slug for _, slug in ODD_NAMES])
def test_long_and_odd_names_derive_names_that_pass_their_validators(
    template_repo: Path, tmp_path: Path, name: str, slug: str
) -> None:
    """The issue's command line: only the name answered, every other answer its default, copier's own validation."""
    dest = tmp_path / "p"
    result = copier_cli("copy", "--trust", "--defaults", "-d", f"project_name={name}", str(template_repo), str(dest))
    assert result.returncode == 0, result.stderr[-2000:]
    answers = yaml.safe_load((dest / ".copier-answers.yml").read_text())
    assert answers["project_name"] == name
    assert answers["project_slug"] == slug
    package = answers["package_name"]
    assert package == (slug.replace("-", "_") + ("_project" if slug in ("test", "class") else ""))
    assert re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", package) and len(package) <= 40, package
    assert (dest / "src" / package / "__init__.py").is_file()
    assert "reserved_package_names" not in answers  # computed, not an answer


def test_a_long_answered_slug_gives_a_package_name_that_fits(template_repo: Path, tmp_path: Path) -> None:
    slug = "hyperspectral-satellite-imagery-land-cover-classifier"  # a valid slug: it has no length limit
    dest = generate(template_repo, tmp_path / "p", project_name="Land Cover", project_slug=slug)
    answers = yaml.safe_load((dest / ".copier-answers.yml").read_text())
    assert (answers["project_slug"], answers["package_name"]) == (slug, "hyperspectral_satellite_imagery_land")


def test_a_timm_model_answer_becomes_the_default_and_its_extra_is_in_dev(template_repo: Path, tmp_path: Path) -> None:
    """timm/<name> passes copier's validator by its form (its Jinja cannot import timm); the dev extra brings timm."""
    dest = generate(template_repo, tmp_path / "p", model="timm/convnext_tiny.fb_in22k_ft_in1k")
    config = yaml.safe_load((dest / "configs" / "default.yaml").read_text())
    assert config["model"]["name"] == "timm/convnext_tiny.fb_in22k_ft_in1k"
    pyproject = (dest / "pyproject.toml").read_text()
    extras = tomllib.loads(pyproject)["project"]["optional-dependencies"]
    assert extras["timm"][0].startswith("timm>=")
    assert "timm" in extras["dev"][0].split("[", 1)[1].rstrip("]").split(",")  # the dev extra pulls the timm extra in


def test_answers_become_config_defaults(template_repo: Path, tmp_path: Path) -> None:
    dest = generate(
        template_repo,
        tmp_path / "p",
        model="resnet18",
        image_size=96,
        optimizer="adamw",
        scheduler="step",
        precision="fp32",
        python_version="3.12",
        description='Quotes " and \\ survive',
    )
    config = yaml.safe_load((dest / "configs" / "default.yaml").read_text())
    assert config["model"]["name"] == "resnet18"
    assert config["data"]["image_size"] == 96
    assert config["optim"]["name"] == "adamw"
    assert config["optim"]["lr"] == 0.002
    assert config["optim"]["scheduler"] == "step"
    assert config["train"]["precision"] == "fp32"
    pyproject = (dest / "pyproject.toml").read_text()
    assert 'requires-python = ">=3.12"' in pyproject
    assert 'target-version = "py312"' in pyproject

    assert tomllib.loads(pyproject)["project"]["description"] == 'Quotes " and \\ survive'


@pytest.mark.parametrize("newer", [True, False], ids=["older-python", "new-enough-python"])
def test_the_install_section_checks_the_python_before_pip(template_repo: Path, tmp_path: Path, newer: bool) -> None:
    """pip checks requires-python only after resolving (and downloading) dependencies: the README's check comes first.

    Its line, run by this Python, must stop with the minimum named where the answer is newer, and pass where not.
    """
    choices = yaml.safe_load((REPO / "copier.yml").read_text())["python_version"]["choices"]
    here = sys.version_info[:2]
    picked = [v for v in choices if (tuple(map(int, v.split("."))) > here) == newer]
    if not picked:
        pytest.skip(f"no python_version choice is {'newer' if newer else 'older'} than this Python")
    version = picked[0]
    dest = generate(template_repo, tmp_path / "p", python_version=version)
    install = (dest / "README.md").read_text().split("\n### 1. Install\n", 1)[1].split("\n### ", 1)[0]
    lines = install.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    check = next(line for line in lines if line.startswith("python -c "))
    assert lines.index(check) < next(i for i, line in enumerate(lines) if "pip install" in line)
    assert f"Python {version} or later" in install
    script = check.removeprefix("python -c ").strip('"')
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_S)
    assert (result.returncode, result.stderr.strip()) == (
        (1, f"this project needs Python {version} or later") if newer else (0, "")
    )

    assert tomllib.loads((dest / "pyproject.toml").read_text())["project"]["requires-python"] == f">={version}"


# The sweep space, the lr comment and the README's recipe section, for the defaults and for other answers.
SWEEP_CASES = {
    "defaults": ({}, {"model.blocks_per_stage"}, "SGD with warmup and cosine decay"),
    "resnet18-adamw-step": (
        {"model": "resnet18", "optimizer": "adamw", "scheduler": "step"},
        {"model.dropout", "optim.step_epochs"},
        "AdamW with warmup and step decay",
    ),
}


@pytest.mark.parametrize("case", SWEEP_CASES)
def test_the_sweep_space_comments_and_recipe_follow_the_answers(template_repo: Path, tmp_path: Path, case: str) -> None:
    """An AdamW project searched SGD's lr range (0.01-0.5) and simple_cnn's depth, and every trial ended at chance."""
    answers, own_keys, recipe = SWEEP_CASES[case]
    dest = generate(template_repo, tmp_path / "p", **answers)
    config = yaml.safe_load((dest / "configs" / "default.yaml").read_text())
    params = yaml.safe_load((dest / "configs" / "sweep.yaml").read_text())["params"]
    shared = {"optim.lr", "optim.weight_decay", "optim.label_smoothing", "data.batch_size"}
    assert set(params) == shared | own_keys
    for key, spec in params.items():  # every range holds the project's default, so trial 0's config is in it
        section, leaf = key.split(".")
        value = config[section][leaf]
        assert value in spec["choices"] if spec["type"] == "categorical" else spec["low"] <= value <= spec["high"], key
    lr = params["optim.lr"]
    sgd = config["optim"]["name"] == "sgd"
    assert lr["log"] and (lr["high"] / lr["low"] <= 20) and (lr["high"] <= 0.2 if sgd else lr["high"] <= 0.02), lr
    # the project's own code accepts the space against its own config (every bound a valid value)
    load = (
        "import dataclasses; from x_pkg.core.config import load_config; from x_pkg.sweeps.space import load_space; "
        "s = load_space('configs/sweep.yaml', dataclasses.asdict(load_config('configs/default.yaml'))); "
        "print(sorted(s.params))"
    )
    assert check(run_in(dest, sys.executable, "-c", load)).strip() == str(sorted(params))
    lr_line = next(line for line in (dest / "configs" / "default.yaml").read_text().splitlines() if "  lr:" in line)
    assert ('"Training recipe": measured' in lr_line) == sgd and ("Small data" in lr_line) != sgd, lr_line
    readme = (dest / "docs" / "training.md").read_text().split("## Training recipe", 1)[1].split("\n## ", 1)[0]
    assert f"fast recipe: random resized crop and flip,\n{recipe}." in readme
    assert ("were not\nmeasured here" in readme) != (case == "defaults")


def validator_model_names() -> list[str]:
    """The names spelled out in copier.yml's ``model`` validator (``{% set known = "..." %}``)."""
    validator = yaml.safe_load((REPO / "copier.yml").read_text())["model"]["validator"]
    found = re.search(r'set known = "([^"]*)"', validator)
    assert found, 'copier.yml\'s model validator no longer spells its names as {% set known = "..." %}'
    return found.group(1).split()


def test_the_model_list_in_copier_yml_is_torchvisions_classifiers() -> None:
    """The validator cannot call torchvision, so it spells the names out; they must not go stale."""
    import torchvision.models

    names = validator_model_names()
    classifiers = set(torchvision.models.list_models(module=torchvision.models))  # not detection, video, ...
    assert names == sorted(names), "keep the list sorted, so that a diff shows what changed"
    assert not set(names) - classifiers, f"not torchvision classifiers: {sorted(set(names) - classifiers)}"
    assert not classifiers - set(names), f"missing from copier.yml: {sorted(classifiers - set(names))}"
