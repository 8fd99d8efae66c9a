"""A recorded call on PostgreSQL beside the run directory and beside a DBOS step, through `flow run
--store URL`, with what each costs the server.

1,000 sequential calls of a trivial Tool (a Python Tool process bound in flow.toml, answering
its argument) in one `flow run`, and the same with the Tool bound in-process (`flowrt.Host` with
a Python callable, as a DBOS step is a function in the application's process), against a run
directory and against a PostgreSQL cluster started here (tests/pg_cluster.py's, on a Unix
socket, with fsync on: commits durable as in production). Per-call cost is the steady state: (run of N calls - run of 1 call) / (N - 1), so
start-up (checking, binding, the sandbox child, connecting) is left out. Runs alternate between
the stores so both see the same machine; medians of `--runs`.

Counted per call, the same steady-state way, from the server's own statistics: WAL flushes
(`pg_stat_wal.wal_sync`: the fsyncs a call costs), WAL records, committed transactions
(`pg_stat_database.xact_commit`), and statements (the server's log with `log_statement=all`, in
runs of their own so that logging does not slow the timed ones): each statement is one round
trip, as psycopg sends them. With `--dbos` (a virtual environment of DBOS Transact, made on first
use as scripts/bench/workers.py makes it), a workflow of `@DBOS.step`s on the same server is
timed and counted the same way, in the same run: a round of DBOS after each round of Flow's, so
that each pair saw the same machine (the ratio is given per round, paired, and of the medians).

    python scripts/bench/pg_calls.py [--calls 1000] [--runs 3] [--dbos]
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

import psycopg  # noqa: E402

PROGRAM = """
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = loop(n, 0)

flow loop(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }
"""

TOOL = """from flowrt.toolkit import serve

if __name__ == "__main__":
    serve({"echo.echo": lambda n: n}, declared_in="echo.flow")
"""

#: the server's counters a call costs; `statements` is counted from the server's log
COUNTERS = ("wal_sync", "wal_records", "xact_commit", "statements")


def server_counters(url: str, log: str | None = None) -> dict[str, int]:
    """The cluster's WAL counters and the database's commits now (this query's own commit is
    read-only and flushes nothing), and with `log`, the statements the server has logged."""
    with psycopg.connect(url, autocommit=True) as conn:
        sync, records = conn.execute("SELECT wal_sync, wal_records FROM pg_stat_wal").fetchone()
        # pg_stat_database is updated when a backend reports, at the latest when it exits
        commits = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()[0]
    counted = {"wal_sync": sync, "wal_records": records, "xact_commit": commits}
    if log is not None:
        with open(log, errors="replace") as handle:
            counted["statements"] = sum(1 for line in handle if "LOG:  statement: " in line or "LOG:  execute " in line)
    return counted


def _timed(arguments: list[str], directory: str, what: str) -> float:
    """Seconds a Python process with `arguments` took, start-up included; it must succeed."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *arguments], capture_output=True, text=True, cwd=directory, timeout=600)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{what} failed ({done.returncode}): {done.stderr}")
    return elapsed


def flow_run(directory: str, location: str, calls: int) -> float:
    return _timed(["-m", "flowrt.cli", "run", os.path.join(directory, "echo.flow"), "--allow", "--store", location,
                   "--input", f'{{"n": {calls}}}'], directory, "flow run")


# The same program with `echo` bound in the application's process (`flowrt.Host(tools)`), as a
# DBOS step is a function of the application's process: the same kind of step on both sides.
HOSTED = """import sys, flowrt
host = flowrt.Host({"echo.echo": lambda n: n}, runs=sys.argv[2], allow=True)
done = host.run(sys.argv[1], {"n": int(sys.argv[3])})
sys.exit(0 if done.output == int(sys.argv[3]) * (int(sys.argv[3]) + 1) // 2 else 1)
"""


def hosted_run(directory: str, location: str, calls: int) -> float:
    """`flow_run`'s figure for a process that runs the program through `flowrt.Host` with `echo`
    bound in-process (no Tool process)."""
    return _timed(["-c", HOSTED, os.path.join(directory, "echo.flow"), location, str(calls)], directory,
                  "the hosted run")


def counted_run(directory: str, url: str, calls: int, log: str | None) -> dict[str, int]:
    before = server_counters(url, log)
    flow_run(directory, url, calls)
    time.sleep(0.6)  # the statistics collector's report of the run's backends (PGSTAT_MIN_INTERVAL)
    after = server_counters(url, log)
    return {name: after[name] - before[name] for name in after}


def per_call(many: dict[str, int], one: dict[str, int], calls: int) -> dict[str, float]:
    return {name: (many[name] - one[name]) / (calls - 1) for name in many}


