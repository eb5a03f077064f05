"""``torch-scaffold status`` output: one project in detail, several as a table, or either as JSON; its exit status.

A team's nightly job reads the exit status, so it ranks the states and never reads green over a conflict:
4 when any project has an unresolved conflict, else 3 when ``--check`` found practices findings, else 1 when
any project is behind the newest release or cannot be read, else 0. (2 is argparse's: a mistyped command.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from copier.errors import CopierError
from packaging.version import Version

from .drift import Status, status
from .project import ProjectError
from .releases import parse_release

EXIT = {"newest": 0, "behind": 1, "error": 1, "findings": 3, "conflict": 4}
STATES = ("conflict", "error", "findings", "behind", "newest")  # the order a summary counts them in
# Answers that name the project rather than choose how it trains: left out of the answers line.
FIRST = ("model", "optimizer")  # what a team asks first about a project: the rest follow in the answers' order
NAMES = {"project_name", "project_slug", "package_name", "description", "author_name"}
# flake8's default line: path:row:col: CODE message
FINDING = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<column>\d+): (?P<code>[A-Z]+\d+) (?P<message>.*)$")


@dataclass(frozen=True)
class Row:
    """One project: its status, the practices check's findings when asked for, or why it could not be read."""

    dest: Path
    status: Status | None = None
    findings: list[dict[str, Any]] | None = None  # None: not checked (no --check)
    error: str | None = None

    @property
    def state(self) -> str:
        if self.status is None:
            return "error"
        if self.status.conflicts:
            return "conflict"
        if self.findings:
            return "findings"
        return "behind" if self.status.behind else "newest"


def practices(root: Path) -> list[dict[str, Any]]:
    """``torch-scaffold check .`` in the project, as its CI runs it, in a process of its own: flake8 writes its
    findings to the standard output, which a JSON report must keep for itself."""
    result = subprocess.run(
        [sys.executable, "-m", "torch_scaffold", "check", "."],
        cwd=root,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if result.returncode not in (0, 1):  # 1: findings; anything else is a check that did not run
        why = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        raise ProjectError(f"torch-scaffold check did not run in {root}: {why}")
    found = [match.groupdict() for match in map(FINDING.match, result.stdout.splitlines()) if match]
    for finding in found:
        finding["path"] = finding["path"].removeprefix("./")
        finding["line"], finding["column"] = int(finding["line"]), int(finding["column"])
    return found


def examine(dest: Path, check: bool) -> Row:
    try:
        result = status(dest)
        return Row(dest, result, practices(result.project.root) if check else None)
    except (ProjectError, CopierError) as exc:
        return Row(dest, error=" ".join(str(exc).split()))


def exit_status(rows: Sequence[Row]) -> int:
    return max((EXIT[row.state] for row in rows), default=0)


def choices(answers: dict[str, Any]) -> dict[str, Any]:
    """The answers that choose how the project trains, model and optimizer first, without its names and parts."""
    chosen = [key for key, value in answers.items() if key not in NAMES and not isinstance(value, (bool, list))]
    return {key: answers[key] for key in sorted(chosen, key=lambda key: key not in FIRST)}


# Choices that joined a multiselect question after their files were in every project, and the release they
# joined in: a project of an earlier release holds them though its recorded answer cannot name them (its next
# update adds them to the answer: migrations/add_parts.py).
JOINED_LATER = {"shards": Version("0.16.0"), "gpu_decode": Version("0.16.0")}


def parts(answers: dict[str, Any], release: str | None = None) -> dict[str, bool]:
    """The optional parts a project has or left out: its yes/no answers (ci_workflow...), and each choice of a
    multiselect answer (optional_parts: audit, sweeps...), on where the project chose it, or where its
    ``release`` came before the choice existed (``JOINED_LATER``). A project answered before the question has
    none of its choices here: it holds the parts as its release made them."""
    found = {key: value for key, value in answers.items() if isinstance(value, bool)}
    made = parse_release(release) if release else None
    for key, options in multiselect_choices().items():
        chosen = answers.get(key)
        if isinstance(chosen, list):
            older = {option for option in options if made is not None and made < JOINED_LATER.get(option, made)}
            found |= {option: option in chosen or option in older for option in options}
    return found


@cache
def multiselect_choices() -> dict[str, list[str]]:
    """copier.yml's multiselect questions and their choices, from the template beside this package: read once a
    process, not once for every project and view of a fleet report."""
    questions = yaml.safe_load((Path(__file__).resolve().parents[1] / "copier.yml").read_text())
    found = {}
    for key, question in questions.items():
        if isinstance(question, dict) and question.get("multiselect"):
            options = question["choices"]  # a list of values, or {label: value}
            found[key] = list(options.values() if isinstance(options, dict) else options)
    return found


def as_json(row: Row) -> dict[str, Any]:
    """One project for a nightly job; every key present in every row, null where the project could not be read."""
    found = row.status
    project = found.project if found else None
    return {
        "path": str(row.dest),
        "state": row.state,
        "error": row.error,
        "template": project.template if project else None,
        "release": project.version if project else None,
        "newest": (found.newest or project.version) if found and project else None,
        "releases_behind": len(found.newer) if found else None,
        "newer_releases": found.newer if found else None,
        "answers": project.answers if project else None,
        "parts": parts(project.answers, project.version) if project else None,
        "edited": [{"path": path, "change": change} for path, change in found.changed] if found else None,
        "conflicts": {"unmerged": found.conflicts.unmerged, "markers": found.conflicts.markers} if found else None,
        "practices": None if row.findings is None else {"counts": counts(row.findings), "findings": row.findings},
    }


def counts(findings: list[dict[str, Any]]) -> dict[str, int]:
    return dict(sorted(Counter(finding["code"] for finding in findings).items()))


def summary(rows: Sequence[Row]) -> dict[str, int]:
    states = Counter(row.state for row in rows)
    return {"projects": len(rows), **{state: states[state] for state in STATES}}


def report_json(rows: Sequence[Row]) -> str:
    document = {"projects": [as_json(row) for row in rows], "summary": summary(rows), "exit_status": exit_status(rows)}
    return json.dumps(document, indent=2)


def next_step(row: Row) -> str:
    """The state and what to type about it, for the table's last column."""
    if row.status is None:
        return f"error: {row.error}"
    if row.status.conflicts:
        return f"conflict: resolve {', '.join(row.status.conflicts.files)}, then commit"
    if row.findings:
        return f"findings: torch-scaffold check {row.dest}"
    return f"behind: torch-scaffold update {row.dest}" if row.status.behind else "newest"


def report_table(rows: Sequence[Row], check: bool) -> str:
    header = ["project", "release", "newest", "behind", "model", "optimizer", "parts", "edited"]
    table = [[*header, *(["findings"] if check else []), "state"]]
    for row in rows:
        found = row.status
        if found is None:
            cells = [str(row.dest), *["?"] * (len(header) - 1 + check)]
        else:
            answers = found.project.answers
            on = ",".join(key for key, value in parts(answers, found.project.version).items() if value) or "-"
            cells = [str(row.dest), found.project.version, found.newest or found.project.version,
                     str(len(found.newer)), str(answers.get("model", "?")), str(answers.get("optimizer", "?")),
                     on, str(len(found.changed)), *([str(len(row.findings or []))] if check else [])]  # fmt: skip
        table.append([*cells, next_step(row)])
    widths = [max(len(line[column]) for line in table) for column in range(len(table[0]) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=False)) + "  " + line[-1]
             for line in table]  # fmt: skip
    states = summary(rows)
    said = [f"{states[state]} {state}" for state in ("newest", "behind", "conflict")]
    said += [f"{states[state]} {state}" for state in ("findings", "error") if states[state]]
    lines.append(f"{len(rows)} projects: " + ", ".join(said))
    return "\n".join(lines)


