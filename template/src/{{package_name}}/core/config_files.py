"""The config's files and ``--set`` overrides, read into plain dicts before ``config.py`` types and checks them.

YAML syntax errors and merge-conflict markers (left by ``copier update`` or git)
end in one line naming ``path:line:column``; later files and overrides change
only the keys they name; keys that moved to another section are read at their
new place from a checkpoint's config.
"""

from __future__ import annotations

import copy
import difflib
import re
from pathlib import Path
from typing import Any

import yaml

from .errors import UserError

# Keys that moved to another section. A checkpoint written before the move is read with the key at its
# new place; a config file or --set that names the old key is refused with the new name (copier update
# rewrites the project's configs/*.yaml).
MOVED = {"train.mixup_alpha": "data.mixup_alpha", "train.cutmix_alpha": "data.cutmix_alpha"}


def upgrade(raw: dict[str, Any]) -> dict[str, Any]:
    """Move keys named in ``MOVED`` to their new sections (a value already there wins)."""
    for old, new in MOVED.items():
        old_section, old_key = old.split(".")
        new_section, new_key = new.split(".")
        section = raw.get(old_section)
        if isinstance(section, dict) and old_key in section:
            value = section.pop(old_key)
            raw.setdefault(new_section, {}).setdefault(new_key, value)
    return raw


def unknown_key(key: str, names: list[str], prefix: str) -> str:
    """The problem with a key its section lacks: where it moved, else the nearest valid key."""
    if key in MOVED:
        new = MOVED[key]
        return (
            f"config key {key} moved to {new}: write {new} instead "
            "(copier update rewrites the project's configs/*.yaml)"
        )
    close = difflib.get_close_matches(key.rpartition(".")[2], names, n=1)
    hint = f"did you mean {prefix}{close[0]}?" if close else f"valid keys: {', '.join(names)}"
    return f"unknown config key {key}: {hint}"


CONFLICT_MARKER = re.compile(r"^(<<<<<<<|=======|>>>>>>>)( |$)", re.MULTILINE)


def read_yaml(path: Path, what: str = "config file") -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"{what} {path} not found: pass --config with an existing YAML file")
    text = path.read_text()
    return yaml_mapping(text, path, what)


def yaml_mapping(text: str, path: Path, what: str = "config file") -> dict[str, Any]:
    """Parse YAML into a dict; a syntax error names ``path:line:column`` and the problem."""
    marker = CONFLICT_MARKER.search(text)
    if marker:
        # Left by a merge (copier update, git): YAML would only say "could not find expected ':'".
        line = text.count("\n", 0, marker.start()) + 1
        raise UserError(
            f"{what} {path} has unresolved merge conflict markers at line {line}: "
            "keep one side of each conflict and delete the <<<<<<<, ======= and >>>>>>> lines"
        )
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{what} {yaml_problem(path, exc)}: fix its syntax") from None
    if not isinstance(raw, dict):
        raise UserError(f"{what} {path} must hold a mapping of sections (data:, model:, ...)")
    return raw


def yaml_problem(path: Path, exc: yaml.YAMLError) -> str:
    """``path:line:column is not valid YAML (problem)``, in one line, from PyYAML's marks (1-based here)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or exc.__class__.__name__
    context = getattr(exc, "context", None)
    detail = f"{context}, {problem}" if context else problem
    return f"{where} is not valid YAML ({' '.join(detail.split())})"


def merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    """Key by key: a later file changes the keys it names and keeps the others."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def parse_override(item: str) -> tuple[str, Any]:
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set {item!r} is malformed: use KEY=VALUE, e.g. --set optim.lr=0.01")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    return key.strip(), value


def set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    node = raw
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise UserError(f"--set {key}: {part!r} is a value, not a section")
        node = child
    node[leaf] = value
