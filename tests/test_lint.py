"""The practices linter: each TSC rule on a bad and a good snippet, flake8 delivery, ``run_check``.

Rules are tested in process on snippets (fast, exact); one test runs the real
``flake8`` command so that the entry point, ``--select`` and torchfix's plugin
are proven together; the last one checks that a generated project is clean.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest
import yaml

from torch_scaffold.check import run_check
from torch_scaffold.lint import RULES, check

from .answer_rows import LONGEST_PACKAGE_NAME, longest_package_name
from .conftest import BIN, HANG_S, REPO, generate, run_in
from .conftest import check as succeeded

HEADER = "import torch\nfrom torch import nn\n\n\n"

# One snippet per rule that the rule must report, and nothing else must.
BAD = {
    "TSC101": "def grad_norm(p):\n    return p.grad.data.norm()\n",
    "TSC102": "t = torch.FloatTensor([1.0, 2.0])\n",
    "TSC103": "model = nn.Linear(2, 2).cuda()\n",
    "TSC104": 'state = torch.load("last.pt")\n',
    "TSC105": 'def save(model):\n    torch.save(model, "model.pt")\n',
    "TSC106": (
        "class Deep(nn.Module):\n"
        "    def __init__(self, depth):\n"
        "        super().__init__()\n"
        "        self.blocks = [nn.Linear(8, 8) for _ in range(depth)]\n"
    ),
    "TSC107": (
        "class Normalize(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.mean = torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1)\n"
    ),
    "TSC108": (
        "def evaluate(model, loader):\n"
        "    model.eval()\n"
        "    correct = 0\n"
        "    for x, y in loader:\n"
        "        correct += (model(x).argmax(1) == y).sum()\n"
        "    return correct\n"
    ),
    "TSC109": (
        "def validate(model, loader):\n"
        "    with torch.no_grad():\n"
        "        return [model(x).argmax(1) for x, _ in loader]\n"
    ),
    "TSC110": (
        "def main():\n"
        "    model = nn.Linear(2, 1)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    model(torch.ones(1, 2)).sum().backward()\n"
        "    optimizer.step()\n"
        "\n\n"
        'if __name__ == "__main__":\n'
        "    main()\n"
    ),
    "TSC111": (
        "def fit(model, loader, criterion):\n"
        "    total_loss = 0.0\n"
        "    for x, y in loader:\n"
        "        loss = criterion(model(x), y)\n"
        "        total_loss += loss\n"
        "    return total_loss\n"
    ),
}

# The right way to do what each bad snippet does, and look-alikes the rule must leave alone.
GOOD = {
    "TSC101": (
        "def show(cfg, config, args, dataset, p):\n"
        "    loader = torch.utils.data.DataLoader(dataset.data, batch_size=cfg.data.batch_size, num_workers=2)\n"
        "    return p.grad.detach().norm(), config.data.root, args.data, loader\n"
        "\n\n"
        "class Folder:\n"
        "    def __init__(self, data):\n"
        "        self.data = data\n"
    ),
    "TSC102": (
        "import numpy as np\n"
        "a = torch.as_tensor([1.0, 2.0])\n"
        "b = torch.from_numpy(np.zeros(2))\n"
        "c = torch.tensor([1, 2], dtype=torch.long)\n"
        "ok = isinstance(a, torch.Tensor)\n"
    ),
    "TSC103": (
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
        "model = nn.Linear(2, 2).to(device)\n"
        "n = torch.cuda.device_count()\n"
    ),
    "TSC104": (
        'a = torch.load("last.pt", map_location="cpu", weights_only=True)\n'
        'b = torch.load("last.pt", "cpu", weights_only=True)\n'
    ),
    "TSC105": (
        "def save(model, optimizer, state, path):\n"
        '    torch.save(model.state_dict(), "model.pt")\n'
        '    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)\n'
        "    torch.save(state, path)\n"
        '    torch.save(torch.load(path, map_location="cpu", weights_only=True), path)\n'
    ),
    "TSC106": (
        "class Deep(nn.Module):\n"
        "    def __init__(self, depth):\n"
        "        super().__init__()\n"
        "        self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(depth)])\n"
        "        self.widths = [8 for _ in range(depth)]\n"
        "        self.body = nn.Sequential(*[nn.Linear(8, 8), nn.ReLU()])\n"
        "        self.heads = nn.ModuleList()\n"
        "        self.heads.append(nn.Linear(8, 1))\n"
    ),
    "TSC107": (
        "class Normalize(nn.Module):\n"
        "    mean: torch.Tensor\n"
        "\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        '        self.register_buffer("mean", torch.zeros(1, 3, 1, 1))\n'
        "        self.mean = torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1)  # updates the buffer\n"
        "        self.scale = nn.Parameter(torch.ones(1))\n"
        "\n\n"
        "class Counting(nn.BatchNorm1d):  # the parent registered num_batches_tracked\n"
        "    def __init__(self):\n"
        "        super().__init__(4)\n"
        "        self.num_batches_tracked = torch.tensor(0, dtype=torch.long)\n"
        "\n\n"
        "class Cache:  # not a module: a tensor attribute is fine\n"
        "    def __init__(self):\n"
        "        self.values = torch.zeros(3)\n"
    ),
    "TSC108": (
        "def evaluate(model, loader):\n"
        "    model.eval()\n"
        "    with torch.no_grad():\n"
        "        return [model(x) for x, _ in loader]\n"
        "\n\n"
        "@torch.inference_mode()\n"
        "def predict(model, loader):\n"
        "    model.eval()\n"
        "    return [model(x) for x in loader]\n"
        "\n\n"
        "def fit(model, loader, epochs):\n"
        "    for _ in range(epochs):\n"
        "        model.train()\n"
        "        for x, _ in loader:\n"
        "            model(x).sum().backward()\n"
        "        model.eval()\n"
        "        evaluate(model, loader)\n"
    ),
    "TSC109": (
        "def validate(model, loader):\n"
        "    model.eval()\n"
        "    with torch.no_grad():\n"
        "        return [model(x).argmax(1) for x, _ in loader]\n"
        "\n\n"
        "@torch.inference_mode()\n"
        "def predict(net, loader):\n"
        "    net.train(False)\n"
        "    return [net(x) for x in loader]\n"
    ),
    "TSC110": (
        "def main(seed):\n"
        "    torch.manual_seed(seed)\n"
        "    model = nn.Linear(2, 1)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    model(torch.ones(1, 2)).sum().backward()\n"
        "    optimizer.step()\n"
        "\n\n"
        "def train_step(model, optimizer, x):  # a module of training functions, not a script\n"
        "    model(x).sum().backward()\n"
        "    optimizer.step()\n"
        "\n\n"
        'if __name__ == "__main__":\n'
        "    main(0)\n"
    ),
    "TSC111": (
        "def fit(model, loader, criterion):\n"
        "    total_loss, seen = 0.0, 0\n"
        "    for x, y in loader:\n"
        "        loss = criterion(model(x), y)\n"
        "        loss = loss + 0.1 * model.weight.abs().sum()  # this step's loss, not a sum across steps\n"
        "        loss.backward()\n"
        "        total_loss += loss.item() * x.shape[0]\n"
        "        seen = seen + x.shape[0]\n"
        "    return total_loss / seen\n"
    ),
}


def codes(snippet: str) -> list[str]:
    return [finding.code for finding in check(ast.parse(HEADER + snippet))]


def test_every_rule_has_a_bad_and_a_good_snippet_and_cites_a_practice() -> None:
    assert {rule.code for rule in RULES} == set(BAD) == set(GOOD)
    for rule in RULES:
        assert rule.code.startswith("TSC1") and rule.message.endswith(")") and "(P" in rule.message


@pytest.mark.parametrize("code", sorted(BAD))
def test_rule_reports_its_bad_snippet(code: str) -> None:
    assert codes(BAD[code]) == [code]


@pytest.mark.parametrize("code", sorted(GOOD))
def test_rule_accepts_the_good_snippet(code: str) -> None:
    assert codes(GOOD[code]) == []


def test_rules_follow_import_aliases() -> None:
    snippet = "import torch as th\nfrom torch import load\nx = th.FloatTensor(2)\ny = load('a.pt')\n"
    assert codes(snippet) == ["TSC102", "TSC104"]


def test_noqa_suppresses_a_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """flake8 gives plugins ``# noqa``; with and without it, so the test fails if the code is wrong."""
    line = 'state = torch.load("last.pt", map_location="cpu", weights_only=True)\nmodel = nn.Linear(2, 2).cuda()'
    noisy, quiet = tmp_path / "noisy.py", tmp_path / "quiet.py"
    noisy.write_text(HEADER + line + "\n")
    quiet.write_text(HEADER + line + "  # noqa: TSC103\n")
    assert run_check(noisy) == 1
    assert "noisy.py:6:9: TSC103" in capsys.readouterr().out
    assert run_check(quiet) == 0
    assert "TSC103" not in capsys.readouterr().out


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A file with every anti-pattern: all bad snippets one after another."""
    path = tmp_path / "planted.py"
    path.write_text(HEADER + "\n\n".join(BAD.values()))
    return path


def test_flake8_command_reports_every_rule_beside_torchfix(planted: Path) -> None:
    result = subprocess.run(
        [str(BIN / "flake8"), "--select", "TSC,TOR", str(planted)], capture_output=True, text=True, timeout=HANG_S
    )
    found = {line.split()[1] for line in result.stdout.splitlines()}
    assert result.returncode == 1, result.stderr
    assert set(BAD) <= found
    assert any(code.startswith("TOR") for code in found), result.stdout


def test_run_check_exit_status_and_summary(planted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean = tmp_path / "clean" / "ok.py"
    clean.parent.mkdir()
    clean.write_text(HEADER + GOOD["TSC104"])
    assert run_check(planted) == 1
    summary = capsys.readouterr().out.splitlines()[-1]
    assert all(f"{code}: 1" in summary for code in BAD)
    assert "TOR102" not in summary  # the unsafe torch.load is one finding: TSC104's
    assert run_check(clean.parent) == 0
    assert capsys.readouterr().out == "torch-scaffold check: no findings\n"


def test_run_check_fails_on_what_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing path or a syntax error is not a clean file."""
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    assert run_check(broken) == 1
    assert run_check(tmp_path / "missing.py") == 1
    out = capsys.readouterr().out
    assert "E999" in out and "E902" in out


