"""Release v0.10.0's move, made in this repository: the last files beside the package's folders go into them.

    python migrations/moves_0_10.py [--template-only] [REPO]

(REPO: this script's repository by default; --template-only: what copier
reads, template/, copier.yml and PRACTICES.md, as the tests' copies hold)

moves (``git mv`` in a git work tree) ``extensions.py`` to ``models/``,
``slurm.py`` to ``training/`` and ``project_defaults.yaml.jinja`` to ``core/``
in ``template/src/{{package_name}}/``, the table ``RELEASES["v0.10.0"]`` of
``move_modules.py`` (which moves a project's edited files the same way on
``copier update``), then rewrites every mention, and changes nothing else:

- imports: in the package, relative ones re-spelled from each file's place
  (``from .. import extensions`` in ``data/folders.py`` is ``from ..models
  import extensions``); in tests, ``from <package> import slurm``
  (``move_modules.rewrite``, the function that moves a user's imports);
- dotted names (``python -m <package>.slurm``, ``f"{PACKAGE}.slurm"``) and
  paths (``src/<package>/extensions.py``, ``slurm.py`` in prose, ``package /
  "extensions.py"``) in the template, copier.yml (``_skip_if_exists``), the
  repository's tests, README.md, PRACTICES.md, benchmarks/ and generator/;
- the generated README's "Layout" tree: each moved line goes under its folder;
  a one-level tree of the package (README.md's): into its folder's description;
- the lines no rule above can know (``EDITS``: a path read by name, a message
  that names the package, lines the longer names would make too long).

Each Python file it changed then has its imports sorted and is formatted by
ruff (run it with the repository's .venv/bin/python), as the tests lint them.

The move is a script so that it can be made again on a later tree: a move
already made is skipped and every rewrite leaves rewritten text as it is. It
ends with status 1, naming them, where an ``EDITS`` line or a Layout line is in
neither its old form nor its new one (a branch changed it since), or where a
line it made is over 120 characters: edit those by hand, then run the
template's tests. History keeps the old names: CHANGELOG.md, ``migrations/``
and the tests of the moves themselves are not rewritten.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from move_modules import RELEASES, rewrite  # a script beside this one, not a package

RELEASE = RELEASES["v0.10.0"]
PACKAGE_DIR = Path("template/src/{{package_name}}")
JINJA_NAME = "{{ package_name }}"
PLACEHOLDER = "tspkg_placeholder"  # the package's name while a Jinja file is parsed as Python
SAME_LENGTH = "package_name_here_"  # while ruff formats one: as long as the Jinja name, so lines wrap where they did
TEMPLATE_SCOPE = ["template", "copier.yml", "PRACTICES.md"]  # what copier reads: --template-only
SCOPE = [*TEMPLATE_SCOPE, "tests", "benchmarks", "generator", "README.md", "Makefile"]
HISTORY = {"tests/test_update_move.py", "tests/test_update_move_0_10.py"}  # about the moves: the old names on purpose
# The package as the texts name it: the Jinja variable, the docs' placeholders, the tests' f-strings and project.
PACKAGE_NAMES = r"(?:\{\{ ?package_name ?\}\}|<package>|<package_name>|\{PACKAGE\}|\{package\}|x_pkg)"
# (file, old text, new text): what no rule can know. Each must be found in one form or the other.
EDITS = [
    (f"{PACKAGE_DIR}/core/config.py", 'resources.files(PACKAGE).joinpath("project_defaults.yaml")',
     'resources.files(PACKAGE).joinpath("core").joinpath("project_defaults.yaml")'),
    (f"{PACKAGE_DIR}/core/__init__.py", "(and ``extensions``, never)", "(and ``models/extensions.py``, never)"),
    (f"{PACKAGE_DIR}/data/__init__.py", "Imports the core (and ``extensions`` for your transforms)",
     "Imports the core (and ``models/extensions.py`` for your transforms)"),
    ("tests/test_generate.py", "__init__ __main__ cli slurm extensions core/config",
     "__init__ __main__ cli models/extensions training/slurm\ncore/config"),
    ("tests/test_change_guide.py", '"a new model": ["extensions.py"]', '"a new model": ["models/extensions.py"]'),
    ("tests/test_change_guide.py", '"a new augmentation": ["extensions.py",',
     '"a new augmentation": ["models/extensions.py",'),
    (f"{PACKAGE_DIR}/training/slurm.py", "train without Slurm with `python -m {__package__} train`",
     "train without Slurm with `python -m {__package__.rpartition('.')[0]} train`"),  # __package__: training now
    ("template/tests/test_slurm.py.jinja",
     'f"{PACKAGE}.slurm", "torchrun", "--nproc-per-node=1", str(child), str(started)]',
     'f"{PACKAGE}.training.slurm", "torchrun", "--nproc-per-node=1"]\n    command += [str(child), str(started)]'),
    ("template/tests/test_batch_augment.py.jinja",
     "    (not through a config key or extensions.py) is seen, and the batch path, which would skip it, is not taken.",
     "    (not through a config key or models/extensions.py) is seen, and the batch path, which would skip it, is\n"
     "    not taken."),
]  # fmt: skip


def moves() -> list[tuple[str, str]]:
    """(old path, new path) under the template's package folder: the modules, then the data files."""
    return [(old, new) for old, new, _, _ in RELEASE.paths()]


