"""make gpu-check on the CPU: red with one line where no GPU is usable, its steps without copier, and the GPU
suites green on 1, 2 and 8 GPUs by their own collection and parameters (tests/gpu/fake_gpus.py).

No GPU runs here: what a GPU machine decides is proven with ``torch.cuda`` faked, as the generated project's
test_cuda_logic.py does for the package.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from .conftest import REPO

GPU_TOOLS = REPO / "tests" / "gpu"


def load(name: str) -> types.ModuleType:
    """tests/gpu/NAME.py as a module (a script, not part of the tests package)."""
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU_TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_make_gpu_check_here_is_red_with_one_line_saying_why() -> None:
    """This machine has no GPU: the check must say so and fail, not pass having checked nothing. Both with the
    system's Python and with .venv's (a CUDA build of torch that finds no driver)."""
    for python in ("python3", str(Path(sys.executable))):
        result = subprocess.run(
            ["make", "--no-print-directory", "gpu-check", f"GPU_PYTHON={python}"],
            cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120,
        )  # fmt: skip
        # make's own line (make[1]: under make test, which runs this inside its make) aside: one line, ours.
        output = (result.stdout + result.stderr).splitlines()
        ours = [line for line in output if not re.match(r"make(\[\d+\])?: \*\*\*", line)]
        assert result.returncode != 0 and len(ours) == 1, (python, result.stdout, result.stderr)
        assert ours[0].startswith("gpu-check: nothing checked: no NVIDIA driver on this machine"), ours


class FakeCuda:
    """torch as tests/gpu/probe.py sees it: a CUDA build whose CUDA is unavailable or whose device refuses."""

    def __init__(self, available: bool, warning: str = "", kernel_error: str = "") -> None:
        self.__version__, self.version = "2.14.1+cu130", types.SimpleNamespace(cuda="13.0")
        self.available, self.warning, self.kernel_error = available, warning, kernel_error
        self.cuda = types.SimpleNamespace(
            is_available=self.is_available,
            device_count=lambda: 8,
            get_device_name=lambda index: "NVIDIA H100 80GB HBM3",
            get_device_capability=lambda index: (9, 0),
        )

    def is_available(self) -> bool:
        if self.warning:
            warnings.warn(self.warning, UserWarning, stacklevel=1)
        return self.available

    def ones(self, *args: Any, **kwargs: Any) -> Any:
        if self.kernel_error:
            raise RuntimeError(self.kernel_error)
        return types.SimpleNamespace(add_=lambda n: types.SimpleNamespace(item=lambda: 2.0))


def test_the_probe_names_why_a_gpu_cannot_be_used() -> None:
    """The preflight's reasons, each one line: a CPU build, CUDA unavailable (torch's own warning says why), a
    device that refuses the build's kernels; and the GPUs where all is well."""
    probe = load("probe")
    old_driver = "CUDA initialization: The NVIDIA driver on your system is too old (found version 12020).\nMore."
    assert probe.cuda_facts(FakeCuda(False, warning=old_driver))["refused"] == (
        "torch 2.14.1+cu130 finds no usable GPU: CUDA initialization: The NVIDIA driver on your system is too old "
        "(found version 12020)."
    )
    assert "no GPU visible to it" in probe.cuda_facts(FakeCuda(False))["refused"]
    no_kernel = "CUDA error: no kernel image is available for execution on the device\nCUDA kernel errors..."
    assert probe.cuda_facts(FakeCuda(True, kernel_error=no_kernel))["refused"] == (
        "cuda:0 refuses torch 2.14.1+cu130: CUDA error: no kernel image is available for execution on the device"
    )
    cpu_build = FakeCuda(True)
    cpu_build.version.cuda = None
    assert probe.cuda_facts(cpu_build)["refused"] == "torch 2.14.1+cu130 is a CPU-only build"
    fine = probe.cuda_facts(FakeCuda(True))
    assert fine["refused"] is None and fine["gpus"] == 8 and fine["capability"] == "9.0", fine


