"""Every answer value in copier.yml makes a project that lints, passes its tests and trains an epoch.

CI runs an all-pairs table over the answer values (every value of every
question meets every value of every other question at least once): each row
is generated, linted with ruff, checked by the project's own config tests
(``configs/default.yaml`` and the README are what answers change), and trained
for one epoch from its generated ``configs/default.yaml``. The rest of a
project's own suite cannot see the answers: ``test_rows_differ_only_where_answers_go``
proves its code and tests are the default project's, whose whole suite
``test_generate.py`` runs. ``-m slow`` runs the full product of the same
values, each with its whole suite (hours: see README).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from .answer_rows import (
    COPIER_QUESTIONS,
    NAMING_QUESTIONS,
    OPEN_VALUES,
    QUESTIONS,
    ROW_IDS,
    ROWS,
    answers_of,
    default_value,
    question_values,
)
from .conftest import BIN, HANG_S, REPO, check, generate, run_in, run_project_suite
from .test_optional_parts import LEFT_OUT


def covering(rows: list[dict[str, object]]) -> list[int]:
    """The fewest rows (greedy) in which every value of every question appears at least once."""
    uncovered = {(name, value) for row in rows for name, value in row.items()}
    chosen: list[int] = []
    while uncovered:
        best = max(range(len(rows)), key=lambda i: len(set(rows[i].items()) & uncovered))
        chosen.append(best)
        uncovered -= set(rows[best].items())
    return sorted(chosen)


# A project's own config tests (a pytest process each, 15-50 s) run on the rows that together hold every answer
# value; what differs between the other rows (each value's pairs) is checked in-process by the row tests below.
CONFIG_TEST_ROW_IDS = [ROW_IDS[i] for i in covering(ROWS)]
ONE_EPOCH = ["train.epochs=1", "data.batch_size=8", "data.num_workers=0", "train.progress=false"]
ON_CPU = not torch.cuda.is_available()


def one_epoch_args(project: Path, data: Path, precision: object, keep_fp16: bool = False) -> list[str]:
    settings = [*ONE_EPOCH, f"data.root={data}", f"train.out_dir={project / 'runs' / 'one-epoch'}"]
    if precision == "fp16" and ON_CPU and not keep_fp16:
        # fp16 needs CUDA (distributed.resolve_precision says so in one line, checked below):
        # on a CPU machine this row trains in fp32 instead.
        settings.append("train.precision=fp32")
    return [
        "train",
        "--config",
        str(project / "configs" / "default.yaml"),
        *[a for s in settings for a in ("--set", s)],
    ]


@pytest.fixture(scope="module")
def matrix(template_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Generate every row, then run all their one-epoch trainings in one process (tests/train_rows.py)."""
    root = tmp_path_factory.mktemp("matrix")
    rows = {}
    for index, (row_id, row) in enumerate(zip(ROW_IDS, ROWS, strict=True)):
        answers = answers_of(row, index)
        project = generate(template_repo, root / row_id, **answers)
        package = yaml.safe_load((project / ".copier-answers.yml").read_text())["package_name"]
        rows[row_id] = {"project": project, "package": package, "answers": answers, "row": row}
    data = root / "data"
    first = next(iter(rows.values()))
    sample = ["sample-data", str(data), "--train-per-class", "4", "--val-per-class", "2", "--image-size", "32"]
    runs = [{"id": "data", "project": str(first["project"]), "package": first["package"], "args": sample}]
    for row_id, info in rows.items():
        args = one_epoch_args(info["project"], data, info["row"]["precision"])
        runs.append({"id": row_id, "project": str(info["project"]), "package": info["package"], "args": args})
        if info["row"]["precision"] == "fp16" and ON_CPU:
            keep = one_epoch_args(info["project"], data, "fp16", keep_fp16=True)
            runs.append(
                {"id": f"{row_id}/fp16", "project": str(info["project"]), "package": info["package"], "args": keep}
            )
    spec, results = root / "spec.json", root / "results.json"
    spec.write_text(json.dumps(runs))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, str(REPO / "tests" / "train_rows.py"), str(spec), str(results)], env=env,
                          capture_output=True, text=True, timeout=HANG_S)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(results.read_text())
    assert outcome["data"]["rc"] == 0, outcome["data"]
    for row_id, info in rows.items():
        info["result"] = outcome[row_id]
        info["fp16_on_cpu"] = outcome.get(f"{row_id}/fp16")
    return rows


def test_every_value_in_copier_yml_is_covered() -> None:
    """A new open question fails here until OPEN_VALUES gives it values; closed ones join by themselves."""
    for name, question in COPIER_QUESTIONS.items():
        if name in NAMING_QUESTIONS:
            continue
        assert question_values(question) is not None or name in OPEN_VALUES, f"{name}: add its values to OPEN_VALUES"
        assert default_value(question) in QUESTIONS[name], name
    assert set(COPIER_QUESTIONS) == NAMING_QUESTIONS | set(QUESTIONS) - {"naming"}