def flow_counts(cluster, directory: str, calls: int) -> dict[str, float]:
    """WAL, commits and statements per recorded call (steady state), the statements counted in
    runs of their own with every statement logged."""
    url = cluster.url
    wal = per_call(counted_run(directory, url, calls, None), counted_run(directory, url, 1, None), calls)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER DATABASE flow SET log_statement = 'all'")
    try:
        logged = per_call(counted_run(directory, url, calls, cluster.log), counted_run(directory, url, 1, cluster.log),
                          calls)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER DATABASE flow RESET log_statement")
    return {**wal, "statements": logged["statements"]}


def describe(counts: dict[str, float]) -> str:
    return ", ".join(f"{name} {counts[name]:.2f}" for name in COUNTERS if name in counts)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--calls", type=int, default=1000)
    options.add_argument("--runs", type=int, default=3)
    options.add_argument("--count-calls", type=int, default=300, help="calls in the counted runs")
    options.add_argument("--dbos", action="store_true", help="also a DBOS step on the same server")
    options.add_argument("--venv", type=Path, default=Path.home() / ".cache" / "flow-bench" / "dbos-pg")
    args = options.parse_args()
    from tests.pg_cluster import Cluster  # here: the DBOS environment imports this module without pytest

    cluster = Cluster(fsync=True)
    try:
        from flowrt.store.postgres_schema import init_schema

        init_schema(cluster.url)
        with tempfile.TemporaryDirectory() as directory:
            Path(directory, "echo.flow").write_text(PROGRAM)
            Path(directory, "echo_tool.py").write_text(TOOL)
            Path(directory, "flow.toml").write_text('[tools]\n"echo" = { python = "echo_tool.py" }\n')
            stores = {"directory": os.path.join(directory, "runs"), "postgresql": cluster.url}
            # name -> (how a run is made, where it is kept)
            ways = {name: (flow_run, location) for name, location in stores.items()}
            ways["postgresql, in-process"] = (hosted_run, cluster.url)
            for make, location in ways.values():
                make(directory, location, 1)  # the build cache and the approval, once
            steady: dict[str, list[float]] = {name: [] for name in ways}
            runner = None
            if args.dbos:
                from scripts.bench.workers import dbos_python, dbos_runner, dbos_step

                runner = dbos_runner(dbos_python(args.venv), cluster, Path(directory))
            dbos_rounds: list[float] = []  # µs per step, one figure per round, beside Flow's
            for _ in range(args.runs):
                for name, (make, location) in ways.items():
                    many = make(directory, location, args.calls)
                    one = make(directory, location, 1)
                    steady[name].append((many - one) / (args.calls - 1))
                if runner is not None:
                    dbos_rounds.append(runner(str(args.calls), "1")["us"])
            dbos = None
            if runner is not None:
                dbos = dbos_step("", cluster, args.calls, 0, Path(directory), count_steps=args.count_calls,
                                 dbos=runner)
                dbos["us"] = statistics.median(dbos_rounds)
                # paired: each round's DBOS figure over the Flow figure of the same round
                ratios = sorted(d / (f * 1e6) for d, f in zip(dbos_rounds, steady["postgresql"]))
                hosted_ratios = sorted(d / (f * 1e6) for d, f in zip(dbos_rounds, steady["postgresql, in-process"]))
            medians = {name: statistics.median(times) for name, times in steady.items()}
            for name, seconds in medians.items():
                print(f"recorded call, {name:22}: {seconds * 1e6:8.0f} µs per call (steady state, "
                      f"median of {args.runs} runs of {args.calls} calls)")
            print(f"postgresql / directory: {medians['postgresql'] / medians['directory']:.2f}x")
            counts = flow_counts(cluster, directory, args.count_calls)
            print(f"per recorded call on postgresql: {describe(counts)}")
            if dbos is not None:
                print(f"DBOS step, same server: {dbos['us']:8.0f} µs per step (median of {args.runs} runs of "
                      f"{args.calls} steps); per step: {describe(dbos)}")
                print(f"dbos / flow: {dbos['us'] / (medians['postgresql'] * 1e6):.2f}x of the medians; per round "
                      f"(paired) median {statistics.median(ratios):.2f}x, {ratios[0]:.2f}-{ratios[-1]:.2f}x "
                      "(above 1: Flow is cheaper)")
                print(f"dbos / flow with echo in-process (both a function of the application's process): per round "
                      f"(paired) median {statistics.median(hosted_ratios):.2f}x, {hosted_ratios[0]:.2f}-"
                      f"{hosted_ratios[-1]:.2f}x")
                dbos["rounds_us"], dbos["ratios"], dbos["in_process_ratios"] = dbos_rounds, ratios, hosted_ratios
            print(json.dumps({"flow_us": medians["postgresql"] * 1e6, "directory_us": medians["directory"] * 1e6,
                              "in_process_us": medians["postgresql, in-process"] * 1e6,
                              "flow": counts, "dbos": dbos}))
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
