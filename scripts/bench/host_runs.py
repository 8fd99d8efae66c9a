"""Short runs through one `flowrt.Host`, as an application serving requests drives them: what the
host keeps from one run to the next is worth, side by side in one run.

Each round, interleaved, N runs of each program through a fresh Host (the first two not counted:
a host starts its first spare child during its second run):

- hello (`main(n) = n + 1`, no Tool): the sandbox child started per run (as `Child.start()`,
  what a host did before flowrt/spare_child.py) against the host's spare child, both children
  started as interpreters of their own (`FLOW_SANDBOX_TEMPLATE=0`), and against children forked
  from the child template (flowrt/child_template.py, `FLOW_SANDBOX_TEMPLATE=1`, with the spare);
- one call of a flow.toml Tool process: a process per run (`reuse = false`, what a host did
  before it kept them) against the kept process, both with the spare child;
- hello again, its child kept after each run for the next (flowrt/kept_child.py, what a host
  does now), against the forked child of every other row, which is let go after its run.

A pause between runs (`--gap`, default 50 ms) stands for the application's own work between
requests; back to back (`--gap 0`) a spare starts while the run before it goes on. Medians of
the rounds' medians, and the ratio per round. Beside each: the CPU a run costs, the host's own
and its children's (a started child's from `RUSAGE_CHILDREN`; a forked child's from what its
template has reaped, `/proc/<template>/stat`), over the same runs.

    python scripts/bench/host_runs.py [--runs 12] [--rounds 5] [--gap 0.05]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import flowrt  # noqa: E402
from flowrt import child_reaper, child_template  # noqa: E402
from flowrt.sandbox_process import Child  # noqa: E402

try:
    from flowrt import kept_child  # noqa: E402
except ImportError:  # a tree from before it
    kept_child = None

HELLO = "pub flow main(n: Int) -> Int = n + 1\n"
ECHO = """\
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = echo(n)
"""
TOOL = """from flowrt.toolkit import serve

serve({"echo.echo": lambda n: n}, declared_in="echo.flow")
"""


def cpu_seconds() -> tuple[float, float]:
    """(this process's CPU, its children's: reaped ones and those its template reaped)."""
    children = child_reaper.children_cpu_seconds()
    try:  # and the children kept alive for a next run (flowrt/kept_child.py; not in older trees)
        from flowrt.kept_child import kept_cpu_seconds

        children += kept_cpu_seconds()
    except ImportError:
        pass
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime, children


def runs_ms(directory: Path, program: str, runs: int, gap: float, *, spare: bool,
            template: str = "0", keep: bool = False) -> tuple[float, float, float]:
    """Median ms of a Host.run of `program`, the first two runs left out, and the host's and
    the children's CPU ms per run over the same runs."""
    os.environ["FLOW_SANDBOX_TEMPLATE"] = template
    if kept_child is not None:
        kept_child.KEEP_IDLE = 4 if keep else 0  # (read when the host makes its spares)
    host = flowrt.Host(runs=str(directory / "runs"), allow=True)
    if not spare:
        host._child = Child.start  # a child per run, started by the run
    times = []
    try:
        for n in range(runs):
            if n == 2:
                time.sleep(0.2)  # the template's and the spare's start are not the runs' own
                host_before, children_before = cpu_seconds()
            start = time.perf_counter()
            done = host.run(str(directory / program), {"n": n})
            times.append((time.perf_counter() - start) * 1e3)
            assert done.exit_code == 0 and done.output in (n, n + 1), done
            time.sleep(gap)
        time.sleep(0.2)  # the last child reaped
        host_after, children_after = cpu_seconds()
    finally:
        host.close()
        child_template.shut_down()
    counted = runs - 2
    return (statistics.median(times[2:]), (host_after - host_before) * 1e3 / counted,
            (children_after - children_before) * 1e3 / counted)


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
        cases = {
            "hello, child per run": (kept, "hello.flow", False, "0", False),
            "hello, spare child": (kept, "hello.flow", True, "0", False),
            "hello, forked child": (kept, "hello.flow", True, "1", False),
            "Tool, process per run": (fresh, "echo.flow", True, "1", False),
            "Tool, kept process": (kept, "echo.flow", True, "1", False),
            "hello, kept child": (kept, "hello.flow", True, "1", True),
        }
        rows: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, (directory, program, spare, template, keep) in cases.items():
                rows[name].append(runs_ms(directory, program, args.runs, args.gap, spare=spare, template=template,
                                          keep=keep))
        print(f"Host.run, medians of {args.rounds} rounds of {args.runs} runs ({args.gap * 1e3:.0f} ms between runs; "
              f"load average {os.getloadavg()[0]:.1f})")
        print(f"  {'':24} {'wall':>9}   CPU per run: host + children")
        for name, figures in rows.items():
            wall, host_cpu, child_cpu = (statistics.median(f[i] for f in figures) for i in range(3))
            print(f"  {name:24} {wall:6.1f} ms   {host_cpu:6.1f} + {child_cpu:6.1f} ms")
        for before, after in (("hello, child per run", "hello, spare child"),
                              ("hello, spare child", "hello, forked child"),
                              ("hello, child per run", "hello, forked child"),
                              ("Tool, process per run", "Tool, kept process"),
                              ("hello, forked child", "hello, kept child")):
            ratios = sorted(b[0] / a[0] for b, a in zip(rows[before], rows[after]))
            cpu = sorted((b[1] + b[2]) / (a[1] + a[2]) for b, a in zip(rows[before], rows[after]))
            print(f"  {before} / {after}: wall median {statistics.median(ratios):.2f}x "
                  f"({ratios[0]:.2f}-{ratios[-1]:.2f}x per round), CPU {statistics.median(cpu):.2f}x")


if __name__ == "__main__":
    main()
