"""Short runs through one `flowrt.Host`, as an application serving requests drives them: what the
host keeps from one run to the next is worth, side by side in one run.

Each round, interleaved, N runs of each program through a fresh Host (the first two not counted:
a host starts its first spare child during its second run):

- hello (`main(n) = n + 1`, no Tool): the sandbox child started per run (as `Child.start()`,
  what a host did before flowrt/spare_child.py) against the host's spare child;
- one call of a flow.toml Tool process: a process per run (`reuse = false`, what a host did
  before it kept them) against the kept process, both with the spare child.

A pause between runs (`--gap`, default 50 ms) stands for the application's own work between
requests; back to back (`--gap 0`) a spare starts while the run before it goes on. Medians of
the rounds' medians, and the ratio per round.

    python scripts/bench/host_runs.py [--runs 12] [--rounds 5] [--gap 0.05]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import flowrt  # noqa: E402
from flowrt.sandbox_process import Child  # noqa: E402

HELLO = "pub flow main(n: Int) -> Int = n + 1\n"
ECHO = """\
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = echo(n)
"""
TOOL = """from flowrt.toolkit import serve

serve({"echo.echo": lambda n: n}, declared_in="echo.flow")
"""


def runs_ms(directory: Path, program: str, runs: int, gap: float, *, spare: bool) -> float:
    """Median ms of a Host.run of `program`, the first two runs left out."""
    host = flowrt.Host(runs=str(directory / "runs"), allow=True)
    if not spare:
        host._child = Child.start  # a child per run, started by the run
    times = []
    try:
        for n in range(runs):
            start = time.perf_counter()
            done = host.run(str(directory / program), {"n": n})
            times.append((time.perf_counter() - start) * 1e3)
            assert done.exit_code == 0 and done.output in (n, n + 1), done
            time.sleep(gap)
    finally:
        host.close()
    return statistics.median(times[2:])


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--runs", type=int, default=12)
    options.add_argument("--rounds", type=int, default=5)
    options.add_argument("--gap", type=float, default=0.05)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        kept, fresh = Path(scratch, "kept"), Path(scratch, "fresh")
        for directory, entry in ((kept, '{ python = "echo_tool.py" }'),
                                 (fresh, '{ python = "echo_tool.py", reuse = false }')):
            directory.mkdir()
            (directory / "hello.flow").write_text(HELLO)
            (directory / "echo.flow").write_text(ECHO)
            (directory / "echo_tool.py").write_text(TOOL)
            (directory / "flow.toml").write_text(f'[tools]\n"echo" = {entry}\n')
        rows: dict[str, list[float]] = {name: [] for name in ("hello, child per run", "hello, spare child",
                                                              "Tool, process per run", "Tool, kept process")}
        for _ in range(args.rounds):
            rows["hello, child per run"].append(runs_ms(kept, "hello.flow", args.runs, args.gap, spare=False))
            rows["hello, spare child"].append(runs_ms(kept, "hello.flow", args.runs, args.gap, spare=True))
            rows["Tool, process per run"].append(runs_ms(fresh, "echo.flow", args.runs, args.gap, spare=True))
            rows["Tool, kept process"].append(runs_ms(kept, "echo.flow", args.runs, args.gap, spare=True))
        print(f"Host.run, medians of {args.rounds} rounds of {args.runs} runs ({args.gap * 1e3:.0f} ms between runs; "
              f"load average {os.getloadavg()[0]:.1f})")
        for name, figures in rows.items():
            print(f"  {name:24} {statistics.median(figures):7.1f} ms")
        for before, after in (("hello, child per run", "hello, spare child"),
                              ("Tool, process per run", "Tool, kept process")):
            ratios = sorted(b / a for b, a in zip(rows[before], rows[after]))
            print(f"  {before} / {after}: median {statistics.median(ratios):.2f}x "
                  f"({ratios[0]:.2f}-{ratios[-1]:.2f}x per round)")


if __name__ == "__main__":
    main()
