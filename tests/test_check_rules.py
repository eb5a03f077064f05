"""The linter's rules for the training loop (TSC109-TSC111), one finding per problem, precise messages, the gate.

Each new rule fires on the shapes the mistake takes and stays silent on the
compliant forms beside them; ``torch-scaffold check`` reports an unsafe
``torch.load`` once (TSC104, not also torchfix's TOR102), says only what a
line lacks, drops TOR401, and finds with torchfix behind the gate exactly
what torchfix finds on every file.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import types
from pathlib import Path

import pytest
from torchfix import torchfix
from torchfix.common import TorchError, TorchVisitor

from torch_scaffold.check import SELECT, TOR_CODES, PracticesCheck, run_check
from torch_scaffold.lint import check
from torch_scaffold.lint.gate import Needs

from .conftest import BIN, HANG_S, REPO

HEADER = "import torch\nfrom torch import nn\nimport torch.nn.functional as F\n\n\n"
FIXTURES = REPO / "benchmarks" / "planted_mistakes"


def findings(snippet: str) -> list[tuple[int, str]]:
    """(line in the snippet, code) of each finding."""
    offset = HEADER.count("\n")
    return [(finding.line - offset, finding.code) for finding in check(ast.parse(HEADER + snippet))]


def codes(snippet: str) -> list[str]:
    return [code for _, code in findings(snippet)]


EVALUATION_BAD = {
    "named, no no_grad": "def validate(model, loader):\n    for x, y in loader:\n        model(x)\n",
    "test, the tutorials' name": (
        "def test(model, loader):\n    with torch.no_grad():\n        for x in loader:\n            model(x)\n"
    ),
    "no_grad with the object's model": (
        "class T:\n    def check(self, loader):\n        with torch.no_grad():\n"
        "            for x in loader:\n                self.model(x)\n"
    ),
    "a script's top level": "model = nn.Linear(2, 2)\nwith torch.no_grad():\n    for x in data:\n        model(x)\n",
    "forward": "@torch.no_grad()\ndef val_epoch(net, loader):\n    return [net.forward(x) for x in loader]\n",
    "a while loop": "def evaluate(model, it):\n    while True:\n        model(next(it))\n",
    "a built model under another name": (
        "m = nn.Sequential(nn.Linear(2, 2), nn.Dropout())\nwith torch.no_grad():\n    out = [m(x) for x in data]\n"
    ),
}
EVALUATION_GOOD = {
    "eval": "def validate(model, loader):\n    model.eval()\n    with torch.no_grad():\n"
    "        for x in loader:\n            model(x)\n",
    "train(False)": (
        "def validate(model, loader):\n    model.train(False)\n    with torch.no_grad():\n"
        "        for x in loader:\n            model(x)\n"
    ),
    "train(mode=False)": (
        "@torch.no_grad()\ndef validate(model, loader):\n    model.train(mode=False)\n"
        "    return [model(x) for x in loader]\n"
    ),
    "an evaluating model by assignment": (
        "def predict(loaded, loader):\n    model = loaded.eval()\n    with torch.no_grad():\n"
        "        return [model(x) for x in loader]\n"
    ),
    "the whole model switched": (
        "@torch.no_grad()\ndef validate(model, loader):\n    model.eval()\n"
        "    return [model.module(x) for x in loader]\n"
    ),
    "a training switch on purpose": (
        "@torch.no_grad()\ndef update_bn(model, loader):\n    model.train()\n    for x in loader:\n        model(x)\n"
    ),
    "a helper that takes the model": (
        "def embed(model, loader):\n    with torch.inference_mode():\n        return [model(x) for x in loader]\n"
    ),
    "switched by the caller": (
        "def validate(model, loader):\n    return [model(x) for x in loader]\n\n\n"
        "def fit(model, loader):\n    model.eval()\n    with torch.no_grad():\n        validate(model, loader)\n"
    ),
    "passed to an evaluating function first": (
        "model = nn.Linear(2, 2)\nevaluate(model, data)\nwith torch.no_grad():\n    out = [model(x) for x in data]\n"
    ),
    "a pytest test": "def test_forward_shapes(model):\n    for x in [torch.ones(1, 2)]:\n        model(x)\n",
    "not a model": (
        "def validate(transform, loader):\n    with torch.no_grad():\n        return [transform(x) for x in loader]\n"
    ),
    "a model builder": "with torch.no_grad():\n    for name in names:\n        build_model(name)\n",
    "training": "def fit(model, loader):\n    for x in loader:\n        model(x).sum().backward()\n",
}


@pytest.mark.parametrize("name", sorted(EVALUATION_BAD))
def test_tsc109_fires_on_evaluation_in_training_mode(name: str) -> None:
    assert codes(EVALUATION_BAD[name]) == ["TSC109"]


@pytest.mark.parametrize("name", sorted(EVALUATION_GOOD))
def test_tsc109_is_silent_where_the_mode_is_set_or_not_evaluation(name: str) -> None:
    assert codes(EVALUATION_GOOD[name]) == []


def test_tsc109_reports_the_loop_once() -> None:
    snippet = "def validate(model, loader):\n    for x, y in loader:\n        model(x)\n        model(y)\n"
    assert findings(snippet) == [(2, "TSC109")]


STEP = "    model = nn.Linear(2, 1)\n    opt = torch.optim.SGD(model.parameters(), 0.1)\n"
STEP += "    model(torch.ones(1, 2)).sum().backward()\n    opt.step()\n"
MAIN = 'if __name__ == "__main__":\n    main()\n'


def script(seeding: str = "", entry: str = MAIN) -> str:
    return f"{seeding}\n\ndef main():\n{STEP}\n\n{entry}"


SEEDING_BAD = {
    "no seed": script(),
    "main() without a guard": script(entry="main()\n"),
    "top-level training": "model = nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), 0.1)\n"
    "for _ in range(3):\n    model(torch.ones(1, 2)).sum().backward()\n    opt.step()\n",
    "Python and NumPy only": script("import random\nimport numpy as np\nrandom.seed(0)\nnp.random.seed(0)"),
    "a generator's own seed": script("g = torch.Generator().manual_seed(0)"),
}
SEEDING_GOOD = {
    "torch.manual_seed": script("torch.manual_seed(0)"),
    "torch.random.manual_seed": script("torch.random.manual_seed(0)"),
    "lightning": script("import lightning as L\nL.seed_everything(0)"),
    "the project's helper": script("from my_project.core.seeding import seed_everything\nseed_everything(0)"),
    "transformers": script("from transformers import set_seed\nset_seed(0)"),
    "a module of training functions": f"def train_step(model, opt):\n{STEP}",
    "a script that only evaluates": 'def main():\n    print(1)\n\n\nif __name__ == "__main__":\n    main()\n',
}


@pytest.mark.parametrize("name", sorted(SEEDING_BAD))
def test_tsc110_fires_on_a_training_script_without_a_seed(name: str) -> None:
    assert codes(SEEDING_BAD[name]) == ["TSC110"]


@pytest.mark.parametrize("name", sorted(SEEDING_GOOD))
def test_tsc110_is_silent_on_seeded_scripts_and_on_modules(name: str) -> None:
    assert codes(SEEDING_GOOD[name]) == []


def test_tsc110_reports_the_first_backward() -> None:
    assert findings(script()) == [(6, "TSC110")]


def loop(body: str, before: str = "total = 0.0\n") -> str:
    lines = "".join(f"        {line}\n" for line in body.splitlines())
    head = "".join(f"    {line}\n" for line in before.splitlines())
    return f"def fit(model, loader, criterion):\n{head}    for x, y in loader:\n{lines}    return total\n"


SUM_BAD = {
    "total = total + loss": loop("loss = criterion(model(x), y)\nloss.backward()\ntotal = total + loss"),
    "total += loss": loop("loss = criterion(model(x), y)\ntotal += loss"),
    "reversed": loop("loss = criterion(model(x), y)\ntotal = loss + total"),
    "into a dict": loop('loss = criterion(model(x), y)\nstats["loss"] += loss', 'stats = {"loss": 0.0}'),
    "a loss function's result": loop("total += criterion(model(x), y) * x.shape[0]"),
    "functional": loop("total += F.cross_entropy(model(x), y)"),
    "a tensor method of it": loop("loss = criterion(model(x), y)\ntotal += loss.mean()"),
    "an attribute": loop("total += self.aux_loss"),
}
SUM_GOOD = {
    ".item()": loop("loss = criterion(model(x), y)\ntotal += loss.item()"),
    ".detach()": loop("loss = criterion(model(x), y)\ntotal = total + loss.detach()"),
    "float()": loop("loss = criterion(model(x), y)\ntotal += float(loss)"),
    "already a number": loop("loss = criterion(model(x), y).item()\ntotal += loss"),
    "under no_grad": "def ev(model, loader, criterion):\n    total = 0.0\n    with torch.no_grad():\n"
    "        for x, y in loader:\n            total += criterion(model(x), y)\n",
    "this step's loss": loop("loss = criterion(model(x), y)\nloss = loss + 0.1 * aux_loss\nloss.backward()"),
    "summed to call backward once": loop("total = total + criterion(model(x), y)", "total = 0")
    + "    total.backward()\n",
    "not a loss": loop("correct = (model(x).argmax(1) == y).sum()\ntotal += correct"),
    "outside a loop": "def f(loss, total):\n    total += loss\n    return total\n",
}


@pytest.mark.parametrize("name", sorted(SUM_BAD))
def test_tsc111_fires_on_a_loss_summed_with_its_graph(name: str) -> None:
    assert codes(SUM_BAD[name]) == ["TSC111"]


@pytest.mark.parametrize("name", sorted(SUM_GOOD))
def test_tsc111_is_silent_on_numbers_detached_sums_and_per_step_losses(name: str) -> None:
    assert codes(SUM_GOOD[name]) == []


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ('torch.load("a.pt")', "TSC104 torch.load needs map_location and weights_only=True (P7)"),
        ('torch.load("a.pt", map_location="cpu")', "TSC104 torch.load needs weights_only=True (P7)"),
        ('torch.load("a.pt", "cpu", weights_only=False)', "TSC104 torch.load needs weights_only=True (P7)"),
        ('torch.load("a.pt", weights_only=True)', "TSC104 torch.load needs map_location (P7)"),
        ('torch.load("a.pt", map_location="cpu", weights_only=True)', None),
        ('torch.load("a.pt", map_location=device, weights_only=trusted)', None),  # a choice written in view
    ],
)
def test_tsc104_names_only_what_the_line_lacks(call: str, message: str | None) -> None:
    found = [finding.message for finding in check(ast.parse(HEADER + call + "\n"))]
    assert found == ([message] if message else [])


def report(path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """``run_check``'s finding lines for ``path``, as ``line:code``."""
    run_check(path)
    out = capsys.readouterr().out
    return [f"{m['line']}:{m['code']}" for m in re.finditer(r":(?P<line>\d+):\d+: (?P<code>[A-Z]+\d+)", out)]