def test_rows_cover_every_pair_of_values() -> None:
    for (a, values_a), (b, values_b) in itertools.combinations(QUESTIONS.items(), 2):
        seen = {(row[a], row[b]) for row in ROWS}
        assert seen == set(itertools.product(values_a, values_b)), (a, b)
    assert len(ROWS) <= 20  # near the lower bound of 4 x 4 = 16 rows


@pytest.mark.parametrize("row_id", ROW_IDS)
def test_row_is_lint_clean(matrix: dict[str, dict], row_id: str) -> None:
    project = matrix[row_id]["project"]
    check(run_in(project, str(BIN / "ruff"), "check", "--no-cache", "."))
    check(run_in(project, str(BIN / "ruff"), "format", "--check", "--no-cache", "."))


def test_the_config_test_rows_hold_every_answer_value() -> None:
    held = {(name, value) for row_id in CONFIG_TEST_ROW_IDS for name, value in ROWS[ROW_IDS.index(row_id)].items()}
    assert held == {(name, value) for name, values in QUESTIONS.items() for value in values}
    assert len(CONFIG_TEST_ROW_IDS) < len(ROW_IDS)


@pytest.fixture(scope="module")
def config_test_outcomes(matrix: dict[str, dict]) -> dict[str, list[str]]:
    """The config tests of every row in CONFIG_TEST_ROW_IDS, in one pytest process: each row's package on the path
    (their names differ), ``--import-mode=importlib`` for the rows' same-named test files, each project's warning
    filter, and no conftest (test_config.py uses none of its fixtures, and the rows' conftests would share one
    module name). One interpreter and one torch import instead of one a row: 5.4 CPU-seconds for five rows, where
    one row alone took 5.5. Returns each row's "PASSED test_x" lines (any other outcome is its own word)."""
    infos = [matrix[row_id] for row_id in CONFIG_TEST_ROW_IDS]
    root = infos[0]["project"].parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(info["project"] / "src") for info in infos)}
    # The projects' own pyproject.toml is not read from the shared root: its filter, for each package.
    warnings = [arg for info in infos for arg in ("-W", f"error::DeprecationWarning:{info['package']}")]
    files = [str(info["project"].relative_to(root) / "tests" / "test_config.py") for info in infos]
    args = ["-q", "-rA", "-p", "no:cacheprovider", f"--rootdir={root}", "--import-mode=importlib", "--noconftest"]
    done = subprocess.run([sys.executable, "-m", "pytest", *args, *warnings, *files], cwd=root, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=HANG_S)  # fmt: skip
    lines = [line.split(" - ")[0] for line in done.stdout.splitlines()]  # "PASSED <row>/tests/test_config.py::test"
    outcomes = {row_id: [f"{line.split()[0]} {line.split('::', 1)[-1]}" for line in lines
                         if " " in line and line.split()[1].startswith(f"{row_id}/tests/")]
                for row_id in CONFIG_TEST_ROW_IDS}  # fmt: skip
    assert any(outcomes.values()), done.stdout[-3000:] + done.stderr[-3000:]
    return outcomes


@pytest.mark.parametrize("row_id", CONFIG_TEST_ROW_IDS)
def test_row_passes_its_config_tests(config_test_outcomes: dict[str, list[str]], row_id: str) -> None:
    outcomes = config_test_outcomes[row_id]
    assert outcomes and all(line.startswith("PASSED ") for line in outcomes), outcomes
    # Every row ran the whole file: the same tests as the first row, the default project's file.
    assert sorted(outcomes) == sorted(config_test_outcomes[CONFIG_TEST_ROW_IDS[0]])


@pytest.mark.parametrize("row_id", ROW_IDS)
def test_row_trains_one_epoch_from_its_defaults(matrix: dict[str, dict], row_id: str) -> None:
    info = matrix[row_id]
    result, row, project = info["result"], info["row"], info["project"]
    assert result["rc"] == 0, result
    out = project / "runs" / "one-epoch"
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1]
    config = torch.load(out / "last.pt", map_location="cpu", weights_only=True)["config"]
    assert config["model"]["name"] == row["model"]
    assert config["data"]["image_size"] == row["image_size"]
    assert config["optim"]["name"] == row["optimizer"]
    assert config["optim"]["scheduler"] == row["scheduler"]
    if row["precision"] == "fp16" and ON_CPU:
        assert info["fp16_on_cpu"]["rc"] == 2
        assert (
            info["fp16_on_cpu"]["stderr"].strip()
            == "error: train.precision=fp16 needs CUDA: use bf16 or fp32 on the CPU"
        )
    else:
        assert config["train"]["precision"] == row["precision"]


def flat(value: object, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flat(item, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): value}


