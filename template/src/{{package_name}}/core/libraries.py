"""torch, torchvision and TorchCodec as one set: their versions and builds checked before any of them is imported.

torchvision and TorchCodec carry compiled code built against one torch
release and one build of it (CPU-only, or one CUDA or ROCm version). Another
torch beside them fails at import in torch's own words (``RuntimeError:
operator torchvision::nms does not exist``, an undefined symbol), one of the
most reported install errors of PyTorch projects: a CPU-only torch from
PyTorch's index beside PyPI's CUDA build of torchvision is enough. Each
package's ``version.py`` names its build (``2.13.0+cpu``, ``0.28.0+cu128``),
so the set is judged by reading those files, without importing anything, and
a mismatch is one line that names what is installed and the pip command that
installs a matching set from one index.

Which versions go together are the libraries' own tables (torchvision's
README, "Installation"; TorchCodec's README, "Installing TorchCodec"):
``TORCHVISION`` and ``TORCHCODEC`` below.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from .errors import UserError

# torchvision's table: torch 2.N goes with torchvision 0.(N + 15) (2.0 with 0.15 ... 2.9 with 0.24; 2.14 with 0.29
# is this project's pinned pair). A torch newer than the table's last row takes the rule every row follows.
TORCHVISION = {
    (2, 0): (0, 15), (2, 1): (0, 16), (2, 2): (0, 17), (2, 3): (0, 18), (2, 4): (0, 19), (2, 5): (0, 20),
    (2, 6): (0, 21), (2, 7): (0, 22), (2, 8): (0, 23), (2, 9): (0, 24), (2, 10): (0, 25), (2, 11): (0, 26),
    (2, 12): (0, 27), (2, 13): (0, 28), (2, 14): (0, 29),
}  # fmt: skip
# TorchCodec's table: each release before 0.12 was built for one torch minor; from 0.12 on, against torch's stable
# ABI as of 2.11, so one release loads with torch 2.11 and every later one (STABLE_ABI).
TORCHCODEC = {
    (0, 0): (2, 4), (0, 1): (2, 5), (0, 2): (2, 6), (0, 3): (2, 7), (0, 4): (2, 7), (0, 5): (2, 7),
    (0, 6): (2, 8), (0, 7): (2, 8), (0, 8): (2, 9), (0, 9): (2, 9), (0, 10): (2, 10), (0, 11): (2, 11),
}  # fmt: skip
STABLE_ABI = ((0, 12), (2, 11))  # TorchCodec from this release on loads with torch from this one on
IMAGE_DECODERS = "0.16"  # the first TorchCodec with image decoders: the decode extra's floor (data/decoding/codec.py)
PYTORCH_INDEX = "https://download.pytorch.org/whl"
BUILDS = re.compile(r"cpu|cu\d+|rocm[\d.]+|xpu")  # the builds PyTorch's index names (its folders: whl/cu130, ...)
PYPI = "https://pypi.org/simple"
# torch's words when torchvision's compiled operators did not load with this torch (torchvision/_meta_registrations.py)
NO_OPERATOR = re.compile(r"operator torchvision::\w+ does not exist")


@dataclass(frozen=True)
class Installed:
    """The three versions as each package's ``version.py`` spells them (the build after ``+``); None: not installed."""

    torch: str | None
    torchvision: str | None
    torchcodec: str | None = None


def release(spelled: str) -> tuple[int, int]:
    """(major, minor) of ``2.13.0+cpu``: (2, 13)."""
    parts = re.findall(r"\d+", spelled.split("+")[0])[:2]
    return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0


def build(spelled: str) -> str:
    """The build a version names after ``+``: ``cpu``, ``cu128``, ``rocm6.2``; '' where it names none (macOS, a
    version read from pip's metadata)."""
    return spelled.partition("+")[2]


def build_said(tag: str) -> str:
    """``cu128`` as people say it: CUDA 12.8; ``cpu``: CPU-only."""
    if tag == "cpu":
        return "CPU-only"
    cuda = re.fullmatch(r"cu(\d+)(\d)", tag)
    if cuda:
        return f"CUDA {cuda.group(1)}.{cuda.group(2)}"
    return tag.replace("rocm", "ROCm ") if tag.startswith("rocm") else tag


