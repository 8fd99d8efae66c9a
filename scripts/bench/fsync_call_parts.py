"""Where a recorded call's time goes with fsync and without (issue 19, item 2: the fsync floor).

One live run of recorded_calls.py's program through `flowrt.Host` (the Tool a Python function, so
no Tool process), with the host's three points of contact timed in place: `Child.recv` (the child's
frame in), `os.fdatasync` (the Call made durable) and `Child.post` (the reply out). Per call, from
the child's Call frame in to the next one:

- `before sync`: the host's work up to the fdatasync (the Call's checks and fact, its write);
- `sync`: the fdatasync itself;
- `after sync`: the host's work from the sync to the reply (the Tool's call, the Reply's admission
  and fact, its write);
- `reply out`: encoding the reply and writing it to the pipe;
- `child`: from the reply out to the next Call in (the child's work and both hops, as the host
  waits for it).

Without fsync, `before sync` is the whole of the host's work and `sync`, `after sync` are zero.
Each round measures a run with fsync, a run without, and the bare floor (one line over reserved
zeros and one fdatasync per call, under_load.py's `floor`), one after the other; the figures are medians
per call over the run's middle calls, then medians over the rounds. The timing adds ~1 µs a point.

    python scripts/bench/fsync_call_parts.py [--calls 2000] [--rounds 5]
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

import flowrt  # noqa: E402
from flowrt import sandbox_process  # noqa: E402
from recorded_calls import PROGRAM  # noqa: E402
from under_load import floor  # noqa: E402

PARTS = ("before sync", "sync", "after sync", "reply out", "child", "call")


class Timeline:
    """The host's contact points, timed in place inside `with timeline:` (perf_counter, in
    order); outside it the real functions are back, so the bare floor is timed without them."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []
        self._real = (os.fdatasync, sandbox_process.Child.recv, sandbox_process.Child.post)

    def __enter__(self) -> "Timeline":
        clock = time.perf_counter
        events = self.events
        events.clear()
        real_sync, real_recv, real_post = self._real

        def fdatasync(fd):
            events.append(("sync", clock()))
            real_sync(fd)
            events.append(("synced", clock()))

        def recv(child, timeout=None):
            message = real_recv(child, timeout)
            events.append(("in", clock()))
            return message

        def post(child, obj):
            events.append(("post", clock()))
            real_post(child, obj)
            events.append(("posted", clock()))

        os.fdatasync, sandbox_process.Child.recv, sandbox_process.Child.post = fdatasync, recv, post
        return self

    def __exit__(self, *exc) -> None:
        os.fdatasync, sandbox_process.Child.recv, sandbox_process.Child.post = self._real

    def parts(self) -> dict[str, float]:
        """Median seconds per call of each part, over the calls between the first and last 10%
        (medians: a call preempted by another process says nothing of the call's own parts; the
        parts' medians need not add up to the call's)."""
        ins = [i for i, (kind, _) in enumerate(self.events) if kind == "in"]
        skip = len(ins) // 10
        spans: dict[str, list[float]] = {part: [] for part in PARTS}
        for start, end in zip(ins[skip:-skip - 1], ins[skip + 1:-skip]):
            seen: dict[str, float] = {}
            for kind, at in self.events[start:end]:
                seen.setdefault(kind, at)
            if "post" not in seen:
                continue  # not a call's span (the load, a checkpoint place)
            begun, posted, posted_out = seen["in"], seen["post"], seen["posted"]
            sync, synced = seen.get("sync", posted), seen.get("synced", posted)
            arrived = self.events[end][1]
            for part, value in (("before sync", sync - begun), ("sync", synced - sync),
                                ("after sync", posted - synced), ("reply out", posted_out - posted),
                                ("child", arrived - posted_out), ("call", arrived - begun)):
                spans[part].append(value)
        return {part: statistics.median(values) for part, values in spans.items()}


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--calls", type=int, default=2000)
    options.add_argument("--rounds", type=int, default=5)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        program = os.path.join(directory, "echo.flow")
        Path(program).write_text(PROGRAM)
        hosts = {durability: flowrt.Host({"echo.echo": lambda n: n}, runs_dir=os.path.join(directory, "runs"),
                                         durability=durability) for durability in ("fsync", "none")}
        for host in hosts.values():
            assert host.run(program, {"n": 1}).exit_code == 0  # imports, the build cache
        timeline = Timeline()
        figures: dict[str, list[dict[str, float]]] = {durability: [] for durability in hosts}
        floors = []
        for _ in range(args.rounds):
            for durability, host in hosts.items():
                with timeline:
                    assert host.run(program, {"n": args.calls}).exit_code == 0
                figures[durability].append(timeline.parts())
            floors.append(floor(args.calls, directory))
    print(f"median over {args.rounds} rounds of the median per call, µs (load average {os.getloadavg()[0]:.1f})")
    print(f"{'':12s}" + "".join(f"{part:>13s}" for part in PARTS))
    for durability, rounds in figures.items():
        print(f"{durability:12s}" + "".join(f"{statistics.median(r[part] for r in rounds) * 1e6:13.1f}"
                                           for part in PARTS))
    bare = statistics.median(floors)
    synced = statistics.median(r["call"] for r in figures["fsync"])
    print(f"bare floor {bare * 1e6:.1f} µs; fsync call / floor {synced / bare:.2f}x; "
          f"what is not the sync, fsync / none: "
          f"{statistics.median(r['call'] - r['sync'] for r in figures['fsync']) * 1e6:.1f} / "
          f"{statistics.median(r['call'] for r in figures['none']) * 1e6:.1f} µs")


if __name__ == "__main__":
    main()