def move_files(repo: Path) -> list[str]:
    """The moves not made yet, made (``git mv`` where the repository is a git work tree): their new paths."""
    in_git = subprocess.run(["git", "rev-parse"], cwd=repo, capture_output=True).returncode == 0
    done = []
    for old, new in moves():
        for suffix in ("", ".jinja"):
            source, target = repo / PACKAGE_DIR / (old + suffix), repo / PACKAGE_DIR / (new + suffix)
            if source.is_file() and not target.exists():
                if in_git:
                    subprocess.run(["git", "mv", str(source), str(target)], cwd=repo, check=True)
                else:
                    source.rename(target)
                done.append(new + suffix)
    return done


def rewrite_package(path: Path, package_dir: Path, just_moved: set[str]) -> str:
    """A module of the template's package with its relative imports spelled from its place: a module this run
    moved has them resolved from its old place, any other from where it is."""
    module = ".".join(path.relative_to(package_dir).with_suffix("").parts)
    old = {new: old for old, new in RELEASE.modules.items()}.get(module, module) if module in just_moved else module
    return rewrite(RELEASE, path.read_text(), PLACEHOLDER, old, module)


def rewrite_outside(text: str) -> str:
    """A test or script: its absolute imports of the package, the Jinja name read as a package's while parsed."""
    text = rewrite(RELEASE, text.replace(JINJA_NAME, PLACEHOLDER), PLACEHOLDER).replace(PLACEHOLDER, JINJA_NAME)
    return rewrite(RELEASE, text, "x_pkg")


def rewrite_mentions(text: str) -> str:
    """Dotted names and paths of the moved files, in code, strings and prose."""
    for old, new in RELEASE.modules.items():
        text = re.sub(rf"(?<![\w.])({PACKAGE_NAMES})\.{old}\b(?![\w/])", rf"\1.{new}", text)
    for old, new in moves():
        folder, name = new.rpartition("/")[0], re.escape(old)
        text = re.sub(rf"({PACKAGE_NAMES}/){name}(?![\w/])", rf"\g<1>{new}", text)  # src/<package>/slurm.py
        text = re.sub(rf'(?<!"{folder}" )/ "{name}((?:\.jinja)?)"', rf'/ "{folder}" / "{old}\1"', text)  # pathlib
        text = re.sub(rf"(?<![\w./<>{{}}-]){name}(?![\w/-])", lambda m, new=new: bare(m, new), text)  # prose
    return text