@pytest.mark.parametrize("row_id", ROW_IDS)
def test_row_built_in_defaults_equal_its_default_yaml(matrix: dict[str, dict], row_id: str) -> None:
    """Every key's value, not only its name: a config that leaves a key out gets what default.yaml says."""
    info = matrix[row_id]
    built_in = flat(info["result"]["built_in_defaults"])  # dataclasses.asdict(Config()), read by train_rows.py
    generated = flat(yaml.safe_load((info["project"] / "configs" / "default.yaml").read_text()))
    assert built_in == generated
    row = info["row"]
    assert (built_in["optim.name"], built_in["optim.scheduler"]) == (row["optimizer"], row["scheduler"])
    assert (built_in["model.name"], built_in["data.image_size"]) == (row["model"], row["image_size"])
    assert built_in["train.precision"] == row["precision"]


def python_files(project: Path) -> dict[str, str]:
    return {str(p.relative_to(project)): p.read_text() for d in ("src", "tests") for p in (project / d).rglob("*.py")}


def test_derived_rows_get_the_names_copier_derives(matrix: dict[str, dict]) -> None:
    """Unanswered, the slug and package name follow the project name, odd characters dropped, cut to fit."""
    expected = {
        "derived": "project_{}_hyperspectral_satellite",
        "unicode": "n_code_leaf_s_disease_{}",
        "explicit": None,
    }
    for index, info in enumerate(matrix.values()):
        derived = expected[str(info["row"]["naming"])]
        if derived is not None:
            assert info["package"] == derived.format(index)
            assert info["project"].joinpath("src", info["package"], "__init__.py").is_file()


def test_rows_differ_only_where_answers_go(matrix: dict[str, dict], project: Path) -> None:
    """Code and tests are the default project's (package name aside), less the optional parts a row leaves out
    (optional_parts none): its full suite, and the lean project's, speak for every row."""
    reference = python_files(project)
    for info in matrix.values():
        package = info["package"]
        mine = python_files(info["project"])
        expected = {path.replace("x_pkg", package): text.replace("x_pkg", package) for path, text in reference.items()}
        if info["row"].get("optional_parts") == "none":
            gone = [left.replace("x_pkg", package) for paths in LEFT_OUT.values() for left in paths]
            expected = {path: text for path, text in expected.items() if not path.startswith(tuple(gone))}
        assert mine.keys() == expected.keys()
        assert [str(path) for path in mine if mine[path] != expected[path]] == []


# The full product of every question but naming; the naming styles take turns.
OTHERS = [name for name in QUESTIONS if name != "naming"]
PRODUCT = [
    {**dict(zip(OTHERS, values, strict=True)), "naming": QUESTIONS["naming"][index % 3]}
    for index, values in enumerate(itertools.product(*(QUESTIONS[name] for name in OTHERS)))
]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(PRODUCT)), ids=["-".join(map(str, row.values())) for row in PRODUCT])
def test_full_product(template_repo: Path, tmp_path: Path, index: int) -> None:
    row = PRODUCT[index]
    project = generate(template_repo, tmp_path / "p", **answers_of(row, index))
    package = yaml.safe_load((project / ".copier-answers.yml").read_text())["package_name"]
    check(run_in(project, str(BIN / "ruff"), "check", "--no-cache", "."))
    check(run_in(project, str(BIN / "ruff"), "format", "--check", "--no-cache", "."))
    run_project_suite(project)
    data = tmp_path / "data"
    check(run_in(project, sys.executable, "-m", package, "sample-data", str(data), "--train-per-class", "4",
                 "--val-per-class", "2", "--image-size", "32"))  # fmt: skip
    check(run_in(project, sys.executable, "-m", package, *one_epoch_args(project, data, row["precision"])))
    assert (project / "runs" / "one-epoch" / "last.pt").is_file()


TEMP_LIMIT = 2**30  # what a row's whole suite may leave in its temporary folder: a hosted CI runner has ~14 GB


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def suite_within_a_runners_disk(project: Path, basetemp: Path, label: str) -> None:
    """The project's whole suite by its README's command, green, its time and temporary bytes printed, and those
    bytes under TEMP_LIMIT."""
    started = time.monotonic()
    run_project_suite(project, f"--basetemp={basetemp}")
    used = folder_bytes(basetemp)
    print(f"{label}: {time.monotonic() - started:.0f} s, {used / 2**20:.0f} MB of temporary files")
    assert used < TEMP_LIMIT, f"{used / 2**30:.2f} GB of temporary files"


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(ROWS)), ids=ROW_IDS)
def test_each_row_passes_its_whole_suite_within_a_ci_runners_disk(
    template_repo: Path, tmp_path: Path, index: int
) -> None:
    """``make test-answers`` (before each release): every matrix row's own suite, whole, green and under 1 GB.

    Its behaviour tests train a tiny CNN whatever the answers (conftest's TINY); only the tests about an answer
    build the answered model. Printed: each row's time and temporary bytes.
    """
    project = generate(template_repo, tmp_path / "p", **answers_of(ROWS[index], index))
    suite_within_a_runners_disk(project, tmp_path / "suite-tmp", ROW_IDS[index])
