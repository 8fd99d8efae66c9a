"""What a host holds while its runs are live: memory and the cyclic collector's pauses.

A host drives runs of the echo loop of `recorded_calls.py` through `flowrt.Host.start(...,
detach=True)`, without fsync, and reports for each tree:

- one run of `--calls` calls: the host's peak resident memory above what it held before the run
  (`VmHWM` after `/proc/self/clear_refs`), and calls/s;
- `--runs` runs of `--many-calls` calls at once: calls/s, and the collector's total time and
  longest pause (`gc.callbacks`), by generation.

Each figure is taken in a fresh process of the tree measured, the trees alternating and taking
turns going first (`--against` another checkout); medians of `--rounds`.

    python scripts/bench/live_memory.py [--calls 50000] [--runs 20] [--many-calls 3000]
        [--rounds 3] [--against /tmp/before]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]

# Run in the measured tree's own process (argv: tree, runs, calls).
_MEASURE = r"""
import gc, json, os, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
sys.path.insert(1, os.path.join(sys.argv[1], "scripts", "bench"))
import flowrt
from recorded_calls import PROGRAM

runs, calls = int(sys.argv[2]), int(sys.argv[3])

def status(field):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise LookupError(field)

pauses = {0: [], 1: [], 2: []}
began = {}
def timed(phase, info):
    if phase == "start":
        began["at"] = time.perf_counter()
    else:
        pauses[info["generation"]].append(time.perf_counter() - began.pop("at"))

with tempfile.TemporaryDirectory() as directory:
    program = os.path.join(directory, "echo.flow")
    with open(program, "w") as handle:
        handle.write(PROGRAM)
    host = flowrt.Host({"echo.echo": lambda n: n}, runs_dir=os.path.join(directory, "runs"),
                       durability="none")
    def drive(count, at_once):
        handles = [host.start(program, {"n": count}, detach=True) for _ in range(at_once)]
        results = [handle.wait(timeout=1200) for handle in handles]
        assert [r.exit_code for r in results] == [0] * at_once, results
    for _ in range(3):  # imports, the build cache and the child template
        drive(1, 1)
    gc.collect()
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # the peak resident size starts again from here
    before = status("VmRSS")
    gc.callbacks.append(timed)
    start = time.perf_counter()
    drive(calls, runs)
    wall = time.perf_counter() - start
    gc.callbacks.remove(timed)
    peak = status("VmHWM")
print(json.dumps({
    "calls_per_s": runs * calls / wall,
    "peak_mb": (peak - before) / 1e6,
    "gc_ms": {g: sum(p) * 1e3 for g, p in pauses.items()},
    "gc_count": {g: len(p) for g, p in pauses.items()},
    "gc_max_ms": max((max(p) for p in pauses.values() if p), default=0.0) * 1e3,
}))
"""


def measure(tree: str, runs: int, calls: int) -> dict:
    done = subprocess.run([sys.executable, "-c", _MEASURE, tree, str(runs), str(calls)],
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50_000, help="calls of the one long run")
    parser.add_argument("--runs", type=int, default=20, help="runs at once")
    parser.add_argument("--many-calls", type=int, default=3000, help="calls of each of those runs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", help="another checkout, measured in the same rounds")
    args = parser.parse_args()
    trees = {"after": str(ROOT)}
    if args.against:
        trees = {"before": os.path.abspath(args.against), "after": str(ROOT)}
    shapes = {"one long run": (1, args.calls), f"{args.runs} runs at once": (args.runs, args.many_calls)}
    taken: dict[tuple[str, str], list[dict]] = {}
    for round_index in range(args.rounds):
        names = list(trees)
        if round_index % 2:
            names.reverse()
        for shape, (runs, calls) in shapes.items():
            for name in names:
                taken.setdefault((shape, name), []).append(measure(trees[name], runs, calls))
    load = os.getloadavg()[0]
    print(f"medians of {args.rounds} rounds; load average at the end {load:.1f} on {os.cpu_count()} CPUs")
    for shape, (runs, calls) in shapes.items():
        print(f"  {shape} ({runs} x {calls} calls, no fsync)")
        for name in trees:
            rows = taken[(shape, name)]
            med = lambda pick: statistics.median(pick(row) for row in rows)  # noqa: E731
            gc_ms = "/".join(f"{med(lambda r, g=g: r['gc_ms'][g]):.0f}" for g in "012")
            counts = "/".join(f"{med(lambda r, g=g: r['gc_count'][g]):.0f}" for g in "012")
            print(f"    {name:>6}: {med(lambda r: r['calls_per_s']):8.0f} calls/s"
                  f"  peak +{med(lambda r: r['peak_mb']):6.1f} MB"
                  f"  collections {counts} taking {gc_ms} ms, longest {med(lambda r: r['gc_max_ms']):.1f} ms")


if __name__ == "__main__":
    main()
