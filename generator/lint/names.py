"""Dotted names of expressions as the module imported them.

Rules match ``torch.load`` or ``torch.nn.Linear``; a file may spell them
``th.load``, ``load`` or ``nn.Linear``. Resolving the file's imports once keeps
every rule a plain string comparison.
"""

from __future__ import annotations

import ast

# Used when a file does not import the name itself (snippets, star imports):
# the spellings every PyTorch tutorial uses.
CONVENTIONAL = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional"}


def import_aliases(nodes: list[ast.AST]) -> dict[str, str]:
    """Local name -> dotted name it was imported as, from every import among a file's nodes (``ast.walk``)."""
    aliases = dict(CONVENTIONAL)
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:  # ``import torch.nn`` binds ``torch``
                    root = alias.name.partition(".")[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, as written; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def qualified(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """The dotted name with its first part replaced by what the file imported under it."""
    name = dotted(node)
    if name is None:
        return None
    root, dot, rest = name.partition(".")
    return aliases.get(root, root) + dot + rest
