"""`flow test` inside the sandbox: @test functions against @fake Tools on a virtual clock.

Each test runs under the same deterministic scheduler as a run, with two differences:

* A Tool call goes to the fake that stands in for its declaration: the fake runs as a task beside
  the test from the moment the call is made, and what it returns is the call's reply, due at the
  virtual instant it returns. `clock.now` and `clock.sleep` without a fake are answered from the
  virtual clock (which starts at 1970-01-01T00:00:00Z; `sleep(d)` is due d later, at once for a
  negative d).
* Nothing is asked of a host: when every task waits, the reply due earliest is handed over
  (replies due at one instant in the order their calls were made) and the clock moves to the
  instant it was due. So a test takes no real time for the time it waits and runs the same way
  every time.
"""

from __future__ import annotations

import time
import traceback

from sandbox import runtime as R
from flowdata import values as V
from sandbox.scheduler import Scheduler
from sandbox.tasks import BLOCKED, Task, Throw

CLOCK_NOW = "std@v1/clock.now"
CLOCK_SLEEP = "std@v1/clock.sleep"


class _Stop(Exception):
    pass


class _Unheard:
    """The wire of a test: facts are the host's business, and a test records nothing."""

    facts = 0

    def send(self, message: dict) -> None:
        pass


class TestScheduler(Scheduler):
    def __init__(self, load: dict, fakes: dict) -> None:
        super().__init__(_Unheard(), load)
        self.fakes = fakes  # tool identity -> (function, takes the call number, takes type arguments)
        self.now = 0
        self.due: list[tuple[int, int, Task, object, Task | None]] = []  # (at, seq, caller, value, fake task)
        self.seq = 0
        self.counts: dict[str, int] = {}
        self.fake_of: dict[Task, tuple[Task, int]] = {}  # fake task -> (caller, seq)

    def run_test(self, fn):
        root = Task("root", None, None)
        self.root = root
        self.tasks["root"] = root
        root.gen = self.root_driver(fn, ())
        self.ready.append(root)
        self.loop()
        return root.result

    def checkpoint_place(self, tail) -> None:
        return None

    def loop(self) -> None:
        while True:
            while self.ready:
                self.step(self.ready.pop(0))
                if self.root.state == "finished":
                    return
            live = [entry for entry in self.due if entry[2].state == "blocked"]
            if not live:
                raise R.Fault("deadlock", "every task of the test waits and nothing is due")
            entry = min(live, key=lambda e: (e[0], e[1]))
            self.due.remove(entry)
            at, _, caller, value, _ = entry
            self.now = max(self.now, at)
            for call_id in list(caller.open_calls):
                caller.open_calls.remove(call_id)
            self.make_ready(caller, value)

    def serve(self, task: Task, request):
        if request[0] != "call":
            return super().serve(task, request)
        _, desc, args, types = request
        self.seq += 1
        seq = self.seq
        identity = desc.identity
        call_id = self.new_call_id(task)
        task.open_calls.append(call_id)
        self.block(task, ("call", call_id))
        fake = self.fakes.get(identity)
        if fake is not None:
            function, counted, typed = fake
            self.counts[identity] = self.counts.get(identity, 0) + 1
            arguments = ((self.counts[identity],) if counted else ()) + tuple(args)
            if typed:
                # The fake's type parameters stand for the Tool's, in order (flowc/resolve.py).
                arguments += (tuple(types),)
            task.spawns += 1
            worker = Task(f"{task.id}/fake{task.spawns}", R.rt_fcall(function, arguments), None)
            self.tasks[worker.id] = worker
            self.fake_of[worker] = (task, seq)
            self.ready.append(worker)
            return BLOCKED
        if identity == CLOCK_NOW:
            self.due.append((self.now, seq, task, V.Instant(self.now), None))
            return BLOCKED
        if identity == CLOCK_SLEEP:
            duration = args[0]
            self.due.append((self.now + max(0, duration.nanos), seq, task, None, None))
            return BLOCKED
        return Throw(R.Fault("no-fake", f"no fake stands in for {identity}"))

    def finish(self, task: Task, result) -> None:
        answered = self.fake_of.pop(task, None)
        if answered is not None:
            task.state = "finished"
            task.result = result
            caller, seq = answered
            self.due.append((self.now, seq, caller, result, task))
            return
        super().finish(task, result)

    def stop_task(self, target: Task, by: Task) -> None:
        # A call that is closed stops the fake answering it.
        for worker, (caller, _) in list(self.fake_of.items()):
            if caller is target and worker.state in ("ready", "blocked"):
                self.fake_of.pop(worker)
                worker.state = "stopped"
                if worker in self.ready:
                    self.ready.remove(worker)
                worker.gen.close()
        self.due = [entry for entry in self.due if entry[2] is not target]
        super().stop_task(target, by)


class StepCounter:
    """The step bound: evaluation steps counted across a test and its fakes."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.steps = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.bound:
            raise R.Fault("step-bound", f"the test reached the step bound of {self.bound} evaluation steps")


def run_tests(load: dict, namespaces: dict, counter: StepCounter) -> list[dict]:
    """Run every test the load message names; one result per test, in order."""
    def resolve(key: str):
        module, name = key.rsplit(".", 1)
        return getattr(namespaces[module[2:]], name)

    fakes = {identity: (resolve(spec["key"]), spec["counted"], spec.get("typed", False))
             for identity, spec in load.get("fakes", {}).items()}
    results = []
    for test in load["tests"]:
        started = time.perf_counter()
        result = {"name": test["name"], "file": test["file"], "line": test["line"]}
        if test.get("unfaked"):
            result.update(outcome="not-started",
                          message="no fake stands in for " + ", ".join(test["unfaked"]))
            results.append(result)
            continue
        scheduler = TestScheduler(load, fakes)
        counter.steps = 0
        try:
            value = scheduler.run_test(resolve(test["key"]))
            if value[0] == "Ok":
                result["outcome"] = "passed"
            else:
                result.update(outcome="failed", message=value[1])
        except R.Fault as fault:
            result.update(outcome="failed", message=f"fault[{fault.kind}]: {fault.message}",
                          location=_location(load, fault))
        except RecursionError:
            result.update(outcome="failed", message="fault[limit]: the call depth limit was exceeded")
        except V.IntOverLimit as problem:
            result.update(outcome="failed", message=f"fault[limit]: {problem}", location=_location(load, problem))
        except V.DecimalOverLimit as problem:
            result.update(outcome="failed", message=f"fault[limit]: {problem}", location=_location(load, problem))
        result["seconds"] = round(time.perf_counter() - started, 6)
        results.append(result)
    return results


def _location(load: dict, problem: BaseException):
    files = {m["filename"]: (m.get("flow_file"), m.get("line_map", [])) for m in load["modules"]}
    found = None
    for frame, line in traceback.walk_tb(problem.__traceback__):
        entry = files.get(frame.f_code.co_filename)
        if entry is None:
            continue
        best = None
        for py, fl, fc in entry[1]:
            if py <= line:
                best = (fl, fc)
            else:
                break
        if best is not None:
            found = {"file": entry[0], "line": best[0], "column": best[1]}
    return found
