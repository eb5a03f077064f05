"""``data.cache``: where the decoded training images live, decided once from measured facts.

One rule for ``auto``, in this order:

1. ``device``: the uint8 squares of the batch path, kept in the training
   device's memory when they take at most ``DEVICE_SHARE`` of its free memory
   (``torch.cuda.mem_get_info``). Batches are then gathered there: no loader,
   no host-to-device copy, crops and flips on the device (as airbench does).
2. ``memory``: decoded once into this machine's memory when they take at most
   ``cache.AUTO_SHARE`` of it; batches are gathered on the host and copied.
3. ``gpu-decode``: on CUDA, when every training file is a JPEG, TorchCodec
   decodes a probe JPEG there, and nvJPEG decodes a sample of the files clearly
   faster than the loader's workers would (``decode_race.py``: ``MARGIN`` times
   their rate on ``MIN_FILES`` files or more, timed at start only where the
   choice hangs on it): the loader reads bytes, nvJPEG decodes each batch on
   the GPU (``gpu_decode.py``). A probe that fails, or a race that nvJPEG
   loses, is named in the line.
4. ``stream``: decoded batch by batch in the loader, every epoch.

``data.decoder`` decides between nvJPEG and the CPU where the files stream:
``auto`` races them at the start of a fresh run (not under
``train.deterministic``, whose CPU needs no clock), and keeps on resume the
decoder its checkpoint's run used (``recorded_decoder``): the same pixels,
whatever ``auto`` would choose now, so resume stays exact. ``nvjpeg`` and
``cpu`` pin one (``nvjpeg`` where nvJPEG cannot decode the run is refused in
one line naming why). Where a resumed run's decoder cannot run here (no
TorchCodec on this machine), the data line says why and the resume says so in
one line (``run_state.py``). A checkpoint written before the decoder was
recorded resumes by the rule of then (nvJPEG wherever it decodes the streamed
files), with a note where that is nvJPEG.

``auto`` takes ``device`` on CUDA only: on the CPU, ``memory`` is the same
memory. ``data.cache: device`` asks for it on any device (on the CPU that is
how the tests prove it gives the batches of the streamed path). The choice is
printed in one line at start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import Dataset
from torchvision import datasets

from ...core.checkpoint import find_resume_state
from ...core.config import DataConfig
from ...core.distributed import World, all_agree, files_checked
from ...core.errors import UserError
from ...core.parts import part_off, present
from ..decoding import codec
from ..files.file_index import FileIndex
from .cache import AUTO_SHARE, MemoryCache
from .pipeline import Fill, square_images
from .store import CacheStore

if TYPE_CHECKING:  # the gpu_decode part's: a name for the annotations alone (core/parts.py)
    from .decode_race import DecodeRace

DEVICE_SHARE = 0.25  # of the device's free memory at start: the rest is for the model, activations and cuDNN
# What the data line says where train.deterministic leaves streamed JPEG files to the CPU, untimed.
UNTIMED = "on the CPU: train.deterministic runs no race, whose result hangs on a clock; data.decoder=nvjpeg pins nvJPEG"


@dataclass(frozen=True)
class DataFacts:
    """What the choice depends on, measured at start (tests set them by hand)."""

    setting: str  # data.cache: auto | none | memory | device
    images: int  # training images (val is evaluated per sample)
    image_bytes: int  # one decoded image: 3 x side x side uint8 on the batch path
    batch_path: bool  # uint8 squares (pipeline.batch_path); the per-sample path caches PIL-sized images on the host
    device: str  # "cpu", "cuda:0", ...
    device_free: int | None  # free bytes on a CUDA device; None on the CPU
    host_fits: bool  # cache.keeps_in_memory: the images fit the host's share (they are decoded there first)
    gpu_decode: bool = False  # gpu_decode.decodes_on_gpu: CUDA, TorchCodec decodes there, every training file a JPEG
    gpu_decode_failure: str | None = None  # why not, where TorchCodec loads but failed its probe decode on the GPU
    # The decoder of the run a resume continues: nvjpeg | cpu | unrecorded (its checkpoint is older than the record:
    # the rule of then, nvJPEG wherever it decodes streamed files) | None (a fresh run).
    recorded: str | None = None
    race: DecodeRace | None = None  # nvJPEG against the loader's workers, timed where the choice hangs on it
    decoder: str = "auto"  # data.decoder: auto | nvjpeg | cpu
    deterministic: bool = False  # train.deterministic: auto takes the CPU, whose choice needs no clock
    unavailable: str | None = None  # why nvJPEG cannot decode these files here (gpu_decode.nvjpeg_unavailable)
    outvoted: bool = False  # under torchrun another process decodes on the CPU (``place``): so does this one
    codec: str | None = None  # codec.unusable: a TorchCodec installed that cannot decode here, why and the fix


@dataclass(frozen=True)
class Placement:
    where: str  # device | memory | gpu-decode | stream
    line: str  # what is printed at start


def mib(count: int) -> str:
    return f"{count / 2**20:,.0f} MB" if count < 2**30 else f"{count / 2**30:,.1f} GB"


def choose(facts: DataFacts) -> Placement:
    """The one rule (module docstring); an explicit ``device`` that cannot hold the images is refused, as is
    ``data.decoder=nvjpeg`` where nvJPEG cannot decode the run. A TorchCodec that is installed and cannot decode
    here ends the line, with the fix: Pillow decodes, about 2x slower for JPEG, and must not do so unsaid."""
    chosen = placed_by_rule(facts)
    return replace(chosen, line=f"{chosen.line}; {facts.codec}") if facts.codec else chosen


def placed_by_rule(facts: DataFacts) -> Placement:
    """``choose`` before its last clause."""
    total = facts.images * facts.image_bytes
    decoded = f"data: {facts.images} images decoded once"
    if facts.setting == "device":
        refuse_device_cache(facts, total)
    refusal = nvjpeg_refusal(facts)
    if facts.decoder == "nvjpeg" and refusal:
        raise UserError(
            f"data.decoder=nvjpeg, but nvJPEG cannot decode this run's images: {refusal}; set data.decoder=auto or cpu"
        )
    nvjpeg, why = nvjpeg_verdict(facts, refusal)
    if nvjpeg:
        return nvjpeg_placement(facts, why)
    where, said = cached_where(facts), f"; {why}" if why else ""
    if where == "device":
        free = f" of {mib(facts.device_free)} free" if facts.device_free is not None else ""
        line = f"{decoded}, kept on {facts.device} ({mib(total)}{free}); batches gathered there{said}"
        return Placement("device", line)
    if where == "memory":  # data.cache=memory, or auto within the host's share (cache.keeps_in_memory)
        return Placement("memory", f"{decoded}, kept in this machine's memory ({mib(total)} a process){said}")
    size = "data.cache=none" if facts.setting == "none" else f"more than {AUTO_SHARE:.0%} of this machine's memory"
    return Placement("stream", f"data: {facts.images} images decoded every epoch in the loader ({size}{said})")


def nvjpeg_refusal(facts: DataFacts) -> str | None:
    """Why nvJPEG cannot decode this run here, whatever ``data.decoder`` says; None where it can: JPEG files on a
    GPU where TorchCodec decodes, on the batch path, streamed (no ``data.cache`` of CPU-decoded images asked)."""
    if not facts.gpu_decode:
        return facts.unavailable or "nvJPEG does not decode these files here (data/loading/gpu_decode.py)"
    if not facts.batch_path:
        return "the per-sample pipeline decodes in the loader (data.pipeline: sample, or what asks for it)"
    if facts.setting in ("memory", "device"):
        return f"data.cache={facts.setting} keeps the images decoded once, on the CPU"
    return None


def nvjpeg_verdict(facts: DataFacts, refusal: str | None) -> tuple[bool, str]:
    """Whether nvJPEG decodes the run, and the words the data line adds (empty: none worth saying). In order:
    what cannot be, the other processes' vote, ``data.decoder``'s pin, the checkpoint's decoder, auto's caches,
    train.deterministic, the race."""
    streams = cached_where(facts) is None  # the images stream: where they are decoded is worth a word
    kept = facts.recorded == "nvjpeg"  # the resume then says the pixels change, and points at this line for why
    if refusal and kept:
        return False, f"not with nvJPEG as its checkpoint's run did: {refusal}"
    if refusal:
        wanted = facts.gpu_decode_failure is not None and facts.batch_path and streams  # JPEGs on CUDA, a bad probe
        return False, f"not with nvJPEG: {facts.gpu_decode_failure}" if wanted else ""
    if facts.outvoted:
        return False, "not with nvJPEG: another of torchrun's processes decodes on the CPU (its data: line says why)"
    if facts.decoder == "nvjpeg":
        return True, "data.decoder=nvjpeg"
    if facts.decoder == "cpu":  # said where the images stream or the checkpoint's were nvJPEG's: else, cached anyway
        return False, "data.decoder=cpu" if streams or kept else ""
    if facts.recorded == "nvjpeg":  # the resumed run's own decoder, whatever auto would do now: the same pixels
        return True, "as its checkpoint's run did"
    if not streams:  # data.cache=auto keeps them: decoded once, on the CPU
        return False, ""
    if facts.recorded == "cpu":
        return False, "on the CPU, as its checkpoint's run did"
    if facts.recorded == "unrecorded":  # as the project chose before the decoder was recorded (the resume notes it)
        return True, "its checkpoint records no decoder: nvJPEG, as runs chose before the decoder was recorded"
    if facts.deterministic:
        return False, UNTIMED
    if facts.race is None:
        return False, "not with nvJPEG: not timed"
    return facts.race.faster, facts.race.words() if facts.race.faster else f"not with nvJPEG: {facts.race.words()}"


def refuse_device_cache(facts: DataFacts, total: int) -> None:
    """``data.cache=device`` where it cannot work: the per-sample path, or a GPU that cannot hold the squares."""
    if not facts.batch_path:
        raise UserError(
            "data.cache=device keeps the uint8 squares of the batch path, which this recipe cannot take: "
            "use data.cache=memory or auto"
        )
    if on_cuda(facts) and total > DEVICE_SHARE * facts.device_free:  # type: ignore[operator]
        raise UserError(
            f"data.cache=device would hold {mib(total)} of images on {facts.device}, more than "
            f"{DEVICE_SHARE:.0%} of its {mib(facts.device_free or 0)} free: use data.cache=memory or auto"
        )


def on_cuda(facts: DataFacts) -> bool:
    return facts.device.startswith("cuda") and facts.device_free is not None


def cached_where(facts: DataFacts) -> str | None:
    """``device`` or ``memory`` where the images are decoded once and kept, else None (they stream)."""
    total = facts.images * facts.image_bytes
    # Decoded on the host first, then copied over once: auto asks for room on both.
    fits_device = on_cuda(facts) and facts.host_fits and total <= DEVICE_SHARE * facts.device_free  # type: ignore[operator]
    if facts.setting == "device" or (facts.setting == "auto" and facts.batch_path and fits_device):
        return "device"
    return "memory" if facts.host_fits and facts.setting != "none" else None


def nvjpeg_placement(facts: DataFacts, why: str) -> Placement:
    line = f"data: {facts.images} JPEG files decoded every epoch on {facts.device} with nvJPEG ({why})"
    return Placement("gpu-decode", line)


def needs_race(facts: DataFacts) -> bool:
    """Whether the choice hangs on timing nvJPEG against the loader's workers: JPEG files nvJPEG can decode,
    that stream (neither cache holds them), in a fresh run (a resumed one keeps its decoder) under
    ``data.decoder=auto``, not under train.deterministic."""
    fresh_auto = facts.decoder == "auto" and facts.recorded is None and not facts.deterministic
    return fresh_auto and nvjpeg_refusal(facts) is None and cached_where(facts) is None


def place(facts: DataFacts, race: Callable[[], DecodeRace], world: World) -> Placement:
    """``choose``, after the race where the choice hangs on it (``decode_race.py``). Under torchrun every process
    votes on its own placement, whether it raced or not (a collective they all reach): nvJPEG decodes only where
    every process chose it, since one that decodes on the CPU (cached, kept from its checkpoint, nvJPEG slower
    or missing on its machine) would train on other pixels."""
    files_checked(world)  # every node's files checked: no check shares the cores a race times (torchrun)
    facts = replace(facts, race=race() if needs_race(facts) else None)
    chosen = choose(facts)
    on_gpu = chosen.where == "gpu-decode"
    if all_agree(on_gpu, world) or not on_gpu:  # asked first, on every process
        return chosen
    return choose(replace(facts, outvoted=True))


def recorded_decoder(resume: str | None, out_dir: str) -> str | None:
    """The decoder of the run a resume continues (nvjpeg or cpu), from the file the restore will read:
    ``find_resume_state``'s pick for ``--resume`` (``auto``: out_dir's last.pt, or an older one where it is
    damaged; a path: that file, whatever out_dir holds). None for a fresh run, or where no file is found or
    reads (the restore then refuses it); ``unrecorded`` for a checkpoint written before the decoder was recorded.
    Mapped, not read: its tensors stay on disk."""
    try:
        found = find_resume_state(resume, out_dir, mapped=True)
    except UserError:  # the restore says it, in the same words, after the run's lock is held
        return None
    if found is None:
        return None
    decoder = found[1].get("provenance", {}).get("decoder")
    return decoder if decoder in ("nvjpeg", "cpu") else "unrecorded"


def device_free_memory(device: torch.device) -> int | None:
    """Free bytes on a CUDA device (``torch.cuda.mem_get_info``); None for any other device."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return free


