"""Move a project's files to a release's new places, with the user's edits, for ``_migrations``.

Three releases moved files, and changed nothing else in them but their imports:

- v0.2.0 moved the package's 48 flat modules into folders (``core``, ``data``,
  ``models``, ``training``, ``outputs``, ``commands``, ``sweeps``);
- v0.10.0 moved the last three files beside the folders into them:
  ``extensions.py`` (the user's own) to ``models/``, ``slurm.py`` (``python -m
  <package>.slurm`` is now ``python -m <package>.training.slurm``) to
  ``training/``, and the answers' ``project_defaults.yaml`` to ``core/``;
- v0.13.0 moved ``data/``'s flat modules into three rooms (``files``,
  ``decoding``, ``loading``) and the audit's own modules, with its command and
  report, into ``commands/audit/``.

``RELEASES`` holds each one's table; ``rewrite``, below, is the function that
rewrote the imports in the template (``migrations/moves_0_10.py`` made
v0.10.0's move). copier update deletes a file that the old template had and
the new one lacks, edits included, and would merge a moved file against an
empty base (every differing line a conflict), so a move runs in two stages:

``before`` (in the project, before copier merges): for every file the user
edited, the user's version and the old template's version (read from the
template's git history at ``_version_from``), both with imports rewritten, are
kept under ``.git/torch-scaffold-moves/<release>``; the old file is removed
from the index. Every other Python file of the user's (their own modules,
their tests) gets its imports rewritten in place, so ``from .data import
build_loader`` still finds ``build_loader``; so do the files an earlier
release of the same update keeps aside.

``after`` (once copier has written the new layout): each kept file is merged
into its new path with ``git merge-file``: the old template's version as the
base, the new template's file as one side and the user's as the other. Edits
come through; a line that both changed is a conflict in that file. A file the
user owns (``extensions.py``: ``_skip_if_exists``) is not merged: the user's
version replaces the template's at the new path, as copier never overwrites
it. A file the template renders (``project_defaults.yaml``, from the answers)
is compared in ``before`` with the old template rendered with the old answers:
it is kept aside, and named as edited, only where the user changed it. Last,
every move of the release is staged as ``git mv`` stages one (``stage_moves``):
``git status`` lists it as renamed, edited or not.

Usage: python move_modules.py before|after TEMPLATE_DIR VERSION_FROM RELEASE
(the package's name is read from the project's ``.copier-answers.yml``:
copier does not render the answers into a migration's command).
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Release:
    """One release's moves, under the package: modules by dotted name, other files by path."""

    modules: dict[str, str]  # old module -> its new dotted place; what is not listed stays where it was
    files: dict[str, str] = field(default_factory=dict)  # old path -> new path: data, not code
    owned: frozenset[str] = frozenset()  # new places (dotted) of the files the user owns: theirs, never merged

    def paths(self) -> list[tuple[str, str, str | None, str | None]]:
        """Every move as (old path, new path, old module, new module), paths under the package; no module: data."""
        modules = [(f"{old.replace('.', '/')}.py", f"{new.replace('.', '/')}.py", old, new)
                   for old, new in self.modules.items()]  # fmt: skip
        return [*modules, *((old, new, None, None) for old, new in self.files.items())]


