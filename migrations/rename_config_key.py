"""Rename or move one ``section.key`` in YAML config text, keeping comments and layout.

``migrate_configs.py`` applies the renames that ``renames.yaml`` lists for a
release to a project's configs after ``copier update``; this module is the
rewrite itself, and by hand (``python rename_config_key.py OLD NEW ...`` in a
project) it rewrites every ``configs/**/*.yaml`` in place. It edits lines,
not parsed YAML, so comments and layout survive:

- within one section the key is renamed where it stands;
- to another section its line (comment included) moves to the end of that
  section, which is made if missing; a section left empty is removed;
- the dotted name (``train.old``, as sweep search spaces write it) is rewritten.

It changes nothing where the key is absent, so running it twice is harmless.

Usage: python rename_config_key.py OLD_SECTION.KEY NEW_SECTION.KEY [OLD NEW ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

TOP_LEVEL = re.compile(r"^([A-Za-z_][\w-]*)\s*:")


def split_key(name: str) -> tuple[str, str]:
    section, _, leaf = name.partition(".")
    if not section or not leaf or "." in leaf:
        raise SystemExit(f"{name}: give SECTION.KEY")
    return section, leaf


def sections(lines: list[str]) -> dict[str, tuple[int, int]]:
    """Each top-level section's line span: its header line, and the line after its last one."""
    starts = [(i, m.group(1)) for i, line in enumerate(lines) if (m := TOP_LEVEL.match(line))]
    ends = [i for i, _ in starts[1:]] + [len(lines)] if starts else []
    return {name: (start, end) for (start, name), end in zip(starts, ends, strict=True)}


def is_content(line: str) -> bool:
    return bool(line.strip()) and not line.lstrip().startswith("#")


def rename_key(text: str, old: str, new: str) -> str:
    """Rename (same section) or move (another section) the key ``old`` to ``new``."""
    (section, old_leaf), (new_section, new_leaf) = split_key(old), split_key(new)
    text = re.sub(rf"(?<![\w.]){re.escape(old)}(?![\w])", new, text)  # dotted mentions (sweep spaces)
    lines = text.splitlines(keepends=True)
    spans = sections(lines)
    if section not in spans:
        return "".join(lines)
    start, end = spans[section]
    key = re.compile(rf"^(\s+){re.escape(old_leaf)}(\s*:)")
    found = next((i for i in range(start + 1, end) if key.match(lines[i])), None)
    if found is None:
        return "".join(lines)
    indent = len(key.match(lines[found]).group(1))
    # A block value (a list or mapping on the following lines) moves with its key.
    stop = found + 1
    while stop < end and lines[stop].strip() and len(lines[stop]) - len(lines[stop].lstrip()) > indent:
        stop += 1
    moved = [key.sub(rf"\g<1>{new_leaf}\g<2>", lines[found], count=1), *lines[found + 1 : stop]]
    if new_section == section:
        return "".join(lines[:found] + moved + lines[stop:])
    del lines[found:stop]
    spans = sections(lines)
    start, end = spans[section]
    if not any(is_content(line) for line in lines[start + 1 : end]) and lines[start].split(":", 1)[1].strip() == "":
        del lines[start]  # nothing left under it: an empty section would read as null
    spans = sections(lines)
    if new_section in spans:
        start, end = spans[new_section]
        last = max([i for i in range(start, end) if is_content(lines[i])], default=start)
        lines[last + 1 : last + 1] = moved
    else:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines += [f"{new_section}:\n", *moved]
    return "".join(lines)


def verb(old: str, new: str) -> str:
    return "renamed" if split_key(old)[0] == split_key(new)[0] else "moved"


def main(argv: list[str]) -> int:
    if not argv or len(argv) % 2:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    for old, new in zip(argv[::2], argv[1::2], strict=True):
        for path in sorted(Path("configs").rglob("*.yaml")):
            text = path.read_text()
            renamed = rename_key(text, old, new)
            if renamed != text:
                path.write_text(renamed)
                print(f"migration: {verb(old, new)} {old} to {new} in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
