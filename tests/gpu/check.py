"""make gpu-check: every GPU check in one command, from a clone, on a machine with a GPU, Python and a registry.

The steps, each timed, each a row of the table printed at the end:

1. preflight: the NVIDIA driver is there and this Python's torch runs a kernel on cuda:0 (tests/gpu/probe.py);
   otherwise one line saying why, exit status 1, nothing else run: red when it would check nothing. A Python
   without a CUDA build of torch is checked again once the environment has installed one.
2. environment: ``.gpu-venv``, a venv over the system's site-packages. The system's CUDA torch is used and never
   replaced: pip is held to its version (and torchvision's); a Python without a CUDA torch gets
   constraints.txt's from the registry. TorchCodec, the one that goes with this torch (``torchcodec_request``:
   constraints.txt's, whose image decoders load with torch 2.11 and later), from ``.wheels/`` (make gpu-wheels)
   where carried, else from the registry (``TORCHCODEC_INDEX``: another index, e.g. PyTorch's CUDA one); pytest.
   With an older torch none goes with it: nvJPEG is not checked, each nvJPEG row says so in one line, the nvJPEG
   tests' skips are counted apart, and the table ends naming what was not verified.
3. project: ``.gpu-project/`` where carried (make gpu-project) and made from this checkout (its answers'
   ``_commit`` is HEAD, and the template has no uncommitted change), else made here by copier, which is installed
   from the registry only for this step and only where this Python lacks it (made beside it, then swapped in:
   where copier cannot make it, a carried one stays as it was and the step fails saying what to do); then
   installed with every extra (its dev extra: ONNX, Optuna, TensorBoard, MLflow, plots, TorchCodec, WebDataset).
4. the template's GPU suite (tests/test_gpu.py on that project) and 5. the project's ``pytest -m gpu``, both
   with ``TORCH_SCAFFOLD_GPU_CHECK=1``: a GPU test that skips fails, except a test that needs more GPUs
   than this machine has (the ``gpus`` marker), which is counted apart.
6. with two GPUs or more: a torchrun DDP job on every GPU, up to 8 (the default config on the sample data).
7. the benchmark's check cases (benchmarks/throughput.py --check): the table's images/s rows; red where a
   case did not run, or ran on another path than it names (the nvJPEG case fell back to the CPU).

Standard library only: it starts on the system's Python, before any environment exists. Every process it
starts is ended with its process group on every way out (an interrupted torchrun leaves no rank behind).

    python3 tests/gpu/check.py [--workers N] [--dry-run GPUS]

``--dry-run GPUS`` runs nothing: it prints each step's commands as they would run on a machine with that
many GPUs, given this checkout's files (.gpu-project/, .wheels/) and this Python's torch.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".gpu-venv"
PROJECT = REPO / ".gpu-project"
FRESH = REPO / ".gpu-project.new"  # where copier makes it, before it replaces PROJECT (make_project)
PACKAGE = "gpu_check"  # make gpu-project's package_name
WHEELS = REPO / ".wheels"
OUT = REPO / ".bench" / "gpu-check"
# Seconds a step may take before it counts as hung and is ended: far above the estimates in README.md
# ("On a GPU machine"), so a slow machine is never cut short; a hang must not eat a lent GPU's minutes.
# PyTorch's own wheel index, by CUDA tag (cu128): its TorchCodec wheels decode with nvJPEG for that CUDA version.
PYTORCH_INDEX = "https://download.pytorch.org/whl/{tag}"
HANG_S = {"environment": 1200, "project": 900, "suite": 1800, "ddp": 600, "benchmark": 1200}
MAX_DDP_PROCESSES = 8  # the DDP job's processes: one a GPU, as on one node of 8
# The batch stream each forced path of the benchmark must have run through (throughput.py records ``ran_on``).
PATH_STREAMS = {"nvjpeg": "GpuDecoded", "prefetch": "Prefetched"}
# What copier generates the project from (template/PRACTICES.md.jinja includes PRACTICES.md): a change there dates it.
TEMPLATE_INPUTS = ("template", "copier.yml", "PRACTICES.md")
# Set for the suites: a GPU test that skips fails (the generated conftest and tests/conftest.py read it); the second
# one, where a TorchCodec that goes with this torch was installed: an nvJPEG test that cannot decode fails too.
SWITCH = {"TORCH_SCAFFOLD_GPU_CHECK": "1", "TORCH_SCAFFOLD_REQUIRE_NVJPEG": "1"}
# TorchCodec's image decoders (0.16 and later: the decode extra's floor) are built against torch's stable ABI as of
# torch 2.11 and load with it and every later torch; no TorchCodec with an image decoder loads with an older one
# (each earlier release was built for one torch minor). The generated package says the same (data/decoding/codec.py).
CODEC_TORCH = (2, 11)
# What the generated tests skip with where TorchCodec cannot decode (their conftest's NEEDS_TORCHCODEC).
NEEDS_TORCHCODEC = "needs TorchCodec (the decode extra)"
DRIVER_FILES = ("/proc/driver/nvidia/version", "/dev/nvidia0", "/dev/nvidiactl")


@dataclass
class Row:
    """One step of the table: what it was, how it ended, its seconds, and what it found (sub-rows below it)."""

    step: str
    status: str = "not run"  # ok | FAILED | n/a | not run
    seconds: float = 0.0
    detail: str = ""
    below: list[tuple[str, str]] = field(default_factory=list)

    @property
    def red(self) -> bool:
        return self.status in ("FAILED", "not run")


class Shell:
    """Runs (or, in a dry run, prints) commands; each in its own process group, ended on every way out."""

    def __init__(self, dry: bool) -> None:
        self.dry = dry

    def run(self, argv: Sequence[str], *, cwd: Path = REPO, env: dict[str, str] | None = None, limit: float) -> int:
        settings = " ".join(f"{key}={value}" for key, value in (env or {}).items())
        where = "" if cwd == REPO else f"cd {os.path.relpath(cwd, REPO)} && "
        shown = f"$ {where}{settings + ' ' if settings else ''}{shlex.join(map(str, argv))}"
        print(shown.replace(f"{REPO}/", ""), flush=True)  # paths in this checkout, relative to it
        if self.dry:
            return 0
        process = subprocess.Popen(
            list(map(str, argv)), cwd=cwd, env={**os.environ, **(env or {})}, start_new_session=True
        )
        try:
            return process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            print(f"gpu-check: ended after {limit:.0f} s as hung: {shlex.join(map(str, argv))}", flush=True)
            return 124
        finally:
            end_group(process)


def end_group(process: subprocess.Popen, grace: float = 10.0) -> None:
    """Whatever is left of the command's process group (torchrun's ranks, pytest's workers, loader workers):
    SIGTERM, then SIGKILL after ``grace`` seconds. Nothing is left after a command that ended cleanly."""
    process.poll()  # reaps the leader where it has exited
    if not group_alive(process.pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)  # the group's id is its leader's pid (start_new_session)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        process.poll()
        if not group_alive(process.pid):
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def group_alive(group: int) -> bool:
    """Whether a process of that group still runs; exited ones that nobody has reaped yet (zombies) do not count:
    in a container whose first process reaps nothing, an orphan's zombie stays for good."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command's name, which may hold spaces
        except (OSError, IndexError):
            continue  # it exited while being read
        if int(fields[2]) == group and fields[0] != "Z":  # fields: state, parent, process group
            return True
    return False


