"""What the run directory costs a run's start and end, as `flow run` of hello world uses it: make
the run (two sources, Start), write the start's host records (origin, a binding, the checkpoint
policy), End, the `sandbox` record, close. With fsync; medians of alternating rounds, and the
syncs each tree makes (counted by wrapping os.fsync and os.fdatasync).

Trees side by side (each in a fresh process that imports it; a tree without
`RunLog.host_records_many` writes the records one by one, as `flow run` did):

    python scripts/bench/start_records.py [--rounds 30] [TREE ...]      (default: this checkout)
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
START = {"program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "hello", "function": "main"},
         "input": {}, "modules": []}
RECORDS = [{"kind": "origin", "root": "/tmp/hello.flow"},
           {"kind": "binding", "tool": "m.t", "implementation": "python tools/t.py"},
           {"kind": "checkpoints", "policy": "every"}]
SANDBOX = {"kind": "sandbox", "layers": {"seccomp": {"applied": True, "detail": "x" * 60}}, "missing": []}


def measure(tree: str, root: str, count: int) -> dict:
    sys.path.insert(0, tree)
    from flowrt.store import open_store

    syncs = [0]
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def counted(fd, real=real):
            syncs[0] += 1
            return real(fd)

        setattr(os, name, counted)
    times = []
    for i in range(count):
        started = time.perf_counter()
        store = open_store(root).create(f"r{i}", START, sources=["pub flow main() -> Text = \"hi\"\n", "std"])
        many = getattr(store, "host_records_many", None)
        if many is not None:
            many(RECORDS)
        else:
            for record in RECORDS:
                store.host_record(record)
        store.append("End", {"outcome": {"Completed": "hi"}})
        store.host_record(SANDBOX)
        store.close()
        times.append(time.perf_counter() - started)
    return {"seconds": times, "syncs": syncs[0] / count}


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--rounds", type=int, default=30)
    options.add_argument("--per-round", type=int, default=3)
    options.add_argument("--measure", nargs=3, help=argparse.SUPPRESS)
    options.add_argument("trees", nargs="*", default=[str(ROOT)])
    args = options.parse_args()
    if args.measure:
        tree, root, count = args.measure
        print(json.dumps(measure(tree, root, int(count))))
        return
    results: dict[str, list[float]] = {tree: [] for tree in args.trees}
    syncs: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as directory:
        for round_ in range(args.rounds):
            for i, tree in enumerate(args.trees):
                root = os.path.join(directory, f"{round_}-{i}")
                done = subprocess.run([sys.executable, __file__, "--measure", str(Path(tree).resolve()), root,
                                       str(args.per_round)], capture_output=True, text=True, check=True, cwd=directory)
                figures = json.loads(done.stdout)
                results[tree] += figures["seconds"]
                syncs[tree] = figures["syncs"]
    for tree, seconds in results.items():
        seconds.sort()
        print(f"{tree:40s} median {statistics.median(seconds) * 1000:6.2f} ms  (min {seconds[0] * 1000:.2f}, "
              f"n={len(seconds)}), {syncs[tree]:.0f} syncs")


if __name__ == "__main__":
    main()
