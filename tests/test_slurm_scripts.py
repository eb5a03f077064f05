"""The scripts behind ``make slurm-test`` parse, and pass shellcheck where it is installed.

The Slurm jobs themselves run in ``make slurm-test`` (a generated project's
``pytest -m slurm``), not here: they need root, Slurm's daemons and minutes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO

SCRIPTS = sorted((REPO / "tests" / "slurm").glob("*.sh"))


def test_there_are_install_start_and_stop_scripts() -> None:
    assert {path.name for path in SCRIPTS} >= {"install.sh", "start.sh", "stop.sh"}


@pytest.mark.parametrize("script", SCRIPTS, ids=[path.name for path in SCRIPTS])
def test_the_script_parses_and_passes_shellcheck(script: Path) -> None:
    parsed = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    if shutil.which("shellcheck"):
        checked = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout
