"""PyTorch's exit race, reproduced without this project: how often a finished 2-rank gloo job aborts at exit.

Each run is ``torchrun --standalone --nproc_per_node=2`` of a script that
all-reduces tensors made in Python (asynchronously, as DDP's gradient buckets
are), calls ``barrier`` and ``destroy_process_group``, and exits while a
Python reference still holds the process group (as a DDP module does). A gloo
worker thread then sometimes releases the barrier's work (which holds the
all-reduces' tensors) after the main thread has begun finalizing the
interpreter; the release takes the GIL, CPython exits that thread inside a
noexcept destructor, and the rank dies with ``terminate called without an
active exception`` (SIGABRT): torchrun reports the finished job as failed. A
core dump of a generated project's rank showed that stack
(``ProcessGroupGloo::runLoop`` -> ``~AsyncBarrierWork`` -> ``decref_pyobject``
-> ``gil_scoped_acquire`` -> ``pthread_exit`` -> ``std::terminate``).

The second column ends each rank with ``os._exit`` after the same work, as
the generated project's ``core/distributed.py`` ``end_process`` does under
torchrun. Prints one line per setting: runs, failures, aborts.

    python benchmarks/gloo_exit_race.py [--runs 40] [--out .bench/gloo_exit_race.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

RACE = """
import datetime, os, sys
import torch
import torch.distributed as dist

store, rank, size = next(dist.rendezvous("env://", timeout=datetime.timedelta(seconds=60)))
dist.init_process_group("gloo", store=store, rank=rank, world_size=size)
group = dist.group.WORLD  # held to the end, as a DDP module holds its process group
for _ in range(5):
    works = [dist.all_reduce(torch.ones(256), async_op=True) for _ in range(8)]
    dist.barrier()
    del works
dist.destroy_process_group()
if sys.argv[1] == "os_exit":  # the workaround: no interpreter finalization to race
    sys.stdout.flush()
    os._exit(0)
"""


def run_once(script: Path, ending: str) -> tuple[bool, bool]:
    """(failed, aborted) for one 2-rank job."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script), ending]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    return result.returncode != 0, "terminate called without an active exception" in result.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=40, help="jobs per setting")
    parser.add_argument("--quick", action="store_true", help="one job per setting: does it run (tests)")
    parser.add_argument("--out", type=Path, default=Path(".bench/gloo_exit_race.json"))
    args = parser.parse_args()
    runs, rows = 1 if args.quick else args.runs, []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "race.py"
        script.write_text(RACE)
        for ending in ("interpreter_exit", "os_exit"):
            outcomes = [run_once(script, ending) for _ in range(runs)]
            failed, aborted = sum(f for f, _ in outcomes), sum(a for _, a in outcomes)
            rows.append({"ending": ending, "runs": runs, "failed": failed, "aborted": aborted})
            print(f"{ending:>16}: {runs} runs, {failed} failed, {aborted} aborted at exit", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