def dry_run(tmp_path: Path, gpus: int, *, carried: bool, python: str = "python3") -> str:
    """tests/gpu/check.py --dry-run in a copy of the clone's files it reads, with (or without) the carried folders."""
    root = tmp_path / ("carried" if carried else "bare")
    shutil.copytree(GPU_TOOLS, root / "tests" / "gpu", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "constraints.txt", root / "constraints.txt")
    (root / "template").mkdir()
    shutil.copy(REPO / "template" / "pyproject.toml.jinja", root / "template" / "pyproject.toml.jinja")
    if carried:
        (root / ".gpu-project").mkdir()
        (root / ".wheels").mkdir()
        (root / ".wheels" / "torchcodec-0.17.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    result = subprocess.run(
        [python, str(root / "tests" / "gpu" / "check.py"), "--dry-run", str(gpus)],
        capture_output=True, text=True, timeout=120, check=False, cwd=root,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def commands(output: str) -> list[str]:
    return [line[2:] for line in output.splitlines() if line.startswith("$ ")]


def test_the_checks_steps_on_a_machine_without_copier(tmp_path: Path) -> None:
    """The system's Python here has neither torch nor copier: the environment installs torch (none to keep) and
    copier is installed for the project's step alone; with the project and the TorchCodec wheel carried, no
    copier at all and TorchCodec from the wheel. One GPU: no DDP job; two: a 2-process torchrun; 12: 8."""
    assert subprocess.run(["python3", "-c", "import copier"], capture_output=True, check=False).returncode != 0
    bare = dry_run(tmp_path, 1, carried=False)
    steps = [line.split(":")[0][3:] for line in bare.splitlines() if line.startswith("-- ")]
    assert steps == [
        "preflight", "environment", "project", "template GPU suite", "project GPU suite", "DDP job",
        "benchmark check cases",
    ]  # fmt: skip
    run = commands(bare)
    copier = [i for i, command in enumerate(run) if "copier" in command]
    project_step = bare.split("== project\n")[1].split("-- project:")[0]
    assert copier and all(run[i] in project_step for i in copier), run  # only where the project is made
    assert any(command.endswith("-m pip install --quiet --disable-pip-version-check -c .gpu-venv/constraints.txt "
                                "copier") for command in run), run  # fmt: skip
    assert any("--ignore-installed" in command and command.endswith("torch torchvision") for command in run)
    assert any(command.endswith("--no-deps torchcodec==0.17.0") for command in run), run
    extras = "plots,onnx,tensorboard,mlflow,sweep,decode,shards,timm,audit,metrics"  # every extra but dev
    assert any(f"-e '.gpu-project[{extras}]'" in command for command in run), run
    suites = [command for command in run if "-m pytest" in command]
    assert len(suites) == 2 and all("TORCH_SCAFFOLD_GPU_CHECK=1" in command for command in suites), suites
    assert not any("torch.distributed.run" in command for command in run)
    assert re.search(r"^DDP job +n/a +0\.0 +needs 2 GPUs; this machine has 1$", bare, re.MULTILINE)
    assert "benchmarks/throughput.py --check --project .gpu-project" in bare

    carried = commands(dry_run(tmp_path, 2, carried=True, python=sys.executable))
    assert not any("copier" in command for command in carried), carried
    assert not any("torch torchvision" in command for command in carried)  # .venv's CUDA torch is kept
    assert any(command.endswith("--no-index --no-deps --find-links .wheels torchcodec") for command in carried)
    torchrun = [command for command in carried if "torch.distributed.run" in command]
    assert len(torchrun) == 1 and "--nproc_per_node=2" in torchrun[0] and "train.parallel=ddp" in torchrun[0]
    for gpus, processes in ((8, 8), (12, 8)):  # DDP on every GPU, up to a node's 8
        torchrun = [c for c in commands(dry_run(tmp_path / str(gpus), gpus, carried=True)) if "distributed.run" in c]
        assert len(torchrun) == 1 and f"--nproc_per_node={processes} " in torchrun[0], torchrun


def git_checkout(root: Path) -> str:
    """``root`` made a git repository of one commit (what dry_run copied); its HEAD."""
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "checkout"]):
        subprocess.run(["git", "-C", str(root), *argv], check=True, capture_output=True)
    found = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True, capture_output=True, text=True)
    return found.stdout.strip()