def spelled_version(package: str) -> str | None:
    """``package``'s version with its build, read from its ``version.py`` (no import: importing a package of a
    mismatched set is what fails); pip's record of it where that file is missing; None where it is not installed."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or ():
        try:
            text = (Path(folder) / "version.py").read_text()
        except OSError:
            continue
        found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
        if found:
            return found.group(1)
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def installed() -> Installed:
    return Installed(spelled_version("torch"), spelled_version("torchvision"), spelled_version("torchcodec"))


def torchvision_for(torch: str) -> tuple[int, int] | None:
    """The torchvision release that goes with this torch (its table, then its rule); None for a torch neither knows."""
    major, minor = release(torch)
    return TORCHVISION.get((major, minor), (0, minor + 15) if major == 2 else None)


def torchcodec_goes_with(torchcodec: str, torch: str) -> bool:
    """Whether this TorchCodec release loads with this torch release (TorchCodec's table)."""
    codec, wanted = release(torchcodec), release(torch)
    if codec >= STABLE_ABI[0]:
        return wanted >= STABLE_ABI[1]
    return TORCHCODEC.get(codec) == wanted


def torchcodec_for(torch: str) -> str:
    """pip's requirement for a TorchCodec that goes with this torch: the decode extra's from 2.11 on."""
    wanted = release(torch)
    if wanted >= STABLE_ABI[1]:
        return f"torchcodec>={IMAGE_DECODERS}"
    older = [codec for codec, goes in TORCHCODEC.items() if goes == wanted]
    return f"torchcodec=={'.'.join(map(str, max(older)))}.*" if older else "torchcodec"


def different_builds(one: str, other: str) -> bool:
    """Two builds that cannot go together: both named as PyTorch's indexes name them, and not the same (a version
    without one, or a build from source, ``+git1a2b3c``, says nothing)."""
    named = [build(version) for version in (one, other) if BUILDS.fullmatch(build(version))]
    return len(named) == 2 and named[0] != named[1]


def torchvision_problem(found: Installed) -> str | None:
    """Why torchvision does not go with torch, in words; None where it does (or either is missing: pip's to say)."""
    torch, vision = found.torch, found.torchvision
    if torch is None or vision is None:
        return None
    wanted = torchvision_for(torch)
    if wanted is not None and release(vision) != wanted:
        return (
            f"torch {torch} and torchvision {vision} do not go together (torch {'.'.join(map(str, release(torch)))} "
            f"goes with torchvision {'.'.join(map(str, wanted))}, torchvision's table)"
        )
    if different_builds(torch, vision):
        return (
            f"torch {torch} and torchvision {vision} are builds for different hardware ({build_said(build(torch))} "
            f"and {build_said(build(vision))}), from different package indexes"
        )
    return None


def torchcodec_problem(found: Installed, builds: bool = True) -> str | None:
    """Why TorchCodec does not go with torch, in words; None where it does or is not installed. ``builds`` off: the
    release alone (a CPU-only TorchCodec decodes on the CPU beside a CUDA torch; its import tells the rest)."""
    torch, codec = found.torch, found.torchcodec
    if torch is None or codec is None:
        return None
    if not torchcodec_goes_with(codec, torch):
        return f"TorchCodec {codec} does not go with torch {torch} (TorchCodec's table)"
    if builds and different_builds(torch, codec):
        return (
            f"TorchCodec {codec} is a build for other hardware than torch {torch} ({build_said(build(codec))} and "
            f"{build_said(build(torch))}), from another package index"
        )
    return None


def index_for(torch: str) -> str:
    """The one index that has torch's build and the packages built for it: PyTorch's for a named build, else PyPI."""
    tag = build(torch)
    return f"{PYTORCH_INDEX}/{tag}" if BUILDS.fullmatch(tag) else PYPI


def matching_set(found: Installed, replace: list[str]) -> str:
    """The pip commands that replace ``replace`` (torchvision, torchcodec) with the builds for the installed torch,
    from torch's own index: torch is named at its version, so pip keeps it as it is."""
    torch = found.torch or ""
    public = torch.split("+")[0]
    vision = torchvision_for(torch)
    wanted = {
        "torchvision": f"torchvision=={'.'.join(map(str, vision))}.*" if vision else "torchvision",
        "torchcodec": torchcodec_for(torch),
    }
    named = " ".join(f'"{wanted[name]}"' for name in replace)
    return (
        f"python -m pip uninstall -y {' '.join(replace)} && "
        f'python -m pip install "torch=={public}" {named} --index-url {index_for(torch)}'
    )


def replaced(found: Installed) -> list[str]:
    """The packages of the set that do not go with the installed torch (torchvision first: it is required)."""
    names = ["torchvision"] if torchvision_problem(found) else []
    return names + (["torchcodec"] if torchcodec_problem(found) else [])


def check_libraries(found: Installed | None = None) -> None:
    """A torchvision that does not go with torch (every command that imports it fails): one line (``UserError``).
    TorchCodec is an extra that Pillow stands in for: its mismatch is said where it would decode
    (data/decoding/codec.py)."""
    found = found or installed()
    problem = torchvision_problem(found)
    if problem is not None:
        raise UserError(f"{problem}: install a matching set from one index: {matching_set(found, replaced(found))}")


def import_failure(error: BaseException, found: Installed | None = None) -> str | None:
    """torch's error when torchvision's operators did not load with it, as one line; None for any other error."""
    if not isinstance(error, RuntimeError) or not NO_OPERATOR.search(str(error)):
        return None
    found = found or installed()
    first = NO_OPERATOR.search(str(error)).group(0)  # type: ignore[union-attr]
    names = ["torchvision", *(["torchcodec"] if torchcodec_problem(found) else [])]
    return (
        f"torchvision {found.torchvision} does not load with torch {found.torch} ({first}): they are builds of "
        f"different torch releases or from different package indexes; install a matching set from one index: "
        f"{matching_set(found, names)}"
    )
