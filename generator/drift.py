"""``torch-scaffold status``: a project's release, the releases since, its local drift and its conflicts.

Drift is measured the way ``copier update`` sees it: a fresh render of the
project's recorded version with its recorded answers, compared file by file
with the project. Files the user owns (``_skip_if_exists``) and files the
template never made are not drift. The releases are the template's tags, read
as copier reads them; conflicts are what ``conflicts.py`` finds. ``fleet.py``
prints it, for one project or many.
"""

from __future__ import annotations

import filecmp
import functools
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from copier import Worker

from .conflicts import Conflicts, find_conflicts
from .project import ANSWERS_FILE, Project, ProjectError, read_project
from .releases import release_tags, releases_after


@dataclass(frozen=True)
class Status:
    project: Project
    releases: list[str]  # the template's release tags, oldest first
    changed: list[tuple[str, str]]  # (relative path, "modified" | "deleted"), sorted
    conflicts: Conflicts

    @property
    def newest(self) -> str | None:
        """The release ``torch-scaffold update`` goes to; None for a template without tags."""
        return self.releases[-1] if self.releases else None

    @property
    def newer(self) -> list[str]:
        """The releases since the project's; a project on an untagged commit after the newest is behind none."""
        return releases_after(self.project.version, self.releases)

    @property
    def behind(self) -> bool:
        return bool(self.newer)


@functools.cache
def template_releases(template: str) -> list[str]:
    """Read once per template for a whole fleet; copier spells out the shortcuts (``gh:org/name``) first."""
    with Worker(src_path=template, quiet=True) as worker:
        if worker.template.vcs != "git":
            return []  # a plain folder: copier renders it as it is, with no versions to update to
        url = worker.template.url_expanded
    try:
        return release_tags(url)
    except subprocess.CalledProcessError as error:
        why = (error.stderr.strip().splitlines() or ["git ls-remote failed"])[-1]
        raise ProjectError(f"cannot read the releases of the template {template}: {why}") from None


def local_changes(project: Project) -> list[tuple[str, str]]:
    with tempfile.TemporaryDirectory(prefix="torch-scaffold-status-") as tmp:
        fresh = Path(tmp) / "fresh"
        with Worker(
            src_path=project.template,
            dst_path=fresh,
            data=project.answers,
            vcs_ref=project.version,
            defaults=True,
            quiet=True,
            unsafe=True,
        ) as worker:
            worker.run_copy()
            user_owned = worker.match_skip
        changed = []
        for path in sorted(p for p in fresh.rglob("*") if p.is_file()):
            relative = path.relative_to(fresh)
            if relative.as_posix() == ANSWERS_FILE or user_owned(relative):
                continue
            mine = project.root / relative
            if not mine.is_file():
                changed.append((relative.as_posix(), "deleted"))
            elif not filecmp.cmp(path, mine, shallow=False):
                changed.append((relative.as_posix(), "modified"))
        return changed


def status(dest: Path) -> Status:
    project = read_project(dest)
    with project.template_reachable():
        # A folder's absolute path: two projects may record the same relative path for different folders.
        releases = template_releases(str(project.template_path) if project.template_is_local else project.template)
        changed = local_changes(project)
    return Status(project=project, releases=releases, changed=changed, conflicts=find_conflicts(project.root))
