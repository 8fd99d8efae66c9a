"""A Tool process's round trip alone: sequential calls to a `flowrt.toolkit.serve` process, with no
run, no store and no sandbox child, in µs per call (medians of rounds, alternated so that every
figure sees the same machine). Its figures tell the host's share from the Tool process's:

- `host`: the host's own `CommandTools` (its writer, its reader thread, its parsing) started on
  the script as `flow run` starts it, each reply delivered into a reply queue as the run's
  driving thread takes replies (`flowrt.run.Driver`'s SimpleQueue; `--queue queue` for
  queue.Queue), the next call made once the reply is taken off it: a call made while others are
  out, or that the run does not wait for.
- `host, here`: through `CommandTools.call_here`, as the Driver makes the only call out when the
  program waits for it (a sequential call): the driving thread reads the reply itself
  (`flowrt.tool_output`). Only where the code measured has it.
- `pipe`: this thread writes a call line into the process's stdin and reads its reply line from
  its stdout itself (no host threads at all): what the Tool process and the pipes cost.

    python scripts/bench/tool_roundtrip.py [--calls 2000] [--rounds 7] [--queue simple|queue]
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from flowrt.bindings import CommandTools, Implementation  # noqa: E402

DECLARATION = "@tool pub flow echo(n: Int) -> Int\n"

TOOL = """from flowrt.toolkit import serve

if __name__ == "__main__":
    serve({"echo.echo": lambda n: n}, declared_in="echo.flow")
"""


def host_round(tools: CommandTools, calls: int, replies) -> float:
    deliver = lambda call_id, outcome: replies.put((call_id, outcome))  # noqa: E731 (as Driver.deliver)
    start = time.perf_counter()
    for i in range(calls):
        call_id = f"c{i}"
        tools.call("bench", call_id, "echo.echo", {"n": i}, None, deliver)
        got, outcome = replies.get()
        if got != call_id or outcome != {"Ok": i}:
            raise SystemExit(f"call {call_id} answered {got}: {outcome!r}")
    return time.perf_counter() - start


def here_round(tools: CommandTools, calls: int, replies) -> float:
    """As the Driver serves the only call out when the program waits for it (`call_here`)."""
    arrived = []
    deliver = lambda call_id, outcome: replies.put((call_id, outcome))  # noqa: E731
    start = time.perf_counter()
    for i in range(calls):
        call_id = f"h{i}"
        tools.call_here("bench", call_id, "echo.echo", {"n": i}, None, lambda c, o: arrived.append((c, o)), deliver)
        got, outcome = arrived.pop() if arrived else replies.get()
        if got != call_id or outcome != {"Ok": i}:
            raise SystemExit(f"call {call_id} answered {got}: {outcome!r}")
    return time.perf_counter() - start


def pipe_round(process: subprocess.Popen, calls: int, base: int) -> float:
    stdin, stdout = process.stdin.fileno(), process.stdout.fileno()
    start = time.perf_counter()
    for i in range(base, base + calls):
        os.write(stdin, b'{"arguments":{"n":%d},"id":"p%d","op":"call","run":"bench","tool":"echo.echo"}\n' % (i, i))
        line = b""
        while not line.endswith(b"\n"):
            chunk = os.read(stdout, 65536)
            if not chunk:
                raise SystemExit("the Tool process ended")
            line += chunk
        if line != b'{"id":"p%d","outcome":{"Ok":%d}}\n' % (i, i):
            raise SystemExit(f"unexpected reply {line!r}")
    return time.perf_counter() - start


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--calls", type=int, default=2000)
    options.add_argument("--rounds", type=int, default=7)
    options.add_argument("--queue", choices=("simple", "queue"), default="simple",
                         help="the reply queue: queue.SimpleQueue, as flowrt.run.Driver has it, or queue.Queue")
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        Path(directory, "echo.flow").write_text(DECLARATION)
        Path(directory, "echo_tool.py").write_text(TOOL)
        command = [sys.executable, "echo_tool.py"]
        tools = CommandTools(command, directory)
        tools.start()
        process = subprocess.Popen(command, cwd=directory, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        try:
            replies = queue.SimpleQueue() if args.queue == "simple" else queue.Queue()
            inline = hasattr(CommandTools, "call_here") and CommandTools.runs_inline is not Implementation.runs_inline
            host_round(tools, 200, replies)  # warm: threads started, code paths taken
            pipe_round(process, 200, 0)
            times: dict[str, list[float]] = {"host": [], "host, here": [], "pipe": []} if inline else \
                {"host": [], "pipe": []}
            for r in range(args.rounds):  # alternated, so all see the same machine
                times["host"].append(host_round(tools, args.calls, replies) / args.calls)
                if inline:
                    times["host, here"].append(here_round(tools, args.calls, replies) / args.calls)
                times["pipe"].append(pipe_round(process, args.calls, (r + 1) * args.calls) / args.calls)
        finally:
            tools.close()
            process.stdin.close()
            process.wait(10)
    for name, each in times.items():
        print(f"{name + ':':11} {statistics.median(each) * 1e6:7.1f} µs per call (median of {args.rounds} rounds of "
              f"{args.calls}; {min(each) * 1e6:.1f}-{max(each) * 1e6:.1f})")


if __name__ == "__main__":
    main()
