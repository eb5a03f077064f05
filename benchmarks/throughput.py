"""Training throughput, side by side in one run: compute bound, generated trainer, naive loop.

For each model it generates a project from this checkout, writes an
ImageFolder of PNG files, and measures images per second of:

  (a) compute-only bound: the model's training step on synthetic uint8 tensors
      already in memory, in the precision and memory format that the trainer's
      ``auto`` picks on this hardware (the generated project's own decision),
      timed in windows of one epoch's steps; each setting left out is printed
      with the reason (``--all-settings``: the fastest of fp32/bf16 x
      contiguous/channels_last);
  (b) the generated trainer's steady-state epochs (after its first) on the PNG files,
      with the default ``auto`` settings (``data.pipeline: auto`` takes the
      batch path: uint8 squares, crops and flips per batch on the device), and
      the share of that epoch spent loading data (one epoch of the same loader
      and batch augmentation, timed alone);
  (c) a naive loop in the style of the reference imagenet example: ToTensor +
      Normalize in a default DataLoader, fp32, contiguous memory, ``.item()``
      every step, one epoch at a time.

Each column is the fastest of ``ROUNDS`` equal windows (one epoch of steps):
on a shared machine other processes can only slow a window down, so the
fastest is the closest to the machine's own speed, for all three alike.

On CUDA (``make gpu-bench``) the same three columns, with: (a) auto's precision
and layout, compiled or not (``--all-settings``: bf16/fp16 x contiguous/channels_last
x compiled or not); the images JPEG files
(at least 20k for the 64 px cases), resnet50 at 224 px added; (c) on the GPU
with the reference example's 4 workers and pinned memory; and the GPU's mean
utilisation during the trainer's run (``torch.cuda.utilization``, which needs
pynvml; n/a without). ``--project DIR`` uses a project generated beforehand
(``make gpu-project``), so a GPU machine needs PyTorch but not copier.

    .venv/bin/python benchmarks/throughput.py [--quick] [--only MODEL...] [--project DIR] [--out FILE.json]
        [--all-settings]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader
from torchvision import datasets, models, transforms

REPO = Path(__file__).resolve().parents[1]
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


ROUNDS = 3  # every column is the best of this many windows of one epoch's steps: other load only slows a window


def timed_steps(
    step: Callable[[], None], warmup: int, steps: int, rounds: int = 1, device: torch.device | None = None
) -> float:
    """Seconds per step after ``warmup`` steps: the fastest of ``rounds`` windows of ``steps`` steps.

    On CUDA each window is synchronized at its start and its end only, as the trainer's epochs are timed (b):
    the steps in between queue their kernels without waiting, so (a) is not slowed by a sync per step.
    """
    for _ in range(warmup):
        step()
    best = float("inf")
    for _ in range(rounds):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        synchronize(device)
        best = min(best, (time.perf_counter() - start) / steps)
    return best


def training_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    targets: torch.Tensor,
    cast: Any,
    scaler: torch.amp.GradScaler,
) -> Callable[[], None]:
    """One optimizer step, queued without waiting (``timed_steps`` synchronizes each window's ends)."""

    def step() -> None:
        with cast:
            loss = nn.functional.cross_entropy(model(x), targets)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return step


LAYOUT_NAMES = {torch.contiguous_format: "contiguous", torch.channels_last: "channels_last"}


def compute_settings(
    decide: Any, device: torch.device, every: bool = False, compile_too: bool = True
) -> list[tuple[str, torch.memory_format, bool]]:
    """(precision, layout, compiled) to time: what the trainer's ``auto`` picks here, compiled or not on CUDA.

    ``decide`` is the generated project's ``device`` module: its ``resolve_precision`` and ``memory_format``
    make the choice, as they do for a run. A setting auto never picks here is left out with one printed line:
    emulated bf16 on a CPU without native bf16 math trained resnet18 at 0.8 images/s, five minutes a window.
    ``every``: the whole grid (the CPU's fp32/bf16 x layouts; on CUDA bf16/fp16 x layouts x compiled).
    ``compile_too``: on CUDA, also compiled (``--check`` compiles one model alone: ``compiles``).
    """
    cuda = device.type == "cuda"
    compiling = (False, True) if compile_too else (False,)
    precisions, compiled = (("bf16", "fp16"), compiling) if cuda else (("fp32", "bf16"), (False,))
    grid = [(p, layout, c) for p in precisions for layout in LAYOUT_NAMES for c in compiled]
    if every:
        return grid
    precision, layout = decide.resolve_precision("auto", device), decide.memory_format("auto", device)
    if cuda:
        why = f"compute capability {'.'.join(map(str, torch.cuda.get_device_capability(device)))}"
    else:
        why = "this CPU has native bf16 math" if precision == "bf16" else "no native bf16 math on this CPU"
    for other in precisions:
        if other != precision:
            print(f"    (a) skipped {other}: train.precision: auto picks {precision} here ({why})", flush=True)
    for other, name in LAYOUT_NAMES.items():
        if other != layout:
            print(f"    (a) skipped {name}: train.channels_last: auto picks {LAYOUT_NAMES[layout]}", flush=True)
    return [setting for setting in grid if setting[:2] == (precision, layout)]


def synchronize(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def compute_bound(
    package: str,
    cfg: Any,
    classes: int,
    steps: int,
    device: torch.device,
    every: bool = False,
    compile_too: bool = True,
) -> tuple[float, str]:
    """(a): on tensors already on the device, the fastest of the settings ``compute_settings`` gives.

    Each setting is timed over one window; the fastest is then timed over ``ROUNDS`` more.
    """
    model_module = importlib.import_module(f"{package}.models.classifier")
    settings = compute_settings(importlib.import_module(f"{package}.core.device"), device, every, compile_too)
    batch, size = cfg.data.batch_size, cfg.data.image_size
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, device=device)
    targets = torch.randint(0, classes, (batch,), device=device)
    best: tuple[float, str, Callable[[], None] | None, bool] = (0.0, "", None, False)
    compiled_after_best = False  # a compiled setting timed after the best one reset dynamo: its graphs are gone
    for precision, layout, compiled in settings:
        torch.manual_seed(0)
        model = (
            model_module.build_model(cfg.model, classes, cfg.data.image_size).to(device, memory_format=layout).train()
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = images.contiguous(memory_format=layout)
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        cast = contextlib.nullcontext() if precision == "fp32" else torch.autocast(device.type, dtype=dtype)
        scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        if compiled:
            # Each setting compiles a new model: without a reset, dynamo counts them as recompiles of one
            # function, and from torch._dynamo.config.recompile_limit on the later settings run uncompiled.
            torch._dynamo.reset()
        run = torch.compile(model) if compiled else model
        step = training_step(run, optimizer, x, targets, cast, scaler)
        rate = batch / timed_steps(step, 3 if compiled else 2, steps, 1, device)
        name = f"{precision}, {LAYOUT_NAMES[layout]}{', compiled' if compiled else ''}"
        print(f"    (a) {name}: {rate:.1f} img/s", flush=True)
        compiled_after_best = compiled_after_best or compiled
        if rate > best[0]:
            best, compiled_after_best = (rate, name, step, compiled), False
    rate, name, step, compiled = best
    assert step is not None
    if compiled and compiled_after_best:  # a later setting's reset dropped its graphs: compiled again, untimed
        torch._dynamo.reset()
    rate = max(rate, batch / timed_steps(step, 3 if compiled and compiled_after_best else 0, steps, ROUNDS, device))
    print(f"    (a) {name}, best of {ROUNDS + 1} windows: {rate:.1f} img/s", flush=True)
    return rate, name


class Utilisation:
    """The GPU's mean utilisation while a block runs, sampled every 0.1 s; None without CUDA or pynvml."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.samples, self.done = device, [], threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def readable(self) -> bool:
        if self.device.type != "cuda":
            return False
        try:
            torch.cuda.utilization(self.device)
        except (ModuleNotFoundError, RuntimeError):  # torch reads it through pynvml (or amdsmi)
            return False
        return True

    def sample(self) -> None:
        while not self.done.wait(0.1):
            self.samples.append(torch.cuda.utilization(self.device))

    def __enter__(self) -> Utilisation:
        if self.readable():
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()

    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


class HostSyncs:
    """Host syncs per training step on CUDA: torch's sync check in ``warn`` mode, its warnings counted.

    As the generated project's no-host-sync test sets it: from the end of each epoch's first step until the
    epoch ends (validation, checkpoints and metrics sync by design). What torch does not see is not counted:
    a synchronize a library calls on the CUDA runtime itself (TorchCodec's nvJPEG decode).
    """

    def __init__(self, package: str, device: torch.device, monkeypatch: Any) -> None:
        self.cuda, self.steps, self.syncs = device.type == "cuda", 0, 0
        if not self.cuda:
            return
        trainer = importlib.import_module(f"{package}.training.trainer")
        step, end_epoch = trainer.train_step, trainer.Trainer.end_epoch

        def counted_step(*args: object, **kwargs: object) -> object:
            self.steps += torch.cuda.get_sync_debug_mode() == 1
            result = step(*args, **kwargs)
            torch.cuda.set_sync_debug_mode("warn")
            return result

        def unchecked_end(trainer_self: object, *args: object, **kwargs: object) -> object:
            torch.cuda.set_sync_debug_mode(0)
            return end_epoch(trainer_self, *args, **kwargs)

        monkeypatch(trainer, "train_step", counted_step)
        monkeypatch(trainer.Trainer, "end_epoch", unchecked_end)

    def per_step(self, caught: list[warnings.WarningMessage]) -> float | None:
        if not self.cuda or not self.steps:
            return None
        self.syncs = sum("synchroniz" in str(w.message) for w in caught)
        return self.syncs / self.steps


class PathTaken:
    """What a run's batches really came through: the stream ``TrainingBatches`` built (its class's name), and on
    the nvJPEG path how many files nvJPEG and the CPU decoded (a file nvJPEG refused counts as the CPU's).
    make gpu-check fails a case whose batches did not take the path it names."""

    def __init__(self, package: str, setattr_: Callable[[object, str, object], None]) -> None:
        self.streams: list[str] = []
        self.nvjpeg = self.cpu = 0
        batches = importlib.import_module(f"{package}.data.batches")
        gpu_decode = importlib.import_module(f"{package}.data.loading.gpu_decode")
        build = batches.TrainingBatches.build.__func__
        send, on_the_cpu = gpu_decode.GpuDecoded.send, gpu_decode.GpuDecoded.on_the_cpu

        def recording_build(cls: type, *args: object, **kwargs: object) -> object:
            made = build(cls, *args, **kwargs)
            self.streams.append(type(made.stream).__name__)
            return made

        def counting_send(decoded: object, batch: Any, stream: object) -> object:
            on_device = int(batch.on_device.sum())
            self.nvjpeg, self.cpu = self.nvjpeg + on_device, self.cpu + len(batch.on_device) - on_device
            return send(decoded, batch, stream)

        def counting_fallback(decoded: object, *args: object) -> object:
            self.nvjpeg, self.cpu = self.nvjpeg - 1, self.cpu + 1
            return on_the_cpu(decoded, *args)

        setattr_(batches.TrainingBatches, "build", classmethod(recording_build))
        setattr_(gpu_decode.GpuDecoded, "send", counting_send)
        setattr_(gpu_decode.GpuDecoded, "on_the_cpu", counting_fallback)

    def row(self) -> dict[str, Any]:
        """The trainer's run's part of a row (read before anything else builds a batch stream)."""
        return {"ran_on": self.streams[0] if self.streams else "n/a", "b_nvjpeg_files": self.nvjpeg,
                "b_cpu_files": self.cpu}  # fmt: skip


@contextlib.contextmanager
def patched() -> Any:
    """setattr that is undone on the way out (a benchmark's monkeypatch)."""
    undo: list[tuple[object, str, object]] = []

    def setattr_(owner: object, name: str, value: object) -> None:
        undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    try:
        yield setattr_
    finally:
        for owner, name, value in reversed(undo):
            setattr(owner, name, value)


def generated_trainer(package: str, cfg: Any, device: torch.device) -> tuple[float, float, float | None, float | None]:
    """(b): the fastest epoch after the first (workers warm), as metrics.jsonl reports it, its seconds, the
    GPU's mean utilisation (percent) over the run's epochs, host syncs per step (None where not read)."""
    trainer = importlib.import_module(f"{package}.training.trainer")
    with patched() as setattr_, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        syncs = HostSyncs(package, device, setattr_)
        try:
            with Utilisation(device) as utilisation:
                trainer.train(cfg)
        finally:
            if device.type == "cuda":
                torch.cuda.set_sync_debug_mode(0)
    rows = [json.loads(line) for line in (Path(cfg.train.out_dir) / "metrics.jsonl").read_text().splitlines()]
    best = max(rows[1:], key=lambda row: row["images_per_second"])
    return best["images_per_second"], best["epoch_seconds"], utilisation.mean(), syncs.per_step(caught)


def loading_seconds(package: str, cfg: Any, device: torch.device) -> float:
    """One training epoch of the trainer's own batch stream (loader, batch augmentation, mixing), without the model."""
    folders = importlib.import_module(f"{package}.data.folders")
    # The trainer's batch stream (device-resident, prefetched or GPU-decoded, as data.cache chose), built as train
    # builds it: the same TrainingData, the same placement, the same batch-level steps.
    compute = importlib.import_module(f"{package}.core.device").Compute(device, "fp32", torch.channels_last)
    world = importlib.import_module(f"{package}.core.distributed").World()
    batches = importlib.import_module(f"{package}.data.batches").TrainingBatches.build(
        folders.build_training_data(cfg.data, cfg.train, world=world), cfg.data, cfg.train.seed, world, compute
    )
    batches.set_epoch(2)
    start = time.perf_counter()
    try:
        for _inputs, _labels, _targets in batches:
            pass
        synchronize(device)
    finally:
        batches.close()
    return time.perf_counter() - start


def naive_loop(root: Path, cfg: Any, classes: int, model_name: str, package: str, device: torch.device) -> float:
    """(c): the reference imagenet example's loop, one epoch, its first steps left out of the timing.

    On the CPU, as its single-process default; on CUDA, as it runs there: 4 workers, pinned memory, fp32.
    """
    size = cfg.data.image_size
    dataset = datasets.ImageFolder(
        str(root / "train"),
        transforms.Compose(
            [
                transforms.RandomResizedCrop(size),
                transforms.RandomHorizontalFlip(),
                transforms.ToTensor(),
                transforms.Normalize(MEAN, STD),
            ]
        ),
    )
    cuda = device.type == "cuda"
    loader = DataLoader(
        dataset, batch_size=cfg.data.batch_size, shuffle=True, num_workers=4 if cuda else 0, pin_memory=cuda
    )
    if model_name == "simple_cnn":
        model = importlib.import_module(f"{package}.models.classifier").build_model(
            cfg.model, classes, cfg.data.image_size
        )
    else:
        model = getattr(models, model_name)(num_classes=classes)
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    best = 0.0
    for _ in range(ROUNDS):  # one epoch each, timed whole: loading included
        seen, start = 0, time.perf_counter()
        for images, targets in loader:
            images, targets = images.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(images), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss.item()  # a host sync every step, as the reference example's meters do
            seen += len(targets)
        best = max(best, seen / (time.perf_counter() - start))
    return best


def generated_project(model_name: str, size: int, tmp: Path, project: Path | None) -> str:
    """The package to measure: the given project's, or one generated here per row (importlib keeps each)."""
    if project is not None:
        packages = [p.parent.name for p in (project / "src").glob("*/__init__.py")]
        if str(project / "src") not in sys.path:
            sys.path.insert(0, str(project / "src"))
        return packages[0]
    from copier import run_copy  # only here: a GPU machine runs a project generated beforehand, without copier

    package = f"bench_{model_name}_{size}"
    answers = {"project_name": package, "package_name": package, "model": model_name, "image_size": size}
    run_copy(str(REPO), tmp / package, data=answers, defaults=True, unsafe=True, quiet=True, vcs_ref="HEAD")
    sys.path.insert(0, str(tmp / package / "src"))
    return package


def draw_jpegs(job: tuple[str, str, Path, int, int, int]) -> None:
    """One class folder of JPEG files (a pool's task): the sample data's shapes, saved as photos are."""
    package, kind, folder, count, size, seed = job
    sample = importlib.import_module(f"{package}.data.files.sample_data")
    rng, noise = sample.random.Random(seed), sample.np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        sample.draw_shape(kind, size, rng, noise).save(folder / f"{kind}_{index:05d}.jpg", quality=90)


def write_jpeg_data(package: str, root: Path, per_class: int, val_per_class: int, size: int) -> Path:
    classes = importlib.import_module(f"{package}.data.files.sample_data").CLASSES
    jobs = [
        (package, kind, root / split / kind, count, size, seed)
        for seed, (split, count, kind) in enumerate(
            (split, count, kind) for split, count in (("train", per_class), ("val", val_per_class)) for kind in classes
        )
    ]
    with multiprocessing.get_context("fork").Pool() as pool:
        pool.map(draw_jpegs, jobs)
    return root


# Batch sizes on CUDA, per (model, image size), for an 80 GB H100 in bf16 (the trainer's auto there): large
# enough that the GPU, not the launch of each step's kernels, sets the pace; half an H100's memory at most.
CUDA_BATCH = {("resnet18", 224): 256, ("resnet50", 224): 128, ("resnet18", 64): 1024, ("simple_cnn", 64): 1024}
# The data paths a case can force (``auto``: as a run decides; on this data set the images stay on the GPU).
PATHS = {
    "auto": [],
    # JPEG files decoded by the loader's workers every epoch, prefetched to the GPU on a side stream: what a
    # data set larger than the cache budget takes without TorchCodec (nvJPEG refused below).
    "prefetch": ["data.cache=none"],
    # The same files decoded on the GPU by nvJPEG (TorchCodec), the next batch on a side stream.
    "nvjpeg": ["data.cache=none"],
}


def forced_path(package: str, path: str, setattr_: Callable[[object, str, object], None]) -> str | None:
    """Make the placement take ``path``; why it cannot here (nvJPEG without a working TorchCodec), else None.
    nvJPEG is forced past the start's race (data/loading/decode_race.py), whose figures the row keeps (``RACES``)."""
    placement = importlib.import_module(f"{package}.data.loading.placement")
    if path == "prefetch":
        setattr_(placement, "decodes_on_gpu", lambda paths, device: False)
        setattr_(placement, "jpegs_on_cuda", lambda paths, device: False)
    if path == "nvjpeg":
        gpu_decode = importlib.import_module(f"{package}.data.loading.gpu_decode")
        decode_race = importlib.import_module(f"{package}.data.loading.decode_race")
        timed = decode_race.race

        def won(*args: object) -> object:
            RACES.append(timed(*args))
            return dataclasses.replace(RACES[-1], faster=True)

        setattr_(decode_race, "race", won)
        return gpu_decode.cuda_decode_failure(torch.device("cuda", 0)) if torch.cuda.is_available() else "no CUDA"
    return None


RACES: list[Any] = []  # the start's races that forced_path overruled: nvJPEG's and the CPU's files a second


# --check (make gpu-check) compiles one model alone: each compile takes a minute or so, and the check has 10.
COMPILED_IN_CHECK = ("resnet18", 224)


def compiles(model_name: str, size: int, check: bool) -> bool:
    """Whether (a) also times the compiled model on CUDA: always, except in ``--check``, for one model alone."""
    return not check or (model_name, size) == COMPILED_IN_CHECK


def trainer_config(
    package: str, project_dir: Path, root: Path, model_name: str, size: int, out: Path, path: str, device: torch.device
) -> Any:
    """(b)'s config: the project's default.yaml with the case's model, size and data path, on one device as (a)
    and (c) are: ``train.parallel=none``, since on a machine with several GPUs auto would take DataParallel."""
    config = importlib.import_module(f"{package}.core.config")
    batch = [f"data.batch_size={CUDA_BATCH[(model_name, size)]}"] if (model_name, size) in CUDA_BATCH else []
    return config.load_config(
        project_dir / "configs" / "default.yaml",
        [
            f"data.root={root}",
            f"model.name={model_name}",  # the copier answers' defaults, for a project generated with others
            f"data.image_size={size}",
            f"train.epochs={ROUNDS + 1}",  # the first epoch warms up; the fastest of the others counts
            f"train.out_dir={out}",
            "train.progress=false",
            "train.parallel=none",  # like with like: one device in every column
            *(batch if device.type == "cuda" else []),
            *PATHS[path],
        ],
    )


def measure(
    model_name: str,
    size: int,
    per_class: int,
    tmp: Path,
    steps: int,
    device: torch.device,
    project: Path | None,
    every: bool = False,
    path: str = "auto",
    known: dict[tuple[str, int], tuple[float, str]] | None = None,
    check: bool = False,
) -> dict[str, Any] | None:
    """One row; ``known`` keeps each model's (a), which a forced path's row shares with its ``auto`` row.
    ``check``: make gpu-check's row: no (c), and (a) compiled for ``COMPILED_IN_CHECK`` alone."""
    package = generated_project(model_name, size, tmp, project)
    data_root = tmp / f"data_{model_name}_{size}"
    if device.type == "cuda":  # JPEG files, as image data sets mostly are
        kind = "JPEG"
        root = data_root if data_root.exists() else write_jpeg_data(package, data_root, per_class, 4, size)
    else:
        sample = importlib.import_module(f"{package}.data.files.sample_data")
        root, kind = sample.write_sample_data(data_root, per_class, 4, image_size=size), "PNG"
    project_dir = project if project is not None else tmp / package
    classes = len(importlib.import_module(f"{package}.data.files.sample_data").CLASSES)
    images = classes * per_class
    out = tmp / f"run_{model_name}_{size}_{path}"
    cfg = trainer_config(package, project_dir, root, model_name, size, out, path, device)
    if device.type == "cuda":
        steps = max(1, images // cfg.data.batch_size)  # a window: one epoch's steps, as (b) and (c) are timed
    name = model_name if path == "auto" else f"{model_name} ({path})"
    print(f"{name} at {size}x{size}, batch {cfg.data.batch_size}, {images} {kind} files on {device}", flush=True)
    known = {} if known is None else known
    with patched() as setattr_:
        why_not = forced_path(package, path, setattr_)
        if why_not is not None:  # a row that says so: make gpu-check fails on it
            print(f"    skipped: {why_not}", flush=True)
            return {"model": model_name, "image_size": size, "path": path, "skipped": why_not}
        if (model_name, size) not in known:
            compile_too = compiles(model_name, size, check)
            known[(model_name, size)] = compute_bound(package, cfg, classes, steps, device, every, compile_too)
        a, best = known[(model_name, size)]
        taken, RACES[:] = PathTaken(package, setattr_), []
        b, epoch_seconds, utilisation, syncs = generated_trainer(package, cfg, device)
        ran = {**taken.row(), **race_figures(RACES)}
        share = loading_seconds(package, cfg, device) / epoch_seconds
    busy = f"{utilisation:.0f}%" if utilisation is not None else "n/a"
    per_step = f"{syncs:.2f}" if syncs is not None else "n/a"
    print(
        f"    (b) generated trainer: {b:.1f} img/s, loading {100 * share:.0f}% of its epoch, GPU busy {busy}, "
        f"host syncs a step {per_step}",
        flush=True,
    )
    c = naive_loop(root, cfg, classes, model_name, package, device) if not check and path == "auto" else None
    if c is not None:
        print(f"    (c) naive loop: {c:.1f} img/s", flush=True)
    return {
        "model": model_name,
        "image_size": size,
        "path": path,
        "batch_size": cfg.data.batch_size,
        "images": images,
        "a_compute_bound": round(a, 2),
        "a_best_setting": best,
        "b_generated_trainer": round(b, 2),
        "c_naive_loop": round(c, 2) if c is not None else "n/a",
        "b_loading_share": round(share, 3),
        "b_gpu_utilisation": round(utilisation, 1) if utilisation is not None else "n/a",
        "b_host_syncs_per_step": round(syncs, 3) if syncs is not None else "n/a",
        "b_over_a": round(b / a, 3),
        "b_over_c": round(b / c, 3) if c is not None else "n/a",
        **ran,  # the stream its batches came through, nvJPEG's and the CPU's files, the start's race
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cpu_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def race_figures(races: list[Any]) -> dict[str, Any]:
    """The start's race, where the run ran one (data/loading/decode_race.py): files a second, nvJPEG's and the CPU's."""
    if not races:
        return {}
    race = races[0]
    return {"race_nvjpeg_files_per_s": round(race.nvjpeg, 1), "race_cpu_files_per_s": round(race.cpu, 1),
            "race_workers": race.workers}  # fmt: skip


def cases(device: torch.device, quick: bool, check: bool = False) -> list[tuple[str, int, int, int, str]]:
    """(model, size, training images per class, steps of a window, data path).

    On CUDA a window is one epoch's steps at ``CUDA_BATCH``'s size (``measure``), and the JPEG prefetch and
    nvJPEG paths are measured on resnet18 at 64 px with ``data.cache=none``: data that would not fit the cache.
    ``check`` (``make gpu-check``): half the images, sized to end within 10 minutes on one H100 with the tests.
    """
    if device.type == "cuda":  # 4 classes: 5,000 per class is the 20k JPEG files of the 64 px cases
        large, small = (64, 256) if quick else (400, 2500) if check else (800, 5000)
        return [
            ("resnet18", 224, large, 0, "auto"),
            ("resnet50", 224, large, 0, "auto"),
            ("resnet18", 64, small, 0, "auto"),
            ("simple_cnn", 64, small, 0, "auto"),
            ("resnet18", 64, small, 0, "prefetch"),
            ("resnet18", 64, small, 0, "nvjpeg"),
        ]
    return [
        ("resnet18", 224, 16 if quick else 64, 2 if quick else 8, "auto"),
        ("resnet18", 64, 32 if quick else 200, 2 if quick else 25, "auto"),  # a real backbone on small images
        ("simple_cnn", 64, 32 if quick else 200, 2 if quick else 25, "auto"),
    ]


TABLE = [  # (heading, row key): the table make gpu-check ends with
    ("case", "case"),
    ("trainer img/s", "b_generated_trainer"),
    ("compute-bound img/s", "a_compute_bound"),
    ("trainer/compute", "b_over_a"),
    ("host syncs/step", "b_host_syncs_per_step"),
    ("naive img/s", "c_naive_loop"),
    ("loading share", "b_loading_share"),
    ("batches from", "ran_on"),
]


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as one aligned text table (``--table FILE`` prints a past run's)."""
    lines = [[heading for heading, _ in TABLE]]
    for row in rows:
        case = f"{row['model']}@{row['image_size']}" + ("" if row["path"] == "auto" else f" {row['path']}")
        if "skipped" in row:
            lines.append([case, f"skipped: {row['skipped']}", *[""] * (len(TABLE) - 2)])
            continue
        lines.append([case if key == "case" else str(row.get(key, "n/a")) for _, key in TABLE])
    widths = [max(len(line[i]) for line in lines) for i in range(len(TABLE))]
    text = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in lines]
    ran = [row for row in rows if "skipped" not in row]
    head = f"{ran[0]['device']}, {ran[0]['cpu_cores']} CPU cores, torch {ran[0]['torch']}" if ran else "no rows"
    return "\n".join([head, *text])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer images and steps, for a smoke test")
    parser.add_argument(
        "--check", action="store_true", help="make gpu-check's: half the images, no (c), one model compiled"
    )
    parser.add_argument("--table", type=Path, help="print the table of a past run's FILE.json, measure nothing")
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "throughput.json")
    parser.add_argument("--project", type=Path, help="a project generated beforehand (make gpu-project): no copier")
    parser.add_argument("--device", default="auto", help="auto (cuda where available) | cpu | cuda")
    parser.add_argument("--only", nargs="*", default=[], help="models to measure (default: all), e.g. simple_cnn")
    parser.add_argument(
        "--all-settings", action="store_true", help="(a) in every precision and layout, not only what auto picks"
    )
    args = parser.parse_args()
    if args.table is not None:
        print(table(json.loads(args.table.read_text())))
        return
    global ROUNDS
    if args.quick:
        ROUNDS = 1  # one window per column: --quick checks that the script runs; its figures mean nothing
    elif args.check:
        ROUNDS = 2
    name = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    device = torch.device(name)
    if device.type == "cuda":
        device = torch.device("cuda", device.index or 0)
        torch.backends.cudnn.benchmark = True  # fixed shapes: as the trainer sets it (P3), for all three columns
    known: dict[tuple[str, int], tuple[float, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        measured = [
            measure(
                model,
                size,
                per_class,
                Path(tmp),
                steps,
                device,
                args.project,
                args.all_settings,
                path,
                known,
                check=args.check,
            )
            for model, size, per_class, steps, path in cases(device, args.quick, args.check)
            if not args.only or model in args.only
        ]
    rows = [row for row in measured if row is not None]
    print()
    print(table(rows))
    for row in (row for row in rows if "skipped" not in row):
        print(
            f"  {row['model']}@{row['image_size']} {row['path']}: (a) {row['a_best_setting']}, batch "
            f"{row['batch_size']}, GPU busy {row['b_gpu_utilisation']}, trainer/naive {row['b_over_c']}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
