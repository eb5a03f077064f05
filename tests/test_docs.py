"""Every reference in the docs resolves: practice IDs, modules, tests, lint rules and links.

PRACTICES.md is the table the code, the tests, the lint rules and both
READMEs cite; a renamed module or test, or a practice cited but never
defined, fails here rather than sending a reader to nothing.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest

from torch_scaffold.lint import RULES

from .conftest import DEFAULT_ANSWERS, PROJECT_TEST_COMMAND, REPO

PACKAGE = REPO / "template" / "src" / "{{package_name}}"
TESTS = REPO / "template" / "tests"
PRACTICE_ID = re.compile(r"\bP(1[0-9]|[1-9])\b")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def practices() -> dict[str, tuple[str, str, str]]:
    """PRACTICES.md's table: ID -> (practice, where, proof)."""
    rows = {}
    for line in (REPO / "PRACTICES.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and PRACTICE_ID.fullmatch(cells[0]):
            rows[cells[0]] = (cells[1], cells[2], cells[3])
    return rows


def defined_names(path: Path) -> set[str]:
    tree = ast.parse(re.sub(r"\{\{ *package_name *\}\}", "x_pkg", path.read_text()))  # the tests are Jinja
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}


def cited_files() -> list[Path]:
    roots = [REPO / "template", REPO / "generator"]
    files = [p for root in roots for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return [*files, REPO / "README.md", REPO / "copier.yml", REPO / ".pre-commit-hooks.yaml"]


def test_the_table_holds_p1_to_p17_in_order() -> None:
    assert list(practices()) == [f"P{i}" for i in range(1, 18)]


def test_every_practice_cited_anywhere_is_in_the_table() -> None:
    known = set(practices())
    unknown = {
        f"{path.relative_to(REPO)}: {match.group(0)}"
        for path in cited_files()
        for match in PRACTICE_ID.finditer(path.read_text(errors="replace"))
        if match.group(0) not in known
    }
    assert not unknown, sorted(unknown)


def test_where_names_modules_and_functions_of_the_generated_package() -> None:
    for practice, (_, where, _) in practices().items():
        if where == "every module":
            continue
        for module, inside in re.findall(r"`(\w+\.py)`(?: \(([^)]*)\))?", where):
            assert (PACKAGE / module).is_file(), f"{practice}: no module {module}"
            for name in re.findall(r"`([\w.]+)`", inside):
                assert name.split(".")[-1] in defined_names(PACKAGE / module), f"{practice}: {module} has no {name}"


def test_proof_names_tests_and_lint_rules_that_exist() -> None:
    codes = {rule.code for rule in RULES}
    for practice, (_, _, proof) in practices().items():
        tests = re.findall(r"`tests/(test_\w+\.py)(?:::(\w+))?`", proof)
        rules = re.findall(r"\bTSC\d{3}\b", proof)
        assert tests or rules, f"{practice}: the proof names no test and no lint rule"
        for test_file, test_name in tests:
            source = TESTS / f"{test_file}.jinja"
            assert source.is_file(), f"{practice}: no tests/{test_file} in the generated project"
            assert not test_name or test_name in defined_names(source), f"{practice}: {test_file} has no {test_name}"
        assert set(rules) <= codes, f"{practice}: unknown lint rules {set(rules) - codes}"


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_each_lint_rule_is_the_proof_of_the_practice_its_message_cites(rule: object) -> None:
    cited = PRACTICE_ID.findall(rule.message)  # type: ignore[attr-defined]
    assert len(cited) == 1, rule
    assert rule.code in practices()[f"P{cited[0]}"][2]  # type: ignore[attr-defined]


def test_docstrings_that_cite_practices_md_find_it() -> None:
    citing = [p for p in (REPO / "generator").rglob("*.py") if "PRACTICES.md" in p.read_text()]
    assert citing, "generator/ docstrings cite PRACTICES.md"
    assert (REPO / "PRACTICES.md").is_file()


@pytest.mark.parametrize("doc", ["README.md", "PRACTICES.md", "CHANGELOG.md", "benchmarks/README.md"])
def test_links_in_the_repository_docs_resolve(doc: str) -> None:
    for target in LINK.findall((REPO / doc).read_text()):
        if not re.match(r"^[a-z]+://", target):
            assert ((REPO / doc).parent / target).exists(), f"{doc} links to {target}, which does not exist"


def test_the_generated_project_carries_practices_md_and_its_readme_links_resolve(project: Path) -> None:
    assert (project / "PRACTICES.md").read_text() == (REPO / "PRACTICES.md").read_text()
    readme = (project / "README.md").read_text()
    assert "[PRACTICES.md](PRACTICES.md)" in readme
    for page in [project / "README.md", *(project / "docs").glob("*.md")]:  # anchors too: the project's test_docs
        for target in LINK.findall(page.read_text()):
            if not re.match(r"^[a-z]+://", target):
                assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"
    table = readme.split("## Practices", 1)[1].split("\n## ", 1)[0]
    for module in re.findall(r"`(\w+\.py)`", table):
        assert (project / "src" / "x_pkg" / module).is_file() or (project / "tests" / module).is_file(), module


def test_readmes_tell_project_owners_to_read_the_changelog_before_updating(project: Path) -> None:
    assert (REPO / "CHANGELOG.md").read_text().count("## [Unreleased]") == 1
    teams = (REPO / "README.md").read_text().split("## For teams", 1)[1].split("\n## ", 1)[0]
    assert "[CHANGELOG.md](CHANGELOG.md)" in teams and "before `copier update`" in teams
    updating = (project / "docs" / "updating.md").read_text()
    assert updating.startswith("# What `copier update` touches\n")
    assert "read\n`CHANGELOG.md` in the template" in updating
    assert "[What `copier update` touches](docs/updating.md)" in (project / "README.md").read_text()


def test_the_readme_and_updating_md_agree_that_one_update_crosses_the_moves(project: Path) -> None:
    """Issue 59: the README said to update across v0.10.0 in two steps, the project's docs/updating.md in one.
    tests/test_update_move_0_10.py shows one update crossing v0.10.0, and v0.2.0 with it: both say so."""
    readme = " ".join((REPO / "README.md").read_text().split())
    updating = " ".join((project / "docs" / "updating.md").read_text().split())
    assert "A project crosses a move in one update, from any earlier release and across every move at once" in readme
    assert "One update crosses them, from any earlier version and across all at once" in updating
    for text in (readme, updating):
        assert "--vcs-ref v0.10.0" not in text and "--vcs-ref v0.2.0" not in text
        assert "lists every moved file as renamed" in text or "lists each moved file as renamed" in text


TREE_HEADING = "## What a generated project contains"
# A file named in an entry's description (`decode.py`, `recipes/strong.yaml`): it must exist too.
NAMED_FILE = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.(?:py|yaml|yml|sbatch))\b")
Entry = tuple[str, str]  # a name as the README writes it (a folder ends in /), and its description


