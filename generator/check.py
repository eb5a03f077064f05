"""``torch-scaffold check PATH...``: our ``TSC`` rules and torchfix's ``TOR`` rules, one flake8 run.

flake8 does the work (file discovery, the project's own flake8 config for
excludes, ``# noqa``); this adds the selection, a one-line summary, and
speed: only the plugins whose codes it reports run (not pyflakes, pycodestyle
nor mccabe, whose findings the selection would drop), and torchfix only on
the files where one of its selected rules could fire (``lint.gate``).

Every torchfix code is named explicitly, which also turns on the ones its
plugin leaves off by default (TOR3, TOR4, TOR9: ``extend_default_ignore``),
the same set as ``torchfix --select ALL`` less two: TOR102 (``torch.load``
without ``weights_only``), which TSC104 reports with more (``map_location``,
``weights_only=False``), so one problem is one finding; and TOR401 (a
``DataLoader`` without a literal ``num_workers > 0``), which fires on every
loader of a test or a notebook and on ``**kwargs``, while the worker count is
a choice per machine. E902 (file not found) and E999 (syntax error) are
selected too: a file that cannot be read or parsed was not checked, and must
not pass as clean.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence

from flake8 import checker
from flake8.main.application import Application
from torchfix import torchfix

from .lint.gate import gated_checker

# torchfix's codes this check leaves out, and why (the module docstring says more).
LEFT_OUT = {"TOR102": "TSC104 reports it, with more", "TOR401": "fires on loaders that are right as they are"}
TOR_CODES = tuple(code for code in torchfix.GET_ALL_ERROR_CODES() if code not in LEFT_OUT)
SELECT = ",".join(("TSC", *TOR_CODES, "E902", "E999"))
# Folders a project keeps beside its code that are not its code (flake8 already skips .git, .tox, ...).
EXCLUDE = ".venv,venv,build,dist,runs"
# The flake8 plugins (entry point names) whose findings the selection keeps.
PLUGINS = ("TSC", "TOR")


_process_tokens = checker.FileChecker.process_tokens


def process_tokens_where_read(self: checker.FileChecker) -> None:
    """flake8's token pass, only where a logical- or physical-line plugin reads it: this check runs AST plugins
    alone, and the pass was a quarter of its time (profiled on the default project). ``# noqa`` and syntax
    errors do not need it: flake8 maps noqa lines from its own tokens when a finding is reported, and the AST
    pass already reports a file that does not parse (E999)."""
    if self.plugins.logical_line or self.plugins.physical_line:
        _process_tokens(self)


# Patched on the class, not a subclass: flake8's worker processes build their FileChecker by name. Any other flake8
# run in this process keeps its token pass, since it has line plugins.
checker.FileChecker.process_tokens = process_tokens_where_read  # type: ignore[method-assign]


class PracticesCheck(Application):
    """flake8 with the plugins the selection reports only, and torchfix behind the gate.

    Under a multiprocessing start method other than fork, flake8's workers load every plugin again: the
    findings are the same, the time is the plain flake8 run's.
    """

    def make_file_checker_manager(self, argv: Sequence[str]) -> None:
        assert self.plugins is not None
        checkers = self.plugins.checkers
        tree = [
            plugin._replace(obj=gated_checker(frozenset(TOR_CODES))) if plugin.entry_name == "TOR" else plugin
            for plugin in checkers.tree
            if plugin.entry_name in PLUGINS
        ]
        self.plugins = self.plugins._replace(checkers=checkers._replace(tree=tree, logical_line=[], physical_line=[]))
        super().make_file_checker_manager(argv)


def run_check(*paths: str | os.PathLike[str]) -> int:
    """Print every finding under ``paths`` and a summary line; 1 when anything was found, else 0."""
    app = PracticesCheck()
    app.run([f"--select={SELECT}", f"--extend-exclude={EXCLUDE}", *map(os.fspath, paths or (".",))])
    counts: Counter[str] = Counter()
    for statistic in app.guide.stats.statistics_for(""):  # type: ignore[union-attr]
        counts[statistic.error_code] += statistic.count
    print(summary(counts))
    return 1 if counts or app.catastrophic_failure else 0


def summary(counts: Counter[str]) -> str:
    if not counts:
        return "torch-scaffold check: no findings"
    per_code = ", ".join(f"{code}: {count}" for code, count in sorted(counts.items()))
    total = sum(counts.values())
    return f"torch-scaffold check: {total} finding{'s' if total != 1 else ''} ({per_code})"
