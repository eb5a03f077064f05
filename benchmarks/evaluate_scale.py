"""``evaluate``'s report step at 100, 1,000 and 20,000 classes: seconds and peak memory, this checkout against
an older ref (issue 57).

The report step is what ``evaluate`` does once the model has run over the split: count the (true, predicted)
pairs, print the per-class table and write its CSV (and, since 0.13, the confusion counts), list the most-confused
pairs, draw the confusion picture. The predictions are synthetic (no model, no images): ``--per-class`` images a
class, 70% right, the rest taken for one of the next five classes.

    .venv/bin/python benchmarks/evaluate_scale.py [--classes 100 1000 20000] [--before f390c41]
        [--cap-gb 8] [--out .bench/evaluate_scale.json]

Each measurement runs in a process of its own, so that its peak resident memory is its own (printed as its growth
over the process with torch, the package and matplotlib imported), under a cap on its address space (``--cap-gb``
above that process): a step that would take more fails with MemoryError, named in the table, instead of swapping
the machine. ``--quick`` (10 and 100 classes, this checkout only) checks that the benchmark still runs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from copier import run_copy

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "scale_pkg"
STEPS = ("count", "table", "pairs", "picture")


def generate(dest: Path, ref: str | None) -> Path:
    """A project of this checkout (``ref`` None: HEAD and its uncommitted changes) or of ``ref``; its src/."""
    data = {"project_name": "Scale", "package_name": PACKAGE}
    if ref is None:
        run_copy(str(REPO), dest, data=data, defaults=True, unsafe=True, quiet=True, vcs_ref="HEAD")
        return dest / "src"
    template = dest.with_name(dest.name + "-template")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(template, filter="data")
    run_copy(str(template), dest, data=data, defaults=True, unsafe=True, quiet=True)  # a plain folder: as it is
    return dest / "src"


def address_space() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(src: Path, classes: int, per_class: int, cap_gb: float, out: Path) -> dict[str, Any]:
    """In this process (started for it): the report step on synthetic predictions, step by step."""
    sys.path.insert(0, str(src))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.backends.backend_agg  # imported before the baseline: not the report's cost
    import matplotlib.figure
    import torch

    report = __import__(f"{PACKAGE}.outputs.evaluation_report", fromlist=["report_extras"])
    __import__(f"{PACKAGE}.outputs.plots")
    engine = __import__(f"{PACKAGE}.training.engine", fromlist=["evaluate"])
    new = hasattr(report, "write_matrix")  # 0.13's report: the counts as pairs, and a CSV of them
    names = [f"class_{index:05d}" for index in range(classes)]
    generator = torch.Generator().manual_seed(0)
    true = torch.arange(classes).repeat_interleave(per_class)
    wrong = torch.rand(len(true), generator=generator) >= 0.7
    predicted = torch.where(wrong, (true + torch.randint(1, 6, true.shape, generator=generator)) % classes, true)
    codes = true * classes + predicted
    cap = address_space() + int(cap_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    before = peak_mb()
    row: dict[str, Any] = {"version": "after" if new else "before", "classes": classes, "images": len(codes)}
    seconds: dict[str, float] = {}
    printed = io.StringIO()
    picture = out / "confusion.png"
    steps = {
        "count": lambda: (
            engine.count_confusion(codes, classes)
            if new
            else torch.bincount(codes, minlength=classes**2).view(classes, classes)  # 0.12's count, as it was
        ),
        "table": lambda confusion: (
            report.report_extras(confusion, names, out / "per_class.csv", out / "counts.csv")
            if new
            else report.report_extras(confusion, names, out / "per_class.csv", None)  # 0.12: the 4th is the picture
        ),
        "pairs": lambda confusion: report.format_confused(confusion, names),
        "picture": lambda confusion: report.save_confusion(confusion, names, picture),
    }
    confusion = None
    try:
        with contextlib.redirect_stdout(printed):
            for step in STEPS:
                start = time.perf_counter()
                if step == "count":
                    confusion = steps[step]()
                else:
                    print(steps[step](confusion))
                seconds[step] = round(time.perf_counter() - start, 3)
    except (MemoryError, ValueError, RuntimeError) as exc:  # the cap reached, or matplotlib's refusal
        said = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ""
        row["failed"] = f"{step}: {type(exc).__name__}" + (f" ({said})" if said else "")
    row["seconds"] = seconds
    row["total_s"] = round(sum(seconds.values()), 3)
    row["peak_growth_mb"] = round(peak_mb() - before, 1)
    row["printed_lines"] = len(printed.getvalue().splitlines())
    if picture.is_file():
        from PIL import Image

        with Image.open(picture) as image:
            row["picture_megapixels"] = round(image.width * image.height / 1e6, 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, nargs="+", default=[100, 1000, 20_000])
    parser.add_argument("--per-class", type=int, default=20, help="synthetic images a class (default 20)")
    parser.add_argument("--before", metavar="REF", help="also measure this git ref (e.g. f390c41, before issue 57)")
    parser.add_argument("--cap-gb", type=float, default=8.0, help="address space a measurement may add (GB)")
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "evaluate_scale.json")
    parser.add_argument("--quick", action="store_true", help="10 and 100 classes, this checkout: checks it runs")
    parser.add_argument("--one", nargs=3, metavar=("SRC", "CLASSES", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child: one measurement, one JSON line
        src, classes, folder = args.one
        print(json.dumps(measure(Path(src), int(classes), args.per_class, args.cap_gb, Path(folder))))
        return
    if args.quick:
        args.classes, args.before = [10, 100], None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        versions = [("after", generate(Path(tmp) / "after", None))]
        if args.before:
            versions.insert(0, ("before", generate(Path(tmp) / "before", args.before)))
        for classes in args.classes:
            for name, src in versions:
                folder = Path(tmp) / f"{name}-{classes}"
                folder.mkdir()
                command = [sys.executable, __file__, "--one", str(src), str(classes), str(folder)]
                command += ["--per-class", str(args.per_class), "--cap-gb", str(args.cap_gb)]
                done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
                if done.returncode != 0:  # killed, or a failure the child could not catch
                    tail = (done.stderr.strip().splitlines() or ["?"])[-1][:160]
                    row = {"version": name, "classes": classes, "failed": f"exit {done.returncode}: {tail}"}
                else:
                    row = json.loads(done.stdout.splitlines()[-1])
                    row["version"] = name
                rows.append(row)
                print(format_row(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"written: {args.out}")


def format_row(row: dict[str, Any]) -> str:
    steps = " ".join(f"{step} {row.get('seconds', {}).get(step, '-')}" for step in STEPS)
    figures = (
        f"total {row.get('total_s', '-')} s ({steps}), peak +{row.get('peak_growth_mb', '-')} MB, "
        f"{row.get('printed_lines', '-')} lines, picture {row.get('picture_megapixels', '-')} MP"
    )
    failed = f"  FAILED {row['failed']}" if "failed" in row else ""
    return f"{row['version']:>6}  {row['classes']:>6} classes  {row.get('images', '-'):>7} images  {figures}{failed}"


if __name__ == "__main__":
    main()
