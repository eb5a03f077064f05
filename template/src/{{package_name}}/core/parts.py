"""The optional parts: which of them this project was made with, and how to turn one on.

copier's ``optional_parts`` answer leaves a part's files out of the project
(copier.yml's ``_exclude``): its modules, tests, config keys and doc page. Kept
code asks here whether a part is present, by its files, and imports the part's
modules only then, so that a project without a part never imports it. A part's
config keys live in its own fragment, ``core/defaults/<part>.yaml``: present
with the part, merged into the defaults by ``core/config.py``.
"""

from __future__ import annotations

from pathlib import Path

from .errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the project's package folder

# Each part, and the files and folders of the package it owns (copier.yml's _exclude leaves them out together);
# the first one is present exactly when the part is.
PARTS: dict[str, tuple[str, ...]] = {
    "audit": ("commands/audit",),
    "sweeps": ("sweeps", "commands/sweep.py"),
    "slurm": ("training/slurm.py",),
    "mlflow": ("outputs/tracking.py",),
    "shards": ("data/files/shards.py", "commands/pack_shards.py"),
    "gpu_decode": ("data/loading/gpu_decode.py", "data/loading/decode_race.py"),
}


def present(part: str) -> bool:
    """Whether the project holds ``part`` (copier's optional_parts answer named it)."""
    return (PACKAGE_DIR / PARTS[part][0]).exists()


def included() -> list[str]:
    """The parts this project holds, in the answer's order."""
    return [part for part in PARTS if present(part)]


def turn_on(part: str) -> str:
    """The command that adds ``part`` to this project, keeping the parts it has."""
    wanted = ", ".join(name for name in PARTS if present(name) or name == part)
    return f'copier update --trust --defaults -d "optional_parts=[{wanted}]"'


def part_off(part: str, what: str) -> UserError:
    """One line: ``what`` belongs to a part this project was made without, and the command that adds it."""
    return UserError(f"{what} is part of the {part} part, which this project was made without: {turn_on(part)}")


def require_part(part: str, what: str) -> None:
    """Refuse ``what`` where ``part`` is absent, in one line that says how to turn it on."""
    if not present(part):
        raise part_off(part, what)
