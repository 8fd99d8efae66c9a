"""The sandbox child's own work per recorded call, in one process: the real loader, scheduler and
wire over recorded_calls.py's program, the host's replies handed back from memory (no pipe, no
sleep, no host). What a child costs a call once it sleeps between calls is under_load.py's
children's CPU; this is the work itself, hot (issue 19, item 1: docs/impl.md, session 16).

Each frame the child sends is encoded as it would be (`encode_batch`); each reply is encoded and
decoded as the host's would be, so the channel's work on the child's side is in the figure and a
little of the host's too. CPU seconds of this process per call, medians of `--rounds`.

    python scripts/bench/child_call_work.py [--calls 20000] [--rounds 5]
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
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

from flowdata import codec as abi  # noqa: E402
from flowdata import framing as channel  # noqa: E402
from flowrt.run import load_message, prepare  # noqa: E402
from recorded_calls import PROGRAM  # noqa: E402
from sandbox import runtime as R  # noqa: E402
from sandbox import wire as sandbox_wire  # noqa: E402
from sandbox.intrinsics import INTRINSICS  # noqa: E402
from sandbox.loader import load as load_modules  # noqa: E402
from sandbox.scheduler import Scheduler  # noqa: E402
from sandbox.wire import Wire  # noqa: E402


class _Replies:
    """The child's receiver: the host's replies, queued as the child's calls go out."""

    def __init__(self) -> None:
        self.pending: list[dict] = []

    def buffered(self) -> bool:
        return bool(self.pending)

    def recv(self) -> dict | None:
        return self.pending.pop(0) if self.pending else None


class _Ended(Exception):
    pass


def one_round(calls: int, directory: str, sent: list | None = None) -> float:
    """CPU seconds per call of one run of `calls` calls through the child's own code (each
    message it sends appended to `sent`, when given)."""
    program = os.path.join(directory, "echo.flow")
    Path(program).write_text(PROGRAM)
    prepared = prepare(program, "main", '{"n": %d}' % calls, python_tools={"echo.echo": lambda n: n})
    load = load_message(prepared)
    load["checkpoints"] = "every"
    replies = _Replies()

    def send_many(_fd: int, messages: list) -> None:
        channel.encode_batch(messages)  # what the child's write would cost to encode
        if sent is not None:
            sent.extend(messages)
        for message in messages:
            if message["op"] == "call":
                reply = channel.encode({"op": "reply", "id": message["id"],
                                        "outcome": {"Ok": message["arguments"]["n"]}})
                replies.pending.append(channel.decode_body(reply[channel.HEADER.size:]))
            elif message["op"] == "end":
                raise _Ended

    injected = dict(R.names())
    injected.update(INTRINSICS)
    injected.update(R.TASK_INTRINSICS)
    namespaces = load_modules([(m["key"][2:], m["filename"], m["source"]) for m in load["modules"]], injected)
    scheduler = Scheduler(Wire(replies, -1), load)
    for key, description in load.get("functions", {}).items():
        module, name = key.rsplit(".", 1)
        function = getattr(namespaces[module[2:]], name, None)
        if function is not None:
            scheduler.checkpoints.functions[function] = description
    entry = load["entry"]
    fn = getattr(namespaces[entry["module"][2:]], entry["function"])
    args = tuple(abi.decode(value, term, entry.get("defs", {})) for value, term in zip(load["args"], entry["params"]))
    real_send_many = sandbox_wire.channel.send_many
    sandbox_wire.channel.send_many = send_many
    started = time.process_time()
    try:
        scheduler.run(fn, args)
    except _Ended:
        pass
    finally:
        sandbox_wire.channel.send_many = real_send_many
    return (time.process_time() - started) / calls


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--calls", type=int, default=20_000)
    options.add_argument("--rounds", type=int, default=5)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        one_round(1000, directory)  # imports, the build cache
        figures = [one_round(args.calls, directory) for _ in range(args.rounds)]
    print(f"the child's own work per recorded call: {statistics.median(figures) * 1e6:.1f} µs "
          f"(medians of {args.rounds} rounds of {args.calls} calls; load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
