"""Where ``make test``'s CPU goes: a pytest plugin that writes each test's CPU-seconds to a file.

Wall-clock durations (``--durations``) mislead on a shared 2-core machine: a test waits for a core as long as it
computes. CPU time does not: each test's own process time plus that of every process it started and waited for
(``os.times``' children fields count a whole finished tree: a generated suite's workers, torchrun's ranks). Load
it with ``-p tests.cpu_accounting`` here, or ``-p cpu_accounting`` with this folder on PYTHONPATH for a generated
project's suite, and name the file in ``CPU_ACCOUNTING``; every xdist worker appends to it. ``python
tests/cpu_accounting.py FILE`` sums it (benchmarks/README.md, "Where make test's time goes", shows a table).
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest


def _cpu() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """Setup, call and teardown together: a session fixture's cost lands on the first test that needs it."""
    start = _cpu()
    result = yield
    target = os.environ.get("CPU_ACCOUNTING")
    if target:
        with open(target, "a") as out:  # one short line a write: xdist workers' lines do not interleave
            out.write(f"{_cpu() - start:.2f}\t{item.nodeid}\n")
    return result


def summarise(lines: list[str], top: int = 25) -> str:
    """Per file and the costliest tests, as a Markdown table."""
    per_test = [(float(cpu), nodeid) for cpu, nodeid in (line.split("\t", 1) for line in lines if "\t" in line)]
    per_file: dict[str, float] = defaultdict(float)
    for cpu, nodeid in per_test:
        per_file[nodeid.split("::")[0]] += cpu
    total = sum(cpu for cpu, _ in per_test)
    rows = [f"{len(per_test)} tests, {total:.0f} CPU-seconds", "", "| file | CPU-s | share |", "|---|---:|---:|"]
    rows += [
        f"| {name} | {cpu:.0f} | {100 * cpu / total:.0f} % |"
        for name, cpu in sorted(per_file.items(), key=lambda kv: -kv[1])
    ]
    rows += ["", "| test | CPU-s |", "|---|---:|"]
    rows += [f"| {nodeid.strip()} | {cpu:.1f} |" for cpu, nodeid in sorted(per_test, reverse=True)[:top]]
    return "\n".join(rows)


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1]).read_text().splitlines()))
