"""``torch-scaffold check PATH...``: our ``TSC`` rules and all of torchfix's ``TOR`` rules, one flake8 run.

flake8 does the work (file discovery, the project's own flake8 config for
excludes, ``# noqa``); this adds only the selection and a one-line summary.
``--select TOR`` names torchfix's codes explicitly, which also turns on the
ones its plugin leaves off by default (TOR3, TOR4, TOR9: ``extend_default_ignore``),
the same set as ``torchfix --select ALL``. E902 (file not found) and E999
(syntax error) are selected too: a file that cannot be read or parsed was not
checked, and must not pass as clean.
"""

from __future__ import annotations

import os
from collections import Counter

from flake8.main.application import Application

SELECT = "TSC,TOR,E902,E999"
# Folders a project keeps beside its code that are not its code (flake8 already skips .git, .tox, ...).
EXCLUDE = ".venv,venv,build,dist,runs"


def run_check(*paths: str | os.PathLike[str]) -> int:
    """Print every finding under ``paths`` and a summary line; 1 when anything was found, else 0."""
    app = Application()
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
