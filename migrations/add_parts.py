"""copier update from a release before v0.16.0: shards and GPU decode joined the optional_parts question then.

A project made before had both (they were in every project), and its answer
(v0.15.x recorded one, of the parts then offered) does not name them: copier
would read it as both turned off, and delete their files. Run before copier
reads the answers again (copier.yml's ``_migrations``), this adds them to the
answer, so the update keeps them; a later ``copier update -d
"optional_parts=[...]"`` turns them off, as for any part.

Usage: add_parts.py ANSWERS_FILE TEMPLATE_DIR VERSION_FROM. The old release is
told by its copier.yml (read from the template's git history): one without
``parts_since_0_16`` offered neither part. A project without the answer (made
before v0.15.0) takes the question's default, every part, and is left alone.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

NEW_PARTS = ("shards", "gpu_decode")
MARK = "\nparts_since_0_16:"  # the copier.yml name that says a release offers them


def offered_them(template: str, version: str) -> bool:
    """Whether the release ``version`` of the template already asked about the new parts."""
    shown = subprocess.run(
        ["git", "-C", template, "show", f"{version}:copier.yml"], capture_output=True, text=True, check=False
    )
    return shown.returncode != 0 or MARK in shown.stdout  # unreadable: leave the answer as it is


def main(answers_file: str, template: str, version: str) -> None:
    path = Path(answers_file)
    text = path.read_text()
    answers = yaml.safe_load(text) or {}
    parts = answers.get("optional_parts")
    if not isinstance(parts, list) or offered_them(template, version):
        return
    answers["optional_parts"] = parts + [part for part in NEW_PARTS if part not in parts]
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))  # copier's comment
    path.write_text(header + yaml.safe_dump(answers, sort_keys=False))
    print(f"optional_parts: {', '.join(NEW_PARTS)} kept (the project had them before v0.16.0 asked)")


if __name__ == "__main__":
    main(*sys.argv[1:4])
