"""The flake8 plugin: flake8 finds it through the ``flake8.extension`` entry point ``TSC``.

flake8 then gives our rules what every linter needs and we need not write:
file discovery, config files, ``--select``/``--extend-ignore``, ``# noqa: TSC101``
and output formats, in the same run as torchfix's ``TOR`` rules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .. import __version__
from .catalog import check


class PracticesChecker:
    """An AST plugin: flake8 passes the parsed file as ``tree`` (the parameter name is the contract)."""

    name = "torch-scaffold"
    version = __version__

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        for finding in check(self.tree):
            yield finding.line, finding.col, finding.message, type(self)