def test_a_carried_project_made_from_another_commit_is_made_again(tmp_path: Path) -> None:
    """After a pull, make gpu-check used to test the old .gpu-project/ and print only "carried". It is made again
    where its answers' _commit is not HEAD, or where the template has uncommitted changes; a project of HEAD (a
    tag or git describe's words for it too) is carried, saying so."""
    dry_run(tmp_path, 1, carried=True)  # the files a dry run reads, copied
    root = tmp_path / "carried"
    (root / ".gitignore").write_text(".gpu-project/\n.wheels/\n")
    head = git_checkout(root)
    subprocess.run(["git", "-C", str(root), "tag", "0.7.4"], check=True)
    script = root / "tests" / "gpu" / "check.py"

    def project_step(commit: str) -> str:
        (root / ".gpu-project" / ".copier-answers.yml").write_text(f"_commit: {commit}\n_src_path: .\n")
        done = subprocess.run(["python3", str(script), "--dry-run", "1"], capture_output=True, text=True, cwd=root)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.split("== project\n")[1].split("-- project:")[0]

    for same in (head, head[:7], "0.7.4"):
        assert "copier" not in project_step(same), same
    made_again = project_step("0.7.3-2-g1234abc")
    why = "gpu-check: .gpu-project/ is not this checkout's (made from 0.7.3-2-g1234abc, this checkout is at "
    assert f"{why}{head[:10]}): made again" in made_again
    made = made_again.index("-m copier copy")  # into .gpu-project.new, then swapped in
    assert "rm -rf .gpu-project.new" in made_again[:made] and ".gpu-project.new" in made_again[made:].split("\n")[0]
    assert "rm -rf .gpu-project\n" in made_again[made:] and "mv .gpu-project.new .gpu-project" in made_again[made:]
    (root / "template" / "pyproject.toml.jinja").write_text("changed")
    assert "(the template has uncommitted changes): made again" in project_step(head)


def test_a_carried_project_stays_where_copier_cannot_make_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """copier is installed from the registry for the project step: without it (no registry, no copier), the old
    .gpu-project/ was removed first and the check left with none. It stays as it was, and the step fails in one
    line saying what to do; where copier works, its project replaces the old one."""
    check = load("check")
    old, fresh = tmp_path / ".gpu-project", tmp_path / ".gpu-project.new"
    (old / "src").mkdir(parents=True)
    monkeypatch.setattr(check, "PROJECT", old)
    monkeypatch.setattr(check, "FRESH", fresh)
    monkeypatch.setattr(check, "project_outdated", lambda project: "made from 0.7.3, this checkout is at 1234abcd")
    monkeypatch.setattr(check, "copier_in", lambda check: True)
    monkeypatch.setattr(check, "probe", lambda *args, **kwargs: {"nvjpeg_failure": None})

    class Shell:
        dry = False

        def __init__(self, copier_works: bool) -> None:
            self.copier_works, self.ran = copier_works, []

        def run(self, argv: list[Any], **kwargs: Any) -> int:
            words = [str(word) for word in argv]
            self.ran.append(" ".join(words))
            if "copier" in words:
                if self.copier_works:
                    (Path(words[-1]) / "pyproject.toml").parent.mkdir(parents=True)
                    (Path(words[-1]) / "pyproject.toml").write_text("made by copier")
                return 0 if self.copier_works else 1
            if words[0] in ("rm", "mv"):
                return subprocess.run(words, check=False).returncode
            return 0  # pip

    failing = check.Check(Shell(copier_works=False), gpus=1, workers=1)
    row = check.Row("project")
    check.project(failing, row)
    assert row.status == "FAILED" and (old / "src").is_dir() and not fresh.exists(), failing.shell.ran
    said = (
        ".gpu-project/ is not this checkout's (made from 0.7.3, this checkout is at 1234abcd) and copier could not "
        "make it again here: run make gpu-project where copier runs and carry it (the old one is kept, untested)"
    )
    assert row.detail == failing.fatal == said
    working = check.Check(Shell(copier_works=True), gpus=1, workers=1)
    row = check.Row("project")
    check.project(working, row)
    assert row.status == "ok" and (old / "pyproject.toml").read_text() == "made by copier", working.shell.ran
    assert not (old / "src").exists() and not fresh.exists()