def driver_present(files: Sequence[str] = DRIVER_FILES) -> bool:
    """An NVIDIA driver loaded here (its /proc file or device nodes), or nvidia-smi on the PATH: instant to ask."""
    return any(Path(name).exists() for name in files) or shutil.which("nvidia-smi") is not None


def torch_of() -> tuple[str | None, str | None]:
    """(version, CUDA version) of this Python's torch, read from its version.py without importing it (a second's
    import and CUDA's start-up): (None, None) where it has none; a CPU build's CUDA version is None."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None, None
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    if not version_file.exists():
        return None, None
    text = version_file.read_text()
    version = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", text)
    cuda = re.search(r"^cuda\b[^=]*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return (version.group(1) if version else "unknown"), (cuda.group(1) if cuda else None)


def installed_version(distribution: str) -> str | None:
    """This Python's installed version of a distribution (torchvision), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def probe(python: Path | str, shell: Shell, nvjpeg: bool = False, torchcodec: bool = False) -> dict:
    """tests/gpu/probe.py's facts for that Python (its torch, the GPUs, why not), or a refusal if it breaks."""
    argv = [str(python), str(REPO / "tests" / "gpu" / "probe.py"), *(["--nvjpeg", PACKAGE] if nvjpeg else [])]
    argv += ["--torchcodec"] if torchcodec else []
    if shell.dry:
        print(f"$ {shlex.join(argv)}".replace(f"{REPO}/", ""), flush=True)
        return {}
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=300, check=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return {"gpus": 0, "refused": f"{python} could not probe the GPU: {last}"}
    return json.loads(lines[-1])


