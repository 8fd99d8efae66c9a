"""Replay speed: a history of N calls (2N facts and a checkpoint per round) replayed with nothing
bound; facts per second, median of several replays.

    python scripts/bench/replay_speed.py [--calls 10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import flowrt  # noqa: E402
from flowrt.replay import replay  # noqa: E402

PROGRAM = """
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = loop(n, 0)

flow loop(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }
"""


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--calls", type=int, default=10_000)
    options.add_argument("--runs", type=int, default=3)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        program = Path(directory) / "echo.flow"
        program.write_text(PROGRAM)
        runs = os.path.join(directory, "runs")
        for policy, label in (("off", "no checkpoints"),):
            host = flowrt.Host({"echo.echo": lambda n: n}, runs_dir=runs, durability="none")
            from flowrt.run import run

            outcome = run(str(program), input_text=f'{{"n": {args.calls}}}', runs_dir=runs,
                          python_tools=host.tools, durability="none", checkpoints=policy)
            assert outcome.exit_code == 0
            facts = sum(1 for _ in open(os.path.join(runs, outcome.run_id, "history.jsonl")))
            times = []
            for _ in range(args.runs):
                start = time.perf_counter()
                result = replay(runs, outcome.run_id)
                times.append(time.perf_counter() - start)
                assert result.verdict.kind == "Matched", result
            median = statistics.median(times)
            print(f"replay of {facts} facts ({label}): {median:.2f} s, {facts / median:.0f} facts/s")


if __name__ == "__main__":
    main()
