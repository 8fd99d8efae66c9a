"""The host's own CPU per recorded call, and its parts (issue 19: the host's per-call work).

The run's `Driver` (flowrt/run.py) drives recorded_calls.py's program against a stand-in for the
sandbox child that hands it, from memory, the frames a real child sends per call (a checkpoint
`place`, then the `call`), decoded by the real `FrameReader`, and takes the replies the host posts
as encoded frames. What remains is everything the host does per call except the pipe's
syscalls and the wait for the child (which `under_load.py` and `recorded_calls.py` measure end
to end): decode, checks, the Checkpoint and Call facts, the Tool's call, the reply's admission, the
Reply fact, the reply frame. The history it writes is a real run directory (no fsync).

Then each part alone, on the same data, the same number of times, as CPU time of this thread
(`time.thread_time`) per call: medians of `--rounds`.

    python scripts/bench/host_call_parts.py [--calls 20000] [--rounds 5] [--tree DIR]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if "--tree" in sys.argv:
    ROOT = Path(sys.argv[sys.argv.index("--tree") + 1]).resolve()
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

from flowdata import framing  # noqa: E402
from flowrt import run as flow_run  # noqa: E402
from flowrt.store import open_store  # noqa: E402
from recorded_calls import PROGRAM  # noqa: E402


def child_frames(calls: int) -> list[bytes]:
    """What a real child writes for recorded_calls.py's program, one chunk per reply it waits
    for: the first call; then the checkpoint place after each reply and the next call; then the
    last place and the end."""
    frames = []
    place = b""
    acc = 0
    for i in range(calls):
        n = calls - i
        task = "root" if i == 0 else f"c{i}:root"
        frames.append(place + framing.encode({"arguments": {"n": n}, "id": f"{task}#1", "op": "call", "task": task,
                                              "tool": "echo.echo", "wait": True}))
        acc += n
        place = framing.encode({"arguments": {"acc": acc, "n": n - 1}, "function": {"module": "echo", "name": "loop"},
                                "op": "place", "taken": True})
    frames.append(place + framing.encode({"op": "end", "outcome": {"Completed": acc}}))
    return frames


class MemoryChild:
    """What `Driver.run` asks of a child, from frames held in memory: each `recv` decodes the
    next chunk through a `FrameReader` as `Child` does after a read; `post` encodes the reply as
    `Child.post` does and keeps its length."""

    def __init__(self, frames: list[bytes]) -> None:
        self._chunks = iter(frames)
        self._reader = framing.FrameReader()
        self._inbox: list[dict] = []
        self.before_sleep = None
        self.check_halt = None
        self.posted = 0

    def send(self, message: dict) -> None:
        framing.encode(message)

    def recv(self, timeout=None) -> dict:
        if not self._inbox:
            self._inbox = self._reader.feed(next(self._chunks))
            self._inbox.reverse()
        return self._inbox.pop()

    def has_message(self) -> bool:
        return bool(self._inbox)

    def peek(self) -> dict | None:
        return self._inbox[-1] if self._inbox else None

    def post(self, message: dict) -> None:
        self.posted += len(framing.encode(message, False))

    def kill(self) -> None:
        return None

    let_go = kill


def prepared_run(directory: str, calls: int):
    program = os.path.join(directory, "echo.flow")
    Path(program).write_text(PROGRAM)
    return flow_run.prepare(program, "main", '{"n": %d}' % calls, python_tools={"echo.echo": lambda n: n})


def drive(directory: str, prepared, calls: int, index: int) -> float:
    """Thread CPU seconds of one `Driver.run` over `calls` calls from memory."""
    run_id = f"run-parts-{index}"
    fields, sources = flow_run.start_fields(prepared)
    store = open_store(os.path.join(directory, "runs")).create(run_id, fields, sources=sources, durability="none")
    frames = child_frames(calls)
    driver = flow_run.Driver(prepared, store, run_id, MemoryChild(frames))
    started = time.thread_time()
    outcome = driver.run()
    elapsed = time.thread_time() - started
    store.close()
    assert outcome.exit_code == 0, outcome
    return elapsed


def parts(directory: str, prepared, calls: int, index: int) -> dict[str, float]:
    """Each part of a call alone, `calls` times: thread CPU seconds per call."""
    frames = child_frames(calls)
    run_id = f"run-part-{index}"
    fields, sources = flow_run.start_fields(prepared)
    store = open_store(os.path.join(directory, "runs")).create(run_id, fields, sources=sources, durability="none")
    # The parts keep every message and outcome for the next part: with the collector on, its
    # passes over those would be charged to whichever part made it run.
    gc.disable()
    try:
        return _timed_parts(frames, store, prepared, run_id, calls)
    finally:
        store.close()
        gc.enable()


def _timed_parts(frames: list[bytes], store, prepared, run_id: str, calls: int) -> dict[str, float]:
    description = prepared.tools["echo.echo"]
    typed = flow_run.Driver(prepared, store, run_id, None).typed("echo.echo", None, "x")
    admit_one = flow_run.admitted_by(typed)
    implementation = prepared.implementations["echo.echo"]
    out: dict[str, float] = {}
    clock = time.thread_time
    reader = framing.FrameReader()
    started = clock()
    messages = [reader.feed(chunk) for chunk in frames[:-1]]
    out["decode the call and place frames"] = clock() - started

    started = clock()
    call_messages = [pair[-1] for pair in messages]
    places = [pair[0] for pair in messages[1:]] + [reader.feed(frames[-1])[0]]
    for call in call_messages:
        facts = {"call": call["id"], "tool": call["tool"], "fingerprint": description["fingerprint"],
                 "arguments": call["arguments"]}
    out["the Call's fields (dict)"] = clock() - started
    del facts

    started = clock()
    for place, call in zip(places, call_messages):
        store.append_many([("Checkpoint", {"function": place["function"], "arguments": place["arguments"]}),
                           ("Call", {"call": call["id"], "tool": call["tool"], "fingerprint": description["fingerprint"],
                                     "arguments": call["arguments"]})], sync=True)
    out["Checkpoint + Call facts (build, hash, pwrite)"] = clock() - started

    got: list = []
    arrive = lambda call_id, outcome: got.append((call_id, outcome))  # noqa: E731
    started = clock()
    for call in call_messages:
        implementation.call_here(run_id, call["id"], "echo.echo", call["arguments"], typed, arrive, None)
    out["the Tool's call (call_here)"] = clock() - started

    started = clock()
    admitted = [admit_one(outcome) for _, outcome in got]
    out["admit the reply (size, decode, encode)"] = clock() - started

    started = clock()
    for (call_id, _), outcome in zip(got, admitted):
        store.append("Reply", {"call": call_id, "outcome": outcome}, sync=False)
    out["Reply fact (build, hash, pwrite)"] = clock() - started

    started = clock()
    for (call_id, _), outcome in zip(got, admitted):
        framing.encode({"op": "reply", "id": call_id, "outcome": outcome}, False)
    out["encode the reply frame"] = clock() - started
    return {name: seconds / calls for name, seconds in out.items()}


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--calls", type=int, default=20000)
    options.add_argument("--rounds", type=int, default=5)
    options.add_argument("--tree", help="measure this checkout's code (default: this one)")
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        prepared = prepared_run(directory, args.calls)
        drive(directory, prepared_run(directory, 10), 10, 0)  # first use: imports, caches
        whole, each = [], []
        for index in range(args.rounds):
            one = drive(directory, prepared_run(directory, 1), 1, 2 * index + 1)
            many = drive(directory, prepared, args.calls, 2 * index + 2)
            whole.append((many - one) / (args.calls - 1))
            each.append(parts(directory, prepared, args.calls, index))
    print(f"host CPU per call, Driver.run from memory (no pipe, no wait): {statistics.median(whole) * 1e6:.2f} µs "
          f"(medians of {args.rounds} rounds, {args.calls} calls; load average {os.getloadavg()[0]:.2f})")
    for name in each[0]:
        print(f"  {name:48} {statistics.median(e[name] for e in each) * 1e6:6.2f} µs")


if __name__ == "__main__":
    main()
