"""How many planted mistakes ``torch-scaffold check`` catches in hand-written scripts, and what else it reports.

Each script in ``planted_mistakes/`` is a small training, evaluation or model
file as people write them, with its mistakes marked where the finding belongs:
``# planted: TSC109`` (several codes comma-separated; anything after them in
parentheses is a note). Every other line is meant to be clean. The check runs
as users run it (the console script, one process over the folder), and the
script prints, per code: planted, caught, missed and false positives (a
finding on an unmarked line, or one more than was planted there).

``--template PATH`` (repeatable) scores another checkout's check too, e.g.
``--template /path/to/checkout-at-v0.12.2`` for the figures before a change:
its ``generator/`` is imported in place of this one's.

    .venv/bin/python benchmarks/lint_accuracy.py [--template PATH ...] [--out .bench/lint_accuracy.json]

``--quick`` scores this checkout alone (it takes seconds either way); the test suite calls it so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "planted_mistakes"
PLANTED = re.compile(r"#\s*planted:\s*([A-Z]{3}\d{3}(?:\s*,\s*[A-Z]{3}\d{3})*)")
FINDING = re.compile(r"^(?P<path>.+?):(?P<line>\d+):\d+: (?P<code>[A-Z]{3}\d{3}) ")

Mark = tuple[str, int, str]  # (file name, line, code)


def planted(folder: Path) -> Counter[Mark]:
    marks: Counter[Mark] = Counter()
    for path in sorted(folder.glob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if match := PLANTED.search(line):
                marks.update((path.name, number, code.strip()) for code in match.group(1).split(","))
    return marks


def findings(folder: Path, template: Path | None) -> Counter[Mark]:
    """What ``torch-scaffold check`` prints for ``folder``, with ``template``'s generator/ when given."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as shim:
        if template is not None:  # import torch_scaffold from that checkout: its folder is generator/
            (Path(shim) / "torch_scaffold").symlink_to(template.resolve() / "generator")
            env["PYTHONPATH"] = os.pathsep.join([shim, env.get("PYTHONPATH", "")])
        command = [sys.executable, "-c", "import sys; from torch_scaffold.cli import main; sys.exit(main())"]
        result = subprocess.run([*command, "check", str(folder)], capture_output=True, text=True, env=env)
    found: Counter[Mark] = Counter()
    for line in result.stdout.splitlines():
        if match := FINDING.match(line):
            found[(Path(match["path"]).name, int(match["line"]), match["code"])] += 1
    return found


def score(expected: Counter[Mark], found: Counter[Mark]) -> dict[str, dict[str, int]]:
    """Per code: planted, caught, missed, false positives; and the totals under "all"."""
    caught, missed, false = expected & found, expected - found, found - expected
    codes = sorted({code for _, _, code in expected + found})
    rows = {}
    for code in [*codes, "all"]:

        def count(marks: Counter[Mark], code: str = code) -> int:
            return sum(n for (_, _, c), n in marks.items() if code in ("all", c))

        rows[code] = {"planted": count(expected), "caught": count(caught), "missed": count(missed),
                      "false": count(false)}  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", type=Path, action="append", default=[], help="another checkout to score")
    parser.add_argument("--quick", action="store_true", help="this checkout alone")
    parser.add_argument("--out", type=Path, help="write the scores as JSON here")
    args = parser.parse_args()
    expected = planted(FIXTURES)
    files = len(list(FIXTURES.glob("*.py")))
    print(f"{files} scripts, {sum(expected.values())} planted mistakes")
    results = {}
    for label, template in [("this checkout", None), *((str(t), t) for t in ([] if args.quick else args.template))]:
        found = findings(FIXTURES, template)
        rows = score(expected, found)
        results[label] = {"rows": rows, "missed": sorted(expected - found), "false": sorted(found - expected)}
        print(f"\n{label}\n| code | planted | caught | missed | false positives |\n|---|---:|---:|---:|---:|")
        for code, row in rows.items():
            print(f"| {code} | {row['planted']} | {row['caught']} | {row['missed']} | {row['false']} |")
        for kind in ("missed", "false"):
            for name, line, code in results[label][kind]:
                print(f"  {kind}: {name}:{line} {code}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