def driver_version(path: Path = Path("/proc/driver/nvidia/version")) -> str | None:
    """The loaded NVIDIA driver's version (its kernel module's), for the table's first line; None where unknown."""
    found = re.search(r"Kernel Module(?: for \w+)?\s+(\d+(?:\.\d+)+)", path.read_text()) if path.exists() else None
    return found.group(1) if found else None


def driver_refusal(has_driver: bool) -> str | None:
    """Why the check cannot run here, decided in milliseconds (nothing imported or installed); None to go on."""
    if not has_driver:
        return "no NVIDIA driver on this machine (no /proc/driver/nvidia/version, /dev/nvidia0 or nvidia-smi)"
    return None


def constraints_for(system_torch: tuple[str | None, str | None], torchvision: str | None) -> str:
    """constraints.txt for the environment: the system's CUDA torch (and torchvision) pinned where there is one,
    so that no requirement can replace it; constraints.txt's own pins for everything else."""
    pins = (REPO / "constraints.txt").read_text().splitlines()
    version, cuda = system_torch
    if version is not None and cuda is not None:
        kept = [line for line in pins if not re.match(r"(torch|torchvision|torchcodec)==", line)]
        held = [f"torch=={version}", *([f"torchvision=={torchvision}"] if torchvision else [])]
        return "\n".join([*kept, "# the system's CUDA build, never replaced:", *held]) + "\n"
    return "\n".join(line for line in pins if not line.startswith("torchcodec==")) + "\n"


def torch_release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a torch version: ``2.14.1+cu130`` is (2, 14); None where it says none (``unknown``)."""
    numbers = re.findall(r"\d+", version)
    return (int(numbers[0]), int(numbers[1])) if len(numbers) >= 2 else None


def torchcodec_request(system_torch: tuple[str | None, str | None]) -> str | None:
    """The TorchCodec that goes with this torch: constraints.txt's (the release built with its torch, and built on
    torch's stable ABI: it loads with every torch from ``CODEC_TORCH`` on); None where none does (an older torch).
    Without a system torch, constraints.txt's torch is installed: its own TorchCodec."""
    pins = dict(line.split("==", 1) for line in (REPO / "constraints.txt").read_text().splitlines() if "==" in line)
    release = torch_release(system_torch[0]) if system_torch[0] else None
    if release is not None and release < CODEC_TORCH:
        return None
    return f"torchcodec=={pins['torchcodec']}"


def no_torchcodec(version: str | None) -> str:
    """What the nvJPEG rows say where no TorchCodec goes with this torch (``torchcodec_request`` None)."""
    floor = ".".join(map(str, CODEC_TORCH))
    return (
        f"no TorchCodec with an image decoder loads with torch {version} (0.16 and later need torch {floor} or "
        "later; the README's TorchCodec table): nvJPEG not checked"
    )


@dataclass
class Check:
    """The run: its shell, the GPUs, the environment's Python, and the table's rows as the steps fill them."""

    shell: Shell
    gpus: int
    workers: int
    rows: list[Row] = field(default_factory=list)
    python: Path = VENV / "bin" / "python"
    fatal: str | None = None  # set by a step after which nothing else can run (no environment, no project)
    codec_installed: bool = True  # TorchCodec: without it the decode extra is left out (its tests then fail)
    # Why nvJPEG cannot be checked here (no TorchCodec goes with this torch): its rows say so, the end names it.
    nvjpeg_unverified: str | None = None

    @property
    def switch(self) -> dict[str, str]:
        """The suites' environment: nvJPEG required where a TorchCodec that goes with this torch was installed."""
        if self.nvjpeg_unverified is None:
            return dict(SWITCH)
        return {key: value for key, value in SWITCH.items() if key != "TORCH_SCAFFOLD_REQUIRE_NVJPEG"}

    def pip(self, *args: str, limit_key: str = "environment") -> int:
        """pip install into the environment: its own pip, or this Python's (``--python``) where it has none."""
        own = self.shell.dry or (VENV / "bin" / "pip").exists()
        pip = [self.python, "-m", "pip"] if own else [sys.executable, "-m", "pip", "--python", self.python]
        quiet = ["--quiet", "--disable-pip-version-check"]
        return self.shell.run([*pip, "install", *quiet, *args], limit=HANG_S[limit_key])

    def step(self, name: str, body: Callable[[Row], None]) -> Row:
        """Run one step (or mark it not run after a fatal one), print its time as it ends, and add its row."""
        row = Row(name)
        self.rows.append(row)
        if self.fatal is not None:
            row.detail = f"after: {self.fatal}"
            return row
        print(f"\n== {name}", flush=True)
        start = time.perf_counter()
        body(row)
        if self.shell.dry and row.status != "n/a":  # nothing ran: no outcome, nothing found
            row.status, row.detail = "dry run", ""
        row.seconds = time.perf_counter() - start
        print(f"-- {name}: {row.status} in {row.seconds:.1f} s{': ' + row.detail if row.detail else ''}", flush=True)
        return row