def test_an_unsafe_load_is_one_finding_and_a_plain_loader_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "load.py"
    path.write_text(
        HEADER + 'state = torch.load("last.pt")\n'
        "loader = torch.utils.data.DataLoader(range(4), batch_size=2)\n"
        'ok = torch.load("last.pt", map_location="cpu", weights_only=True)\n'
    )
    assert report(path, capsys) == ["6:TSC104"]
    plain = subprocess.run(  # torchfix alone reports the load and the loader
        [str(BIN / "flake8"), "--select", "TOR", str(path)], capture_output=True, text=True, timeout=HANG_S
    )
    assert re.search(r":6:\d+: TOR102", plain.stdout) and re.search(r":7:\d+: TOR401", plain.stdout)


def test_the_check_selects_every_torchfix_code_but_the_two_left_out() -> None:
    assert set(TOR_CODES) == set(torchfix.GET_ALL_ERROR_CODES()) - {"TOR102", "TOR401"}
    assert SELECT.split(",")[0] == "TSC" and {"E902", "E999"} <= set(SELECT.split(","))


# One trigger for each torchfix rule the check selects (a few spelled two ways), as scripts spell them.
TORCHFIX_TRIGGERS = {
    "TOR101": "a = torch.chain_matmul(x, y, z)\n",
    "TOR002": "x.require_grad = True\n",
    "TOR003": "import torch.utils.checkpoint as cp\ny = cp.checkpoint(f, x)\n",
    "TOR104": "b = torch.utils.data._utils.collate.default_collate(items)\n",
    "TOR105": "from torch.utils.data._utils.collate import default_convert\n",
    "TOR106": "import torch as th\ny = th.log(1 + x)\n",
    "TOR107": "from torch import exp\ny = exp(x) - 1\n",
    "TOR201": "from torchvision.models import resnet18\nm = resnet18(pretrained=True)\n",
    "TOR201-aliased": "import torchvision.models as tvm\nm = tvm.resnet18(True)\n",
    "TOR201-detection": (
        "from torchvision import models\nm = models.detection.fasterrcnn_resnet50_fpn(pretrained=True)\n"
    ),
    "TOR202": "from torchvision.transforms import v2\nt = v2.ToTensor()\n",
    "TOR203": "import torchvision.models as models\n",
    "TOR901": "lib = torch.library.Library('ns', 'DEF')\n",
}


