"""1,000 tasks each making one Tool call (task.all over list.map), through the Python API:
time per task, medians of several runs.

    python scripts/bench/many_tasks.py [--tasks 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import flowrt  # noqa: E402

PROGRAM = """
use "std@v1/task"
use "std@v1/list"

@tool pub flow work(n: Int) -> Int

pub flow main(n: Int) -> Int !tool =
    list.fold(task.all(list.map(list.range(0, n), flow(i) = flow() = work(i))), 0, flow(a, b) = a + b)
"""


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--tasks", type=int, default=1000)
    options.add_argument("--runs", type=int, default=3)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "tasks.flow"
        path.write_text(PROGRAM)
        times = []
        for durability in ("none", "fsync"):
            times = []
            for _ in range(args.runs):
                host = flowrt.Host({"tasks.work": lambda n: n}, runs_dir=str(Path(directory) / "runs"),
                                   durability=durability)
                start = time.perf_counter()
                outcome = host.run(str(path), {"n": args.tasks})
                times.append(time.perf_counter() - start)
                assert outcome.exit_code == 0, outcome
            total = statistics.median(times)
            print(f"{args.tasks} tasks, one call each ({durability}): {total:.2f} s, "
                  f"{total / args.tasks * 1e6:.0f} us per task (start-up included)")


if __name__ == "__main__":
    main()
