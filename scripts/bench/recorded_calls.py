"""One recorded Tool call end to end: sandbox -> host -> in-process Python binding -> Call and Reply
facts written. Reports calls/s without fsync and with fsync, next to a bare Python loop that
appends and fsyncs one JSON line per call; and `flow run` of hello world next to `python -c pass`.
Medians of several runs.

A run's cost is its start-up (checking, the sandbox child's start, the run directory) plus its
calls, so two figures are given for each: calls/s of the whole run of N calls, and the steady
state: (run of N calls - run of 1 call) / (N - 1) per call. The fsync ratio compares steady-state
calls with the bare loop, which has no start-up, measured alternately with the runs so that both
see the same disk. A call writes two facts durably, each before its consequence: the Call before
the call is made, the Reply before the program sees it (the Checkpoint the loop takes every round
goes in the same write as the Call that follows it).

    python scripts/bench/recorded_calls.py [--calls 2000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import flowrt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bare_reserved import write_over_zeros  # noqa: E402

PROGRAM = """
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = loop(n, 0)

flow loop(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }
"""

HELLO = 'pub flow main() -> Text = "hello, world"\n'


def bare_loop(calls: int, directory: str) -> float:
    path = os.path.join(directory, "bare.jsonl")
    start = time.perf_counter()
    with open(path, "ab") as handle:
        for i in range(calls):
            handle.write(json.dumps({"n": i, "kind": "Call", "arguments": {"n": i}}).encode() + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
    return time.perf_counter() - start


def bare_reserved_loop(calls: int, directory: str) -> float:
    lines = [json.dumps({"n": i, "kind": "Call", "arguments": {"n": i}}).encode() + b"\n" for i in range(calls)]
    return write_over_zeros(os.path.join(directory, "bare-reserved.jsonl"), lines)


def flow_calls(calls: int, directory: str, durability: str) -> float:
    program = os.path.join(directory, "echo.flow")
    Path(program).write_text(PROGRAM)
    host = flowrt.Host({"echo.echo": lambda n: n}, runs_dir=os.path.join(directory, "runs"), durability=durability)
    start = time.perf_counter()
    outcome = host.run(program, {"n": calls})
    elapsed = time.perf_counter() - start
    assert outcome.exit_code == 0, outcome
    return elapsed


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--calls", type=int, default=2000)
    options.add_argument("--runs", type=int, default=3)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        flow_calls(1, directory, "none")  # imports and the build cache, once
        none, none_one, fsync, fsync_one, bare, ratios = [], [], [], [], [], []
        reserved_ratios = []
        synced = args.calls // 2  # enough calls that the start-up's own syncs (run(1)) are noise
        for _ in range(args.runs):
            none.append(flow_calls(args.calls, directory, "none"))
            none_one.append(flow_calls(1, directory, "none"))
            # The disk is shared and its fsync latency drifts: each ratio pairs runs made together.
            bare.append(bare_loop(synced, directory) / synced)
            fsync.append(flow_calls(synced, directory, "fsync"))
            fsync_one.append(flow_calls(1, directory, "fsync"))
            ratios.append((fsync[-1] - fsync_one[-1]) / (synced - 1) / bare[-1])
            reserved = bare_reserved_loop(synced, directory) / synced
            reserved_ratios.append((fsync[-1] - fsync_one[-1]) / (synced - 1) / reserved)
        none, none_one = statistics.median(none), statistics.median(none_one)
        fsync, fsync_one = statistics.median(fsync), statistics.median(fsync_one)
        per_bare = statistics.median(bare)
        steady_none = (none - none_one) / (args.calls - 1)
        steady_fsync = (fsync - fsync_one) / (synced - 1)
        ratio = statistics.median(ratios)
        print(f"recorded calls, no fsync:   {args.calls / none:8.0f} calls/s (run of {args.calls} calls, start-up included)")
        print(f"                            {1 / steady_none:8.0f} calls/s steady state "
              f"(start-up {none_one * 1000:.0f} ms)")
        print(f"recorded calls, fsync:      {synced / fsync:8.0f} calls/s (run of {synced} calls, start-up included)")
        print(f"                            {1 / steady_fsync:8.0f} calls/s steady state")
        print(f"bare append+fsync loop:     {1 / per_bare:8.0f} lines/s")
        print(f"ratio fsync call / bare line: {ratio:.2f}x per call, {ratio / 2:.2f}x per fact "
              f"(a call writes two facts, Call and Reply, with one fsync when the Reply is synced with the next Call; median of {args.runs} paired runs)")
        print(f"(context) vs the bare loop over zeroed space: {statistics.median(reserved_ratios):.2f}x per call "
              f"(the store writes over reserved space too)")
        hello = os.path.join(directory, "hello.flow")
        Path(hello).write_text(HELLO)
        runs = os.path.join(directory, "hello-runs")
        flow_times, python_times = [], []
        for _ in range(args.runs + 2):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "flowrt.cli", "run", hello, "--runs", runs], check=True,
                           capture_output=True)
            flow_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            python_times.append(time.perf_counter() - start)
        print(f"flow run hello world:       {statistics.median(flow_times) * 1000:8.0f} ms "
              f"(python -c pass: {statistics.median(python_times) * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