def measured_facts(
    choices: tuple[str, str],
    paths: list[str],
    image_bytes: int,
    batch: bool,
    device: torch.device,
    host_fits: bool,
    recorded: str | None = None,
    deterministic: bool = False,
) -> DataFacts:
    """The facts of this machine and run (``choices``: the config's ``data.cache`` and ``data.decoder``;
    ``host_fits`` from ``cache.keeps_in_memory``, ``recorded`` from ``recorded_decoder``); the race is
    ``place``'s to run, where the choice hangs on it."""
    setting, decoder = choices
    free = device_free_memory(device)
    gpu, unavailable, failure = nvjpeg_facts(paths, device)
    measured = DataFacts(setting, len(paths), image_bytes, batch, str(device), free, host_fits, gpu, failure)
    settings = {"recorded": recorded, "decoder": decoder, "deterministic": deterministic}
    return replace(measured, **settings, unavailable=unavailable, codec=codec.unusable())


def nvjpeg_facts(paths: list[str], device: torch.device) -> tuple[bool, str | None, str | None]:
    """Whether nvJPEG decodes these files here (gpu_decode.decodes_on_gpu), why not, and why not where the GPU path
    was wanted (JPEG files on CUDA). A project made without the gpu_decode part: never, in words that say so."""
    if not present("gpu_decode"):  # auto then never picks it; data.decoder=nvjpeg is refused with the config
        return False, str(part_off("gpu_decode", "nvJPEG decoding")), None
    from . import gpu_decode  # the gpu_decode part, there: imported only now (core/parts.py)

    gpu = gpu_decode.decodes_on_gpu(paths, device)
    # Why not, asked only where nvJPEG cannot (its probe decode then runs again: rare, and on CUDA alone).
    unavailable = None if gpu else gpu_decode.nvjpeg_unavailable(paths, device)
    failure = unavailable if not gpu and gpu_decode.jpegs_on_cuda(paths, device) else None  # the GPU path was wanted
    return gpu, unavailable, failure


@dataclass(frozen=True)
class Cached:
    """Where the decoded images are kept (``store``: data.cache_dir, or None: in memory) and the files' digests."""

    store: CacheStore | None
    indexes: dict[str, FileIndex]
    progress: bool

    def digest(self, dataset: datasets.DatasetFolder, split: str) -> str:
        if self.store is None:
            return ""
        return self.indexes[split].digest([path for path, _ in dataset.samples], self.progress)

    def squares(
        self, dataset: datasets.DatasetFolder, cfg: DataConfig, kept: bool, workers: int, start: Any = None
    ) -> Dataset:
        """The batch path's squares; kept: decoded now by ``workers`` loader processes started by ``start``."""
        files = self.digest(dataset, "train") if kept else ""
        return square_images(dataset, cfg, kept, Fill(workers, start, self.progress), self.store, files)

    def resized(self, dataset: datasets.DatasetFolder, cfg: DataConfig, split: str) -> Dataset:
        return MemoryCache(dataset, cfg, self.progress, self.store, self.digest(dataset, split))