# v0.2.0: folder -> the old flat modules it holds now, under the same names. What is not listed stayed where it
# was: cli, slurm, __main__, extensions (the user's own file), project_defaults.yaml and the sweeps folder.
FOLDERS = {
    "core": "checkpoint config config_rules device distributed errors optional provenance seeding",
    "data": "augment bad_files batches cache gpu_decode mixing pipeline placement prefetch resident samplers"
    " sample_data",
    "training": "ema engine holdout inference optim preemption run_length run_lock run_state startup trainer",
    "outputs": "evaluation_report plots reporting tensorboard_log tracking",
    "commands": "export similarity sweep",
}
RENAMED = {"data": "data.folders", "model": "models.classifier", "outputs": "outputs.writers"}  # a folder's name now
MOVES = {**{name: f"{folder}.{name}" for folder, names in FOLDERS.items() for name in names.split()}, **RENAMED}
# v0.13.0: data/ room -> the modules it holds now, under the same names; folders.py and batches.py stay at data/'s top.
DATA_ROOMS = {
    "files": "bad_files file_index class_counts duplicates start_checks shards sample_data",
    "decoding": "decode codec",
    "loading": "pipeline loaders samplers prefetch placement resident cache store augment mixing gpu_decode"
    " decode_race",
}
RELEASES = {
    "v0.2.0": Release(MOVES),
    # v0.10.0: the last names beside the folders but cli.py (and the dunder files) go into them.
    "v0.10.0": Release(
        {"extensions": "models.extensions", "slurm": "training.slurm"},
        files={"project_defaults.yaml": "core/project_defaults.yaml"},
        owned=frozenset({"models.extensions"}),  # copier.yml's _skip_if_exists
    ),
    # v0.13.0: data/'s flat modules into three rooms, and the audit's own logic beside its command.
    "v0.13.0": Release(
        {
            **{f"data.{name}": f"data.{room}.{name}" for room, names in DATA_ROOMS.items() for name in names.split()},
            **{f"data.{name}": f"commands.audit.{name}" for name in ("findings", "near_copies", "label_checks")},
            "commands.audit": "commands.audit.audit",
            "commands.audit_report": "commands.audit.audit_report",
        }
    ),
}
STASH = "torch-scaffold-moves"  # under the project's .git folder: nothing there is merged or committed


def moved(release: Release, name: str) -> str:
    """The new dotted name (under the package) of an old one; new and unmoved names come back as they are.

    The longest old module that ``name`` starts with decides (``data.decode.read_file``: ``data.decode``); a
    name already in the new layout (``data.cache``, ``commands.audit.audit.run_audit``) is left alone.
    """
    if any(name == new or name.startswith(new + ".") for new in release.modules.values()):
        return name
    parts = name.split(".")
    for length in range(len(parts), 0, -1):
        old = ".".join(parts[:length])
        if old in release.modules:
            return ".".join([release.modules[old], *parts[length:]])
    return name


def relative(target: str, module: str) -> str:
    """``target`` (a dotted module or package under the top package) as seen from the module ``module``."""
    here, parts = module.split(".")[:-1], target.split(".") if target else []
    common = 0
    while common < min(len(here), len(parts)) and here[common] == parts[common]:
        common += 1
    return "." * (len(here) - common + 1) + ".".join(parts[common:])


def resolve(level: int, name: str | None, module: str) -> str:
    """The dotted name (under the package) that ``from <level dots><name>`` means inside ``module``."""
    here = module.split(".")[:-1]
    return ".".join([*here[: len(here) - (level - 1)], *([name] if name else [])])


def imports_modules(release: Release, source: str, names: list[ast.alias]) -> bool:
    """``from . import a, b`` (from the top package) or ``from .data import cache``: the names are modules.

    One moved or new module among the names makes them all modules, each then placed on its own.
    """
    modules = {*release.modules, *release.modules.values()}
    return not source or any(f"{source}.{alias.name}" in modules for alias in names)


