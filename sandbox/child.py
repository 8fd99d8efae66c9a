"""The sandboxed child, `python -m sandbox.child`: load the generated program, lock down, run it.

The order is the point: everything the run needs is imported and compiled first (the loader, the
intrinsics, the scheduler and its parts, `sandbox.testing` for `flow test`), then the process
gives up the operating system (`sandbox.lockdown`: no module can be imported, no file opened
after; a system call the filter does not allow kills the child), and only then does the
program run. So a module imported lazily after `lock_down` would kill the child: what the child
runs is imported before it, at the top of its modules or in `main` before the load
(tests/test_child_layout.py checks every import in `sandbox/` against what is loaded by then).

The child's roles each have a module: the wire protocol with the host (`sandbox.wire`, whose
docstring lists the messages), the scheduler (`sandbox.scheduler`), stepping through a record in
replay and resume (`sandbox.record`), checkpoint places and restores (`sandbox.checkpoints`), the
Tool codec (`sandbox.toolcodec`), how a run ends (`sandbox.outcome`).
"""

from __future__ import annotations

import gc
import select
import sys

from flowdata import codec as abi
from flowdata import framing as channel
from sandbox import checkpoints, lockdown
from sandbox import runtime as R
from sandbox.scheduler import Scheduler
from sandbox.warmup import warm_up
from sandbox.wire import Wire


def lock_down(config: dict | None, write_fd: int) -> None:
    """Give up the operating system (`sandbox.lockdown`) and tell the host which layers took.
    Called once everything the run needs is imported and compiled: afterwards no module can be
    imported, no file opened."""
    if config is None:
        return  # started by hand, without the host's `--lockdown`: nothing to report to
    import json  # noqa: F401 - the channel imports these lazily, for frames with big integers
    import math  # noqa: F401

    layers = lockdown.lock(**config)
    lockdown.install_excepthook()
    channel.send(write_fd, {"op": "sandbox", "layers": layers})


#: How long a new child waits for its program before it warms up instead: a host that has its
#: program ready sends it within this (runs back to back: 1.5-4 ms after the child is ready), and
#: a warm-up then would only put the run's own load off (~3 ms); a spare that waits longer has
#: the time to spare.
WARM_AFTER_SECONDS = 0.005


def main() -> None:
    read_fd, write_fd = channel.claim_stdio()
    receiver = channel.Receiver(read_fd)
    config = lockdown.parse_argv(sys.argv[1:])
    # Imported before the first message, not after: the host checks the program and opens the
    # run while this process starts, so these imports usually end before the load arrives.
    from sandbox.intrinsics import INTRINSICS
    from sandbox.loader import SandboxRefusal, load as load_modules, settle_heap

    injected = dict(R.names())
    injected.update(INTRINSICS)
    injected.update(R.TASK_INTRINSICS)
    if not select.select((read_fd,), (), (), WARM_AFTER_SECONDS)[0]:
        # The program is not here yet (a spare waiting for its run): its first load's page
        # faults are taken now, on code of our own, not on the run's time (sandbox/warmup.py).
        warm_up(load_modules, injected)
    load = receiver.recv()
    if load is None or load.get("op") not in ("load", "test"):
        return
    sys.setrecursionlimit(12_000)

    counter = None
    if load["op"] == "test":
        from sandbox.testing import StepCounter, run_tests

        counter = StepCounter(int(load.get("steps", 2 ** 26)))
        injected["rt_step"] = counter.step
    try:
        namespaces = load_modules([(m["key"][2:], m["filename"], m["source"]) for m in load["modules"]], injected,
                                  count_steps=counter is not None)
    except SandboxRefusal as refusal:
        channel.send(write_fd, {"op": "refused", "message": str(refusal)})
        return
    if "lane" in load and load["op"] == "load":
        from sandbox.lanes import serve_lanes  # (before the lockdown: it imports greenlet)

        lock_down(config, write_fd)
        serve_lanes(load, receiver, write_fd, lambda one, wire: run_once(one, namespaces, wire, settle_heap))
        return
    lock_down(config, write_fd)
    if load["op"] == "test":
        channel.send(write_fd, {"op": "results", "results": run_tests(load, namespaces, counter)})
        return
    first = load["modules"]
    while True:
        run_once(load, namespaces, Wire(receiver, write_fd), settle_heap)
        if not load.get("keep"):
            return
        # The host may keep this child for the next run of the same program (flowrt/kept_child.py):
        # the program is loaded and the process locked down already. Anything else ends it.
        load = receiver.recv()
        if load is None or load.get("op") != "load" or not load.get("keep") or load.get("replay") \
                or load.get("start") is not None or load["modules"] != first:
            return
        gc.collect()  # what the last run left is garbage (its values are not frozen with the next)


def run_once(load: dict, namespaces: dict, wire: Wire, settle_heap) -> None:
    """Run the program `load` asks for, in the loaded `namespaces`, to its `end`, talking to the
    host over `wire` (`settle_heap`: the loader's, imported by `main` before the lockdown)."""
    scheduler = Scheduler(wire, load)
    by_key = {}
    for key, description in load.get("functions", {}).items():
        module, name = key.rsplit(".", 1)
        function = getattr(namespaces[module[2:]], name, None)
        if function is not None:
            scheduler.checkpoints.functions[function] = description
            by_key[key] = (function, description)
    start = load.get("start")
    if start is not None:
        # Resume or replay from a checkpoint: the whole future is the function and its arguments.
        fn, description = by_key[start["function"]]
        args, parked = checkpoints.restore(start, description, scheduler.root, load.get("tools", {}))
        scheduler.resume_at(start["checkpoint"], parked)
    else:
        entry = load["entry"]
        fn = getattr(namespaces[entry["module"][2:]], entry["function"])
        defs = entry.get("defs", {})
        args = tuple(abi.decode(value, term, defs) for value, term in zip(load["args"], entry["params"]))
    settle_heap()
    scheduler.run(fn, args)


if __name__ == "__main__":
    main()