def report_one(row: Row) -> str:
    """One readable project in detail: what ``status DEST`` prints."""
    found = row.status
    assert found is not None  # a single project that cannot be read is a one-line error instead
    project = found.project
    lines = [f"template:  {project.template}"]
    if found.behind:
        count = len(found.newer)
        lines.append(f"release:   {project.version}, {count} release{'s' if count > 1 else ''} behind "
                     f"{found.newest}: run `torch-scaffold update {project.root}`")  # fmt: skip
    else:
        lines.append(f"release:   {project.version} (newest)")
    lines.append("answers:   " + " ".join(f"{key}={value}" for key, value in choices(project.answers).items()))
    switches = parts(project.answers, project.version).items()
    lines.append("parts:     " + (" ".join(f"{key}={'on' if on else 'off'}" for key, on in switches) or "-"))
    if found.conflicts:
        lines.append(f"conflicts ({len(found.conflicts.files)}): resolve the markers, `git add` the files, commit:")
        for path in found.conflicts.files:
            why = [why for why, paths in (("unmerged", found.conflicts.unmerged), ("markers", found.conflicts.markers))
                   if path in paths]  # fmt: skip
            lines.append(f"  {'+'.join(why):<16} {path}")
    else:
        lines.append("conflicts: none")
    if found.changed:
        lines.append(f"template files changed in this project ({len(found.changed)}):")
        lines.extend(f"  {change:<9} {path}" for path, change in found.changed)
    else:
        lines.append("template files changed in this project: none")
    if row.findings is not None:
        per_code = ", ".join(f"{code}: {count}" for code, count in counts(row.findings).items())
        lines.append(f"practices: {len(row.findings)} findings ({per_code})" if row.findings else "practices: none")
        lines.extend(f"  {f['path']}:{f['line']}:{f['column']}: {f['code']} {f['message']}" for f in row.findings)
    lines.append(f"state:     {row.state}")
    return "\n".join(lines)


def run_status(dests: Sequence[Path], json_output: bool, check: bool) -> int:
    if len(dests) == 1 and not json_output:
        result = status(dests[0])  # a project that cannot be read: the one-line error of every command
        row = Row(dests[0], result, practices(result.project.root) if check else None)
        print(report_one(row))
        return exit_status([row])
    rows = [examine(dest, check) for dest in dests]
    print(report_json(rows) if json_output else report_table(rows, check))
    return exit_status(rows)