def rewrite(
    release: Release, text: str, package: str, old_module: str | None = None, new_module: str | None = None
) -> str:
    """``text`` with every mention of a module that ``release`` moved pointing at its new place.

    Inside the package, ``old_module`` is the file's dotted name before the
    move (relative imports are resolved from it) and ``new_module`` after it
    (they are spelled from there). Outside it (tests, scripts) both are None:
    absolute ``package.name`` imports and dotted mentions (``monkeypatch.setattr("package.data.X", ...)``)
    are rewritten. A file already in the new layout is left as it is.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text  # not Python we can read: left as it is
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (first line, last line, replacement), 1-based, whole lines
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level > 0 and old_module is not None and new_module is not None:
            source = resolve(node.level, node.module, old_module)

            def spelled(target: str) -> str:
                return relative(target, new_module)  # type: ignore[arg-type]
        elif node.level == 0 and node.module is not None and node.module.split(".")[0] == package:
            source = node.module.partition(".")[2]

            def spelled(target: str) -> str:
                return f"{package}.{target}" if target else package
        else:
            continue
        indent = re.match(r"\s*", lines[node.lineno - 1]).group(0)  # type: ignore[union-attr]
        if imports_modules(release, source, node.names):
            # Each named module to its own place: one statement per package they now live in.
            groups: dict[str, list[str]] = {}
            for alias in node.names:
                parent, _, leaf = moved(release, f"{source}.{alias.name}" if source else alias.name).rpartition(".")
                bound = alias.asname or alias.name  # the name the code uses stays: outputs.writers as outputs
                groups.setdefault(parent, []).append(leaf + (f" as {bound}" if bound != leaf else ""))
            new = "".join(
                f"{indent}from {spelled(parent)} import {', '.join(names)}\n" for parent, names in groups.items()
            )
            old = "".join(lines[node.lineno - 1 : node.end_lineno])
            if new.split() != old.split():
                edits.append((node.lineno, node.end_lineno or node.lineno, new))
            continue
        first = lines[node.lineno - 1]
        match = re.match(r"(\s*from\s+)([.\w]+)(\s+import\b.*)", first, flags=re.DOTALL)
        spelling = spelled(moved(release, source))
        if match is not None and match.group(2) != spelling:
            edits.append((node.lineno, node.lineno, match.group(1) + spelling + match.group(3)))
    for first, last, new in sorted(edits, reverse=True):
        lines[first - 1 : last] = [new]
    # Dotted mentions outside import statements (those are done): strings, comments, attribute chains.
    imports = set()
    for node in ast.walk(ast.parse("".join(lines))):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.update(range(node.lineno - 1, node.end_lineno or node.lineno))
    return "".join(line if index in imports else mentions(release, line, package) for index, line in enumerate(lines))


def mentions(release: Release, text: str, package: str) -> str:
    """Dotted mentions of a moved module (``package.plots.plot_curves``) in code, strings or prose."""
    return re.sub(
        rf"(?<![\w.]){re.escape(package)}\.([a-z_]+(?:\.[a-z_]+){{0,2}})\b",
        lambda m: f"{package}.{moved(release, m.group(1))}",
        text,
    )


def git(*args: str, cwd: Path | None = None, check: bool = True) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True, text=True).stdout


def old_template_file(template: Path, version: str, path: str) -> str | None:
    """The old template's ``src/{{package_name}}/<path>`` at ``version``; None where history does not have it."""
    result = subprocess.run(
        ["git", "show", f"{version}:template/src/{{{{package_name}}}}/{path}"],
        cwd=template,
        capture_output=True,
        text=True,
    )
    return result.stdout if result.returncode == 0 else None


def old_template_files(template: Path, version: str, package: str) -> set[str]:
    """The project paths the old template wrote (``src/x/data.py``, ``tests/test_data.py``), from its git history."""
    listing = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", version, "template/"], cwd=template, capture_output=True, text=True
    ).stdout
    paths = (name.removeprefix("template/").removesuffix(".jinja") for name in listing.splitlines())
    return {path.replace("{{package_name}}", package).replace("{{ package_name }}", package) for path in paths}


def module_name(path: Path, package_dir: Path) -> str:
    return ".".join(path.relative_to(package_dir).with_suffix("").parts)


def answered_package() -> str:
    """``package_name`` as the project's answers file records it (written by copier: one ``key: value`` a line)."""
    found = re.search(r"^package_name:\s*['\"]?([\w]+)", Path(ANSWERS).read_text(), re.MULTILINE)
    if found is None:
        raise SystemExit(f"{ANSWERS} names no package_name: run this from the project's folder")
    return found.group(1)