def test_pre_commit_hook_runs_the_check() -> None:
    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "torch-scaffold-check" and hook["entry"] == "torch-scaffold check"
    assert hook["language"] == "python" and hook["types"] == ["python"]
    assert {dependency.split(">")[0] for dependency in hook["additional_dependencies"]} == {"flake8", "torchfix"}


def test_generated_package_is_clean(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Answers other than package_name do not change any generated .py file, so this covers every variant."""
    status = run_check(project / "src")
    assert status == 0, capsys.readouterr().out


def test_generated_tests_are_clean(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = run_check(project / "tests")
    assert status == 0, capsys.readouterr().out


@pytest.mark.parametrize("package_name", [longest_package_name(0), "cls2d_v3"], ids=["longest-allowed", "with-digits"])
def test_generated_project_is_ruff_clean_for_any_package_name(
    template_repo: Path, tmp_path: Path, package_name: str
) -> None:
    """The package name is the one answer inside .py files: the longest allowed one must still fit 120 columns.

    The default project (a short name) is linted in tests/test_generate.py; the matrix lints every row.
    """
    assert len(longest_package_name(0)) == LONGEST_PACKAGE_NAME
    project = generate(template_repo, tmp_path / "p", project_name="Texture Classifier", package_name=package_name)
    succeeded(run_in(project, str(BIN / "ruff"), "check", "--no-cache", "."))
    succeeded(run_in(project, str(BIN / "ruff"), "format", "--check", "--no-cache", "."))


def test_torch_scaffold_check_command(planted: Path, project: Path) -> None:
    """The console script: each rule's code reported on the planted file, exit 1; a clean generated file, exit 0.

    The whole generated project is checked in-process above (the same run_check); once more here through the
    console script would only add 15 s of the same work.
    """
    bad = subprocess.run([str(BIN / "torch-scaffold"), "check", str(planted)], capture_output=True, text=True)
    assert bad.returncode == 1
    for rule in RULES:
        assert rule.code in bad.stdout
    (clean_file,) = project.glob("src/*/core/checkpoint.py")
    clean = subprocess.run([str(BIN / "torch-scaffold"), "check", str(clean_file)], capture_output=True, text=True)
    assert clean.returncode == 0, clean.stdout
    assert "no findings" in clean.stdout


def module(body: str, imports: str = "") -> str:
    """``body`` as the ``__init__`` of an nn.Module subclass."""
    lines = "".join(f"        {line}\n" for line in body.splitlines())
    return f"{imports}class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n{lines}"


# Shapes real code gives the mistakes: each must be reported with exactly these codes.
BAD_VARIANTS = {
    "expression": (module("self.scale = torch.ones(1) * 2"), ["TSC107"]),
    "reflected expression": (module("self.shift = -(2 * torch.ones(1))"), ["TSC107"]),
    "alias": (module("self.scale = T.ones(1)", "import torch as T\n"), ["TSC107"]),
    "imported factory": (module("self.scale = ones(1) + 1", "from torch import ones\n"), ["TSC107"]),
    "method chain": (module("self.pos = torch.arange(3).float().view(1, -1)"), ["TSC107"]),
    "torch function": (module("self.log_scale = torch.log(torch.full((1,), 2.0))"), ["TSC107"]),
    "through a local": (module("w = torch.linspace(0, 1, 5)\nself.w = w[None] / w.sum()"), ["TSC107"]),
    "appended list": (
        module("self.blocks = []\nfor _ in range(3):\n    self.blocks.append(nn.Linear(8, 8))"),
        ["TSC106"],
    ),
    "list(...)": (module("self.blocks = list()\nself.blocks.extend([nn.Linear(8, 8)])"), ["TSC106"]),
    "list times n": (module("self.blocks = [nn.Linear(8, 8)] * 3"), ["TSC106"]),
    "aliased layer": (module("self.blocks = [tnn.Linear(8, 8)]", "import torch.nn as tnn\n"), ["TSC106"]),
    "dict of modules": (module('self.heads = {"a": nn.Linear(8, 1), "b": nn.Linear(8, 2)}'), ["TSC106"]),
    "dict comprehension": (module("self.heads = {k: nn.Linear(8, 1) for k in 'ab'}"), ["TSC106"]),
    "dict(...)": (module("self.heads = dict(a=nn.Linear(8, 1))"), ["TSC106"]),
    "filled dict": (module('self.heads = {}\nself.heads["a"] = nn.Linear(8, 1)'), ["TSC106"]),
    "updated dict": (module('self.heads = dict()\nself.heads.update({"a": nn.Linear(8, 1)})'), ["TSC106"]),
    "tensor .data": ("def f(w):\n    return (w * 2).data\n", ["TSC101"]),
}

# Correct code that looks like the variants: nothing may be reported.
GOOD_VARIANTS = {
    "buffers and parameters": module(
        'self.register_buffer("scale", torch.ones(1) * 2)\n'
        'self.register_buffer("pos", torch.arange(3).float().view(1, -1), persistent=False)\n'
        "self.gain = nn.Parameter(torch.ones(1) * 0.5)\n"
        "self.bias = nn.Parameter(T.zeros(4))",
        "import torch as T\n",
    ),
    "python values from tensors": module(
        "self.n = torch.ones(3).sum().item()\nself.sizes = torch.arange(4).tolist()\nself.dims = torch.ones(2, 3).dim()"
    ),
    "plain python": module(
        "self.widths = [8, 16, 32]\nself.names = []\nself.names.append('a')\nself.lookup = {'a': 1}\n"
        "self.scale = 2 * 3.0\nself.table = dict(a=1)"
    ),
    "registered containers": module(
        "self.blocks = nn.ModuleList()\nself.blocks.append(nn.Linear(8, 8))\n"
        'self.heads = nn.ModuleDict({"a": nn.Linear(8, 1)})\n'
        "self.heads.update({'b': nn.Linear(8, 2)})\n"
        "self.body = nn.Sequential(*[nn.Linear(8, 8) for _ in range(2)])\n"
        "layers = [nn.Linear(8, 8), nn.ReLU()]\nself.stack = nn.Sequential(*layers)"
    ),
    "a data set's .data": (
        "from torchvision.datasets import MNIST\n\n\n"
        "def arrays(root, trainset, train_set, ds):\n"
        "    mnist = MNIST(root)\n"
        "    return mnist.data, MNIST(root).data, trainset.data, train_set.data, ds.data, load_config(root).data\n"
    ),
    "not a module": (
        "class Cache:\n    def __init__(self):\n        self.scale = torch.ones(1) * 2\n        self.parts = []\n"
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_VARIANTS))
def test_rules_catch_the_shapes_real_code_takes(name: str) -> None:
    snippet, expected = BAD_VARIANTS[name]
    assert codes(snippet) == expected


@pytest.mark.parametrize("name", sorted(GOOD_VARIANTS))
def test_rules_leave_correct_look_alikes_alone(name: str) -> None:
    assert codes(GOOD_VARIANTS[name]) == []
