"""What a child serving several runs costs a call, against a child per run (issue 19, item 1).

Real sandbox children (`flowrt.sandbox_process.Child`, locked down as for a run) run
recorded_calls.py's program; this process stands in for the host and does only what the child
needs of it: it reads each Call and posts its reply at once, no facts, no Tool (so the figures are
the children's side, and the host's pipe work, not a host's bookkeeping). Three arrangements,
interleaved round by round:

- `one run`: one child, one run (the reference: host and child take turns, each polling);
- `N children`: N runs at once, a child each (what a host driving N runs has today);
- `N lanes`: N runs at once in one child, a lane each (sandbox/lanes.py).

Printed per arrangement: calls/s over all runs, and CPU per call of the stand-in host and of the
children (medians of `--rounds`). The steady state is each round's runs of `--calls` calls less
the same arrangement's runs of one call.

    python scripts/bench/child_lanes.py [--runs 20] [--calls 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

from flowrt.kept_child import cpu_seconds_of  # noqa: E402
from flowrt.run import load_message, prepare  # noqa: E402
from flowrt.sandbox_process import Child  # noqa: E402
from recorded_calls import PROGRAM  # noqa: E402


def serve(children: list[Child], loads: list[tuple[Child, dict]]) -> tuple[float, float, float]:
    """Send each load to its child, answer every call at once until every run has ended: wall
    seconds, this process's CPU seconds, the children's CPU seconds."""
    by_fd = {child._read_fd: child for child in children}
    poller = select.poll()
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    before = cpu_seconds_of(children)
    own = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    for child, load in loads:
        child.send(load)
    running = len(loads)
    while running:
        for fd, _ in poller.poll(10_000):
            child = by_fd[fd]
            child._read_available()
            while child.has_message():
                message = child.recv()
                op = message["op"]
                if op == "call":
                    reply = {"op": "reply", "id": message["id"], "outcome": {"Ok": message["arguments"]["n"]}}
                    if "lane" in message:
                        reply["lane"] = message["lane"]
                    child.post(reply)
                elif op == "end":
                    assert "Completed" in message["outcome"], message
                    running -= 1
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    host = after.ru_utime + after.ru_stime - own.ru_utime - own.ru_stime
    return wall, host, cpu_seconds_of(children) - before


def arrangement(kind: str, runs: int, calls: int, base: dict) -> tuple[float, float, float]:
    """Wall, host CPU and children's CPU seconds of `runs` runs of `calls` calls, as `kind`."""
    def load(n: int, lane: int | None) -> dict:
        message = dict(base, args=[n])
        if lane is not None:
            message["lane"] = lane
        else:
            message["keep"] = True  # (it waits after its run, so that its CPU can still be read)
        return message

    if kind == "lanes":
        children = [Child.start()]
        loads = [(children[0], load(calls, lane)) for lane in range(runs)]
    else:
        children = [Child.start() for _ in range(runs)]
        loads = [(child, load(calls, None)) for child in children]
    time.sleep(0.2)  # (the children started and imported: the figure is their runs')
    try:
        return serve(children, loads)
    finally:
        for child in children:
            child.kill()


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--runs", type=int, default=20)
    options.add_argument("--calls", type=int, default=2000)
    options.add_argument("--rounds", type=int, default=3)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        program = os.path.join(directory, "echo.flow")
        Path(program).write_text(PROGRAM)
        prepared = prepare(program, "main", '{"n": 1}', python_tools={"echo.echo": lambda n: n})
        base = load_message(prepared)
        base["checkpoints"] = "every"
        shapes = {"one run": ("children", 1), f"{args.runs} children": ("children", args.runs),
                  f"{args.runs} lanes": ("lanes", args.runs)}
        figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in shapes}
        for _ in range(args.rounds):
            for name, (kind, runs) in shapes.items():
                many = arrangement(kind, runs, args.calls, base)
                one = arrangement(kind, runs, 1, base)
                steady = runs * (args.calls - 1)
                figures[name].append((steady / (many[0] - one[0]), (many[1] - one[1]) / steady * 1e6,
                                      (many[2] - one[2]) / steady * 1e6))
    print(f"medians of {args.rounds} rounds, {args.calls} calls a run, a stand-in host answering at once "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    reference = statistics.median(f[0] for f in figures["one run"])
    for name, values in figures.items():
        rate = statistics.median(v[0] for v in values)
        host = statistics.median(v[1] for v in values)
        children = statistics.median(v[2] for v in values)
        print(f"  {name:14} {rate:9.0f} calls/s {rate / reference:5.2f}x one run   CPU a call: host {host:5.1f} µs"
              f" + children {children:5.1f} µs")


if __name__ == "__main__":
    main()
