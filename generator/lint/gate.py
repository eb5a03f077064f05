"""Which files torchfix could report anything in, read from the ``ast`` flake8 already parsed.

torchfix builds a libcst tree with scope analysis for every file that
mentions "torch": about nine tenths of a project's check, for a handful of
findings. Each of its rules looks for a few qualified names (``torch.exp``,
``torch.utils.checkpoint.checkpoint``, ``torchvision.models.*``...), and it
resolves imports as ``names.qualified`` does, so a file that mentions none of
them cannot get a finding and is skipped. A torchfix with a rule this module
does not know opens the gate for every file: slower, never wrong.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import cache

from torchfix import torchfix

from .names import qualified
from .rules import Source

# What each torchfix 0.7 rule needs in a file, beside the names read from torchfix itself (deprecated symbols,
# non-public aliases, the models that took ``pretrained``): qualified names, prefixes (ending in "."; none
# today), names imported by ``import``, attributes.
NEEDS: dict[str, dict[str, frozenset[str]]] = {
    "TorchExpm1Visitor": {"names": frozenset({"torch.exp"})},
    "TorchLog1pVisitor": {"names": frozenset({"torch.log"})},
    "TorchReentrantCheckpointVisitor": {"names": frozenset({"torch.utils.checkpoint.checkpoint"})},
    "TorchScopedLibraryVisitor": {"names": frozenset({"torch.library.Library"})},
    "TorchSynchronizedDataLoaderVisitor": {"names": frozenset({"torch.utils.data.DataLoader"})},
    "TorchUnsafeLoadVisitor": {"names": frozenset({"torch.load"})},
    "TorchVisionDeprecatedToTensorVisitor": {"names": frozenset({"torchvision.transforms.v2.ToTensor"})},
    "TorchVisionSingletonImportVisitor": {
        "imports": frozenset({"torchvision.datasets", "torchvision.models", "torchvision.transforms"})
    },
    "TorchRequireGradVisitor": {"attributes": frozenset({"require_grad"})},
}


class Needs:
    """The union of what the selected torchfix rules look for; ``everything`` when one of them is unknown."""

    def __init__(self, codes: Iterable[str]) -> None:
        self.names: set[str] = set()
        self.prefixes: set[str] = set()
        self.imports: set[str] = set()
        self.attributes: set[str] = set()
        self.everything = False
        selected = set(codes)
        for visitor in torchfix.ALL_VISITOR_CLS:
            if not {error.error_code for error in visitor.ERRORS} & selected:
                continue  # none of its codes is reported: what it finds does not matter
            name = visitor.__name__
            if name == "TorchDeprecatedSymbolsVisitor":
                self.names |= set(torchfix.construct_visitor(visitor).deprecated_config)
            elif name == "TorchNonPublicAliasVisitor":
                self.names |= set(visitor.ALIASES)  # type: ignore[attr-defined]
            elif name == "TorchVisionDeprecatedPretrainedVisitor":  # the models that had a pretrained argument
                models = {model for model, _ in visitor.MODEL_WEIGHTS}  # type: ignore[attr-defined]
                for module in ["", *(f"{sub}." for sub in visitor.MODEL_SUBMODULES)]:  # type: ignore[attr-defined]
                    self.names |= {f"torchvision.models.{module}{model}" for model in models}
            elif name in NEEDS:
                for kind, values in NEEDS[name].items():
                    getattr(self, kind).update(values)
            else:
                self.everything = True

    def wanted(self, name: str | None) -> bool:
        """A name a rule looks for, or one under a prefix, or the prefix's module itself (``tvm`` for
        ``import torchvision.models as tvm``: what follows it is under the prefix)."""
        if not name:
            return False
        return name in self.names or any(name.startswith(p) or name == p[:-1] for p in self.prefixes)

    @property
    def leaves(self) -> set[str]:
        """The last part of every wanted name: an attribute ending otherwise cannot qualify to one."""
        return {name.rpartition(".")[2] for name in self.names} | {p[:-1].rpartition(".")[2] for p in self.prefixes}

    def met_by(self, tree: ast.Module) -> bool:
        """Whether ``tree`` mentions anything a selected rule looks for."""
        if self.everything:
            return True
        src = Source.of(tree)  # the walk and the imports our rules read anyway
        aliases, leaves = src.aliases, self.leaves
        for node in src.nodes:
            if isinstance(node, ast.Name):
                if self.wanted(aliases.get(node.id, node.id)):
                    return True
            elif isinstance(node, ast.Attribute):  # qualified only where its last part could end a wanted name
                if node.attr in self.attributes or (node.attr in leaves and self.wanted(qualified(node, aliases))):
                    return True
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                if any(self.wanted(f"{node.module}.{alias.name}") for alias in node.names):
                    return True
            elif isinstance(node, ast.Import) and any(alias.name in self.imports for alias in node.names):
                return True
        return False


@cache
def needs(codes: frozenset[str]) -> Needs:
    """One ``Needs`` a selection: torchfix's deprecated-symbol list is read once a process."""
    return Needs(codes)


def gated_checker(codes: frozenset[str]) -> type[torchfix.TorchChecker]:
    """torchfix's flake8 plugin, run only on files that mention something the rules in ``codes`` look for."""

    class GatedTorchChecker(torchfix.TorchChecker):
        def __init__(self, tree: ast.Module, lines: list[str]) -> None:  # flake8 passes these by parameter name
            if needs(codes).met_by(tree):
                super().__init__(tree, lines)
            else:
                self.module = None  # run() yields nothing for a file without a module

    return GatedTorchChecker