def bare(match: re.Match[str], new: str) -> str:
    """A name with no folder: its new path, but for a whole quoted string (a file's name: ``p.name == "..."``)
    and a line of the README's Layout tree (moved by ``move_layout_lines``)."""
    text, start, end = match.string, match.start(), match.end()
    quoted = start > 0 and text[start - 1] == '"' and re.match(r'(\.jinja)?"', text[end:]) is not None
    line_start = text.rfind("\n", 0, start) + 1
    tree_line = re.fullmatch(r" +", text[line_start:start]) is not None and text[end : end + 2] == "  "
    return match.group(0) if quoted or tree_line else new


def move_layout_lines(readme: str) -> tuple[str, list[str]]:
    """The README's Layout tree with each moved file's line under its folder; what could not be found."""
    head, sep, rest = readme.partition("### Layout\n")
    if not sep:
        return readme, ["template/README.md.jinja has no ### Layout section"]
    tree, fence, tail = _block(rest)
    lines, missing = tree.split("\n"), []
    for old, new in moves():
        folder, name = new.rsplit("/", 1)
        top = [i for i, line in enumerate(lines) if re.match(rf"  {re.escape(old)}  ", line)]
        if not top:
            if not any(re.match(rf"    {re.escape(name)}  ", line) for line in lines):
                missing.append(f"template/README.md.jinja Layout: no line for {old} (top) or {new}")
            continue
        description = lines.pop(top[0])[2 + len(old) :].strip()
        opening = next(i for i, line in enumerate(lines) if line.startswith(f"  {folder}/"))
        end = opening + 1
        while end < len(lines) and lines[end].startswith("    "):
            end += 1
        column = len(re.match(r"    \S+ +", lines[opening + 1]).group(0))  # type: ignore[union-attr]
        entry = f"    {name}"
        lines.insert(end, entry + " " * max(column - len(entry), 2) + description)  # in the folder's column
    return head + sep + "\n".join(lines) + fence + tail, missing


def fold_tree_lines(text: str, name: str) -> tuple[str, list[str]]:
    """A one-level tree of the package (README.md's "what a project holds": each folder with a description) with
    each moved file's line folded into its folder's description; the lines that have no folder to go to."""
    missing = []
    for old, new in moves():
        folder = new.rsplit("/", 1)[0]
        for line in re.findall(rf"^ +{re.escape(old)} {{2,}}\S.*\n", text, flags=re.MULTILINE):
            indent, description = line[: len(line) - len(line.lstrip())], line.strip()[len(old) :].strip()
            parent = re.search(rf"^{indent}{folder}/ {{2,}}\S.*$", text, flags=re.MULTILINE)
            if parent is None:
                missing.append(f"{name}: the tree line of {old} has no {folder}/ line beside it to go to")
                continue
            folded = f"{parent.group(0)}; {new}: {description}"  # the path, not the name: the rules keep it
            text = text.replace(parent.group(0), folded, 1).replace(line, "", 1)
    return text, missing


def _block(rest: str) -> tuple[str, str, str]:
    """The Layout section's code block (the tree, through its closing fence's newline), and the rest."""
    opening = rest.index("```\n") + 4
    closing = rest.index("\n```", opening)
    return rest[:closing], rest[closing : closing + 4], rest[closing + 4 :]


