"""Recorded calls under load (issue 19, item 1) and at the fsync floor (item 2), side by side.

Each round, interleaved so that every figure sees the same machine:

- a recorded call's steady-state cost ((run of N calls - run of 1 call) / (N - 1), the program of
  recorded_calls.py through the Python API), without fsync and with fsync, first quiet, then with
  a CPU hog this script starts (`python3 -c 'while True: pass'`, pinned nowhere) and stops;
- the bare floor: one line written over reserved zeros and fdatasync'd per call (bare_reserved.py);
  and, for context, the same loop writing per sync as many bytes as a recorded call writes
  (its Checkpoint, Call and Reply: the size of a real history over its calls, ~850 bytes where
  the line is ~50), since this disk's sync costs more when the bytes cross into another page;
- 20 runs at once against one: 20 `flow run`-like processes (each `flowrt.Host.run` in a process
  of its own, as 20 `flow run` commands would be; no fsync), all started together; calls/s is all
  their calls over the wall time from the first start to the last end (start-up included, as for
  the single run measured the same way);
- one host driving 1, 2, 5, 10 and 20 runs at once (`--hosted`): one `flowrt.Host` in one
  process, each run started with `host.start(..., detach=True)` as an application serving many
  runs would (or, `--hosted-api async`, each `await`ed through `flowrt.AsyncHost.run`, as an
  asyncio application serving a request a run would), no fsync. Steady state, as for a single
  call: (k runs of N calls - k runs of 1 call) gives k (N - 1) calls over the difference in
  wall time, and the host's and the
  children's CPU per call over the same difference (the children's is read once they are reaped).

Prints medians over the rounds and one table of ratios against the goals. `--against DIR`
measures another checkout (e.g. `git worktree add /tmp/before main`) in the same rounds, each
figure taken from both trees one after the other, and prints both columns: before and after
side by side in one run, on the same machine's load. Every figure is taken in a fresh process
(`--measure`) that imports the tree it is asked about.

    python scripts/bench/under_load.py [--calls 2000] [--rounds 3] [--runs 20] [--against DIR]
        [--hosted 1,2,5,10,20] [--only-hosted] [--hosted-durability none|fsync] [--hosted-api host|async]
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
# `--tree DIR`: measure DIR's code with this script (a tree older than `--hosted` has no such figure)
if "--tree" in sys.argv:
    ROOT = Path(sys.argv[sys.argv.index("--tree") + 1]).resolve()
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))  # recorded_calls puts its own tree first

from bare_reserved import write_over_zeros  # noqa: E402
from recorded_calls import PROGRAM  # noqa: E402


#: the one-host figures' durability, from `--hosted-durability` to the process measuring them
HOSTED_DURABILITY = "UNDER_LOAD_HOSTED_DURABILITY"
#: ... and their API, from `--hosted-api`: `Host.start(detach=True)`, or `await AsyncHost.run`
HOSTED_API = "UNDER_LOAD_HOSTED_API"


def children_cpu() -> float:
    """CPU seconds of this process's reaped children, and of those its child template reaped
    (each run's sandbox child, started or forked: flowrt/child_template.py), of the run hub's
    sync processes so far (flowrt/sync_process.py, the first and its workers: they live as long
    as the host), and of the children kept for a next run or serving runs in lanes."""
    from flowrt import child_reaper, run_hub

    syncer = getattr(run_hub._shared, "_syncer", None)  # (None in a tree without one)
    try:  # and the children kept for a next run, alive (flowrt/kept_child.py; not in older trees)
        from flowrt.kept_child import kept_cpu_seconds
    except ImportError:
        kept_cpu_seconds = float
    try:  # and the children serving runs in lanes, alive (flowrt/lane_child.py; not in older trees)
        from flowrt.lane_child import shared_cpu_seconds
    except ImportError:
        shared_cpu_seconds = float
    return child_reaper.children_cpu_seconds() + (syncer.cpu_seconds() if syncer is not None else 0.0) + \
        kept_cpu_seconds() + shared_cpu_seconds()


def cpu_seconds() -> float:
    """CPU time of this process (the host) and of its reaped children (each run's sandbox child)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + children_cpu()


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


def call_bytes_floor(calls: int, directory: str) -> float:
    """The floor's loop with each sync covering what one recorded call writes: the bytes of a
    real history of `calls` calls (no fsync) over its calls, written as that many chunks."""
    flow_run(calls, directory, "none")
    runs = os.path.join(directory, "runs")
    newest = max((os.path.join(runs, run) for run in os.listdir(runs)), key=os.path.getmtime)
    per_call = os.path.getsize(os.path.join(newest, "history.jsonl")) // calls
    chunk = (b"x" * (per_call - 1)) + b"\n"
    return write_over_zeros(os.path.join(directory, "floor-call.jsonl"), [chunk] * calls) / calls


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


def ended_well(results: list) -> None:
    """Every run completed; otherwise what the others said (a failed figure names its cause)."""
    failed = [result for result in results if result.exit_code != 0]
    assert not failed, failed


def one_host(runs: int, calls: int, directory: str) -> tuple[float, float, float]:
    """Steady calls/s of one host driving `runs` runs at once, and its own and its children's CPU
    per call: k runs of `calls` calls against k runs of one, both through the same `flowrt.Host`."""
    import flowrt

    program = os.path.join(directory, "echo.flow")
    Path(program).write_text(PROGRAM)
    durability = os.environ.get(HOSTED_DURABILITY, "none")
    runs_dir = os.path.join(directory, "runs")
    if os.environ.get(HOSTED_API) == "async":
        import asyncio

        async_host = flowrt.AsyncHost({"echo.echo": lambda n: n}, runs=runs_dir, durability=durability)

        async def awaited(count: int, at_once: int) -> list:
            return await asyncio.gather(*[async_host.run(program, {"n": count}) for _ in range(at_once)])

        def drive(count: int, at_once: int) -> list:
            return asyncio.run(awaited(count, at_once))
    else:
        host = flowrt.Host({"echo.echo": lambda n: n}, runs_dir=runs_dir, durability=durability)

        def drive(count: int, at_once: int) -> list:
            handles = [host.start(program, {"n": count}, detach=True) for _ in range(at_once)]
            return [handle.wait(timeout=600) for handle in handles]
    # Imports and the build cache, once; and the child template (flowrt/child_template.py),
    # which starts beside a process's second run and serves its third: measured beside its
    # start-up, one run's first ~1,500 calls took 90 µs each instead of 50.
    for _ in range(3):
        ended_well(drive(1, 1))
    # Those three share one kept child (flowrt/kept_child.py), so the template has not started:
    # two runs at once start it, and one round of the measured kind warms the rest.
    ended_well(drive(1, 2))
    time.sleep(0.5)
    ended_well(drive(min(calls, 500), runs))

    def together(count: int) -> tuple[float, float, float]:
        own = resource.getrusage(resource.RUSAGE_SELF)
        reaped = children_cpu()
        start = time.perf_counter()
        ended_well(drive(count, runs))
        wall = time.perf_counter() - start
        time.sleep(0.1)  # a forked child is reaped by its template once the host has let it go
        own_after = resource.getrusage(resource.RUSAGE_SELF)
        return (wall, own_after.ru_utime + own_after.ru_stime - own.ru_utime - own.ru_stime,
                children_cpu() - reaped)

    many = together(calls)
    one = together(1)
    steady = runs * (calls - 1)
    return steady / (many[0] - one[0]), (many[1] - one[1]) / steady, (many[2] - one[2]) / steady


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
    options.add_argument("--against", help="another checkout, measured in the same rounds")
    options.add_argument("--hosted", default="1,2,5,10,20",
                         help="how many runs one host drives at once, each count measured (comma-separated)")
    options.add_argument("--only-hosted", action="store_true", help="measure only the one-host figures")
    options.add_argument("--hosted-durability", choices=("none", "fsync"), default="none",
                         help="the one-host figures' durability (with fsync, use fewer --calls)")
    options.add_argument("--hosted-api", choices=("host", "async"), default="host",
                         help="the one-host figures' API: Host.start(detach=True), or await AsyncHost.run")
    options.add_argument("--hosted-lanes", type=int, default=0,
                         help="also measure each count of runs above one with FLOW_SANDBOX_LANES at this "
                              "(runs sharing children, a lane each), in the same rounds")
    options.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    options.add_argument("--measure", nargs=3, help=argparse.SUPPRESS)
    options.add_argument("--tree", help=argparse.SUPPRESS)
    args = options.parse_args()
    if args.worker:
        start, end = flow_run(int(args.worker[1]), args.worker[0], "none")
        print(start, end)
        return
    if args.measure:
        measure(*args.measure)
        return
    synced = args.calls // 2
    runs = args.runs
    hosted = [int(count) for count in args.hosted.split(",") if count]
    trees = {"after": Path(__file__).resolve()}
    if args.against:
        trees = {"before": Path(args.against).resolve() / "scripts" / "bench" / "under_load.py", **trees}
    figures: dict[str, dict[str, list[float]]] = {tree: {} for tree in trees}

    def take(name: str, kind: str, count: int, directory: str, lanes: int = 0) -> None:
        # Which tree goes first alternates by round: measured back to back, the first of two
        # processes ran 5-7% faster than the second of the same tree (A/A, one and two runs).
        order = list(trees.items())
        if round_index % 2:
            order.reverse()
        for tree, script in order:
            command = [sys.executable, str(script), "--measure", kind, str(count), directory]
            if kind.startswith("host") or kind == "call-floor":  # (measured by this script in that tree)
                command = [sys.executable, __file__, "--measure", kind, str(count), directory,
                           "--tree", str(script.parents[2])]
            out = subprocess.run(command, capture_output=True, text=True, timeout=900,
                                 env={**os.environ, HOSTED_DURABILITY: args.hosted_durability,
                                      HOSTED_API: args.hosted_api, "FLOW_SANDBOX_LANES": str(lanes)})
            if out.returncode != 0:
                raise SystemExit(f"{tree}: {out.stderr}")
            values = [float(v) for v in out.stdout.split()]
            figures[tree].setdefault(name, []).append(values[0])
            if len(values) > 1:
                figures[tree].setdefault(name + " cpu", []).append(values[1])
            if len(values) > 2:
                figures[tree].setdefault(name + " child cpu", []).append(values[2])

    with tempfile.TemporaryDirectory() as directory:
        for round_index in range(args.rounds):
            for count in hosted:
                take(f"host{count}", f"host{count}", args.calls, directory)
                if args.hosted_lanes and count > 1:
                    take(f"host{count} lanes", f"host{count}", args.calls, directory, args.hosted_lanes)
            if args.only_hosted:
                continue
            take("quiet none", "none", args.calls, directory)
            take("quiet fsync", "fsync", synced, directory)
            take("floor", "floor", synced, directory)
            take("call floor", "call-floor", synced, directory)
            with Hog():
                take("busy none", "none", args.calls, directory)
                take("busy fsync", "fsync", synced, directory)
            take("one run", "runs1", args.calls, directory)
            take(f"{runs} runs", f"runs{runs}", args.calls, directory)
    print(f"medians of {args.rounds} interleaved rounds ({args.calls} calls, {synced} with fsync); "
          f"load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    medians = {tree: {name: statistics.median(values) for name, values in figures[tree].items()}
               for tree in trees}
    report_hosted(medians, hosted, args.hosted_durability, args.hosted_lanes)
    if not args.only_hosted:
        report(medians, runs)


def measure(kind: str, count: str, directory: str) -> None:
    """One figure, printed: steady wall and CPU per call, seconds per synced line, or calls/s."""
    calls = int(count)
    place = os.path.join(directory, str(os.getpid()))
    os.makedirs(place)
    if kind == "floor":
        print(floor(calls, place))
    elif kind == "call-floor":
        print(call_bytes_floor(calls, place))
    elif kind.startswith("host"):
        print(*one_host(int(kind[4:]), calls, place))
    elif kind.startswith("runs"):
        print(concurrent(int(kind[4:]), calls, place))
    else:
        # Imports and the build cache, once; and the child template, which starts beside a
        # process's second run (as in `one_host`): measured beside its start-up, the steady call
        # without fsync read 91 µs where it costs ~55.
        for _ in range(3):
            flow_run(1, place, "none")
        print(*per_call(calls, place, kind))


def report_hosted(medians: dict[str, dict[str, float]], hosted: list[int], durability: str, lanes: int = 0) -> None:
    """How one host scales: steady calls/s at each count of runs at once, against one run (with
    `lanes`, also each count above one with runs sharing children, a lane each)."""
    if not hosted:
        return
    trees = list(medians)
    synced = "no fsync" if durability == "none" else "fsync"
    print(f"  one host, runs at once (steady, {synced}): calls/s, x one run, host + children CPU per call")
    rows = [(f"{count:>4} runs       ", f"host{count}") for count in hosted]
    if lanes:
        rows += [(f"{count:>4} runs, lanes", f"host{count} lanes") for count in hosted if count > 1]
    for label, name in rows:
        cells = []
        for tree in trees:
            rate, host_cpu, child_cpu = (medians[tree][f"{name}{part}"] for part in ("", " cpu", " child cpu"))
            base = medians[tree].get("host1")
            scale = f"{rate / base:.2f}x" if base else "-"
            cells.append(f"{rate:8.0f} {scale:>6} {host_cpu * 1e6:5.1f}+{child_cpu * 1e6:5.1f} us")
        print(f"  {label} " + "".join(f"   {tree}: {cell}" for tree, cell in zip(trees, cells)))
    # What item 1's goal (most runs at 1.6x one run's calls/s) leaves a call of the CPUs there are,
    # host and children together, beside what such a call costs now: the goal's arithmetic.
    most, cpus = max(hosted), os.cpu_count() or 1
    for tree in trees:
        base = medians[tree].get("host1")
        for name, how in ((f"host{most}", ""), (f"host{most} lanes", " in lanes")):
            if not base or most < 2 or name not in medians[tree]:
                continue
            host_cpu = medians[tree][f"{name} cpu"]
            spent = host_cpu + medians[tree][f"{name} child cpu"]
            print(f"  {tree}: {most} runs{how} at 1.6x one run leave {cpus / (1.6 * base) * 1e6:.1f} us of "
                  f"{cpus} CPUs a call; they spend {spent * 1e6:.1f} (host {host_cpu * 1e6:.1f}: "
                  f"its one thread caps them at {1 / host_cpu / base:.2f}x one run)")


def report(medians: dict[str, dict[str, float]], runs: int) -> None:
    """One table: each figure and each ratio against its goal, a column per tree."""
    trees = list(medians)
    us = lambda value: f"{value * 1e6:.1f} us"  # noqa: E731
    rows: list[tuple[str, list[str], str]] = []
    for name, label in (("quiet none", "call, no fsync, quiet"), ("busy none", "call, no fsync, one core busy"),
                        ("quiet fsync", "call, fsync, quiet"), ("busy fsync", "call, fsync, one core busy")):
        rows.append((label, [us(medians[t][name]) for t in trees], ""))
        rows.append(("  CPU per call (host + child)", [us(medians[t][name + " cpu"]) for t in trees], ""))
    rows.append(("bare fdatasync per line (floor)", [us(medians[t]["floor"]) for t in trees], ""))
    rows.append(("  ... of a call's bytes (context)", [us(medians[t]["call floor"]) for t in trees], ""))
    rows.append(("one run, calls/s", [f"{medians[t]['one run']:.0f}" for t in trees], ""))
    rows.append((f"{runs} runs at once, calls/s", [f"{medians[t][f'{runs} runs']:.0f}" for t in trees], ""))
    ratios = (("busy / quiet, no fsync", lambda m: m["busy none"] / m["quiet none"], "<= 2.0"),
              ("busy / quiet, fsync", lambda m: m["busy fsync"] / m["quiet fsync"], "<= 2.0"),
              (f"{runs} runs / one run (calls/s)", lambda m: m[f"{runs} runs"] / m["one run"], ">= 1.6"),
              ("fsync call / bare floor", lambda m: m["quiet fsync"] / m["floor"], "<= 1.25"),
              ("  ... / floor of a call's bytes", lambda m: m["quiet fsync"] / m["call floor"], ""))
    for label, ratio, goal in ratios:
        rows.append((label, [f"{ratio(medians[t]):.2f}x" for t in trees], goal))
    print(f"  {'':<34}" + "".join(f"{t:>12}" for t in trees) + "   goal")
    for label, cells, goal in rows:
        print(f"  {label:<34}" + "".join(f"{c:>12}" for c in cells) + (f"   {goal}" if goal else ""))


if __name__ == "__main__":
    main()
