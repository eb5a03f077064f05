"""The answer matrix's rows, and the jobs that run each row's whole suite: ``python tests/answer_rows.py``.

The rows are an all-pairs table over the answer values of copier.yml
(``tests/test_matrix.py`` says why and tests them). This module needs only
PyYAML, not torch: the template's CI workflow runs it in a job of its own to
get its matrix of whole-suite jobs (one a row, and the every-answer project of
``tests/test_other_answers.py``) in seconds, and ``make test-answers`` runs
the same list. ``tests/test_template_ci.py`` checks that the list is what
pytest collects, so a new row, or a new whole-suite test, joins both by itself.

    python tests/answer_rows.py          # the CI matrix: a JSON list of {"name", "test"}
    python tests/answer_rows.py --tests  # the same tests' pytest node ids, one a line
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]

NAMING_QUESTIONS = {"project_name", "project_slug", "package_name", "description", "author_name"}
# Open questions get representative values: the in-code network and two small torchvision
# ones, the bounds that train fast (16, the smallest allowed, and the default 64).
OPEN_VALUES: dict[str, list[object]] = {
    "model": ["simple_cnn", "resnet18", "mobilenet_v3_small"],
    "image_size": [16, 64],
}
# The questions copier asks: not its settings (_...), nor the values it computes without asking (when: false).
COPIER_QUESTIONS = {
    k: v
    for k, v in yaml.safe_load((REPO / "copier.yml").read_text()).items()
    if not k.startswith("_") and v.get("when") is not False
}


# A multiselect question (optional_parts) in the matrix: every choice (its default) or none, by name, so that a row
# stays hashable and its id readable; answers_of gives copier the list.
MULTISELECT_VALUES = ("all", "none")


def default_value(question: dict) -> object:
    """The question's default as the matrix names it."""
    return "all" if question.get("multiselect") else question.get("default")


def question_values(question: dict) -> list[object] | None:
    """Every value copier accepts for a closed question, read from copier.yml so a new choice joins the matrix."""
    if question.get("multiselect"):
        return list(MULTISELECT_VALUES)
    if isinstance(question.get("choices"), list):
        return list(question["choices"])
    if question.get("type") == "bool":
        return [True, False]
    return None


QUESTIONS: dict[str, list[object]] = {
    name: question_values(question) or OPEN_VALUES.get(name, [question.get("default")])
    for name, question in COPIER_QUESTIONS.items()
    if name not in NAMING_QUESTIONS
}
QUESTIONS["naming"] = ["derived", "unicode", "explicit"]  # the free-text questions, three ways
LONGEST_PACKAGE_NAME = 40  # copier.yml's package_name validator: the longest name must still lint


def longest_package_name(index: int) -> str:
    """A package name of the longest allowed length, with digits, distinct per row."""
    return f"team{index:02d}_texture_classifier_for_photos_v2"[:LONGEST_PACKAGE_NAME].ljust(LONGEST_PACKAGE_NAME, "x")


def naming(style: str, index: int) -> dict[str, str]:
    """Answers for the free-text questions; the index keeps package names distinct across rows."""
    if style == "derived":  # long, and a digit first: the slug and package name are cut and prefixed to fit
        return {"project_name": f"{index} Hyperspectral Satellite Imagery Land Cover Classifier"}
    if style == "unicode":
        return {
            "project_name": f'Ünïcode Leaf\'s "Disease" #{index}',
            "description": 'Says "hi", \\ and ünïcode ☃',
            "author_name": "O'Brien & Co <lab@example.org>",
        }
    # Explicit answers: the longest allowed package name, with digits (lines that hold it must fit 120 columns).
    return {
        "project_name": f"Explicit {index}",
        "project_slug": f"team-{index}-cls",
        "package_name": longest_package_name(index),
    }


def pairwise(domains: dict[str, list[object]]) -> list[dict[str, object]]:
    """Greedy all-pairs: repeatedly take the full-product row that covers most uncovered pairs."""
    names = list(domains)
    candidates = [dict(zip(names, values, strict=True)) for values in itertools.product(*domains.values())]

    def pairs(row: dict[str, object]) -> set[tuple[str, object, str, object]]:
        return {(a, row[a], b, row[b]) for a, b in itertools.combinations(names, 2)}

    uncovered = set().union(*(pairs(row) for row in candidates))
    rows = []
    while uncovered:
        best = max(candidates, key=lambda row: len(pairs(row) & uncovered))
        rows.append(best)
        uncovered -= pairs(best)
    return rows


def answers_of(row: dict[str, object], index: int) -> dict[str, object]:
    answers = {k: v for k, v in row.items() if k != "naming"}
    for name, question in COPIER_QUESTIONS.items():
        if question.get("multiselect"):  # every choice or none
            answers[name] = list(question["choices"].values()) if answers[name] == "all" else []
    return {**answers, **naming(str(row["naming"]), index)}


ROWS = pairwise(QUESTIONS)
ROW_IDS = [f"{i:02d}-" + "-".join(str(v) for v in row.values()) for i, row in enumerate(ROWS)]


# The slow tests that run a generated project's whole suite: the every-answer project, then one a row.
EVERY_ANSWER_TEST = "tests/test_other_answers.py::test_a_project_with_every_answer_changed_passes_its_whole_suite"
ROW_TEST = "tests/test_matrix.py::test_each_row_passes_its_whole_suite_within_a_ci_runners_disk"


def whole_suite_jobs() -> list[dict[str, str]]:
    """One CI job a project: its name, and the pytest node id that generates it and runs its whole suite."""
    rows = [{"name": row_id, "test": f"{ROW_TEST}[{row_id}]"} for row_id in ROW_IDS]
    return [{"name": "every-answer-changed", "test": EVERY_ANSWER_TEST}, *rows]


def main(argv: list[str]) -> int:
    jobs = whole_suite_jobs()
    print("\n".join(job["test"] for job in jobs) if "--tests" in argv else json.dumps(jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