def tidy(path: Path, repo: Path, original: str) -> list[str]:
    """A rewritten Python file with its imports sorted and formatted by ruff, as the tests lint it (a Jinja file
    with the package's name read as a first-party package of the same length, so that lines wrap where they did);
    each line the rewrite made longer than 120 characters, which ruff cannot wrap (comments, docstrings)."""
    jinja = path.name.endswith(".jinja")
    text = path.read_text().replace(JINJA_NAME, SAME_LENGTH) if jinja else path.read_text()
    name = str(path.relative_to(repo)).removesuffix(".jinja")
    first_party = ["--config", f"lint.isort.known-first-party=['{SAME_LENGTH}']"] if jinja else []
    settings = ["--line-length", "120", "--target-version", "py310", "--quiet"]  # as pyproject.toml's, here or not
    for command in (["check", "--fix", "--select", "I", "--exit-zero", *first_party], ["format"]):
        done = subprocess.run([sys.executable, "-m", "ruff", *command, *settings, "--stdin-filename", name, "-"],
                              cwd=repo, input=text, text=True, capture_output=True)  # fmt: skip
        if done.returncode != 0:
            return [f"{name}: ruff {command[0]} failed ({done.stderr.strip()[:200]}): tidy it by hand"]
        text = done.stdout
    path.write_text(text.replace(SAME_LENGTH, JINJA_NAME) if jinja else text)
    longest, had = "x" * 40, set(original.splitlines())  # the longest package name the answers allow
    return [f"{name}:{number}: over 120 characters" for number, line in enumerate(path.read_text().splitlines(), 1)
            if line not in had and len(line.replace(JINJA_NAME, longest)) > 120]  # fmt: skip


def scope_files(repo: Path, scope: list[str]) -> list[Path]:
    files: list[Path] = []
    for name in scope:
        path = repo / name
        found = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
        files += [p for p in found if "__pycache__" not in p.parts and p.suffix not in (".pyc", ".png", ".pt")]
    return [p for p in files if p.relative_to(repo).as_posix() not in HISTORY]


def apply_edits(repo: Path, scope: list[str]) -> list[str]:
    """``EDITS`` made; each one found in neither form."""
    missing = []
    for name, old, new in (edit for edit in EDITS if edit[0].split("/")[0] in scope):
        path = repo / name
        text = path.read_text() if path.is_file() else ""
        if old in text:
            path.write_text(text.replace(old, new))
        elif new not in text:
            missing.append(f"{name}: neither {old!r} nor {new!r}")
    return missing


def read(path: Path) -> str | None:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        return None  # not text: no mention to rewrite


def main(repo: Path, scope: list[str]) -> int:
    moved = move_files(repo)
    package_dir, readme = repo / PACKAGE_DIR, repo / "template" / "README.md.jinja"
    before = {path: read(path) for path in scope_files(repo, scope)}
    missing = apply_edits(repo, scope)  # first: the rules below leave their new text as it is
    for path in before:
        text = read(path)
        if text is None:
            continue
        if path.suffix == ".py" and package_dir in path.parents:
            text = rewrite_package(path, package_dir, {new.removesuffix(".py").replace("/", ".") for new in moved})
        elif path.name.endswith((".py", ".py.jinja")):
            text = rewrite_outside(text)
        text = rewrite_mentions(text)
        if path == readme:
            text, not_found = move_layout_lines(text)
            missing += not_found
        elif path.name.endswith((".md", ".md.jinja")):
            text, not_found = fold_tree_lines(text, path.relative_to(repo).as_posix())
            missing += not_found
        if text != read(path):
            path.write_text(text)
    changed = [path for path, text in before.items() if read(path) != text]
    for path in changed:
        if path.name.endswith((".py", ".py.jinja")):
            missing += tidy(path, repo, before[path] or "")
    print(f"moved to {PACKAGE_DIR}/: {', '.join(moved) or 'nothing (moved before)'}")
    print(f"rewrote {len(changed)} file(s): {', '.join(path.relative_to(repo).as_posix() for path in changed)}")
    for line in missing:
        print(f"by hand: {line}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    template_only = "--template-only" in args
    args = [arg for arg in args if arg != "--template-only"]
    if len(args) > 1 or any(arg.startswith("-") for arg in args):
        raise SystemExit(__doc__)
    sys.exit(
        main(Path(args[0]) if args else Path(__file__).resolve().parents[1], TEMPLATE_SCOPE if template_only else SCOPE)
    )
