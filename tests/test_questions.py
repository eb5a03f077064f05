"""copier.yml: answers are validated by copier, and derived defaults are sensible."""

import re
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, generate


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
    import tomllib

    assert tomllib.loads(pyproject)["project"]["description"] == 'Quotes " and \\ survive'


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
