"""The generated README's "Where does my change go", row by row: each change, made in the files its row names
(and no other) in a copy of a generated project, takes effect.

One copy gets every row's change, as a user would write it; one short training
run and a resume then show each at work, with the default settings (the
batch path, the cache) except what a test must shorten. A row that needs one
more file than it names fails here: its change then does not take effect, or
the project's own tests of that part fail.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .conftest import check, run_in

PACKAGE = "x_pkg"
ROWS = {  # row of the table -> the files it names (checked against the README, below)
    "a new model": ["models/extensions.py"],
    "a model family with a setting": [
        "models/classifier.py",
        "core/config.py",
        "configs/default.yaml",
        "docs/config.md",
    ],
    "a new augmentation": ["models/extensions.py", "data/folders.py", "data/loading/augment.py"],
    "a new image format": ["data/decoding/decode.py"],
    "a new metric": ["models/extensions.py"],
    "a new logger with its own run": ["outputs/writers.py"],
    "a new checkpoint field": ["training/run_state.py"],
    "a new config key": ["core/config.py", "configs/default.yaml", "docs/config.md"],
    "a new command": ["cli.py", "commands/<name>.py", "README.md"],
}
TOUCHED = '''

class Touched:
    """Ours: marks that a training image passed through here (a file per place), and changes nothing."""

    def __init__(self, place: str) -> None:
        self.place = place

    def __call__(self, image):  # noqa: ANN001, ANN204
        import os

        with open(os.path.join(os.environ["OURS_DIR"], self.place), "a") as marks:
            marks.write("x")
        return image
'''
OUR_LOG = '''

class OurLog(Output):
    """Ours: a tracker with its own run, continued on a resume."""

    tracker = "ours"

    def start(self, resumed_at: float | None, run_id: str | None, completed: int = 0) -> None:
        import os

        self.run_id = run_id or "ours-1"
        with open(os.path.join(os.environ["OURS_DIR"], "log"), "a") as seen:
            seen.write(f"{run_id}\\n")
'''
# A new image format: 4 bytes of magic, the width and height (2 bytes each), then the RGB pixels, row by row.
OUR_FORMAT_READER = """    if data[:4] == b"OURS":  # ours
        width, height = struct.unpack("<HH", data[4:8])
        return Image.frombytes("RGB", (width, height), data[8:])
"""
OUR_FORMAT_HEADER = """    if data[:4] == b"OURS":  # ours: the size, for the checks at start
        return Header("OURS", *struct.unpack("<HH", data[4:8]))
"""
OURS_IMAGES = 2  # training images of the sample data rewritten in our format


def write_our_format(png: Path) -> Path:
    """The PNG's picture in our format, beside it under the ``.ours`` extension; the PNG removed."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    ours = png.with_suffix(".ours")
    ours.write_bytes(b"OURS" + struct.pack("<HH", *image.size) + image.tobytes())
    png.unlink()
    return ours


OUR_METRIC = """    from torchmetrics.classification import MulticlassF1Score

    return {"our_f1": MulticlassF1Score(num_classes, average="macro")}
"""
OUR_COMMAND = '''"""Ours: the hello command."""


def hello() -> str:
    return "hello from our command"
'''


def edit(path: Path, anchor: str, text: str, after: bool = True) -> None:
    """Insert ``text`` after (or before) the one line holding ``anchor``."""
    source = path.read_text()
    lines = source.splitlines(keepends=True)
    found = [i for i, line in enumerate(lines) if anchor in line]
    assert len(found) == 1, f"{anchor!r} is not on exactly one line of {path}"
    at = found[0] + (1 if after else 0)
    path.write_text("".join([*lines[:at], text, *lines[at:]]))