def readme_tree(readme: str) -> tuple[list[Entry], list[Entry]]:
    """The README's tree of a generated project: its top-level entries, and those of ``src/<package_name>/``.

    One entry a line, its name first, then its description; the package's entries are indented two spaces more,
    under the line ``src/<package_name>/``; a line indented otherwise continues the description above it.
    """
    section = readme.split(f"\n{TREE_HEADING}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"^```\n(.*?)^```", section, re.S | re.M)
    assert block, f"{TREE_HEADING}: no tree"
    lines = [line for line in block.group(1).splitlines() if line.strip() and line.strip() != "<project_slug>/"]
    base = min(len(line) - len(line.lstrip()) for line in lines)
    top: list[Entry] = []
    inside: list[Entry] = []
    for line in lines:
        indent, (name, _, description) = len(line) - len(line.lstrip()), line.strip().partition(" ")
        if indent == base:
            top.append((name, description.strip()))
        elif indent == base + 2 and top[-1][0] == "src/<package_name>/":
            inside.append((name, description.strip()))
        else:  # a description that goes on
            entries = inside if inside and top[-1][0] == "src/<package_name>/" else top
            entries[-1] = (entries[-1][0], f"{entries[-1][1]} {line.strip()}")
    return top, inside


def holds(folder: Path, project: Path) -> set[str]:
    """What a folder of a generated project holds, less dunder files and what its .gitignore leaves out (caches,
    an install's egg-info; /runs/ and /data/ at the top only): what copier wrote, whatever tests did there since."""
    patterns = [line.strip() for line in (project / ".gitignore").read_text().splitlines()]
    ignored = [g.strip("/") for g in patterns if g and not g.startswith("#") and (folder == project or g[0] != "/")]
    return {
        path.name
        for path in folder.iterdir()
        if not re.fullmatch(r"__\w+__(\.py)?", path.name) and not any(fnmatch(path.name, g) for g in ignored)
    }


def tree_differences(readme: str, project: Path, package: str) -> list[str]:
    """Where the README's tree and a generated project disagree, each in a line; none when they agree."""
    top, inside = readme_tree(readme)
    src = project / "src" / package
    problems = []
    for where, folder, entries in (("the project", project, top), ("src/<package_name>/", src, inside)):
        listed = {name.split("/")[0] for name, _ in entries}
        on_disk = holds(folder, project) if folder.is_dir() else set()
        problems += [f"{where}: the README names {name}, which a generated project lacks" for name in listed - on_disk]
        problems += [f"{where}: the README misses {name}, which a generated project holds" for name in on_disk - listed]
        for name, description in entries:
            path = folder / name.replace("<package_name>", package)
            if path.exists() and path.is_dir() != name.endswith("/"):
                kind = "a folder" if path.is_dir() else "a file"
                problems.append(f"{where}: {name} is {kind} in a generated project")
            for named in NAMED_FILE.findall(description):
                if not any((base / named).is_file() for base in (path, path.parent, project)):
                    problems.append(f"{where}: {name}'s line names {named}, which a generated project lacks")
    if holds(project / "src", project) != {package}:
        problems.append(f"src/ holds {sorted(holds(project / 'src', project))}, the README only src/<package_name>/")
    practices_cited = f"P1..P{len(practices())}"
    if not any(name == "tests/" and practices_cited in description for name, description in top):
        problems.append(f"the tests/ line does not say {practices_cited}, the practices PRACTICES.md has")
    return sorted(problems)


def test_the_readme_tree_is_a_generated_projects(project: Path) -> None:
    """Issue 47: the README named modules that had moved into folders three releases before (cli, config, data,
    sample_data, model, ...) and 16 practices of 17. Its tree must be the generated project's, at the top level and
    in the package, folders and files alike, with every file its descriptions name: a release that moves, adds or
    renames an entry fails here until the README says so."""
    problems = tree_differences((REPO / "README.md").read_text(), project, DEFAULT_ANSWERS["package_name"])
    assert not problems, "\n".join(problems)


def test_the_readme_opens_with_what_it_is_the_two_commands_the_tree_and_the_alternatives() -> None:
    """The first screen is for users: the two commands (the ones the Makefile has and .ci/run calls), the team
    workflow, what a project holds, how it compares; the test suite's timing is for maintainers, in
    benchmarks/README.md."""
    readme = (REPO / "README.md").read_text()
    headings = re.findall(r"^## (.+)$", readme, re.M)
    first = ["The team workflow", TREE_HEADING.removeprefix("## "), "How it compares", "Start a project"]
    assert headings[:4] == first, headings[:4]
    # Issue 60: the team workflow first, in at most 30 lines: copy, check, status, update, as commands.
    team = readme.split("\n## The team workflow\n", 1)[1].split("\n## ", 1)[0]
    assert len(team.strip().splitlines()) <= 30, len(team.strip().splitlines())
    steps = re.findall(r"^torch-scaffold (\w+)", team, re.M)
    assert steps == ["new", "check", "status", "update"], steps
    commands = re.search(r"```bash\n(.*?)```", readme.split("\n## ", 1)[0], re.S)
    assert commands, "the README opens with its two commands"
    said = [line.split("#")[0].split() for line in commands.group(1).splitlines()]
    assert said == [["make", "demo"], ["make", "test"]], said
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "\nmake test\n" in (REPO / ".ci" / "run").read_text()
    table = readme.split("\n## How it compares\n", 1)[1].split("\n## ", 1)[0]
    header = next(line for line in table.splitlines() if line.startswith("| |"))
    for alternative in ("pytorch/examples", "references/classification", "timm", "lightning-hydra-template", "fast.ai"):
        assert alternative in header, alternative
    assert "CPU-seconds" not in readme and "CPU-seconds" in (REPO / "benchmarks" / "README.md").read_text()


def test_the_readme_shows_no_invented_hosting_urls() -> None:
    docs = [REPO / "README.md", REPO / ".pre-commit-hooks.yaml", REPO / "CHANGELOG.md"]
    text = "\n".join(p.read_text() for p in [*docs, *(REPO / "template").glob("**/*.md.jinja")])  # README, docs/
    for invented in ("gh:torch-scaffold", "git.example.org", "https://github.com/torch-scaffold"):
        assert invented not in text, invented


def test_the_generated_readme_documents_what_a_new_user_meets(project: Path) -> None:
    """Issue 16's docs: run outputs, TensorBoard, small data, resume with more epochs, predict folders, export."""
    readme = "".join(page.read_text() for page in [project / "README.md", *(project / "docs").glob("*.md")])
    for text in (
        "| `curves.png` |",
        "tensorboard --logdir runs",
        "## Small data",
        "model: {name: resnet50, pretrained_weights: IMAGENET1K_V2}",
        "the learning-rate schedule was reshaped (train.epochs 15 -> 30)",
        "--csv predictions.csv photos/",
        "custom_metadata_map",
        "each image with its class name",
    ):
        assert text in readme, text


FIRST_STEPS = ["Install", "Train on the sample data", "Train on your own photos", "Check your data",
               "Fine-tune published weights", "Stop and resume", "Evaluate and predict", "Export"]  # fmt: skip
FIRST_STEPS_MAX_LINES = 200  # four screens of 50 lines


def test_the_generated_readme_starts_with_the_first_steps_in_a_few_screens(project: Path) -> None:
    """Issue 47: the path a newcomer walks comes first and stays short, each step a command; the commands and the
    reference (docs/, then the README's own reference sections) follow."""
    readme = (project / "README.md").read_text()
    assert re.findall(r"^## (.+)$", readme, flags=re.MULTILINE)[:3] == ["First steps", "Commands", "Reference"]
    path = readme.split("\n## First steps\n", 1)[1].split("\n## ", 1)[0]
    assert len(path.splitlines()) <= FIRST_STEPS_MAX_LINES, "the first steps grew: move the detail to docs/"
    steps = re.split(r"^### \d\. ", path, flags=re.MULTILINE)[1:]
    assert [step.split("\n", 1)[0] for step in steps] == FIRST_STEPS
    for step in steps:
        assert "```bash\npython " in step, step.split("\n", 1)[0]  # its command, to copy
    import yaml

    message = yaml.safe_load((REPO / "copier.yml").read_text())["_message_after_copy"]
    commands = [line.split("#")[0].strip() for line in message.splitlines() if line.strip().startswith("python ")]
    first = [command for command in commands if "pytest" not in command]  # the tests come after the path
    assert first and all(command.replace("{{ package_name }}", "x_pkg") in path for command in first)


def test_the_template_readme_lists_the_questions_and_commands() -> None:
    readme = (REPO / "README.md").read_text()
    texts = ("| `ci_workflow` |", "`similar --checkpoint", "`export --checkpoint", "newest [PEP 440]", "0.0.0.post")
    for text in texts:
        assert text in readme, text


def test_the_generated_readme_states_no_test_count_and_the_suite_duration_as_a_dated_measurement() -> None:
    """A count or a duration written by hand went stale with the next test (256 stated, 287 collected): no count;
    the suite's time is a measurement, dated, on a named CPU, with the load it ran under (a time without them
    is a promise that drifts)."""
    readme = (REPO / "template" / "README.md.jinja").read_text()
    tests = readme.split("\n## Tests\n", 1)[1].split("\n## ", 1)[0]
    readme += "".join(page.read_text() for page in (REPO / "template" / "docs").glob("*.md.jinja"))
    assert "--collect-only" in tests and "--durations" in tests  # how to get the figures from the code instead
    assert not re.search(r"\b\d+ tests\b", readme), "state no test count: it drifts; --collect-only counts them"
    assert re.search(r"\b\d+ min \d+ s\b", tests), "the measured time of `python -m pytest -n auto`"
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", tests) and "AMD EPYC" in tests and "load average" in tests
    assert "in minutes" not in tests


RECIPE_RESULTS = REPO / "benchmarks" / "results" / "recipe_accuracy.json"


def percent(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "-"


def lr_and_batch(row: dict[str, Any]) -> tuple[str, str]:
    """The run's optim.lr and data.batch_size, as the benchmark recorded them.

    Rows from before it recorded them ran at the defaults of the time (0.1, 32) unless --set changed them; the
    default lr has been 0.02 since, chosen from the sweep table.
    """
    if "lr" in row:
        return f"{row['lr']:g}", str(row["batch_size"])
    settings = dict(setting.split("=", 1) for setting in row["settings"])
    return settings.get("optim.lr", "0.1"), settings.get("data.batch_size", "32")


def spread(values: list[float]) -> str:
    """The mean over seeds and, in brackets, the lowest and highest run: a smaller difference is noise."""
    mean = sum(values) / len(values)
    return f"{100 * mean:.1f}% ({100 * min(values):.1f}-{100 * max(values):.1f})"


def grouped(rows: list[dict[str, Any]], table: str, key: Callable[[dict[str, Any]], Any]) -> dict[Any, list]:
    """The rows of one README table (their ``tables`` name it), grouped by ``key``, in the file's order."""
    cells: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        if table in row["tables"]:
            cells.setdefault(key(row), []).append(row)
    return cells


def spreads(runs: list[dict[str, Any]]) -> str:
    """The seeds' spread of best val_acc, final val_acc and test_acc, as three table cells."""
    cells = []
    for key in ("best_val_acc", "final_val_acc", "test_acc"):
        values = [run[key] for run in runs]
        cells.append("-" if None in values else spread(values))  # photos: no test split
    return " | ".join(cells)


def recipe_table_rows(rows: list[dict[str, Any]]) -> list[str]:
    """The generated README's recipe table, formatted from the benchmark's JSON: one line per data set, epochs
    and recipe, over its seeds, at the defaults of configs/default.yaml."""
    lines = []
    cells = grouped(rows, "recipe", lambda row: (row["data"], row["epochs"], row["recipe"]))
    for (data, epochs, recipe), runs in sorted(cells.items()):
        assert {lr_and_batch(run) for run in runs} == {("0.02", "32")}, "the recipe table is at today's defaults"
        assert len({run["seed"] for run in runs}) == len(runs) >= 3, "one run per seed, at least three"
        seconds = sum(run["seconds_per_epoch"] for run in runs) / len(runs)
        lines.append(
            f"| {data} | {recipe.removesuffix('.yaml')} | {epochs} | {len(runs)} | {spreads(runs)} | {seconds:.1f} |"
        )
    return lines


def sweep_table_row(row: dict[str, Any]) -> str:
    """One row of its lr x batch size table: the default recipe at 15 epochs, settings as the benchmark's --set."""
    lr, batch = lr_and_batch(row)
    return (
        f"| {row['data']} | {lr} | {batch} | {percent(row['best_val_acc'])} | {percent(row['final_val_acc'])} "
        f"| {percent(row['test_acc'])} |"
    )


# Images in each data set's validation and test splits (benchmarks/recipe_accuracy.py cuts them 60/20/20).
SPLIT_IMAGES = {("digits", "val"): 359, ("digits", "test"): 360, ("patches", "val"): 80, ("patches", "test"): 80}
SPLIT_IMAGES[("photos", "val")] = 400  # benchmarks/real_photos.py: 40 validation photos a class, no test split


def test_the_strong_recipe_never_loses_to_the_default_in_the_measured_table() -> None:
    """What the README and strong.yaml claim: in every cell, over the same seeds, the strong recipe gets at most
    one image fewer right than the default (a single image on a single seed is within the seeds' spread)."""
    rows = [row for row in json.loads(RECIPE_RESULTS.read_text()) if "recipe" in row["tables"]]
    right: dict[tuple[str, int, str, str], list[float]] = {}
    for row in rows:
        for key, split in (("best_val_acc", "val"), ("final_val_acc", "val"), ("test_acc", "test")):
            if row[key] is None:  # a data set without that split
                continue
            right.setdefault((row["data"], row["epochs"], key, row["recipe"]), []).append(
                row[key] * SPLIT_IMAGES[(row["data"], split)]
            )
    cells = {cell[:3] for cell in right}
    assert len(cells) >= 12
    for cell in sorted(cells):
        default, strong = right[(*cell, "default")], right[(*cell, "strong.yaml")]
        assert len(default) == len(strong) >= 3
        assert sum(strong) - sum(default) >= -1 - 1e-6, (cell, sum(strong) - sum(default))


def ablation_table_rows(rows: list[dict[str, Any]]) -> list[str]:
    """The table of what the strong recipe, as it was with TrivialAugment, did without each of its parts."""
    lines = []
    for settings, runs in grouped(rows, "ablation", lambda row: tuple(row["settings"])).items():
        change = "`" + " ".join(settings) + "`" if settings else "as it was"
        lines.append(f"| {change} | {len(runs)} | {spreads(runs)} |")
    return lines


def test_the_recipe_tables_are_the_benchmarks_measured_file() -> None:
    """Figures typed by hand drift from what was measured: both tables are benchmarks/results' rows, CPU included."""
    rows = json.loads(RECIPE_RESULTS.read_text())
    page = (REPO / "template" / "docs" / "training.md.jinja").read_text()
    section = page.split("\n## Training recipe\n", 1)[1].split("\n## ", 1)[0]
    recipe_rows = [line for line in section.splitlines() if re.match(r"\| \w+ \| (default|strong) \|", line)]
    assert recipe_rows == recipe_table_rows(rows)
    assert len(recipe_rows) >= 8  # digits and patches, 15 and 40 epochs, default and strong
    ablation_rows = [line for line in section.splitlines() if re.match(r"\| (as it was|`[a-z_.]+=)", line)]
    assert ablation_rows == ablation_table_rows(rows)
    assert len(ablation_rows) >= 2
    assert {row["commit"][:7] for row in rows if "ablation" in row["tables"]} == {"ad6f36c"}  # as the README says
    assert {row["threads"] for row in rows if "recipe" in row["tables"]} == {1}  # "one thread a run"
    # the sweep table in a fixed order: data set, then the batch and lr from the largest
    order = sorted(rows, key=lambda row: (row["data"], *(-float(v) for v in lr_and_batch(row)[::-1]), row["epochs"]))
    sweep_rows = [line for line in section.splitlines() if re.match(r"\| \w+ \| 0\.\d+ \| \d+ \|", line)]
    assert sweep_rows == [sweep_table_row(row) for row in order if "sweep" in row["tables"]]
    assert len({row["cpu"] for row in rows}) == 1, "one CPU, or the s/epoch don't compare"
    assert rows[0]["cpu"] in section


def test_copiers_closing_message_gives_the_readmes_commands() -> None:
    """What copier prints after a copy and what the generated README says are the same commands (the message said
    ``python -m pytest``, the README ``python -m pytest -n auto``)."""
    import yaml

    message = yaml.safe_load((REPO / "copier.yml").read_text())["_message_after_copy"]
    commands = [line.split("#")[0].strip() for line in message.splitlines() if line.strip().startswith("python ")]
    readme = (REPO / "template" / "README.md.jinja").read_text()
    assert f"## Tests\n\n```bash\n{PROJECT_TEST_COMMAND}\n```" in readme and PROJECT_TEST_COMMAND in commands
    for command in commands:
        assert command in readme, f"copier's closing message says `{command}`, the README does not"


FINETUNE_RESULTS = REPO / "benchmarks" / "results" / "finetune.json"


def test_the_fine_tuning_table_is_the_benchmarks_measured_file_and_its_claims_hold() -> None:
    """Issue 45: the generated README's fine-tuning comparison is benchmarks/finetune.py's table (real ImageNet
    weights, 10 and 50 photos a class, the data's size and the weights', three seeds of every tool), and what the
    README says of it holds: the defaults ahead of fast.ai, timm and the linear probe at every point, in less
    time than fast.ai."""
    report = json.loads(FINETUNE_RESULTS.read_text())
    readme = (REPO / "template" / "README.md.jinja").read_text()
    section = readme.split("\n## Fine-tuning\n", 1)[1].split("\n## ", 1)[0]
    assert report["table"] in section
    assert report["machine"]["cpu"] in section
    rows = {(row["per_class"], row["size"], row["tool"]): row for row in report["rows"]}
    points = [(10, 96), (10, 224), (50, 96), (50, 224)]
    for point in points:
        assert all(len(rows[(*point, tool)]["runs"]) == 3 for tool in ("ours", "fastai", "timm")), point
        ours = rows[(*point, "ours")]["summary"]
        for tool in ("fastai", "timm", "probe"):
            assert ours["mean"] > rows[(*point, tool)]["summary"]["mean"], (point, tool)
        assert ours["seconds"] < rows[(*point, "fastai")]["summary"]["seconds"], point
