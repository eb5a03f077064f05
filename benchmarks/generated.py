"""A project generated from this checkout and imported into the benchmark's own process.

For the benchmarks that train through the generated CLI in-process (``package.cli.main``): one Python
process and one torch import for every run they time, instead of one subprocess a run.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from copier import run_copy

REPO = Path(__file__).resolve().parents[1]


def import_generated(
    dest: Path,
    project_name: str,
    package_name: str,
    answers: dict[str, str] | None = None,
    template: Path | None = None,
) -> ModuleType:
    """Generate this checkout (HEAD and its uncommitted changes; or the checkout ``template``) at ``dest`` with
    ``answers`` beside the names, and import its package, with ``package.cli`` loaded so that
    ``package.cli.main(args)`` runs as the console script would."""
    data = {"project_name": project_name, "package_name": package_name, **(answers or {})}
    run_copy(str(template or REPO), dest, data=data, defaults=True, unsafe=True, quiet=True, vcs_ref="HEAD")
    sys.path.insert(0, str(dest / "src"))
    package = importlib.import_module(package_name)
    importlib.import_module(f"{package_name}.cli")  # an attribute of the package once imported
    return package
