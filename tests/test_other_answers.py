"""A project whose every answer differs from the default passes its whole suite, within a hosted runner's disk.

The whole suite is ``slow`` (``make test-answers``, before each release): beside the default project's suite it
took make test from about 8 minutes to 12 min 56 s on a 2-core EPYC (2026-11-25). Which answers it uses is checked in
make test.
"""

from pathlib import Path

import pytest
import yaml

from .answer_rows import COPIER_QUESTIONS, NAMING_QUESTIONS
from .conftest import generate
from .test_matrix import suite_within_a_runners_disk

# Every asked answer other than its default. The model: ViT-B/16, the largest family the test can step on a
# hosted runner (one AdamW step of vit_h_14, the largest the validator allows, took 80 s and 10.6 GB here, more
# than a 7 GB runner holds), and the one whose builder needs the image size; the size a multiple of its patch.
OTHER_ANSWERS = {
    "project_name": "Every Answer Changed",
    "python_version": "3.13",
    "model": "vit_b_16",
    "image_size": 48,
    "optimizer": "adamw",
    "scheduler": "step",
    "precision": "fp32",
    "ci_workflow": False,
    "optional_parts": ["sweeps", "slurm"],  # sweeps without MLflow, no audit
}


def test_every_question_is_answered_otherwise() -> None:
    """A new question joins OTHER_ANSWERS, with a value other than its default."""
    asked = {name for name in COPIER_QUESTIONS if name not in NAMING_QUESTIONS}
    assert asked == set(OTHER_ANSWERS) - {"project_name"}
    for name in asked:
        assert OTHER_ANSWERS[name] != COPIER_QUESTIONS[name]["default"], name


@pytest.mark.slow
def test_a_project_with_every_answer_changed_passes_its_whole_suite(template_repo: Path, tmp_path: Path) -> None:
    project = generate(template_repo, tmp_path / "p", **OTHER_ANSWERS)
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert {name: answers[name] for name in OTHER_ANSWERS} == OTHER_ANSWERS
    suite_within_a_runners_disk(project, tmp_path / "suite-tmp", "every answer changed")
