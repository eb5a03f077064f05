"""Run many generated projects' commands in one Python process: ``python train_rows.py SPEC RESULTS``.

Starting Python and importing torch takes about 4 s; a one-epoch run on tiny
data about 1 s. The answer matrix trains some twenty projects, so one process
saves more than a minute of CI. Each project is imported from its own ``src/``
under its own package name and run through its real entry point, ``cli.main``,
which is what ``python -m <package> train`` calls.

SPEC is a JSON list of runs ``{"id", "project", "package", "args"}``; RESULTS
gets ``{id: {"rc", "stdout", "stderr", "seconds", "built_in_defaults"}}``, the
last being every key's default as ``core/config.py`` writes it (``auto`` where a
run resolves it, as ``configs/default.yaml`` has it) of the project's package
(read here too, so no process per project is started for it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import json
import os
import sys
import time
import traceback
from pathlib import Path


def use_project(project: str, package: str) -> None:
    """Import ``package`` from this project's ``src/`` from now on.

    Each row's package name is its own today, but a spec may hold two projects with one name (any two
    generated with the default answers): a package already imported from another project's folder is
    forgotten first, so each run uses its own code and reads its own defaults.
    """
    src = str(Path(project) / "src")
    if src in sys.path:
        sys.path.remove(src)
    sys.path.insert(0, src)
    loaded = sys.modules.get(package)
    if loaded is not None and not str(loaded.__file__).startswith(src + os.sep):
        for name in [name for name in sys.modules if name == package or name.startswith(f"{package}.")]:
            del sys.modules[name]


def written_defaults(kind: type) -> dict[str, object]:
    """Each field's default as declared: ``Config()`` resolves the ``auto`` fine-tuning keys, the file does not."""
    values: dict[str, object] = {}
    for item in dataclasses.fields(kind):
        default = item.default if item.default_factory is dataclasses.MISSING else item.default_factory()
        values[item.name] = written_defaults(type(default)) if dataclasses.is_dataclass(default) else default
    return values


def run(project: str, package: str, args: list[str]) -> dict[str, object]:
    use_project(project, package)
    os.chdir(project)
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = importlib.import_module(f"{package}.cli").main(args)
        except SystemExit as stop:
            rc = stop.code
        except BaseException:  # a crash is a result to report, not a reason to skip the other rows
            traceback.print_exc()
            rc = "crash"
    seconds = round(time.perf_counter() - start, 2)
    config = importlib.import_module(f"{package}.core.config").Config
    # As the project writes them: less the keys of the optional parts it lacks (train.mlflow without mlflow).
    rules = importlib.import_module(f"{package}.core.config_rules")
    defaults = rules.without_absent_keys(written_defaults(config), config())
    return {
        "rc": rc,
        "stdout": out.getvalue()[-3000:],
        "stderr": err.getvalue()[-3000:],
        "seconds": seconds,
        "built_in_defaults": defaults,
    }


def main(spec_path: str, results_path: str) -> int:
    results = {
        item["id"]: run(item["project"], item["package"], item["args"])
        for item in json.loads(Path(spec_path).read_text())
    }
    Path(results_path).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
