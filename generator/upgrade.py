"""``torch-scaffold update``: copier update with the flags a team always wants.

Answers are kept (``defaults=True`` reuses them and gives new questions their
defaults) unless ``-d KEY=VALUE`` changes one, conflicts are written inline so they show in ``git diff``, and the
project must be a clean git work tree so that the merge can be reviewed and
undone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from copier import run_update

from .project import conflicted_files, read_project, require_clean_git


def update(dest: Path, vcs_ref: str | None, data: dict[str, Any] | None = None) -> int:
    """copier update; ``data`` changes answers, which copier re-renders even at the same version."""
    before = read_project(dest)
    require_clean_git(dest)
    with before.template_reachable():
        # unsafe=True: the template's _migrations are commands; this is our own template.
        run_update(
            before.root,
            data=data or {},
            vcs_ref=vcs_ref,
            defaults=True,
            overwrite=True,
            unsafe=True,
            quiet=True,
            conflict="inline",
        )
    after = read_project(dest)
    changed = sorted(key for key, value in after.answers.items() if before.answers.get(key) != value)
    if after.version == before.version and not changed:
        print(f"{dest} is already on template version {after.version}")
        return 0
    conflicts = conflicted_files(dest)
    if after.version == before.version:
        print(f"Applied the changed answers ({', '.join(changed)}) to {dest} at template version {after.version}.")
    else:
        print(f"Updated {dest} from template version {before.version} to {after.version}.")
    if conflicts:
        print(f"Resolve the <<<<<<< markers in: {', '.join(conflicts)}; then review `git diff` and commit.")
        return 1
    print("Review the changes with `git diff`, run the tests, then commit.")
    return 0