def make_every_change(project: Path) -> None:
    """Each row's change, in the files the row names and nowhere else."""
    src = project / "src" / PACKAGE
    # A new model: models/extensions.py.
    extensions = src / "models" / "extensions.py"
    edit(
        extensions,
        "    return None",
        '    if name == "tiny_mlp":\n        return nn.Sequential(nn.Flatten(), nn.LazyLinear(9)), 9\n',
        after=False,
    )
    # A model family with a setting: core/config.py and models/classifier.py.
    edit(
        src / "core" / "config.py",
        "    freeze_backbone: bool | str = option(",
        '    tiny_width: int = option(5, "tiny: the width of its one layer", bounds="(0, inf)")\n',
        after=False,
    )
    edit(
        src / "models" / "classifier.py",
        '    elif cfg.name == "simple_cnn":',
        '    elif cfg.name == "tiny":\n'
        "        backbone, num_features = nn.Sequential(nn.Flatten(), nn.LazyLinear(cfg.tiny_width)), cfg.tiny_width\n",
        after=False,
    )
    edit(project / "configs" / "default.yaml", "  freeze_backbone:", "  tiny_width: 5\n", after=False)
    edit(
        project / "docs" / "config.md",
        "| `model.freeze_backbone` |",
        "| `model.tiny_width` | `5` | tiny: the width of its one layer |\n",
        after=False,
    )
    # A new augmentation per image, in each place the row names.
    extensions.write_text(extensions.read_text() + TOUCHED)
    edit(extensions, "    return []", "    return [Touched('extensions')]\n", after=False)
    folders = src / "data" / "folders.py"
    folders.write_text(folders.read_text() + TOUCHED)
    edit(folders, "extensions.extra_train_transforms() if", "            Touched('build_transform'),\n")
    # A new image format: data/decoding/decode.py, its extension and its reader.
    decode = src / "data" / "decoding" / "decode.py"
    edit(decode, "IMAGE_EXTENSIONS = (*IMG_EXTENSIONS", 'IMAGE_EXTENSIONS = (*IMAGE_EXTENSIONS, ".ours")  # ours\n')
    edit(decode, "    image = Image.open(io.BytesIO(data))  # its first frame", OUR_FORMAT_READER, after=False)
    edit(decode, "    if data.startswith(PNG_MAGIC) and data[12:16]", OUR_FORMAT_HEADER, after=False)
    # A new metric: models/extensions.py, a torchmetrics object by name.
    edit(extensions, "    return {}", OUR_METRIC, after=False)
    # A new logger with its own run id: outputs/writers.py.
    writers = src / "outputs" / "writers.py"
    writers.write_text(writers.read_text() + OUR_LOG)
    edit(writers, "    return Outputs(outputs, pictures_wanted=", "    outputs.append(OurLog())\n", after=False)
    # A new checkpoint field: training/run_state.py, three lines.
    run_state = src / "training" / "run_state.py"
    edit(
        run_state,
        "tracker_run_ids    each tracker's run",
        "ours               the run's own counter                                       ``RunState.ours``\n",
    )
    edit(run_state, '"tracker_run_ids": self.tracking.run_ids,', '            "ours": 42,\n')
    edit(run_state, "        progress.load_state_dict(state)", '        self.ours = state.get("ours")\n')
    # A new config key: core/config.py, configs/default.yaml, its row in docs/config.md.
    edit(
        src / "core" / "config.py",
        "    epochs: int = option(15,",
        '    ours: int = option(3, "our own setting", bounds="(0, inf)")\n',
    )
    edit(project / "configs" / "default.yaml", "  epochs: 15", "  ours: 3\n")
    edit(project / "docs" / "config.md", "| `train.epochs` | `15` |", "| `train.ours` | `3` | our own setting |\n")
    # A new command: cli.py, commands/hello.py, its row in the README's Commands.
    (src / "commands" / "hello.py").write_text(OUR_COMMAND)
    cli = src / "cli.py"
    edit(
        cli,
        '    sample = commands.add_parser("sample-data"',
        '    commands.add_parser("hello", help="say hello")\n',
        after=False,
    )
    edit(
        cli,
        '    "sample-data": sample_data_command,',
        '    "hello": hello_command,\n',
    )
    edit(project / "README.md", "| `pack-shards` |", "| `hello` | says hello | [Commands](#commands) |\n")
    edit(
        cli,
        "# One table of commands",
        "def hello_command(args: argparse.Namespace) -> int:\n"
        "    from .commands.hello import hello\n\n    print(hello())\n    return 0\n\n\n",
        after=False,
    )


