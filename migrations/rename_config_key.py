"""Rename one ``section.key`` in every ``configs/*.yaml`` of a project, for ``_migrations``.

A template version that renames a config key lists this script in copier.yml
with ``when: "{{ _stage == 'before' }}"``. copier runs it in the project before
merging, so the user's own configs (which the template never touches) follow
the rename, and ``configs/default.yaml`` carries it into the merge with the
user's values kept. It edits lines, not parsed YAML, so comments and layout
survive. The rewritten files are staged so that copier's merge sees them.

Usage: python rename_config_key.py OLD_SECTION.KEY NEW_SECTION.KEY
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

TOP_LEVEL = re.compile(r"^([A-Za-z_][\w-]*)\s*:")


def rename_key(text: str, old: str, new: str) -> str:
    """Rename the key ``old`` (``section.key``) to ``new`` wherever it appears under its section."""
    section, _, old_leaf = old.partition(".")
    new_section, _, new_leaf = new.partition(".")
    if section != new_section or not old_leaf or not new_leaf:
        raise SystemExit(f"rename {old} -> {new}: give SECTION.KEY twice, with the same section")
    nested = re.compile(rf"^(\s+){re.escape(old_leaf)}(\s*:)")
    current = None
    lines = []
    for line in text.splitlines(keepends=True):
        top = TOP_LEVEL.match(line)
        if top:
            current = top.group(1)
        elif current == section:
            line = nested.sub(rf"\g<1>{new_leaf}\g<2>", line, count=1)
        lines.append(line)
    return "".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    old, new = argv
    for path in sorted(Path("configs").glob("*.yaml")):
        text = path.read_text()
        renamed = rename_key(text, old, new)
        if renamed != text:
            path.write_text(renamed)
            subprocess.run(["git", "add", "--", str(path)], check=False)
            print(f"migration: renamed {old} to {new} in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
