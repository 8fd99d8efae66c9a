"""Flow beside its peers, the same workloads in one run: DBOS (SQLite system database),
LangGraph (its SQLite checkpointer) and Temporal (its Replayer; no server runs offline).

    python scripts/bench/peers.py [--rounds 5] [--steps 1000] [--replay-steps 3000] [--fan 100]
                                  [--workflows 100] [--venv DIR] [--quick]

The peers are installed into a virtual environment of their own (created on first use, by
default under ~/.cache/flow-bench/peers) from the package registry. Every figure is measured in
a fresh process (peer_workloads.py) as the steady state per step, and the rounds interleave the
systems, so that each ratio pairs figures taken on the same machine at the same time: each round
runs every workload of every system quiet, then again with a CPU hog (one busy process, started
and stopped here) beside it. Printed: medians over the rounds, in microseconds per step, and each
peer's cost divided by Flow's (above 1: Flow is cheaper); workflows of one step are per workflow,
each its own run (for Flow: its sandbox child, forked from the child template, and its history).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = ["dbos>=3.4", "langgraph>=1.2", "langgraph-checkpoint-sqlite>=3.1", "temporalio>=1.35"]
SYSTEMS = ("flow", "dbos", "langgraph", "temporal")
WORKLOADS = {
    "steps": "sequential durable steps",
    "replay": "recovery / replay of a finished history",
    "fanout": "concurrent steps (fan-out)",
    "workflows": "workflows of one step, one after another",
}
HOG = "while True: pass"


def peers_python(venv: Path) -> str:
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PEERS], check=True)
    return str(python)


def measure(python: str, system: str, workload: str, n: int) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        done = subprocess.run([python, str(HERE / "peer_workloads.py"), system, workload, str(n), directory],
                              capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{system} {workload} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--rounds", type=int, default=5)
    options.add_argument("--steps", type=int, default=1000)
    options.add_argument("--replay-steps", type=int, default=3000)
    options.add_argument("--fan", type=int, default=100)
    options.add_argument("--workflows", type=int, default=100)
    options.add_argument("--venv", type=Path, default=Path.home() / ".cache" / "flow-bench" / "peers")
    options.add_argument("--quick", action="store_true", help="One round of smaller workloads.")
    args = options.parse_args()
    if args.quick:
        # (a fan-out of 50 is within one round's noise: its steady figure came out negative)
        args.rounds, args.steps, args.replay_steps, args.fan, args.workflows = 1, 200, 600, 200, 30
    pythons = {"flow": sys.executable}
    peer = peers_python(args.venv)
    pythons.update({system: peer for system in SYSTEMS if system != "flow"})
    sizes = {"steps": args.steps, "replay": args.replay_steps, "fanout": args.fan, "workflows": args.workflows}
    figures: dict[tuple, list[float]] = {}
    why: dict[tuple, str] = {}
    for round_ in range(args.rounds):
        for load in ("quiet", "one core busy"):
            hog = subprocess.Popen([sys.executable, "-c", HOG]) if load != "quiet" else None
            try:
                order = SYSTEMS if round_ % 2 == 0 else tuple(reversed(SYSTEMS))
                for workload, n in sizes.items():
                    for system in order:
                        result = measure(pythons[system], system, workload, n)
                        if result["us"] is None:
                            why[(system, workload)] = result["why"]
                        else:
                            figures.setdefault((system, workload, load), []).append(result["us"])
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
        print(f"round {round_ + 1} of {args.rounds} done", file=sys.stderr)
    print(f"medians of {args.rounds} interleaved rounds, microseconds per step "
          f"(steps {args.steps}, replay {args.replay_steps}, fan-out {args.fan}; per workflow of one step, "
          f"{args.workflows} of them); peer / Flow in brackets")
    print(f"{'workload':44} {'load':14} " + " ".join(f"{s:>18}" for s in SYSTEMS))
    for workload, title in WORKLOADS.items():
        for load in ("quiet", "one core busy"):
            flow = figures.get(("flow", workload, load))
            base = statistics.median(flow) if flow else None
            if base is not None and base <= 0:
                base = None  # a steady-state difference lost in the noise: no ratio against it
            cells = []
            for system in SYSTEMS:
                values = figures.get((system, workload, load))
                if not values:
                    cells.append(f"{'-':>18}")
                    continue
                median = statistics.median(values)
                if median <= 0:  # T(n) - T(1) at or below zero: n steps cost less than the noise
                    cells.append(f"{'below noise':>18}")
                    continue
                ratio = f" ({median / base:.1f}x)" if base and system != "flow" else ""
                cells.append(f"{median:>10.0f}{ratio:>8}")
            print(f"{title:44} {load:14} " + " ".join(cells))
    for (system, workload), reason in sorted(why.items()):
        print(f"- {system} {workload}: {reason}")


if __name__ == "__main__":
    main()
