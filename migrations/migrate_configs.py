"""``copier update``'s last step: the config keys a release renamed or moved, rewritten in the project's configs.

copier.yml runs this after every update (``_migrations``, stage ``after``, once the merge is done); it does
something only when the update crosses a version that ``renames.yaml`` lists, and then applies that version's
renames (``rename_config_key.rename_key``), oldest version first, to every ``configs/**/*.yaml`` of the project:

- a config the template renders and copier merged (``default.yaml``, ``recipes/strong.yaml``) is merged again,
  three ways, with the keys moved on both sides: the template as the project last had it and the user's file, each
  migrated, against the template's new version. Rewriting the user's file before copier's merge (as this step once
  did) made the move look like the user's own edit: an untouched ``strong.yaml`` conflicted with the template's
  other changes, and an edited line next to a moved key conflicted with the move.
- any other config (the user's own, and those the project owns: ``_skip_if_exists``) is rewritten in place.

A real conflict (the user and the template changed the same line) is written inline between copier's markers and
recorded in git's index as unmerged, as copier records its own; a file the user did not edit never conflicts.

Usage (copier runs it in the project): python migrate_configs.py [ANSWERS_FILE]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rename_config_key import rename_key, verb  # a script beside this one, not a package

RENAMES = Path(__file__).resolve().parent / "renames.yaml"
LABELS = ("before updating", "last update", "after updating")  # copier's own: ours, base, theirs


def crossed(renames: dict[str, list[list[str]]], start: Version, end: Version) -> list[tuple[str, str]]:
    """The (old, new) key pairs of every version in (start, end], oldest version first."""
    return [(old, new) for v in sorted(renames, key=Version) if start < Version(v) <= end for old, new in renames[v]]


def git(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], input=stdin, capture_output=True, text=True, check=False)


def at_head(path: Path) -> str | None:
    """The file as the project's last commit has it: copier updates only a clean work tree, so the user's version."""
    shown = git("show", f"HEAD:./{path.as_posix()}")
    return shown.stdout if shown.returncode == 0 else None


def render(answers: dict, dest: Path) -> Path:
    """The template at the version and with the answers an answers file records, as copier renders it to compare."""
    from copier import run_copy  # copier's own Python runs this step

    data = {key: value for key, value in answers.items() if not str(key).startswith("_")}
    run_copy(answers["_src_path"], dest, data=data, vcs_ref=answers["_commit"], defaults=True, overwrite=True,
             quiet=True, unsafe=True)  # fmt: skip
    return dest


def read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def merge(base: str, ours: str, theirs: str) -> tuple[str, bool]:
    """git's three-way merge of whole texts: the result, and whether it holds conflicts."""
    with tempfile.TemporaryDirectory() as tmp:
        files = [Path(tmp, name) for name in ("ours", "base", "theirs")]
        for file, text in zip(files, (ours, base, theirs), strict=True):
            file.write_text(text)
        labels = [arg for label in LABELS for arg in ("-L", label)]
        done = git("merge-file", "-p", *labels, *map(str, files))
    if not 0 <= done.returncode < 128:
        raise SystemExit(f"git merge-file failed: {done.stderr.strip()}")
    return done.stdout, done.returncode > 0


def record(path: Path, sides: tuple[str, str, str] | None) -> None:
    """The index entry copier would leave: unmerged stages (base, ours, theirs) for a conflict, else HEAD's entry."""
    name = path.as_posix()
    if sides is None:
        if git("ls-files", "--unmerged", "--", name).stdout:  # copier's merge conflicted, ours did not
            git("reset", "--quiet", "--", name)
        return
    mode = git("ls-files", "--stage", "--", name).stdout.split(maxsplit=1)[0]
    blobs = [git("hash-object", "-w", "--stdin", stdin=text).stdout.strip() for text in sides]
    info = f"0 {'0' * 40}\t{name}\n" + "".join(f"{mode} {blob} {n}\t{name}\n" for n, blob in enumerate(blobs, 1))
    git("update-index", "--index-info", stdin=info)


def migrate(text: str, renames: list[tuple[str, str]], changed: set[int]) -> str:
    """``text`` with every rename applied in order; ``changed`` collects the indices of those that changed it."""
    for index, (old, new) in enumerate(renames):
        renamed = rename_key(text, old, new)
        if renamed != text:
            changed.add(index)
        text = renamed
    return text


def main(argv: list[str]) -> int:
    answers_file = Path(argv[0] if argv else ".copier-answers.yml")
    if not {"VERSION_PEP440_FROM", "VERSION_PEP440_TO"} <= set(os.environ):
        raise SystemExit("copier update runs this step; by hand, use rename_config_key.py OLD NEW in the project")
    start, end = Version(os.environ["VERSION_PEP440_FROM"]), Version(os.environ["VERSION_PEP440_TO"])
    renames = crossed(yaml.safe_load(RENAMES.read_text()) or {}, start, end)
    configs = sorted(Path("configs").rglob("*.yaml"))
    if not renames or not configs:
        return 0
    reports: list[tuple[int, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        before_answers = at_head(answers_file)
        old = render(yaml.safe_load(before_answers), Path(tmp, "old")) if before_answers else None
        new = render(yaml.safe_load(answers_file.read_text()), Path(tmp, "new"))
        for path in configs:
            current, user = path.read_text(), at_head(path)
            base, theirs = read(old / path) if old else None, read(new / path)
            changed: set[int] = set()
            if user is not None and base is not None and theirs is not None and current != user:
                # copier merged the template's changes into it; where a key moved, merge again, moved on both sides
                sides = (migrate(base, renames, set()), migrate(user, renames, changed), theirs)
                text, conflicted = merge(*sides) if sides[:2] != (base, user) else (current, False)
                if text != current:
                    record(path, sides if conflicted else None)
            else:
                text = migrate(current, renames, changed)
            if text != current:
                path.write_text(text)
            reports += [(index, path.as_posix()) for index in changed]
    for index, name in sorted(reports):
        old_key, new_key = renames[index]
        print(f"migration: {verb(old_key, new_key)} {old_key} to {new_key} in {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