ANSWERS = ".copier-answers.yml"


def stash_root() -> Path:
    return Path(git("rev-parse", "--git-dir").strip()) / STASH


def before(template: Path, version_from: str, name: str) -> None:
    release, package = RELEASES[name], answered_package()
    package_dir = Path("src") / package
    stash = stash_root() / name
    shutil.rmtree(stash, ignore_errors=True)
    stash.mkdir(parents=True)
    shutil.copyfile(ANSWERS, stash / "answers.yml")  # the old answers, to render the old template's files
    kept: dict[str, dict[str, str | bool | None]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for old, new, old_module, new_module in release.paths():
            path = package_dir / old
            if not path.is_file():
                continue
            base = old_template_file(template, version_from, old)
            if base is None and old_template_file(template, version_from, old + ".jinja") is not None:
                # A file the answers render (project_defaults.yaml): as the old template rendered it with them.
                base = old_rendered(template, version_from, stash / "answers.yml", Path(tmp, "old"), path)
            mine = path.read_text()
            if base is not None and mine == base:
                continue  # not edited: copier removes it and writes the new file
            key = new.replace("/", ".")
            if old_module is not None and new_module is not None:
                mine, base = (rewrite(release, text, package, old_module, new_module) if text else text
                              for text in (mine, base))  # fmt: skip
            (stash / f"{key}.mine").write_text(mine)
            if base is not None:
                (stash / f"{key}.base").write_text(base)
            kept[key] = {"old": str(path), "target": str(package_dir / new), "module": new_module,
                         "owned": new_module in release.owned, "new": new}  # fmt: skip
            git("rm", "--quiet", "--cached", "--", str(path))
            path.unlink()
    (stash / "moves.json").write_text(json.dumps(kept, indent=1))
    # The user's own Python files (modules, tests, scripts): their imports follow the move in place. The
    # template's own files are left to copier's merge, which brings their new imports.
    template_files = old_template_files(template, version_from, package)
    for path in Path(".").rglob("*.py"):
        if ".git" in path.parts or path.as_posix() in template_files or not path.is_file():
            continue
        inside = package_dir in path.parents
        text = path.read_text()
        module = module_name(path, package_dir) if inside else None
        new_text = rewrite(release, text, package, module, module)
        if new_text != text:
            path.write_text(new_text)
            git("add", "--", str(path))
    follow_in_earlier_stashes(release, name, package)
    if kept:  # only files whose text differs from what the old template wrote: the user's edits
        edited = sorted(str(entry["new"]) for entry in kept.values())
        print(f"moving {len(kept)} edited file(s) to the {name} layout: {', '.join(edited)}")


def follow_in_earlier_stashes(release: Release, name: str, package: str) -> None:
    """The modules an earlier release of this update keeps aside (both sides) get this release's imports too."""
    for other in (p for p in stash_root().iterdir() if p.name in RELEASES and order(p.name) < order(name)):
        for key, entry in json.loads((other / "moves.json").read_text()).items():
            for side in (other / f"{key}.mine", other / f"{key}.base"):
                if entry.get("module") and side.is_file():
                    module = str(entry["module"])
                    side.write_text(rewrite(release, side.read_text(), package, module, module))


def order(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.removeprefix("v").split("."))


def render_old(template: Path, version_from: str, answers: Path, dest: Path) -> Path:
    """The old template as the project's last update rendered it: ``version_from``, with the old answers."""
    import yaml
    from copier import run_copy  # copier's own Python runs this step

    data = {key: value for key, value in yaml.safe_load(answers.read_text()).items() if not str(key).startswith("_")}
    run_copy(str(template), dest, data=data, vcs_ref=version_from, defaults=True, overwrite=True, quiet=True,
             unsafe=True)  # fmt: skip
    return dest


def old_rendered(template: Path, version_from: str, answers: Path, dest: Path, path: Path) -> str | None:
    """``path`` (a project path) as the old template rendered it with the old answers; the template is rendered
    into ``dest`` once, for the first file that asks."""
    if not dest.is_dir():
        render_old(template, version_from, answers, dest)
    rendered = dest / path
    return rendered.read_text() if rendered.is_file() else None


def after(template: Path, version_from: str, name: str) -> None:
    stash = stash_root() / name
    conflicts = []
    if (stash / "moves.json").is_file():
        for key, entry in json.loads((stash / "moves.json").read_text()).items():
            mine, base, path = stash / f"{key}.mine", stash / f"{key}.base", Path(str(entry["target"]))
            path.parent.mkdir(parents=True, exist_ok=True)
            if entry["owned"] or not path.is_file() or not base.is_file():
                shutil.copyfile(mine, path)  # the user's own file, or nothing to merge with: the user's version, moved
                continue
            if merge_into(path, mine, base):
                conflicts.append(str(path))
        shutil.rmtree(stash)
    stage_moves(RELEASES[name], Path("src") / answered_package(), set(conflicts))
    if conflicts:
        print(f"moved files with conflicts to resolve: {', '.join(conflicts)}")


def stage_moves(release: Release, package_dir: Path, unmerged: set[str]) -> None:
    """Each move in git's index as ``git mv`` would leave it: the old path removed, the new one added, so that
    ``git status`` shows a rename (not a staged deletion beside an untracked file) and ``git diff --staged -M`` the
    edits it carries. A file with a conflict keeps its unmerged stages: adding it would mark it resolved."""
    if git("rev-parse", "--is-inside-work-tree", check=False).strip() != "true":
        return  # not a git repository: nothing to stage
    for old, new, _, _ in release.paths():
        before, moved_to = package_dir / old, package_dir / new
        if before.exists() or not moved_to.is_file() or str(moved_to) in unmerged:
            continue  # not moved here (a file the user kept at the old path, or one the new layout lacks)
        committed = subprocess.run(["git", "cat-file", "-e", f"HEAD:{before.as_posix()}"], capture_output=True)
        if committed.returncode != 0:
            continue  # the project never had it: a new file of the template's, left as copier leaves new files
        git("rm", "--quiet", "--cached", "--ignore-unmatch", "--", str(before))
        git("add", "--", str(moved_to))


def merge_into(path: Path, mine: Path, base: Path) -> bool:
    """The user's version of ``path``, with the template's change since ``base``, written there; True: conflicts."""
    theirs = path.read_text()
    work = path.with_name(path.name + ".mine")
    shutil.copyfile(mine, work)
    # merge-file writes into its first file: the user's version, with the template's change since the base.
    files = [str(work), str(base), str(path)]
    labels = ["-L", "before updating", "-L", "last update", "-L", "after updating"]
    status = subprocess.run(["git", "merge-file", *labels, *files], capture_output=True, check=False).returncode
    shutil.move(work, path)
    if status:
        record_conflict(path.as_posix(), mine.read_text(), base.read_text(), theirs)
    return status != 0


def record_conflict(path: str, mine: str, base: str, theirs: str) -> None:
    """Mark ``path`` unmerged in the index, as copier and git merge do, so that ``git status`` and tools list it."""

    def blob(text: str) -> str:
        return subprocess.run(
            ["git", "hash-object", "-w", "--stdin"], input=text, capture_output=True, text=True, check=True
        ).stdout.strip()

    entries = [f"0 {'0' * 40}\t{path}"] + [
        f"100644 {blob(text)} {stage}\t{path}" for stage, text in ((1, base), (2, mine), (3, theirs))
    ]
    subprocess.run(["git", "update-index", "--index-info"], input="\n".join(entries) + "\n", text=True, check=True)


if __name__ == "__main__":
    stage, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if stage not in ("before", "after") or len(args) != 3 or args[2] not in RELEASES:
        raise SystemExit(__doc__)
    (before if stage == "before" else after)(Path(args[0]), args[1], args[2])
