"""A config key's rules, kept with its dataclass field, and the generic checks that apply them.

``config.py`` declares each key once, as a field made by ``option`` (or a list
field with ``rules``): its type, default, allowed strings and numeric bounds,
and a line of help. ``coerce`` turns what YAML or ``--set`` gave into the
field's type (``build_dataclass``: a whole section), and ``check_value`` says in words what breaks a key's rules, so
that every error is one line naming the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import field
from typing import Any

from .config_files import unknown_key
from .errors import UserError
from .parts import part_off, present


def rules(help: str, *, choices: tuple[str, ...] = (), bounds: str = "", nonempty: bool = False) -> dict[str, Any]:
    """A key's help and checks, kept in its dataclass field's metadata for ``validate`` and the docs.

    ``choices``: the strings it may take. ``bounds``: an interval such as ``"(0, 1]"`` or
    ``"[0, inf)"`` that each number (each item, for a list) must lie in. ``nonempty``: a list
    that needs at least one item.
    """
    return {"help": help, "choices": choices, "bounds": bounds, "nonempty": nonempty}


def option(
    default: Any,
    help: str,
    *,
    choices: tuple[str, ...] = (),
    bounds: str = "",
    part: str = "",
    choice_parts: dict[str, str] | None = None,
) -> Any:
    """One config key with a fixed default (lists use ``field(default_factory=...)`` with ``rules``).

    ``part``: the optional part the key belongs to (core/parts.py). Without the part the key keeps its default, is
    not listed (``options``) and may not be set: one line says how to add the part. ``choice_parts``: choices that
    belong to a part (``{"nvjpeg": "gpu_decode"}``): without it that value is refused the same way.
    """
    metadata = {**rules(help, choices=choices, bounds=bounds), "part": part, "choice_parts": choice_parts or {}}
    return field(default=default, metadata=metadata)


def absent(item: dataclasses.Field) -> bool:
    """Whether the key belongs to an optional part this project was made without."""
    return bool(item.metadata.get("part")) and not present(item.metadata["part"])


def options(config: Any, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """Every key of a config dataclass as (dotted name, its field, its value), in file order: for checks and docs."""
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        if absent(item):
            continue  # a key of a part the project lacks: not one of its keys
        if dataclasses.is_dataclass(value):
            yield from options(value, f"{prefix}{item.name}.")
        else:
            yield f"{prefix}{item.name}", item, value


def without_absent_keys(values: dict[str, Any], config: Any) -> dict[str, Any]:
    """``values`` (the config as plain types) without the section keys of optional parts the project lacks."""
    for section in dataclasses.fields(config):
        if dataclasses.is_dataclass(getattr(config, section.name)):
            for item in dataclasses.fields(getattr(config, section.name)):
                if absent(item):
                    del values[section.name][item.name]
    return values


def coerce(value: Any, kind: Any, key: str) -> Any:
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) == 1:
            return coerce(value, kinds[0], key)
        # A bool is an int to Python: it matches only a bool type (``freeze_backbone: bool | str`` takes true).
        matching = [kind for kind in kinds if isinstance(value, kind) and (kind is bool or not isinstance(value, bool))]
        if not matching and float in kinds and isinstance(value, int) and not isinstance(value, bool):
            return float(value)  # ``backbone_lr_scale: float | str`` takes 1 as 1.0
        if not matching:
            names = " or ".join(kind.__name__ for kind in kinds)
            raise UserError(f"{key} must be {names}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list | tuple):
            raise UserError(f"{key} must be a list, got {value!r}: write e.g. {key}=[1,2,3]")
        return [coerce(v, args[0], key) for v in value]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is float and isinstance(value, str):
        try:
            return float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string
        except ValueError:
            pass
    if kind is str and isinstance(value, bool):
        return "true" if value else "false"  # YAML reads an unquoted true/false as a bool
    if kind is str and isinstance(value, int | float):
        return str(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UserError(f"{key} must be {kind.__name__}, got {value!r}")
    return value


def check_value(value: Any, rules: typing.Mapping[str, Any]) -> str:
    """What is wrong with ``value`` under a key's rules, as the end of a sentence; "" when nothing."""
    choices, bounds = rules.get("choices", ()), rules.get("bounds", "")
    allowed = ", ".join(choices) if not bounds else f"{' or '.join(choices)} or a number {describe(bounds)}"
    if isinstance(value, str) and choices:
        return "" if value in choices else f"is {value!r}: choose one of {allowed}"
    if isinstance(value, list):
        if rules.get("nonempty") and not value:
            return "must not be an empty list"
        bad = [item for item in value if bounds and not within(item, bounds)]
        return f"items must each be {describe(bounds)}, got {value}" if bad else ""
    if bounds and isinstance(value, int | float) and not isinstance(value, bool) and not within(value, bounds):
        if choices:
            return f"must be {allowed}, got {value!r}"
        if bounds == "[0, inf)":
            return f"must not be negative, got {value}"
        return f"must be {describe(bounds)}, got {value}"
    return ""


