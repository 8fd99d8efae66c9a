"""Fan-out: 1,000 tasks each making one Tool call (task.all over list.map), through the Python
API, without fsync and with fsync, interleaved round by round (the disk and the machine's load
drift): time per task (start-up included) and the ratio fsync / none, median over the rounds
of each round's own ratio. The goal (issue 19, item 3) is fsync <= 1.3x none: the Calls the
tasks place at one step, and replies that arrive together, share a sync (group commit).

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


def fan_out(path: Path, tasks: int, runs_dir: str, durability: str) -> float:
    host = flowrt.Host({"tasks.work": lambda n: n}, runs_dir=runs_dir, durability=durability)
    start = time.perf_counter()
    outcome = host.run(str(path), {"n": tasks})
    elapsed = time.perf_counter() - start
    assert outcome.exit_code == 0, outcome
    return elapsed


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--tasks", type=int, default=1000)
    options.add_argument("--runs", type=int, default=3)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "tasks.flow"
        path.write_text(PROGRAM)
        runs_dir = str(Path(directory) / "runs")
        fan_out(path, 1, runs_dir, "none")  # imports and the build cache, once
        times: dict[str, list[float]] = {"none": [], "fsync": []}
        ratios = []
        for _ in range(args.runs):
            for durability in ("none", "fsync"):
                times[durability].append(fan_out(path, args.tasks, runs_dir, durability))
            ratios.append(times["fsync"][-1] / times["none"][-1])
        for durability, values in times.items():
            total = statistics.median(values)
            print(f"{args.tasks} tasks, one call each ({durability}): {total:.2f} s, "
                  f"{total / args.tasks * 1e6:.0f} us per task (start-up included)")
        print(f"fsync / none: {statistics.median(ratios):.2f}x (median of {args.runs} paired rounds; goal <= 1.3x)")


if __name__ == "__main__":
    main()
