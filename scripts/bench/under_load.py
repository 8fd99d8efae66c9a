"""Recorded calls under load (issue 19, item 1) and at the fsync floor (item 2), side by side.

Each round, interleaved so that every figure sees the same machine:

- a recorded call's steady-state cost ((run of N calls - run of 1 call) / (N - 1), the program of
  recorded_calls.py through the Python API), without fsync and with fsync, first quiet, then with
  a CPU hog this script starts (`python3 -c 'while True: pass'`, pinned nowhere) and stops;
- the bare floor: one line written over reserved zeros and fdatasync'd per call (bare_reserved.py);
- 20 runs at once against one: 20 `flow run`-like processes (each `flowrt.Host.run` in a process
  of its own, as 20 `flow run` commands would be; no fsync), all started together; calls/s is all
  their calls over the wall time from the first start to the last end (start-up included, as for
  the single run measured the same way).

Prints medians over the rounds and one table of ratios against the goals.

    python scripts/bench/under_load.py [--calls 2000] [--rounds 3] [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bare_reserved import write_over_zeros  # noqa: E402
from recorded_calls import PROGRAM  # noqa: E402


def cpu_seconds() -> float:
    """CPU time of this process (the host) and of its reaped children (each run's sandbox child)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def flow_run(calls: int, directory: str, durability: str) -> tuple[float, float]:
    """(start, end) perf_counter times of one live run of `calls` recorded calls."""
    import flowrt

    program = os.path.join(directory, "echo.flow")
    if not os.path.exists(program):
        Path(program).write_text(PROGRAM)
    host = flowrt.Host({"echo.echo": lambda n: n}, runs_dir=os.path.join(directory, "runs"), durability=durability)
    start = time.perf_counter()
    outcome = host.run(program, {"n": calls})
    end = time.perf_counter()
    assert outcome.exit_code == 0, outcome
    return start, end


def per_call(calls: int, directory: str, durability: str) -> tuple[float, float]:
    """Steady-state wall and CPU seconds (host and child together) per recorded call, start-up
    subtracted. CPU is the figure the rest of a shared machine feels: what polling burns."""
    cpu = cpu_seconds()
    start, end = flow_run(calls, directory, durability)
    cpu_many = cpu_seconds() - cpu
    one_start, one_end = flow_run(1, directory, durability)
    cpu_one = cpu_seconds() - cpu - cpu_many
    return ((end - start) - (one_end - one_start)) / (calls - 1), (cpu_many - cpu_one) / (calls - 1)


def floor(calls: int, directory: str) -> float:
    lines = [json.dumps({"n": i, "kind": "Call", "arguments": {"n": i}}).encode() + b"\n" for i in range(calls)]
    return write_over_zeros(os.path.join(directory, "floor.jsonl"), lines) / calls


def concurrent(runs: int, calls: int, directory: str) -> float:
    """Calls/s of `runs` processes each driving one run of `calls` calls, started together."""
    workers = []
    for i in range(runs):
        place = os.path.join(directory, f"w{i}")
        os.makedirs(place, exist_ok=True)
        workers.append(subprocess.Popen([sys.executable, __file__, "--worker", place, str(calls)],
                                        stdout=subprocess.PIPE, text=True))
    spans = []
    for worker in workers:
        out, _ = worker.communicate(timeout=600)
        assert worker.returncode == 0, out
        spans.append(tuple(map(float, out.split())))
    # perf_counter is CLOCK_MONOTONIC on Linux: comparable across processes.
    return runs * calls / (max(e for _, e in spans) - min(s for s, _ in spans))


class Hog:
    """A CPU-bound process beside the run, pinned nowhere, for as long as the `with` lasts."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.2)  # let it reach a CPU and its steady state
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--calls", type=int, default=2000)
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--runs", type=int, default=20)
    options.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = options.parse_args()
    if args.worker:
        start, end = flow_run(int(args.worker[1]), args.worker[0], "none")
        print(start, end)
        return
    synced = args.calls // 2
    figures: dict[str, list[float]] = {}

    def note(name: str, value) -> None:
        if isinstance(value, tuple):
            figures.setdefault(name, []).append(value[0])
            figures.setdefault(name + " cpu", []).append(value[1])
        else:
            figures.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory() as directory:
        flow_run(1, directory, "none")  # imports and the build cache, once
        for _ in range(args.rounds):
            note("quiet none", per_call(args.calls, directory, "none"))
            note("quiet fsync", per_call(synced, directory, "fsync"))
            note("floor", floor(synced, directory))
            with Hog():
                note("busy none", per_call(args.calls, directory, "none"))
                note("busy fsync", per_call(synced, directory, "fsync"))
            note("one run", concurrent(1, args.calls, directory))
            note(f"{args.runs} runs", concurrent(args.runs, args.calls, directory))
    median = {name: statistics.median(values) for name, values in figures.items()}
    us = lambda name: f"{median[name] * 1e6:7.1f} us"  # noqa: E731
    print(f"medians of {args.rounds} interleaved rounds ({args.calls} calls, {synced} with fsync); "
          f"load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"  recorded call, no fsync:  quiet {us('quiet none')}   one core busy {us('busy none')}"
          f"   (CPU per call, host and child: {us('quiet none cpu')} / {us('busy none cpu')})")
    print(f"  recorded call, fsync:     quiet {us('quiet fsync')}   one core busy {us('busy fsync')}"
          f"   (CPU per call, host and child: {us('quiet fsync cpu')} / {us('busy fsync cpu')})")
    print(f"  bare fdatasync per call over reserved space: {us('floor')}")
    print(f"  one run: {median['one run']:8.0f} calls/s   {args.runs} runs at once: "
          f"{median[f'{args.runs} runs']:8.0f} calls/s (each its own process, start-up included)")
    rows = [
        ("busy / quiet, no fsync", median["busy none"] / median["quiet none"], "<= 2.0"),
        ("busy / quiet, fsync", median["busy fsync"] / median["quiet fsync"], "<= 2.0"),
        (f"{args.runs} runs / one run (calls/s)", median[f"{args.runs} runs"] / median["one run"], ">= 1.6"),
        ("fsync call / bare floor", median["quiet fsync"] / median["floor"], "<= 1.25"),
    ]
    print(f"  {'ratio':<34} {'now':>6}   goal")
    for name, ratio, goal in rows:
        print(f"  {name:<34} {ratio:6.2f}x  {goal}")


if __name__ == "__main__":
    main()