def train(project: Path, ours: Path, *args: str) -> subprocess.CompletedProcess[str]:
    sets = ["data.root=data/sample", "train.out_dir=runs/ours", "train.epochs=2", "data.image_size=32"]
    sets += ["model.widths=[8]", "model.blocks_per_stage=1", "train.progress=false"]
    argv = [a for kv in sets for a in ("--set", kv)]
    env_run = subprocess.run(
        [sys.executable, "-m", PACKAGE, "train", "--config", "configs/default.yaml", *argv, *args],
        cwd=project,
        env={**dict(__import__("os").environ), "PYTHONPATH": str(project / "src"), "OURS_DIR": str(ours)},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert env_run.returncode == 0, env_run.stdout[-3000:] + env_run.stderr[-3000:]
    return env_run


@pytest.fixture(scope="module")
def changed(project: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A copy of the generated project with every change; trained 1 epoch, then resumed to 2."""
    copy = tmp_path_factory.mktemp("guide") / "project"

    def outputs(folder: str, names: list[str]) -> list[str]:  # the runs and data of other tests; src/x_pkg/data stays
        top = Path(folder) == project
        return [n for n in names if n in ("__pycache__", ".pytest_cache") or (top and n in ("runs", "data"))]

    shutil.copytree(project, copy, ignore=outputs)
    make_every_change(copy)
    ours = copy / "ours"
    ours.mkdir()
    check(run_in(copy, sys.executable, "-m", PACKAGE, "sample-data", "data/sample", "--train-per-class", "6",
                 "--val-per-class", "3", "--image-size", "32"))  # fmt: skip
    for png in sorted((copy / "data" / "sample" / "train" / "circle").glob("*.png"))[:OURS_IMAGES]:
        write_our_format(png)
    first = train(copy, ours, "--set", "train.epochs=1")
    resumed = train(copy, ours, "--resume", "auto")
    return copy, ours, first.stdout + resumed.stdout


def test_the_guide_names_these_files_for_each_row(project: Path) -> None:
    table = (project / "README.md").read_text().split("### Where does my change go", 1)[1].split("\n#", 1)[0]
    for row, files in ROWS.items():
        line = next((line for line in table.splitlines() if line.startswith(f"| {row} |")), None)
        assert line is not None, f"the guide has no row {row!r}"
        named = re.findall(r"`([\w/<>.]+\.(?:py|yaml|md))`", line)
        assert sorted(set(named)) == sorted(files), row


def test_a_new_model_and_a_model_family_build(changed: tuple[Path, Path, str]) -> None:
    project, _, _ = changed
    code = (
        f"from {PACKAGE}.core.config import load_config; from {PACKAGE}.models.classifier import build_model; "
        "import torch; "
        "m = build_model(load_config(None, ['model.name=tiny_mlp']).model, 3); "
        "print(m(torch.zeros(2, 3, 8, 8)).shape); "
        "c = load_config(None, ['model.name=tiny', 'model.tiny_width=7']).model; m = build_model(c, 3); "
        "m(torch.zeros(1, 3, 8, 8)); print(m.head.in_features)"
    )
    assert check(run_in(project, sys.executable, "-c", code)).split() == ["torch.Size([2,", "3])", "7"]


def test_an_augmentation_in_each_named_place_runs_on_the_default_settings(changed: tuple[Path, Path, str]) -> None:
    _, ours, out = changed
    for place in ("extensions", "build_transform"):
        assert (ours / place).is_file() and len((ours / place).read_text()) >= 24, place  # every training image
    assert "per-sample path" in out  # the batch path would have skipped them: the run says which path it took


def test_a_new_image_format_is_checked_decoded_and_trained_on(changed: tuple[Path, Path, str]) -> None:
    """The start's checks accept the new files (a stray file would stop it), the contract decodes them to the
    picture they hold, and every training image counts, ours included."""
    project, _, out = changed
    ours = sorted((project / "data" / "sample" / "train" / "circle").glob("*.ours"))
    assert len(ours) == OURS_IMAGES
    code = (
        f"from {PACKAGE}.data.decoding.decode import ImageFiles; from PIL import Image; import sys; "
        f"image = ImageFiles(None)(sys.argv[1]); print(image.mode, *image.size)"
    )
    width, height = struct.unpack("<HH", ours[0].read_bytes()[4:8])
    assert check(run_in(project, sys.executable, "-c", code, str(ours[0]))).split() == ["RGB", str(width), str(height)]
    assert "24 train / 12 val images" in out  # 6 a class in 4 classes: the PNGs and ours


def test_a_new_metric_reaches_metrics_jsonl_and_can_choose_best_pt(
    changed: tuple[Path, Path, str], tmp_path: Path
) -> None:
    project, _, _ = changed
    rows = [json.loads(line) for line in (project / "runs" / "ours" / "metrics.jsonl").read_text().splitlines()]
    assert [row["epoch"] for row in rows] == [1, 2] and all(0 <= row["val_our_f1"] <= 1 for row in rows)
    # The finished run, asked to choose by it: nothing left to train, and the note that its best starts over.
    chosen = train(project, tmp_path, "--set", "train.best_metric=val_our_f1", "--resume", "auto")
    assert "best.pt was chosen by val_acc max, from here by val_our_f1 max" in chosen.stdout


def test_a_new_logger_keeps_its_own_run_across_a_resume(changed: tuple[Path, Path, str]) -> None:
    project, ours, _ = changed
    assert (ours / "log").read_text().split() == ["None", "ours-1"]  # fresh, then continued with its own id
    state = torch.load(project / "runs" / "ours" / "last.pt", map_location="cpu", weights_only=True)
    assert state["tracker_run_ids"] == {"ours": "ours-1"}


# The changed project's own tests that three rows rely on: the checkpoint's key table, the config's tests, and
# the docs' (every key and every command documented once).
SCHEMA_TEST = "tests/test_checkpoint.py::test_a_run_checkpoint_holds_exactly_the_keys_run_state_lists"
CONFIG_TESTS = "tests/test_config.py"
DOCS_TESTS = "tests/test_docs.py"


@pytest.fixture(scope="module")
def own_tests(changed: tuple[Path, Path, str]) -> list[str]:
    """All in one pytest process (one torch import instead of three); each test's "OUTCOME node id" line."""
    project, _, _ = changed
    done = run_in(project, sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", SCHEMA_TEST,
                  CONFIG_TESTS, DOCS_TESTS)  # fmt: skip
    lines = [line.split(" - ")[0] for line in done.stdout.splitlines()]
    outcomes = [line for line in lines if line.split(" ", 1)[0] in ("PASSED", "FAILED", "ERROR", "SKIPPED")]
    assert outcomes, done.stdout[-3000:] + done.stderr[-3000:]
    return outcomes


def passed(outcomes: list[str], tests: str) -> bool:
    """Every test of ``tests`` (a node id or a file) passed, and there was one."""
    mine = [line for line in outcomes if line.split(" ", 1)[1].startswith(tests)]
    return bool(mine) and all(line.startswith("PASSED ") for line in mine)


def test_a_new_checkpoint_field_is_saved_and_the_schema_test_agrees(
    changed: tuple[Path, Path, str], own_tests: list[str]
) -> None:
    project, _, _ = changed
    state = torch.load(project / "runs" / "ours" / "last.pt", map_location="cpu", weights_only=True)
    assert state["ours"] == 42
    assert passed(own_tests, SCHEMA_TEST), own_tests


def test_a_new_config_key_is_read_checked_and_documented(changed: tuple[Path, Path, str], own_tests: list[str]) -> None:
    project, _, _ = changed
    load = "print(load_config('configs/default.yaml', ['train.ours=5']).train.ours)"
    code = f"from {PACKAGE}.core.config import load_config; {load}"
    assert check(run_in(project, sys.executable, "-c", code)).strip() == "5"
    refused = run_in(project, sys.executable, "-m", PACKAGE, "train", "--set", "train.ours=0")
    assert refused.returncode == 2 and "train.ours" in refused.stderr
    assert passed(own_tests, CONFIG_TESTS) and passed(own_tests, DOCS_TESTS), own_tests


def test_a_new_command_runs_and_is_documented(changed: tuple[Path, Path, str], own_tests: list[str]) -> None:
    project, _, _ = changed
    assert check(run_in(project, sys.executable, "-m", PACKAGE, "hello")).strip() == "hello from our command"
    assert passed(own_tests, f"{DOCS_TESTS}::test_the_readme_lists_every_command_once"), own_tests