def test_torchfix_behind_the_gate_finds_what_it_finds_on_every_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each trigger in its own file, the planted mistakes and clean files: the gated check's TOR findings equal
    flake8 running torchfix on every file, and each trigger is found."""
    folder = tmp_path / "scripts"
    folder.mkdir()
    for code, snippet in TORCHFIX_TRIGGERS.items():
        (folder / f"{code.lower()}.py").write_text(HEADER + snippet)
    for fixture in FIXTURES.glob("*.py"):
        (folder / fixture.name).write_text(fixture.read_text())
    run_check(folder)
    gated = sorted(line for line in capsys.readouterr().out.splitlines() if ": TOR" in line)
    everywhere = subprocess.run(
        [str(BIN / "flake8"), f"--select={','.join(TOR_CODES)}", str(folder)],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert gated == sorted(everywhere.stdout.splitlines())
    for name in TORCHFIX_TRIGGERS:
        code = name.partition("-")[0]
        assert any(f"{name.lower()}.py:" in line and f" {code} " in line for line in gated), name


def test_the_gate_opens_for_every_file_under_a_torchfix_rule_it_does_not_know(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clean = ast.parse(HEADER + "y = torch.ones(2)\n")
    assert not Needs(TOR_CODES).met_by(clean)

    class NewVisitor(TorchVisitor):
        ERRORS = [TorchError("TOR999", "a rule of a newer torchfix")]  # noqa: RUF012 - torchfix's own shape

    monkeypatch.setattr(torchfix, "ALL_VISITOR_CLS", [*torchfix.ALL_VISITOR_CLS, NewVisitor])
    assert Needs([*TOR_CODES, "TOR999"]).met_by(clean)


def test_the_check_runs_only_the_plugins_it_reports(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import os\n")
    app = PracticesCheck()
    app.run([f"--select={SELECT}", str(tmp_path)])
    checkers = app.plugins.checkers  # type: ignore[union-attr]
    assert {plugin.entry_name for plugin in checkers.tree} == {"TSC", "TOR"}
    assert checkers.logical_line == [] and checkers.physical_line == []


def load_benchmark(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_table_is_what_the_planted_mistakes_score() -> None:
    """The README's "now" columns are benchmarks/lint_accuracy.py's score of this checkout, code by code."""
    accuracy = load_benchmark("lint_accuracy")
    rows = accuracy.score(accuracy.planted(FIXTURES), accuracy.findings(FIXTURES, None))
    row = re.compile(r"^\| (TSC\d+|TOR\d+|all) \| (\d+) \| \d+ \| \d+ \| (\d+) \| (\d+) \|$", re.MULTILINE)
    table = row.findall((REPO / "README.md").read_text())
    assert table, "the README has no planted-mistakes table"
    in_readme = {code: (int(planted), int(caught), int(false)) for code, planted, caught, false in table}
    measured = {code: (row["planted"], row["caught"], row["false"]) for code, row in rows.items()}
    assert {code: value for code, value in in_readme.items() if value != (0, 0, 0)} == measured