def value_problems(config: Any) -> list[str]:
    """Each key of a config dataclass against its own rules (its field's choices and bounds), as sentences."""
    problems = []
    for key, item, value in options(config):
        part = item.metadata.get("choice_parts", {}).get(value) if isinstance(value, str) else None
        if part and not present(part):  # a choice of an optional part this project was made without
            problems.append(str(part_off(part, f"{key}={value}")))
        elif problem := check_value(value, item.metadata):
            problems.append(f"{key} {problem}")
    return problems


def config_error(problems: list[str]) -> UserError:
    """One line for one problem or several: a file with two typos names both, so one edit fixes the file."""
    if len(problems) == 1:
        return UserError(problems[0])
    return UserError(f"{len(problems)} config problems: " + "; ".join(problems))


INTERVAL = re.compile(r"^([\[(])\s*([^,]+?)\s*,\s*([^,]+?)\s*([\])])$")


def parse_bounds(bounds: str) -> tuple[float, float, bool, bool]:
    """``"(0, 1]"`` -> (0.0, 1.0, low included?, high included?)."""
    match = INTERVAL.match(bounds)
    if not match:
        raise ValueError(f"bounds {bounds!r} is not an interval like (0, 1] or [0, inf)")
    left, low, high, right = match.groups()
    return float(low), float(high), left == "[", right == "]"


def within(value: float, bounds: str) -> bool:
    low, high, low_in, high_in = parse_bounds(bounds)
    above = value >= low if low_in else value > low
    below = value <= high if high_in else value < high
    return above and below


def describe(bounds: str) -> str:
    """Words for an interval: "greater than 0", ">= 0", or "in (0, 1]"."""
    low, high, low_in, _ = parse_bounds(bounds)
    if math.isinf(high):
        return f">= {low:g}" if low_in else f"greater than {low:g}"
    return f"in {bounds}"


def build_dataclass(cls: type, raw: Any, prefix: str, problems: list[str]) -> Any:
    """The dataclass ``cls`` from ``raw``; a key that is unknown or of the wrong type is added to ``problems`` and
    left at its default, so that one pass names every such key."""
    where = prefix.rstrip(".") or "the config"
    if not isinstance(raw, dict):
        if not prefix:  # no sections to look into
            raise UserError(f"{where} must be a mapping of keys, got {type(raw).__name__}")
        problems.append(f"{where} must be a mapping of keys, got {type(raw).__name__}")
        return cls()
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    names = [name for name, item in fields.items() if not absent(item)]
    values = {}
    for key, value in raw.items():
        if key not in hints:
            problems.append(unknown_key(f"{prefix}{key}", names, prefix))
            continue
        if absent(fields[key]):
            if value != fields[key].default:  # its default (a checkpoint from a project with the part) is harmless
                problems.append(str(part_off(fields[key].metadata["part"], f"{prefix}{key}")))
            continue
        kind = hints[key]
        if dataclasses.is_dataclass(kind):
            values[key] = build_dataclass(kind, value, f"{prefix}{key}.", problems)
            continue
        try:
            values[key] = coerce(value, kind, f"{prefix}{key}")
        except UserError as error:
            problems.append(str(error))
    return cls(**values)
