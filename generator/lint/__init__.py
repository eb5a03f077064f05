"""The practices linter: PRACTICES.md's anti-patterns as ``TSC1xx`` rules.

``rules`` and ``training`` hold the checks (plain ``ast``), ``catalog`` their
codes and messages, ``names`` resolves import aliases so that ``th.load`` and
``from torch import load`` read as ``torch.load``, ``gate`` tells which files
torchfix could report anything in, and
``plugin`` hands the findings to flake8, which adds ``# noqa``, config files and
torchfix's ``TOR`` rules in the same run.
"""

from .catalog import RULES, check
from .rules import Finding

__all__ = ["RULES", "Finding", "check"]
