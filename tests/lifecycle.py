"""Two releases of the template, and a project edited the way users edit theirs.

``make_versioned_template`` builds a template repository tagged ``v1.0.0`` (this
checkout's template plus one module that v2 drops) and ``v2.0.0``, changed as a
maintainer would: edited files, a new module with its test, a removed module,
a new question with a default, a renamed config key with the entry in
``migrations/renames.yaml`` that renames it in existing projects, and new
versions of the files users own (``models/extensions.py``, an example config) that
must not replace theirs.
``make_user_project`` generates from v1.0.0, commits, makes a user's edits and
commits again, as a project is before its first ``copier update``.
"""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import generate, git, make_template_repo

V1, V2 = "v1.0.0", "v2.0.0"
PACKAGE = "src/{{package_name}}"

LEGACY_MODULE = '"""Helpers that template v2.0.0 no longer ships."""\n\nLEGACY = True\n'
CALLBACKS_MODULE = '''"""Epoch summaries (new in template v2.0.0)."""


def format_epoch(epoch: int, val_acc: float) -> str:
    return f"epoch {epoch}: val_acc {100 * val_acc:.1f}%"
'''
CALLBACKS_TEST = """from {{ package_name }}.callbacks import format_epoch


def test_format_epoch() -> None:
    assert format_epoch(3, 0.5) == "epoch 3: val_acc 50.0%"
"""
TEMPLATE_FINETUNE = "# Fine-tuning example (template v2.0.0)\nmodel:\n  freeze_backbone: true\n"
V2_README_LINE = "This project follows the torch-scaffold v2 layout."
V2_QUESTION = """
license:
  type: str
  help: License expression for pyproject.toml
  default: MIT
"""
V2_RENAME = "v2.0.0:\n  - [train.log_every, train.log_interval]\n"  # for migrations/renames.yaml

USER_MODULE = """\"\"\"Our own metric, added after generation.\"\"\"


def balanced(correct: int, total: int) -> float:
    return correct / max(total, 1)
"""
USER_README = "\n## Our lab notes\n\nWe train on the greenhouse photos in data/leaves.\n"
USER_DEPENDENCY = '    "scikit-learn>=1.3",\n'
USER_EXTENSION = """

def lab_transforms() -> list[v2.Transform]:
    \"\"\"Our photos come rotated.\"\"\"
    return [v2.RandomRotation(10)]
"""
USER_FINETUNE = "# our fine-tuning run\ntrain:\n  epochs: 3\n  log_every: 5\n"


def substitute(path: Path, pattern: str, replacement: str, count: int = 1) -> None:
    """A regex edit that must match exactly ``count`` times, so a changed template fails loudly here."""
    text, found = re.subn(pattern, replacement, path.read_text(), flags=re.MULTILINE)
    assert found == count, f"{pattern!r} matched {found} times in {path}, expected {count}"
    path.write_text(text)


def commit(repo: Path, message: str, tag: str | None = None) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", message)
    if tag:
        git(repo, "tag", tag)


def add_question(copier_yml: Path, question: str) -> None:
    """A question goes before ``_migrations``, the file's last key."""
    head, sep, tail = copier_yml.read_text().partition("\n_migrations:\n")
    assert sep, f"{copier_yml} has no _migrations list at its end"
    copier_yml.write_text(head + "\n" + question + sep + tail)


def add_rename(repo: Path, entry: str) -> None:
    """A version's renamed config keys, which copier.yml's _migrations apply to the projects that update across it."""
    renames = repo / "migrations" / "renames.yaml"
    renames.write_text(renames.read_text() + entry)


def make_versioned_template(dest: Path) -> Path:
    repo = make_template_repo(dest, tag="v0.0.0")
    template = repo / "template"
    (template / PACKAGE / "legacy.py").write_text(LEGACY_MODULE)
    commit(repo, "v1.0.0", tag=V1)

    (template / PACKAGE / "legacy.py").unlink()  # a removed file
    (template / PACKAGE / "callbacks.py").write_text(CALLBACKS_MODULE)  # a new file, with its test
    (template / "tests" / "test_callbacks.py.jinja").write_text(CALLBACKS_TEST)
    substitute(template / "configs" / "default.yaml.jinja", r"^(  batch_size:) 32$", r"\1 64")  # edited files
    substitute(template / "README.md.jinja", r"^(\{\{ description \}\}\n)", rf"\1\n{V2_README_LINE}\n")
    substitute(template / "pyproject.toml.jinja", r'^(readme = "README.md"\n)', r"\1license = {{ license | tojson }}\n")
    add_question(repo / "copier.yml", V2_QUESTION)  # a new question
    add_rename(repo, V2_RENAME)
    for path in template.rglob("*"):  # a renamed config key, everywhere the template uses it
        if path.is_file() and "log_every" in path.read_text():
            substitute(path, r"\blog_every\b", "log_interval", count=path.read_text().count("log_every"))
    with (template / PACKAGE / "models" / "extensions.py").open("a") as extensions:  # files the user owns
        extensions.write('\n\nTEMPLATE_V2 = "the template changed this file"\n')
    (template / "configs" / "finetune.yaml").write_text(TEMPLATE_FINETUNE)
    commit(repo, "v2.0.0", tag=V2)
    return repo


def make_user_project(template: Path, dest: Path, package: str = "x_pkg") -> Path:
    """A v1.0.0 project under git, then the edits a user makes, committed."""
    generate(template, dest, vcs_ref=V1, package_name=package)
    git(dest, "init", "--quiet", "--initial-branch=main")
    commit(dest, "Generated from torch-scaffold v1.0.0")
    (dest / "src" / package / "my_metrics.py").write_text(USER_MODULE)
    substitute(dest / "configs" / "default.yaml", r"^(  epochs:) 15$", r"\1 40")
    with (dest / "README.md").open("a") as readme:
        readme.write(USER_README)
    substitute(dest / "pyproject.toml", r'^(    "pyyaml>=6",\n)', rf"\1{USER_DEPENDENCY}")
    with (dest / "src" / package / "models" / "extensions.py").open("a") as extensions:
        extensions.write(USER_EXTENSION)
    (dest / "configs" / "finetune.yaml").write_text(USER_FINETUNE)
    commit(dest, "Our changes")
    return dest


def conflict_markers(project: Path) -> list[str]:
    """Files with copier's inline conflict markers or leftover .rej files."""
    found = []
    for path in project.rglob("*"):
        if ".git" in path.parts or not path.is_file():
            continue
        if path.suffix == ".rej" or re.search(r"^(<<<<<<<|>>>>>>>) ", path.read_text(errors="replace"), re.M):
            found.append(str(path.relative_to(project)))
    return found