def test_a_benchmark_case_that_did_not_run_on_its_path_fails_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe that failed dropped the nvJPEG case and the step stayed green; a case that fell back to another
    path (its files decoded on the CPU) passed as the nvJPEG one. Each is now named, red."""
    check = load("check")
    good = {"model": "resnet18", "image_size": 64, "b_generated_trainer": 9000.0, "a_compute_bound": 10000.0,
            "a_best_setting": "bf16, channels_last", "b_over_a": 0.9, "b_host_syncs_per_step": 0.0}  # fmt: skip
    rows = {
        "auto": {**good, "path": "auto", "ran_on": "DeviceBatches"},
        "prefetch": {**good, "path": "prefetch", "ran_on": "Prefetched"},
        "nvjpeg": {**good, "path": "nvjpeg", "ran_on": "GpuDecoded", "b_nvjpeg_files": 10000, "b_cpu_files": 0},
    }
    astray = {
        "skipped": {"model": "resnet18", "image_size": 64, "path": "nvjpeg", "skipped": "no CUDA"},
        "elsewhere": {**rows["nvjpeg"], "ran_on": "Prefetched"},
        "fell back": {**rows["nvjpeg"], "b_nvjpeg_files": 0, "b_cpu_files": 10000},
    }

    class Shell:
        dry = False

        def __init__(self, cases: list[dict[str, Any]]) -> None:
            self.cases = cases

        def run(self, argv: list[str], **kwargs: Any) -> int:
            Path(argv[argv.index("--out") + 1]).write_text(json.dumps(self.cases))
            return 0

    monkeypatch.setattr(check, "OUT", tmp_path)
    runs = [(list(rows.values()), "ok"), *(([*rows.values(), case], "FAILED") for case in astray.values())]
    for cases, status in runs:
        row = check.Row("benchmark check cases")
        check.benchmark(check.Check(Shell(cases), gpus=1, workers=1), row)
        assert row.status == status, (cases[-1], row)
    problems = [check.path_problem(case) for case in astray.values()]
    assert problems == [
        "not run: no CUDA",
        "its batches came through Prefetched, not GpuDecoded",
        "nvJPEG decoded 0 files, the CPU 10000: it fell back",
    ]


def test_the_environment_holds_the_systems_cuda_torch() -> None:
    """Where this Python has a CUDA torch, pip may not replace it: it and torchvision are pinned to their
    versions, and constraints.txt's own torch pins are dropped; without one, constraints.txt's stand."""
    check = load("check")
    held = check.constraints_for(("2.9.0+cu128", "12.8"), "0.24.0+cu128").splitlines()
    assert "torch==2.9.0+cu128" in held and "torchvision==0.24.0+cu128" in held
    assert not any(line.startswith(("torch==2.14", "torchvision==0.29", "torchcodec==")) for line in held)
    assert "torch==2.14.1" in check.constraints_for((None, None), None).splitlines()
    assert check.torchcodec_request(("2.14.1+cu130", "13.0")) == "torchcodec==0.17.0"
    assert check.torchcodec_request(("2.11.0+cu130", "13.0")) == "torchcodec==0.17.0"  # torch's stable ABI, 2.11 on
    assert check.torchcodec_request((None, None)) == "torchcodec==0.17.0"  # constraints.txt's torch comes with it
    assert check.torchcodec_request(("2.9.0+cu128", "12.8")) is None  # no TorchCodec image decoder loads with it
    assert check.torchcodec_request(("unknown", "12.8")) == "torchcodec==0.17.0"  # a version.py without a version
    assert check.torch_of() == (torch.__version__, torch.version.cuda)  # read without importing


def test_where_no_torchcodec_goes_with_the_torch_each_nvjpeg_row_says_so_and_the_check_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 53: with torch 2.10 no TorchCodec with an image decoder loads (0.16 and later need 2.11), so none is
    installed (a carried wheel neither) and nvJPEG cannot be checked: the environment's, project's, suites' and
    benchmark's rows say so in one line each, the nvJPEG tests' skips are counted apart, not as failures, and the
    table ends naming what was not verified. With a torch that has one, those skips stay red."""
    check = load("check")
    monkeypatch.setattr(check, "OUT", tmp_path)
    monkeypatch.setattr(check, "WHEELS", tmp_path / "wheels")
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "torchcodec-0.17.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    monkeypatch.setattr(check, "torch_of", lambda: ("2.10.0+cu128", "12.8"))
    skip = f"{check.NEEDS_TORCHCODEC}: TorchCodec 0.17.0 is installed but cannot decode"
    report = (
        '<testsuites><testsuite name="pytest"><testcase name="a"/>'
        f'<testcase name="nvjpeg"><skipped message="{skip}"/></testcase></testsuite></testsuites>'
    )
    bench = [{"model": "resnet18", "image_size": 224, "path": "nvjpeg", "skipped": "TorchCodec cannot decode"}]

    class Shell:
        dry = False

        def __init__(self) -> None:
            self.commands: list[str] = []

        def run(self, argv: list[Any], *, env: dict[str, str] | None = None, **kwargs: Any) -> int:
            self.commands.append(" ".join(map(str, argv)))
            self.env = env
            junit = next((word for word in map(str, argv) if word.startswith("--junitxml=")), None)
            if junit:
                Path(junit.split("=", 1)[1]).write_text(report)
            if "--out" in argv:
                Path(argv[argv.index("--out") + 1]).write_text(json.dumps(bench))
            return 0

    shell = Shell()
    run = check.Check(shell, gpus=1, workers=1, python=Path(sys.executable))  # type: ignore[arg-type]
    monkeypatch.setattr(check, "see_this_pythons_packages", lambda python: None)
    monkeypatch.setattr(check, "VENV", tmp_path / "venv")
    (tmp_path / "venv").mkdir()
    rows = {name: check.Row(name) for name in ("environment", "template GPU suite", "benchmark check cases")}
    check.environment(run, rows["environment"])
    said = "no TorchCodec with an image decoder loads with torch 2.10.0+cu128 (0.16 and later need torch 2.11"
    assert rows["environment"].status == "ok" and said in rows["environment"].detail, rows["environment"]
    installs = [word for command in shell.commands for word in command.split()]
    assert not any(word.startswith(("torchcodec", "--find-links")) for word in installs), shell.commands  # nor carried
    check.template_suite(run, rows["template GPU suite"])
    assert "TORCH_SCAFFOLD_REQUIRE_NVJPEG" not in (shell.env or {}) and shell.env["TORCH_SCAFFOLD_GPU_CHECK"] == "1"
    suite = rows["template GPU suite"]
    assert suite.status == "ok" and suite.detail.startswith("1 passed, 1 without TorchCodec (no TorchCodec"), suite
    check.benchmark(run, rows["benchmark check cases"])
    bench_row = rows["benchmark check cases"]
    assert bench_row.status == "ok" and bench_row.below == [("  resnet18@224 nvjpeg", run.nvjpeg_unverified)]
    text = check.table(list(rows.values()), {"gpus": 1, "names": ["H100"]}, run.nvjpeg_unverified)
    assert "gpu-check: PASSED; nvJPEG NOT VERIFIED;" in text.splitlines()[0], text
    assert text.splitlines()[-1].startswith("not verified: nvJPEG decoding, its tests and benchmark case: " + said)
    run.nvjpeg_unverified = None  # a torch with a TorchCodec: an nvJPEG test that skips is red
    check.template_suite(run, rows["template GPU suite"])
    assert rows["template GPU suite"].status == "FAILED" and shell.env["TORCH_SCAFFOLD_REQUIRE_NVJPEG"] == "1"


