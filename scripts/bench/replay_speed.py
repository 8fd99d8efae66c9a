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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from recorded_calls import PROGRAM  # noqa: E402  (the same loop of echo calls)

from flowrt.replay import replay  # noqa: E402
from flowrt.run import run  # noqa: E402


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--calls", type=int, default=10_000)
    options.add_argument("--runs", type=int, default=3)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        program = Path(directory) / "echo.flow"
        program.write_text(PROGRAM)
        runs = os.path.join(directory, "runs")
        outcome = run(str(program), input_text=f'{{"n": {args.calls}}}', runs_dir=runs,
                      python_tools={"echo.echo": lambda n: n}, durability="none", checkpoints="off")
        assert outcome.exit_code == 0
        with open(os.path.join(runs, outcome.run_id, "history.jsonl")) as handle:
            facts = sum(1 for _ in handle)
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            result = replay(runs, outcome.run_id)
            times.append(time.perf_counter() - start)
            assert result.verdict.kind == "Matched", result
        median = statistics.median(times)
        print(f"replay of {facts} facts (no checkpoints): {median:.2f} s, {facts / median:.0f} facts/s")


if __name__ == "__main__":
    main()