def environment(check: Check, row: Row) -> None:
    system_torch = torch_of()
    constraints = VENV / "constraints.txt"
    if check.shell.dry or not check.python.exists():
        code = check.shell.run([sys.executable, "-m", "venv", "--system-site-packages", VENV], limit=120)
        if code and not check.shell.dry:  # a system Python without ensurepip (Debian's python3-venv): pip from outside
            shutil.rmtree(VENV, ignore_errors=True)
            code = check.shell.run(
                [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", VENV], limit=120
            )
        if code:
            check.fatal = row.detail = f"could not make {VENV.name} with {sys.executable} (exit status {code})"
            row.status = "FAILED"
            return
    if not check.shell.dry:
        see_this_pythons_packages(check.python)
        # The distributions' own versions, which pip compares (torch.__version__ may carry a local label they lack).
        held = (installed_version("torch"), system_torch[1])
        constraints.write_text(constraints_for(held, installed_version("torchvision")))
    codes = []
    if system_torch[1] is None:  # no CUDA torch in this Python: constraints.txt's, into the venv (several GB)
        codes.append(check.pip("--ignore-installed", "-c", str(constraints), "torch", "torchvision"))
        facts = probe(check.python, check.shell)
        if facts.get("refused"):
            check.fatal = row.detail = facts["refused"]
            row.status = "FAILED"
            return
    codes.append(check.pip("-c", str(constraints), "pytest", "pytest-timeout", "pytest-xdist"))
    request = torchcodec_request(system_torch)
    if request is None:  # none goes with this torch: not installed, carried or not (it could not load)
        check.codec_installed, codec_code = False, 0
        check.nvjpeg_unverified = no_torchcodec(system_torch[0])
        codec = check.nvjpeg_unverified
    elif sorted(WHEELS.glob("torchcodec-*.whl")):
        codec_code = check.pip("--no-index", "--no-deps", "--find-links", str(WHEELS), "torchcodec")
        codec = f"TorchCodec from {WHEELS.name}/"
    else:
        codec_code, codec = torchcodec_that_decodes(check, request, system_torch[1])
    if request is not None:
        check.codec_installed = codec_code == 0
        codec += "" if codec_code == 0 else " FAILED (the nvJPEG tests will fail)"
    used = f"system torch {system_torch[0]}" if system_torch[1] else "torch from the registry"
    row.status = "ok" if not any([*codes, codec_code]) else "FAILED"
    row.detail = f"{VENV.name}: {used}; {codec}"


def pytorch_index(cuda: str | None) -> str | None:
    """PyTorch's wheel index for a CUDA version (12.8: ``.../cu128``), whose TorchCodec is built with nvJPEG for it;
    None for a CPU torch."""
    return PYTORCH_INDEX.format(tag="cu" + cuda.replace(".", "")) if cuda else None


def torchcodec_that_decodes(check: Check, request: str, cuda: str | None) -> tuple[int, str]:
    """``request`` from ``TORCHCODEC_INDEX`` where set, else from the registry; where the registry's build cannot
    decode on the GPU (a build without nvJPEG for this CUDA), from PyTorch's index for this torch's CUDA version.
    (pip's exit status, the line that says which it took and why)."""
    index = os.environ.get("TORCHCODEC_INDEX", "")
    code = check.pip("--no-deps", *(["--index-url", index] if index else []), request)
    said = f"{request} from {index or 'the registry'}"
    if code or index or check.shell.dry:
        return code, said
    facts = probe(check.python, check.shell, torchcodec=True)
    failure = facts.get("torchcodec_failure")
    fallback = pytorch_index(cuda or facts.get("cuda"))
    if not failure or fallback is None:
        return code, said
    code = check.pip("--no-deps", "--force-reinstall", "--index-url", fallback, request)
    after = None if code else probe(check.python, check.shell, torchcodec=True).get("torchcodec_failure")
    still = f"; it cannot decode either: {after}" if after else ""
    return code, f"{request} from {fallback}, as the registry's cannot decode on the GPU ({failure}){still}"


def see_this_pythons_packages(venv_python: Path) -> None:
    """The venv sees this Python's packages after its own (its CUDA torch above all), also when this Python is
    itself a venv or a conda environment, whose packages ``--system-site-packages`` alone would not show."""
    import site

    found = subprocess.run(
        [str(venv_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    own = [*site.getsitepackages(), site.getusersitepackages()]
    (Path(found.stdout.strip()) / "_gpu_check_system_packages.pth").write_text("\n".join(own) + "\n")


def project(check: Check, row: Row) -> None:
    codes = []
    outdated = project_outdated(PROJECT) if PROJECT.is_dir() else None
    if PROJECT.is_dir() and outdated is None:
        made = f"{PROJECT.name}/ carried ({carried_note(PROJECT)})"
    else:
        if outdated is not None:  # a pull since make gpu-project: the old project would be tested, said "carried"
            print(f"gpu-check: {PROJECT.name}/ is not this checkout's ({outdated}): made again", flush=True)
        if not make_project(check, codes):
            row.status = "FAILED"
            if outdated is not None:  # kept as it was: only a project that copier made replaces it
                check.fatal = row.detail = (
                    f"{PROJECT.name}/ is not this checkout's ({outdated}) and copier could not make it again here: "
                    "run make gpu-project where copier runs and carry it (the old one is kept, untested)"
                )
            else:
                check.fatal = row.detail = (
                    f"no {PROJECT.name}/: copier failed (make gpu-project where copier is, and carry it)"
                )
            return
        made = f"{PROJECT.name}/ made by copier" + (f" ({outdated})" if outdated else "")
    # Every extra by name (ONNX export, Optuna sweeps, TorchCodec...): one that cannot install fails the step,
    # the others still install. TorchCodec's is the environment's: where it failed there, pip would fail here.
    extras = [name for name in extras_of(project_pyproject()) if check.codec_installed or name != "decode"]
    codes.append(
        check.pip("-c", str(VENV / "constraints.txt"), "-e", f"{PROJECT}[{','.join(extras)}]", limit_key="project")
    )
    facts = {} if check.shell.dry or any(codes) else probe(check.python, check.shell, nvjpeg=True)
    if check.nvjpeg_unverified is not None:
        decodes = check.nvjpeg_unverified
    elif "nvjpeg_failure" not in facts:  # nothing installed, or no GPU to decode on
        decodes = f"nvJPEG not probed{': ' + facts['refused'] if facts.get('refused') else ''}"
    else:
        decodes = facts["nvjpeg_failure"] or "nvJPEG decodes on cuda:0"
    codec_ok = check.codec_installed or check.nvjpeg_unverified is not None
    row.status = "ok" if not any(codes) and codec_ok else "FAILED"
    row.detail = f"{made}, installed with {', '.join(extras)}; {decodes}"


def make_project(check: Check, codes: list[int]) -> bool:
    """copier makes the project beside ``PROJECT`` (``FRESH``), which then replaces it: a copier that cannot run
    here (not installed, no registry) leaves a carried project as it was. Whether it was made."""
    codes.append(check.shell.run(["rm", "-rf", FRESH], limit=120))  # what an interrupted try left
    if not copier_in(check):  # copier is needed here alone: installed only where the project is made
        codes.append(check.pip("-c", str(VENV / "constraints.txt"), "copier", limit_key="project"))
    copier = [check.python, "-m", "copier", "copy", "--trust", "--defaults", "--quiet", "--vcs-ref", "HEAD"]
    answers = ["-d", "project_name=GPU Check", "-d", f"package_name={PACKAGE}"]
    made = check.shell.run([*copier, *answers, REPO, FRESH], limit=HANG_S["project"])
    if made != 0 or not (check.shell.dry or FRESH.is_dir()):
        check.shell.run(["rm", "-rf", FRESH], limit=120)
        return False
    codes.append(check.shell.run(["rm", "-rf", PROJECT], limit=120))
    codes.append(check.shell.run(["mv", FRESH, PROJECT], limit=120))
    return True


def git(*args: str) -> str | None:
    """A git command's output in this checkout, or None where git or the repository is missing."""
    try:
        done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def made_from(project: Path) -> str | None:
    """The template commit a generated project's answers name (``_commit``: a hash or git describe's words)."""
    answers = project / ".copier-answers.yml"
    found = re.search(r"^_commit:\s*['\"]?([^'\"\s]+)", answers.read_text(), re.MULTILINE) if answers.exists() else None
    return found.group(1) if found else None


def project_outdated(project: Path) -> str | None:
    """Why ``project`` is not what copier makes of this checkout now, in words; None where it is, or where no
    git answers (a checkout carried without .git: the project carried with it is taken as its own)."""
    head = git("rev-parse", "HEAD")
    if head is None:
        return None
    if git("status", "--porcelain", "--", *TEMPLATE_INPUTS):
        return "the template has uncommitted changes"  # copier made it from a temporary commit of them, or not at all
    commit = made_from(project)
    if commit is None:
        return "its .copier-answers.yml names no _commit"
    if git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}") != head:
        return f"made from {commit}, this checkout is at {head[:10]}"
    return None


def carried_note(project: Path) -> str:
    commit = made_from(project)
    return f"made from {commit}, this checkout's HEAD" if git("rev-parse", "HEAD") else "no git here to compare"


def project_pyproject() -> str:
    """The project's pyproject.toml; before it is made (a dry run), the template's, which names the same extras."""
    for path in (PROJECT / "pyproject.toml", REPO / "template" / "pyproject.toml.jinja"):
        if path.exists():
            return path.read_text()
    return ""


def extras_of(pyproject: str) -> list[str]:
    """The optional-dependency groups a generated pyproject.toml names, but ``dev`` (which only gathers them)."""
    section = pyproject.split("[project.optional-dependencies]", 1)[-1].split("\n[", 1)[0] if pyproject else ""
    return [name for name in re.findall(r"^([A-Za-z0-9_-]+)\s*=", section, re.MULTILINE) if name != "dev"]


def copier_in(check: Check) -> bool:
    """Whether the environment imports copier (this Python's own counts: the venv sees its packages)."""
    if check.shell.dry or not check.python.exists():
        return importlib.util.find_spec("copier") is not None
    found = subprocess.run([str(check.python), "-c", "import copier"], capture_output=True, check=False)
    return found.returncode == 0


def junit_counts(path: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(outcome counts; the figures the tests measured and recorded) from pytest's JUnit XML.

    A test skipped because the machine has too few GPUs (the ``gpus`` marker: "needs 2 GPUs, ...") is counted
    apart: a skip the switch allows; so is one for want of TorchCodec (allowed only where none goes with this
    torch: ``suite`` decides).
    """
    counts = {"passed": 0, "failed": 0, "skipped": 0, "need more GPUs": 0, "without TorchCodec": 0}
    measured: list[tuple[str, str]] = []
    if not path.exists():
        return counts, measured
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
        elif skipped is not None:
            message = skipped.get("message", "")
            fewer = re.search(r"needs \d+ GPUs, this machine has", message)
            kind = "need more GPUs" if fewer else "without TorchCodec" if NEEDS_TORCHCODEC in message else "skipped"
            counts[kind] += 1
        else:
            counts["passed"] += 1
        for prop in case.iter("property"):
            measured.append((f"  {case.get('name')}", f"{prop.get('name')} = {prop.get('value')}"))
    return counts, measured


def suite(check: Check, row: Row, argv: list[str], cwd: Path, report: Path) -> None:
    """A pytest run under the switch; ok when it exits 0 having passed tests and skipped none it could run."""
    report.unlink(missing_ok=True)
    env = {**check.switch, "GPU_PROJECT": str(PROJECT)}
    code = check.shell.run([*argv, f"--junitxml={report}"], cwd=cwd, env=env, limit=HANG_S["suite"])
    counts, row.below = junit_counts(report)
    # Skipped for want of TorchCodec: only where none goes with this torch (else the switch made them fail).
    codec_skips = counts["without TorchCodec"] and check.nvjpeg_unverified is None
    skips = counts["skipped"] or codec_skips
    row.status = "ok" if code == 0 and counts["passed"] > 0 and not skips else "FAILED"
    row.detail = ", ".join(f"{n} {what}" for what, n in counts.items() if n) or f"exit status {code}, no report"
    if counts["without TorchCodec"] and check.nvjpeg_unverified is not None:
        row.detail += f" ({check.nvjpeg_unverified})"


def template_suite(check: Check, row: Row) -> None:
    pytest = [check.python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", "gpu", "tests/test_gpu.py"]
    suite(check, row, pytest, REPO, OUT / "template.xml")


def project_suite(check: Check, row: Row) -> None:
    pytest = [check.python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", "-m", "gpu"]
    pytest += ["-n", str(check.workers)] if check.workers > 1 else []
    suite(check, row, pytest, PROJECT, OUT / "project.xml")


def ddp_processes(gpus: int) -> int:
    return min(gpus, MAX_DDP_PROCESSES)


def ddp_job(check: Check, row: Row) -> None:
    """torchrun on every GPU (up to 8): NCCL, DDP and the default config, as a user runs it."""
    if check.gpus < 2:
        row.status, row.detail = "n/a", f"needs 2 GPUs; this machine has {check.gpus}"
        return
    processes = ddp_processes(check.gpus)
    with tempfile.TemporaryDirectory(prefix="gpu-check-ddp-") as tmp:
        data, out = Path(tmp) / "data", Path(tmp) / "run"
        code = check.shell.run([check.python, "-m", PACKAGE, "sample-data", data], cwd=PROJECT, limit=HANG_S["ddp"])
        torchrun = [check.python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
        settings = [f"data.root={data}", "train.epochs=2", f"train.out_dir={out}", "train.progress=false"]
        settings += ["train.device=cuda", "train.parallel=ddp"]  # what this step is for: fail, never fall back
        command = ["-m", PACKAGE, "train", "--config", "configs/default.yaml"]
        command += [word for setting in settings for word in ("--set", setting)]
        cache = {"XDG_CACHE_HOME": tmp}  # the run's file index and decoded images go with the folder
        code = code or check.shell.run([*torchrun, *command], cwd=PROJECT, env=cache, limit=HANG_S["ddp"])
        metrics = out / "metrics.jsonl"
        rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    if check.shell.dry:
        row.status = "ok"
    elif code or len(rows) != 2:
        row.status, row.detail = "FAILED", f"exit status {code}, {len(rows)} of 2 epochs in metrics.jsonl"
    else:
        last = rows[-1]
        row.status = "ok"
        row.detail = (
            f"{processes} processes, 2 epochs; val_acc {100 * last['val_acc']:.1f}%, "
            f"{last['images_per_second']:.0f} img/s"
        )


def benchmark(check: Check, row: Row) -> None:
    report = OUT / "bench.json"
    report.unlink(missing_ok=True)
    bench = [check.python, REPO / "benchmarks" / "throughput.py", "--check", "--project", PROJECT, "--out", report]
    with tempfile.TemporaryDirectory(prefix="gpu-check-bench-") as cache:  # its runs' caches, gone after it
        code = check.shell.run(bench, env={"XDG_CACHE_HOME": cache}, limit=HANG_S["benchmark"])
    cases = json.loads(report.read_text()) if report.exists() else []
    unverified = check.nvjpeg_unverified
    astray = [case for case in cases if path_problem(case) and not (unverified and case["path"] == "nvjpeg")]
    row.status = "ok" if code == 0 and cases and not astray else "FAILED"
    row.detail = f"{len(cases)} cases" if cases else f"exit status {code}"
    row.detail += f", {len(astray)} not on the path they name" if astray else ""
    for case in cases:
        name = f"  {case['model']}@{case['image_size']}" + ("" if case["path"] == "auto" else f" {case['path']}")
        problem = path_problem(case)
        if problem and unverified and case["path"] == "nvjpeg":  # no TorchCodec goes with this torch: said once
            row.below.append((name, unverified))
            continue
        if problem:
            row.below.append((name, f"FAILED: {problem}"))
            continue
        row.below.append(
            (
                name,
                f"trainer {case['b_generated_trainer']} img/s, compute-bound {case['a_compute_bound']} img/s "
                f"({case['a_best_setting']}), ratio {case['b_over_a']}, "
                f"host syncs/step {case['b_host_syncs_per_step']}",
            )
        )


def path_problem(case: dict) -> str | None:
    """Why a benchmark case did not measure the path it names, in words; None where it did. The nvJPEG case's
    files are all nvJPEG's (baseline JPEG files, upright, small): one decoded on the CPU fell back."""
    if "skipped" in case:
        return f"not run: {case['skipped']}"
    expected = PATH_STREAMS.get(case["path"])
    if expected is not None and case.get("ran_on") != expected:
        return f"its batches came through {case.get('ran_on')}, not {expected}"
    if case["path"] == "nvjpeg" and (not case.get("b_nvjpeg_files") or case.get("b_cpu_files")):
        return f"nvJPEG decoded {case.get('b_nvjpeg_files')} files, the CPU {case.get('b_cpu_files')}: it fell back"
    return None


def table(rows: list[Row], facts: dict, unverified: str | None = None) -> str:
    """The one table the check ends with: a line for the machine, a row per step, its findings below it, and
    what it could not verify (``unverified``: nvJPEG, where no TorchCodec goes with this torch)."""
    names = ", ".join(sorted(set(facts.get("names", [])))) or "no GPU"
    red = [row.step for row in rows if row.red]
    verdict = "PASSED" if not red else f"FAILED ({', '.join(red)})"
    verdict += "; nvJPEG NOT VERIFIED" if unverified else ""
    verdict = "DRY RUN, nothing ran" if any(row.status == "dry run" for row in rows) else verdict
    machine = f"{facts.get('gpus', 0)} x {names}, driver {driver_version()}"
    head = f"gpu-check: {verdict}; {machine}, torch {facts.get('torch')} (CUDA {facts.get('cuda')})"
    lines = [("step", "result", "seconds", "detail")]
    for row in rows:
        lines.append((row.step, row.status, f"{row.seconds:.1f}", row.detail))
        lines.extend((name, "", "", detail) for name, detail in row.below)
    widths = [max(len(line[i]) for line in lines) for i in range(3)]
    cells = [[*(cell.ljust(w) for cell, w in zip(line[:3], widths, strict=True)), line[3]] for line in lines]
    text = ["  ".join(line).rstrip() for line in cells]
    total = sum(row.seconds for row in rows)
    gaps = [f"not verified: nvJPEG decoding, its tests and benchmark case: {unverified}"] if unverified else []
    return "\n".join([head, *text, f"total {total:.0f} s", *gaps])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4, help="pytest-xdist workers for the project's GPU suite")
    parser.add_argument("--dry-run", type=int, metavar="GPUS", help="print the steps' commands for GPUS GPUs")
    args = parser.parse_args(argv)
    shell = Shell(dry=args.dry_run is not None)
    start = time.perf_counter()
    system_torch = torch_of()
    refusal = None if shell.dry else driver_refusal(driver_present())
    facts: dict = {"gpus": args.dry_run, "names": ["(dry run)"]} if shell.dry else {}
    if refusal is None and not shell.dry and system_torch[1] is not None:
        facts = probe(sys.executable, shell)  # this Python's CUDA torch runs a kernel before anything else
        refusal = facts.get("refused")
    if refusal is not None:
        print(f"gpu-check: nothing checked: {refusal}", flush=True)
        return 1
    check = Check(shell, facts.get("gpus", 0), args.workers)
    found = f"{check.gpus} GPU(s): {', '.join(facts['names'])}" if facts else "no CUDA torch here yet: installed next"
    check.rows.append(Row("preflight", "ok", time.perf_counter() - start, found))
    print(f"-- preflight: ok in {check.rows[0].seconds:.1f} s: {found}", flush=True)
    if not shell.dry:
        OUT.mkdir(parents=True, exist_ok=True)  # the suites' reports and the benchmark's rows
    check.step("environment", lambda row: environment(check, row))
    if not facts and check.fatal is None:  # torch came with the environment: its GPUs now
        facts = probe(check.python, shell)
        check.gpus = facts.get("gpus", 0)
    check.step("project", lambda row: project(check, row))
    check.step("template GPU suite", lambda row: template_suite(check, row))
    check.step("project GPU suite", lambda row: project_suite(check, row))
    check.step("DDP job", lambda row: ddp_job(check, row))
    check.step("benchmark check cases", lambda row: benchmark(check, row))
    print()
    print(table(check.rows, facts, check.nvjpeg_unverified))
    return 1 if any(row.red for row in check.rows) and not shell.dry else 0


if __name__ == "__main__":
    sys.exit(main())
