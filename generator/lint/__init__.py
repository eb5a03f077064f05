"""The practices linter: PRACTICES.md's anti-patterns as ``TSC1xx`` rules.

``rules`` holds the checks (plain ``ast``), ``names`` resolves import aliases so
that ``th.load`` and ``from torch import load`` read as ``torch.load``, and
``plugin`` hands the findings to flake8, which adds ``# noqa``, config files and
torchfix's ``TOR`` rules in the same run.
"""

from .rules import RULES, Finding, check

__all__ = ["RULES", "Finding", "check"]