def test_the_project_is_installed_with_every_extra() -> None:
    """Each optional-dependency group by name: the ones the generated dev extra gathers, no fewer."""
    check = load("check")
    pyproject = (REPO / "template" / "pyproject.toml.jinja").read_text()
    dev = re.search(r'^dev = \["\{\{ project_slug \}\}\[([a-z,]+)\]"', pyproject, re.MULTILINE)
    assert dev and check.extras_of(pyproject) == dev.group(1).split(","), check.extras_of(pyproject)


def test_the_tables_first_line_names_the_driver(tmp_path: Path) -> None:
    check = load("check")
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n")
    assert check.driver_version(version) == "550.54.15"
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n")
    assert check.driver_version(version) == "570.86.15"
    assert check.driver_version(tmp_path / "missing") is None


def gone(pid: int) -> bool:
    """Whether a process has exited (a zombie that init has yet to reap counts as exited)."""
    status = Path(f"/proc/{pid}/status")
    return not status.exists() or "\nState:\tZ" in status.read_text()


def test_a_hung_step_is_ended_with_every_process_it_started(tmp_path: Path) -> None:
    """A step past its limit is ended with its process group: the child it started too (torchrun's ranks)."""
    check = load("check")
    pidfile = tmp_path / "child"
    started = time.monotonic()
    code = check.Shell(dry=False).run(["bash", "-c", f"sleep 300 & echo $! > {pidfile}; wait"], cwd=tmp_path, limit=2)
    assert code == 124 and time.monotonic() - started < 60
    child = int(pidfile.read_text())
    for _ in range(50):  # init reaps it
        if gone(child):
            break
        time.sleep(0.1)
    assert gone(child)
    assert check.Shell(dry=False).run(["true"], cwd=tmp_path, limit=60) == 0


