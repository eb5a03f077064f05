"""``torch-scaffold status``: template version, newest version, and local drift.

Drift is measured the way ``copier update`` sees it: a fresh render of the
project's recorded version with its recorded answers, compared file by file
with the project. Files the user owns (``_skip_if_exists``) and files the
template never made are not drift. ``fleet`` puts many projects in one table
and exits 1 when any is behind, for a team's nightly job.
"""

from __future__ import annotations

import filecmp
import functools
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from copier import Worker
from copier.errors import CopierError

from .project import ANSWERS_FILE, Project, ProjectError, read_project


@dataclass(frozen=True)
class Status:
    project: Project
    newest: str | None  # the template's newest version tag, None when it has no tags
    changed: list[tuple[str, str]]  # (relative path, "modified" | "deleted"), sorted

    @property
    def behind(self) -> bool:
        return self.newest is not None and self.newest != self.project.version


@functools.cache
def newest_version(template: str) -> str | None:
    """copier picks the newest PEP 440 tag when no ref is given; ask it rather than sorting tags here."""
    with Worker(src_path=template, quiet=True) as worker:
        return worker.template.commit if worker.template.version else None


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
        return Status(project=project, newest=newest_version(project.template), changed=local_changes(project))


def report(result: Status) -> str:
    project = result.project
    lines = [f"template: {project.template}"]
    if result.newest is None or result.newest == project.version:
        lines.append(f"version:  {project.version} (newest)")
    else:
        hint = f"run `torch-scaffold update {project.root}`"
        lines.append(f"version:  {project.version} (newest: {result.newest}; {hint})")
    if result.changed:
        lines.append(f"template files changed in this project ({len(result.changed)}):")
        lines.extend(f"  {change:<9} {path}" for path, change in result.changed)
    else:
        lines.append("template files changed in this project: none")
    return "\n".join(lines)


def fleet(dests: Sequence[Path]) -> int:
    """One row per project; 1 when any is behind or cannot be read, so a scheduled job fails and someone looks."""
    rows = [("project", "version", "newest", "drifted", "state")]
    behind = broken = 0
    for dest in dests:
        try:
            result = status(dest)
        except (ProjectError, CopierError) as exc:
            broken += 1
            rows.append((str(dest), "?", "?", "?", "error: " + " ".join(str(exc).split())))
            continue
        behind += result.behind
        state = f"behind: torch-scaffold update {dest}" if result.behind else "newest"
        newest = result.newest or result.project.version
        rows.append((str(dest), result.project.version, newest, str(len(result.changed)), state))
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)) + "  " + row[4])
    summary = f"{len(dests)} projects, {behind} behind the newest template version"
    print(summary + (f", {broken} unreadable" if broken else ""))
    return 1 if behind or broken else 0
