"""Optional dependencies: import them on demand, or say in one line how to install them.

Pictures (matplotlib), ONNX export and TensorBoard are extras of this
project's distribution, so a plain install stays small.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from types import ModuleType

from . import PACKAGE
from .errors import UserError


def distribution_name() -> str:
    """The name ``pip install`` knows this project by: the one whose console script runs our CLI."""
    for entry in metadata.entry_points(group="console_scripts"):
        if entry.value.startswith(f"{PACKAGE}.cli:") and entry.dist is not None:
            return entry.dist.name
    return PACKAGE.replace("_", "-")


def install_hint(extra: str) -> str:
    return f'pip install "{distribution_name()}[{extra}]"'


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """``importlib.import_module(module)``, or a UserError naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        missing = module.split(".")[0]
        raise UserError(f"{purpose} needs {missing}, which is not installed: {install_hint(extra)}") from None