def test_a_suites_report_counts_skips_as_red_except_too_few_gpus(tmp_path: Path) -> None:
    check = load("check")
    report = tmp_path / "report.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase name="a"><properties><property name="nvjpeg_mean" value="1.5"/></properties></testcase>'
        '<testcase name="b"><skipped message="needs 2 GPUs, this machine has 1"/></testcase>'
        '<testcase name="c"><failure message="x"/></testcase>'
        '<testcase name="d"><skipped message="needs a CUDA device"/></testcase>'
        "</testsuite></testsuites>"
    )
    counts, measured = check.junit_counts(report)
    assert counts == {"passed": 1, "failed": 1, "skipped": 1, "need more GPUs": 1, "without TorchCodec": 0}
    assert measured == [("  a", "nvjpeg_mean = 1.5")]


def test_under_the_switch_a_gpu_test_that_skips_fails(project: Path) -> None:
    """Without CUDA every GPU test skips, and pytest exits 0: green having checked nothing (this very run shows
    it: make test passes with tests/test_gpu.py skipped, and so does the project suite, test_generate.py). Under
    ``TORCH_SCAFFOLD_GPU_CHECK=1`` (make gpu-check sets it) each of those skips fails, naming why; the
    generated project's conftest and this repository's alike."""
    suites = [(project, ["tests/test_gpu.py", "-k", "auto_precision or second_gpu"]), (REPO, ["tests/test_gpu.py"])]
    for cwd, selection in suites:
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", "-m", "gpu", *selection]
        env = {
            **os.environ,
            "PYTHONPATH": str(project / "src"),
            "GPU_PROJECT": str(project),
            "TORCH_SCAFFOLD_GPU_CHECK": "1",
        }
        red = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert red.returncode != 0 and " skipped" not in red.stdout.splitlines()[-1], red.stdout
        assert "skipped under TORCH_SCAFFOLD_GPU_CHECK=1, where a skip has checked nothing" in red.stdout
        assert "needs a CUDA device" in red.stdout


# --- the GPU suites with the device count faked -------------------------------------------------------------


def violations(report: dict[str, Any]) -> list[str]:
    """What would fail on a machine with ``report['gpus']`` GPUs, from tests/gpu/fake_gpus.py's records.

    Every test that needs more GPUs than there are skips saying so, and no other test skips. A test on one GPU
    pins ``train.parallel=none`` in every CUDA configuration it makes; a test on several asks for DataParallel
    (``dp``) where DataParallel runs, with a batch that every GPU takes an equal share of, and for DDP
    (``ddp``) under torchrun, with no more processes than GPUs. A test whose source starts runs recorded one.
    """
    gpus, found = report["gpus"], []
    for name, test in report["tests"].items():
        needs = test["gpus"]
        if needs > gpus:
            if not test.get("skipped", "").endswith(f"needs {needs} GPUs, this machine has {gpus}"):
                found.append(f"{name}: needs {needs} GPUs but was not skipped on {gpus}: {test.get('skipped')}")
            continue
        if "skipped" in test:
            found.append(f"{name}: skipped on {gpus} GPUs: {test['skipped']}")
        if test["starts_runs"] and not test["runs"]:
            found.append(f"{name}: starts a run, but none was recorded before its first CUDA call")
        for run in test["runs"]:
            found.extend(f"{name}: {problem}" for problem in run_problems(run, needs, gpus))
    return found


