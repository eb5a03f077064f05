"""A pytest plugin: a GPU suite collected and started on the CPU as on a machine with ``FAKE_GPUS`` GPUs.

tests/test_gpu_check.py loads it (``-p fake_gpus``) into a pytest run of a generated project's ``-m gpu``
suite, or of the template's tests/test_gpu.py. Loaded before any test module is imported, it makes
``torch.cuda`` say that CUDA is there with ``FAKE_GPUS`` devices: the suite's own marks, parameters and
module-level decisions are then those of such a machine. Each test then runs until it would start
training, and every configuration it makes on the way is written to ``FAKE_GPUS_REPORT`` (JSON), with
what the project's own ``data_parallel_ids`` decides for it on that many GPUs:

- ``load_config`` (in-process runs, the CLI's commands, sweeps): recorded and returned;
- ``training.trainer.train`` and ``torch.multiprocessing.spawn``: recorded, then the test is stopped (a
  ``StoppedBeforeTheGpu``: a BaseException, which no ``except Exception`` of the package swallows);
- ``subprocess.run`` of ``-m PACKAGE train`` or ``SCRIPT.py train`` (a test's launcher; torchrun's jobs too): its
  arguments parsed by the package's CLI into a configuration, recorded with torchrun's process count, and
  stopped; other commands run.

A test's outcome here says nothing (a CPU cannot run what follows); the configurations are the point.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

GPUS = int(os.environ["FAKE_GPUS"])
REPORT = Path(os.environ["FAKE_GPUS_REPORT"])
# The calls by which a test starts runs: a test whose source has one is expected to record a configuration.
STARTS_RUNS = ("main(", "train(", "load_config(", "torchrun(", "run_in(", "spawn(", "training_batches(")


class StoppedBeforeTheGpu(BaseException):
    """Raised where the test would start computing on the GPU: what it asked for is recorded by then."""


def project_source() -> Path:
    """The generated project's src/: GPU_PROJECT's (the template's suite), else the one pytest runs in."""
    return Path(os.environ.get("GPU_PROJECT", ".")).resolve() / "src"


SOURCE = project_source()
PACKAGE = next(SOURCE.glob("*/__init__.py")).parent.name
if str(SOURCE) not in sys.path:
    sys.path.insert(0, str(SOURCE))

# A machine with GPUS GPUs of compute capability 9.0, before any test module asks.
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: GPUS
torch.cuda.get_device_capability = lambda device=None: (9, 0)
torch.cuda.get_device_name = lambda device=None: "fake GPU"
torch.cuda.is_bf16_supported = lambda including_emulation=True: True
torch.cuda.set_device = lambda device: None  # select_device makes its GPU current: there is none to make so here

# load_config is replaced before any other module of the package is imported: those that import it by name
# (inference, sweeps) then hold the recording one.
config_module = __import__(f"{PACKAGE}.core.config", fromlist=["load_config"])

records: dict[str, dict[str, Any]] = {}
current: dict[str, Any] = {}  # the record of the test whose body runs now; empty between bodies


def decided(cfg: Any, nproc: int = 1) -> dict[str, Any]:
    """What a configuration asks for, and the GPUs DataParallel would spread it over here (or its refusal)."""
    run = {
        "device": cfg.train.device,
        "parallel": cfg.train.parallel,
        "batch_size": cfg.data.batch_size,
        "compile": cfg.train.compile,
        "nproc": nproc,
    }
    if not str(cfg.train.device).startswith("cuda") or nproc > 1:
        return run  # DataParallel is decided on CUDA in one process alone (under torchrun: never)
    try:
        device = device_module.select_device(cfg.train.device)
        run["replicas"] = distributed.data_parallel_ids(device, cfg.train, cfg.data.batch_size)
    except Exception as error:  # the package's one-line refusal (a UserError): what the test would meet
        run["refused"] = str(error)
    return run


real_load_config = config_module.load_config


def recording_load_config(*args: Any, **kwargs: Any) -> Any:
    cfg = real_load_config(*args, **kwargs)
    if current:
        current["runs"].append(decided(cfg))
    return cfg


def stopping_train(cfg: Any, *args: Any, **kwargs: Any) -> Any:
    raise StoppedBeforeTheGpu("trainer.train")


def stopping_spawn(function: Any, args: tuple = (), nprocs: int = 1, **kwargs: Any) -> Any:
    if current:
        current["runs"].append({"spawn": nprocs})
    raise StoppedBeforeTheGpu("torch.multiprocessing.spawn")


real_run = subprocess.run


def train_command(words: list[str]) -> list[str] | None:
    """The train command's own words where ``words`` launch it: ``-m PACKAGE train ...`` or ``SCRIPT.py train ...``
    (a test's launcher), ``train`` right after the program; None for any other command, one that names a .py file
    and the word train elsewhere included (``pytest tests/test_x.py -k train``)."""
    for at, word in enumerate(words[:-1]):
        program = (word == PACKAGE and at > 0 and words[at - 1] == "-m") or word.endswith(".py")
        if program and words[at + 1] == "train":
            return words[at + 1 :]
    return None


def recording_run(argv: Any, *args: Any, **kwargs: Any) -> Any:
    """A ``-m PACKAGE train`` or ``SCRIPT.py train`` command (torchrun's or not): parsed by the package's CLI,
    recorded, stopped."""
    words = [str(word) for word in argv] if isinstance(argv, list | tuple) else []
    command = train_command(words)
    if current and command is not None:
        nproc = next((int(w.split("=")[1]) for w in words if w.startswith("--nproc_per_node=")), 1)
        parsed = cli.parse(command)
        cwd = Path(kwargs.get("cwd") or ".")
        paths = [p if not p or Path(p).is_absolute() else str(cwd / p) for p in (parsed.config or [])]
        cfg = real_load_config(paths or None, parsed.overrides)
        current["runs"].append(decided(cfg, nproc))
        raise StoppedBeforeTheGpu("a training command")
    return real_run(argv, *args, **kwargs)


config_module.load_config = recording_load_config
distributed = __import__(f"{PACKAGE}.core.distributed", fromlist=["data_parallel_ids"])
device_module = __import__(f"{PACKAGE}.core.device", fromlist=["select_device"])
cli = __import__(f"{PACKAGE}.cli", fromlist=["parse"])
trainer = __import__(f"{PACKAGE}.training.trainer", fromlist=["train"])
trainer.train = stopping_train
torch.multiprocessing.spawn = stopping_spawn
subprocess.run = recording_run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Record the configurations of this test's body (fixtures' are set-up, not what the test trains)."""
    record = records.setdefault(item.nodeid, {})
    current.update(record)
    current["runs"] = record.setdefault("runs", [])
    try:
        return (yield)
    finally:
        current.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    record = records.setdefault(item.nodeid, {"runs": []})
    gpus = item.get_closest_marker("gpus")
    function = getattr(item, "function", None)
    source = inspect.getsource(function) if function is not None else ""
    record.update(
        {
            "gpu": item.get_closest_marker("gpu") is not None,
            "gpus": gpus.args[0] if gpus else 1,
            "starts_runs": any(call_ in source for call_ in STARTS_RUNS),
        }
    )
    if report.skipped:
        record["skipped"] = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if call.excinfo is not None and call.excinfo.errisinstance(StoppedBeforeTheGpu):
        record["stopped"] = True
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    REPORT.write_text(json.dumps({"gpus": GPUS, "package": PACKAGE, "tests": records}, indent=1))
