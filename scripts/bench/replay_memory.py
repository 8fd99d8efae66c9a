"""What a replay, or a resume, of a long history holds: the host's peak memory and its time.

One history of `--calls` calls of the echo loop of `recorded_calls.py` (a Checkpoint, a Call and a
Reply a call: 3 facts a call), recorded once without fsync with this tree; then
`flowrt.replay.replay` of it from Start in a fresh process of each tree measured, reporting the
process's peak resident memory above what it held before (`VmHWM` after
`/proc/self/clear_refs`) and the replay's seconds. The trees alternate and take turns going first
(`--against` another checkout); medians of `--rounds`.

`--resume`: instead, a run paused after `--calls` calls of resume_cost.py's program (its last
call pending, never archived) is resumed with a reply (`flowrt.replay.resume`) and runs to its
end; each measurement resumes a copy of its own (PostgreSQL: a run recorded for it).

`--postgres`: the history is kept in a PostgreSQL cluster started here (tests/pg_cluster.py's, on
a Unix socket) instead of a run directory.

    python scripts/bench/replay_memory.py [--calls 100000] [--rounds 3] [--against /tmp/before]
        [--postgres] [--resume]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]

# Run in the measured tree's own process (argv: tree, runs directory, run id, "replay" | "resume").
_MEASURE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from flowrt.replay import open_calls, replay, resume
from flowrt.store import open_store

def status(field):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise LookupError(field)

runs, run_id, what = sys.argv[2:5]
if what == "resume":
    sys.path.insert(1, sys.argv[1] + "/scripts/bench")
    from resume_cost import TOOLS as tools  # (the program's Tools, as it was recorded with them)

    with open_store(runs).open(run_id, for_append=False) as paused:
        pending = open_calls(paused)[-1]
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")  # the peak starts again from what the process holds now
before = status("VmRSS")
started = time.perf_counter()
if what == "resume":
    result = resume(runs, run_id, call=pending, reply_text='{"Ok": "yes"}', python_tools=tools, durability="none")
    assert result.exit_code == 0, result
else:
    result = replay(runs, run_id)
    assert result.exit_code == 0 and result.verdict.kind == "Matched", result
seconds = time.perf_counter() - started
print(json.dumps({"memory": status("VmHWM") - before, "seconds": seconds}))
"""


def record(calls: int, runs_dir: str, store: str | None = None, *, paused: bool = False) -> str:
    """The run id of one recorded run of `calls` echo calls (this tree, no fsync), kept in
    `store` (a database URL) or in `runs_dir`/runs; `paused`: resume_cost.py's program, paused
    on its last call."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(1, str(HERE.parent))
    import flowrt
    from recorded_calls import PROGRAM

    if paused:
        from resume_cost import PROGRAM, TOOLS
    else:
        TOOLS = {"echo.echo": lambda n: n}
    program = os.path.join(runs_dir, "prog.flow" if paused else "echo.flow")
    Path(program).write_text(PROGRAM)
    host = flowrt.Host(TOOLS, runs_dir=store or os.path.join(runs_dir, "runs"), durability="none")
    outcome = host.run(program, {"n": calls})
    assert outcome.exit_code == (3 if paused else 0), outcome
    return outcome.run_id


def measure(tree: Path, runs_dir: str, run_id: str, what: str = "replay") -> dict:
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(tree), runs_dir, run_id, what],
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--calls", type=int, default=100_000)
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--against", help="another checkout, measured in the same rounds")
    options.add_argument("--postgres", action="store_true", help="keep the history in PostgreSQL")
    options.add_argument("--resume", action="store_true", help="resume a paused run rather than replay")
    args = options.parse_args()
    cluster = None
    if args.postgres:
        sys.path.insert(0, str(ROOT))
        from tests.pg_cluster import Cluster

        cluster = Cluster()
        from flowrt.store.postgres_schema import init_schema

        init_schema(cluster.url)
    try:
        _measure_all(args, cluster.url if cluster else None)
    finally:
        if cluster is not None:
            cluster.stop()


def _measure_all(args, url: str | None) -> None:
    trees = {"after": ROOT}
    if args.against:
        trees = {"before": Path(args.against).resolve(), **trees}
    figures: dict[str, list[dict]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as directory:
        run_id = record(args.calls, directory, url, paused=args.resume)
        runs_dir = url or os.path.join(directory, "runs")
        size = 0 if url else os.path.getsize(os.path.join(runs_dir, run_id, "history.jsonl"))
        for index in range(args.rounds):
            order = list(trees.items())
            if index % 2:
                order.reverse()
            for name, tree in order:
                if not args.resume:
                    figures[name].append(measure(tree, runs_dir, run_id))
                    continue
                if url:  # (a resume changes its run: each one of its own)
                    figures[name].append(measure(tree, url, record(args.calls, directory, url, paused=True), "resume"))
                    continue
                copy = os.path.join(directory, "copy")
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(runs_dir, copy)
                figures[name].append(measure(tree, copy, run_id, "resume"))
    kept = "PostgreSQL" if url else f"history.jsonl {size / 1e6:.1f} MB"
    what = "resume of a paused run" if args.resume else "replay from Start"
    print(f"{what} of {args.calls:,} calls ({3 * args.calls + 2:,} facts, {kept}), medians of {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}")
    for name, rows in figures.items():
        memory = statistics.median(row["memory"] for row in rows) / 1e6
        seconds = statistics.median(row["seconds"] for row in rows)
        print(f"  {name:>6}: host memory +{memory:7.1f} MB   {seconds:6.2f} s "
              f"({seconds / (3 * args.calls) * 1e6:.1f} µs a fact)")


if __name__ == "__main__":
    main()