def run_problems(run: dict[str, Any], needs: int, gpus: int) -> list[str]:
    """One configuration's problems on ``gpus`` GPUs, in a test that needs ``needs``."""
    if "spawn" in run or not run["device"].startswith("cuda"):
        return []
    if run["nproc"] > 1:
        ok = needs >= 2 and run["nproc"] <= gpus and run["parallel"] == "ddp"
        return [] if ok else [f"torchrun of {run['nproc']} processes, parallel={run['parallel']}, on {gpus} GPUs"]
    if "refused" in run:  # compile with DataParallel is refused by design; a batch too small for the GPUs is not
        return [f"refused on {gpus} GPUs: {run['refused']}"] if needs == 1 or "batch" in run["refused"] else []
    if needs == 1:
        return (
            [] if run["parallel"] == "none" else [f"parallel={run['parallel']} (DataParallel over {run['replicas']})"]
        )
    if not run["replicas"]:
        return []
    spread = run["parallel"] == "dp" and len(run["replicas"]) == gpus and run["batch_size"] % gpus == 0
    return (
        []
        if spread
        else [f"DataParallel over {run['replicas']} with parallel={run['parallel']}, batch {run['batch_size']}"]
    )


def test_the_rules_find_what_fails_on_many_gpus() -> None:
    """The checker is able to fail: each flaw the issue found, as a record, is reported."""
    unpinned = {"device": "cuda", "parallel": "auto", "batch_size": 8, "nproc": 1, "replicas": list(range(8))}
    too_small = {**unpinned, "batch_size": 4, "refused": "data.batch_size 4 is smaller than the 8 GPUs"}
    uneven = {**unpinned, "parallel": "dp", "batch_size": 12}
    tests = {
        "one_gpu": {"gpus": 1, "starts_runs": True, "runs": [unpinned]},
        "small_batch": {"gpus": 1, "starts_runs": True, "runs": [too_small]},
        "dp": {"gpus": 2, "starts_runs": True, "runs": [uneven]},
        "ran_nothing": {"gpus": 1, "starts_runs": True, "runs": []},
        "two_gpus_on_one": {"gpus": 2, "starts_runs": True, "runs": []},
    }
    assert [found.split(":")[0] for found in violations({"gpus": 8, "tests": tests})] == list(tests)
    assert len(violations({"gpus": 1, "tests": {"x": tests["two_gpus_on_one"]}})) == 1
    pinned = {**unpinned, "parallel": "none", "replicas": []}
    assert violations({"gpus": 8, "tests": {"one_gpu": {"gpus": 1, "starts_runs": True, "runs": [pinned]}}}) == []


def fake_gpu_suite(tmp_path: Path, gpus: int, cwd: Path, project: Path, *selection: str) -> dict[str, Any]:
    """A GPU suite's pytest run with tests/gpu/fake_gpus.py on ``gpus`` faked GPUs: its report."""
    report = tmp_path / f"report-{gpus}.json"
    env = {
        **os.environ,
        "FAKE_GPUS": str(gpus),
        "FAKE_GPUS_REPORT": str(report),
        "GPU_PROJECT": str(project),
        "PYTHONPATH": os.pathsep.join([str(GPU_TOOLS), str(project / "src")]),
        "TORCH_SCAFFOLD_GPU_CHECK": "1",  # as make gpu-check runs them: the GPU-count skip is the only one allowed
    }
    env.pop("TORCH_SCAFFOLD_REQUIRE_NVJPEG", None)  # its probe decodes on the GPU: before any configuration
    command = [sys.executable, "-m", "pytest", "-p", "fake_gpus", "-p", "no:cacheprovider", "-q", "-m", "gpu"]
    result = subprocess.run(
        [*command, "-p", "no:randomly", *selection], cwd=cwd, env=env, capture_output=True, text=True, timeout=1800
    )
    assert report.exists(), result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(report.read_text())


COMMANDS_SUITE = """
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu


def test_another_command_that_names_a_py_file_and_train() -> None:
    done = subprocess.run([sys.executable, "-c", "pass", "tests/test_x.py", "-k", "train"], check=False)
    assert done.returncode == 0


def test_a_launcher_script(tmp_path) -> None:
    subprocess.run([sys.executable, str(tmp_path / "launch.py"), "train", "--config", "", "--set", "data.batch_size=4"])
"""


