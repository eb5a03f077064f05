"""Release v0.13.0's move, made in this repository: ``data/`` into three rooms, the audit's logic beside its command.

    python migrations/moves_0_13.py [REPO]

moves (``git mv``) the modules ``RELEASES["v0.13.0"]`` of ``move_modules.py``
names (the table that moves a project's edited files on ``copier update``),
then rewrites every import and dotted mention in the template's Python files,
the repository's tests, benchmarks and generator, and every path
(``data/decode.py``, ``commands/audit.py``) in their prose, with
``move_modules.rewrite``. A move already made is skipped and rewritten text is
left as it is, so it runs again on a branch made before the move (then run the
template's tests). What no rule can know (the front door ``data/__init__.py``,
the structure test's rooms, the README's trees) was written by hand.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from move_modules import RELEASES, rewrite  # a script beside this one, not a package

RELEASE = RELEASES["v0.13.0"]
PACKAGE_DIR = Path("template/src/{{package_name}}")
# The package's name in Jinja (two spellings) -> a name that parses as Python while the file is rewritten.
PLACEHOLDERS = {"{{ package_name }}": "tspkg_placeholder", "{{package_name}}": "tspkgplain_placeholder"}
PACKAGE_NAMES = ("x_pkg", "demo_project", "gpu_check", "slurm_check")  # the names the repository's tests give
SCOPE = ["template", "tests", "benchmarks", "generator", "README.md", "PRACTICES.md", "Makefile", "copier.yml"]
# The packages the move made: a module in one (not moved by this run) is read as the new layout's, since
# ``commands.audit.X`` would otherwise read as the old ``commands/audit.py``'s name X.
NEW_PACKAGES = ("data.files.", "data.decoding.", "data.loading.", "commands.audit.")
HISTORY = {"tests/test_update_move.py", "tests/test_update_move_0_10.py", "tests/test_update_move_0_13.py"}


def move_files(repo: Path) -> set[Path]:
    """``git mv`` each module not moved yet; the new paths of those it moved now (their imports are the old)."""
    moved = set()
    for old, new, _, _ in RELEASE.paths():
        source, target = repo / PACKAGE_DIR / old, repo / PACKAGE_DIR / new
        if source.is_file() and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "mv", str(source), str(target)], cwd=repo, check=True)
            moved.add(target)
    return moved


def module_of(path: Path, repo: Path) -> str:
    return ".".join(path.relative_to(repo / PACKAGE_DIR).with_suffix("").parts)


def rewrite_python(path: Path, repo: Path, moved_now: set[Path]) -> str:
    """``path``'s imports and dotted mentions in the new layout. A module moved by this run has its relative
    imports read from its old place; every other module's are read from where it is (it may be moved already)."""
    text = path.read_text()
    for name, placeholder in PLACEHOLDERS.items():
        text = text.replace(name, placeholder)
    if PACKAGE_DIR.as_posix() in path.as_posix() or (repo / PACKAGE_DIR) in path.parents:
        new = module_of(path.with_suffix("") if path.suffix == ".jinja" else path, repo)
        if path not in moved_now and new.startswith(NEW_PACKAGES):
            return path.read_text()  # in a room already: its relative imports are the new layout's (by hand)
        old = next((o for o, n in RELEASE.modules.items() if n == new), new) if path in moved_now else new
        kept = front_door_imports(text, new) if path not in moved_now else {}
        for number, line in kept.items():  # the front door's names, modules among them, are no old modules
            text = text.replace(line, f"# front door {number}\n", 1)
        text = rewrite(RELEASE, text, "tspkg_placeholder", old, new)
        for number, line in kept.items():
            text = text.replace(f"# front door {number}\n", line, 1)
    else:
        # An import of commands/audit/'s own modules reads as the old commands/audit.py's names: left as it is.
        text = re.sub(r"(from \S+\.commands\.audit) import ", r"\1 import_NEW ", text)
        for package in (*PLACEHOLDERS.values(), *PACKAGE_NAMES):
            text = rewrite(RELEASE, text, package)
            text = IMPORT_LINE.sub(functools.partial(in_a_string, package=package), text)
    for name, placeholder in PLACEHOLDERS.items():
        text = text.replace(placeholder, name)
    return text.replace(" import_NEW ", " import ")


def front_door_imports(text: str, module: str) -> dict[int, str]:
    """The statements of a module in the new layout that import from data/'s front door (``from ..data import
    duplicates, shards``): its names, modules among them, which an old module's import would look like."""
    here, kept = module.split(".")[:-1], {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.level > 0 and node.module is not None:
            source = [*here[: len(here) - (node.level - 1)], node.module]
            if source == ["data"]:
                lines = text.splitlines(keepends=True)[node.lineno - 1 : node.end_lineno]
                kept[len(kept)] = "".join(lines)
    return kept


# An absolute import on a line of its own: also inside a string, the code a test runs in another process.
IMPORT_LINE = re.compile(r"^([ \t]*)(from [\w.]+ import [^()\n]+)$", re.MULTILINE)


def in_a_string(match: re.Match[str], package: str) -> str:
    """One import line, as ``rewrite`` spells it (a statement in code is spelled so already: the same again)."""
    if not match.group(2).startswith(f"from {package}."):
        return match.group(0)
    return match.group(1) + rewrite(RELEASE, match.group(2) + "\n", package).rstrip("\n").replace(
        "\n", "\n" + match.group(1)
    )


def rewrite_paths(text: str) -> str:
    """``data/decode.py`` -> ``data/decoding/decode.py``, ``commands/audit.py`` -> ``commands/audit/audit.py``."""
    for old, new in RELEASE.modules.items():
        old_path, new_path = old.replace(".", "/") + ".py", new.replace(".", "/") + ".py"
        text = re.sub(rf"(?<![\w/]){re.escape(old_path)}\b", new_path, text)
    return text


def main(repo: Path) -> None:
    moved_now = move_files(repo)
    files = subprocess.run(["git", "ls-files", *SCOPE], cwd=repo, capture_output=True, text=True).stdout.split()
    for name in files:
        path = repo / name
        if name in HISTORY or name.startswith("migrations/") or not path.is_file():
            continue
        text = path.read_text()
        new = rewrite_python(path, repo, moved_now) if name.endswith((".py", ".py.jinja")) else text
        new = rewrite_paths(new)
        if new != text:
            path.write_text(new)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]).resolve())
