"""History store append throughput: facts/s with durability "none" and "fsync" (one fact per
append, and group commit), each next to a bare Python loop that appends one JSON line per
iteration (write + flush, and + os.fsync for the durable figures), and, for context, the same
loop writing over space it filled with zeros first, as the store does (pwrite + fdatasync).
Medians of several runs.

    python scripts/bench/store_append.py [--facts 20000] [--durable-facts 2000] [--runs 5] [--dir DIR]

The facts are a Call/Reply pair per round with small values (inline), like a tool loop. --dir
chooses the file system measured (default: a temporary directory).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from flowrt.store import RunStore  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bare_reserved import write_over_zeros  # noqa: E402

START = {"program": "sha256:" + "ab" * 32, "std": "std@v1",
         "entry": {"module": "bench", "function": "main"}, "input": {"n": 1}, "modules": []}


def fact_fields(i: int) -> tuple[str, dict]:
    if i % 2 == 0:
        return "Call", {"call": f"root#{i // 2 + 1}", "tool": "planner.next", "fingerprint": "f" * 16,
                        "arguments": {"ticket": "Login fails on Safari", "round": i // 2}}
    return "Reply", {"call": f"root#{i // 2 + 1}", "outcome": {"Ok": {"Search": "safari login cookie"}}}


def store_run(base: str, count: int, durability: str, batch: int) -> float:
    root = tempfile.mkdtemp(dir=base)
    store = RunStore.create(root, "bench", START, durability=durability)
    items = [fact_fields(i) for i in range(count)]
    began = time.perf_counter()
    if batch == 1:
        for kind, fields in items:
            store.append(kind, fields)
    else:
        for at in range(0, count, batch):
            store.append_many(items[at:at + batch])
    elapsed = time.perf_counter() - began
    store.close()
    shutil.rmtree(root)
    return count / elapsed


def bare_run(base: str, count: int, fsync: bool) -> float:
    path = os.path.join(tempfile.mkdtemp(dir=base), "bare.jsonl")
    records = []
    for i in range(count):
        kind, fields = fact_fields(i)
        records.append(dict(fields, n=i + 1, kind=kind))
    began = time.perf_counter()
    with open(path, "ab") as handle:
        for record in records:
            handle.write(orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"\n")
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
    elapsed = time.perf_counter() - began
    shutil.rmtree(os.path.dirname(path))
    return count / elapsed


def bare_reserved_run(base: str, count: int) -> float:
    lines = []
    for i in range(count):
        kind, fields = fact_fields(i)
        lines.append(orjson.dumps(dict(fields, n=i + 1, kind=kind), option=orjson.OPT_SORT_KEYS) + b"\n")
    directory = tempfile.mkdtemp(dir=base)
    elapsed = write_over_zeros(os.path.join(directory, "bare.jsonl"), lines)
    shutil.rmtree(directory)
    return count / elapsed


def paired(runs: int, ours, theirs) -> tuple[float, float, float]:
    """Medians of `runs` interleaved measurements of both, and the median of the paired ratios
    (interleaving keeps a noisy machine from favouring one side)."""
    mine, bare, ratios = [], [], []
    for _ in range(runs):
        a, b = ours(), theirs()
        mine.append(a)
        bare.append(b)
        ratios.append(a / b)
    return statistics.median(mine), statistics.median(bare), statistics.median(ratios)


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--facts", type=int, default=20_000)
    options.add_argument("--durable-facts", type=int, default=2_000)
    options.add_argument("--batch", type=int, default=16)
    options.add_argument("--runs", type=int, default=5)
    options.add_argument("--dir", default=None)
    args = options.parse_args()
    base = tempfile.mkdtemp(dir=args.dir)
    try:
        rows = [
            ("durability=none, append", args.facts,
             lambda: store_run(base, args.facts, "none", 1),
             "bare write+flush", lambda: bare_run(base, args.facts, False)),
            ("durability=fsync, append", args.durable_facts,
             lambda: store_run(base, args.durable_facts, "fsync", 1),
             "bare write+flush+fsync", lambda: bare_run(base, args.durable_facts, True)),
            (f"durability=fsync, append_many({args.batch})", args.durable_facts,
             lambda: store_run(base, args.durable_facts, "fsync", args.batch),
             "bare write+flush+fsync", lambda: bare_run(base, args.durable_facts, True)),
            ("durability=fsync, append", args.durable_facts,
             lambda: store_run(base, args.durable_facts, "fsync", 1),
             "bare, over zeros", lambda: bare_reserved_run(base, args.durable_facts)),
        ]
        print(f"file system of {base}; medians of {args.runs} interleaved runs; "
              f"ratio = median of paired store/bare ratios")
        print(f"{'store':<34} {'facts':>6} {'facts/s':>10}   {'bare loop':<24} {'lines/s':>10} {'ratio':>6}")
        for name, count, measure, bare_name, bare in rows:
            ours, theirs, ratio = paired(args.runs, measure, bare)
            print(f"{name:<34} {count:>6} {ours:>10,.0f}   {bare_name:<24} {theirs:>10,.0f} "
                  f"{ratio:>6.2f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