def test_fake_gpus_stops_train_commands_alone(project: Path, tmp_path: Path) -> None:
    """tests/gpu/fake_gpus.py records and stops ``-m PACKAGE train`` and ``SCRIPT.py train`` (a test's launcher), and
    runs every other command: one that names a .py file and the word train elsewhere (``pytest tests/x.py -k
    train``) was parsed as a training, recorded and stopped."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_commands.py").write_text(COMMANDS_SUITE)
    tests = fake_gpu_suite(tmp_path, 1, tmp_path, project, "tests/test_commands.py")["tests"]
    other = tests["tests/test_commands.py::test_another_command_that_names_a_py_file_and_train"]
    assert other["runs"] == [] and "stopped" not in other, other
    launcher = tests["tests/test_commands.py::test_a_launcher_script"]
    assert launcher.get("stopped") and [run["batch_size"] for run in launcher["runs"]] == [4], launcher


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_the_projects_gpu_suite_is_green_on_any_gpu_count(project: Path, tmp_path: Path, gpus: int) -> None:
    """The generated project's ``-m gpu`` suite, collected and started with ``gpus`` GPUs faked.

    Only the files that mark a test ``gpu`` (or ``gpus``) are collected: ``-m gpu`` selects nothing elsewhere,
    and importing the others (timm, Optuna, MLflow, ONNX) cost 3 CPU-seconds a run."""
    marked = sorted(str(path.relative_to(project)) for path in (project / "tests").glob("test_*.py")
                    if "mark.gpu" in path.read_text())  # fmt: skip
    report = fake_gpu_suite(tmp_path, gpus, project, project, *marked)
    tests = report["tests"]
    assert len(tests) >= 30 and sum(test["gpus"] == 2 for test in tests.values()) >= 5, sorted(tests)
    assert sum(bool(test["runs"]) for test in tests.values()) >= 25  # the records are there to be checked
    assert violations(report) == []


@pytest.mark.parametrize("gpus", [1, 8])
def test_the_templates_gpu_suite_is_green_on_any_gpu_count(project: Path, tmp_path: Path, gpus: int) -> None:
    report = fake_gpu_suite(tmp_path, gpus, REPO, project, "tests/test_gpu.py")
    assert [test["runs"] for test in report["tests"].values()] != [[]], report  # its training command was seen
    assert violations(report) == []


def test_a_torchcodec_that_cannot_decode_on_the_gpu_is_taken_from_pytorchs_cuda_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 57: where the registry's TorchCodec cannot decode on the GPU (built without nvJPEG for this CUDA), the
    environment takes it from PyTorch's index for this torch's CUDA version and says which it took and why; where
    the registry's decodes, or TORCHCODEC_INDEX names an index, it stays, and nothing is probed twice."""
    check = load("check")
    installs: list[tuple[str, ...]] = []
    failures = ["RuntimeError: nvJPEG not available", None]  # the registry's build, then PyTorch's

    class Run:
        shell = types.SimpleNamespace(dry=False)
        python = Path(sys.executable)

        def pip(self, *args: str) -> int:
            installs.append(args)
            return 0

    monkeypatch.setattr(check, "probe", lambda python, shell, torchcodec=False: {"torchcodec_failure": failures.pop(0)})
    monkeypatch.delenv("TORCHCODEC_INDEX", raising=False)
    code, said = check.torchcodec_that_decodes(Run(), "torchcodec==0.17.0", "12.8")  # type: ignore[arg-type]
    assert code == 0 and installs[-1][-3:] == (
        "--index-url",
        "https://download.pytorch.org/whl/cu128",
        "torchcodec==0.17.0",
    )
    assert said == (
        "torchcodec==0.17.0 from https://download.pytorch.org/whl/cu128, as the registry's cannot decode on the GPU "
        "(RuntimeError: nvJPEG not available)"
    )
    installs.clear()
    failures[:] = [None]  # the registry's decodes: kept
    assert check.torchcodec_that_decodes(Run(), "torchcodec==0.17.0", "12.8") == (
        0,
        "torchcodec==0.17.0 from the registry",
    )  # type: ignore[arg-type]
    assert len(installs) == 1 and not failures
    monkeypatch.setenv("TORCHCODEC_INDEX", "https://example.invalid/simple")  # the user's index: taken as it is
    assert check.torchcodec_that_decodes(Run(), "torchcodec==0.17.0", "12.8")[1].endswith(
        "https://example.invalid/simple"
    )  # type: ignore[arg-type]
    assert check.pytorch_index(None) is None and check.pytorch_index("13.0").endswith("/cu130")
