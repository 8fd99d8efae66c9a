"""A recorded call on PostgreSQL beside the run directory, through `flow run --store URL`.

1,000 sequential calls of a trivial Tool (a Python Tool process bound in flow.toml, answering
its argument) in one `flow run`, against a run directory and against a PostgreSQL cluster
started here (tests/pg_cluster.py's, on a Unix socket, with fsync on: commits durable as in
production). Per-call cost is the steady state: (run of N calls - run of 1 call) / (N - 1), so
start-up (checking, binding, the sandbox child, connecting) is left out. Runs alternate between
the stores so both see the same machine; medians of `--runs`.

    python scripts/bench/pg_calls.py [--calls 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.pg_cluster import Cluster  # noqa: E402

PROGRAM = """
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = loop(n, 0)

flow loop(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }
"""

TOOL = """from flowrt.toolkit import serve

if __name__ == "__main__":
    serve({"echo.echo": lambda n: n}, declared_in="echo.flow")
"""


def flow_run(directory: str, location: str, calls: int) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "run", os.path.join(directory, "echo.flow"),
                           "--allow", "--store", location, "--input", f'{{"n": {calls}}}'],
                          capture_output=True, text=True, cwd=directory, timeout=600)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"flow run failed ({done.returncode}): {done.stderr}")
    return elapsed


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--calls", type=int, default=1000)
    options.add_argument("--runs", type=int, default=3)
    args = options.parse_args()
    cluster = Cluster(fsync=True)
    try:
        from flowrt.store.postgres_schema import init_schema

        init_schema(cluster.url)
        with tempfile.TemporaryDirectory() as directory:
            Path(directory, "echo.flow").write_text(PROGRAM)
            Path(directory, "echo_tool.py").write_text(TOOL)
            Path(directory, "flow.toml").write_text('[tools]\n"echo" = { python = "echo_tool.py" }\n')
            stores = {"directory": os.path.join(directory, "runs"), "postgresql": cluster.url}
            for location in stores.values():
                flow_run(directory, location, 1)  # the build cache and the approval, once
            steady: dict[str, list[float]] = {name: [] for name in stores}
            for _ in range(args.runs):
                for name, location in stores.items():
                    many = flow_run(directory, location, args.calls)
                    one = flow_run(directory, location, 1)
                    steady[name].append((many - one) / (args.calls - 1))
            per_call = {name: statistics.median(times) for name, times in steady.items()}
            for name, seconds in per_call.items():
                print(f"recorded call, {name:10}: {seconds * 1e6:8.0f} µs per call (steady state, "
                      f"median of {args.runs} runs of {args.calls} calls)")
            print(f"postgresql / directory: {per_call['postgresql'] / per_call['directory']:.2f}x")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
