"""The child's scheduler: the program's tasks, the run queue, and the requests generated code
`yield`s (Tool calls, spawns, waits, task.first, stops, call frames).

Scheduling is deterministic: every runnable task runs until it waits, in the order it became
ready; only then does the child ask the host for a reply. So the order of replies alone decides
every interleaving, live and in replay. What goes to the host is `sandbox.wire`'s; stepping
through a record, `sandbox.record`'s; checkpoint places, `sandbox.checkpoints`'; the encoding of
a Tool's arguments and replies, `sandbox.toolcodec`'s; how the run ends, `sandbox.outcome`'s.
"""

from __future__ import annotations

from types import GeneratorType

from sandbox import runtime as R
from flowdata import values as V
from sandbox.checkpoints import Checkpoints
from sandbox.outcome import FAULTS, Ending
from sandbox.record import Record
from sandbox.tasks import BLOCKED, Task, TaskHandle, Throw, tasks_in
from sandbox.toolcodec import ToolCodec
from sandbox.wire import Wire


class Scheduler:
    """Deterministic cooperative scheduling: every ready task runs, in the order it became ready,
    until it waits; only then is the host asked for the next reply."""

    def __init__(self, wire: Wire, load: dict) -> None:
        self.wire = wire
        self.send = wire.send  # bound once: every call, choice and stop goes through it
        self.load = load
        self.tasks: dict[str, Task] = {}
        self.ready: list[Task] = []
        self.by_call: dict[str, tuple[Task, object, tuple]] = {}
        self.completed = 0
        self.prefix = ""  # before task ids after a checkpoint: `cN:`
        self.root = Task("root", None, None)
        self.record = Record(wire, bool(load.get("replay")), str(load.get("checkpoints", "off")))
        self.checkpoints = Checkpoints(load, self.record)
        self.codec = ToolCodec(load.get("tools", {}))

    # -- running

    def run(self, entry_fn, args: tuple) -> None:
        root = self.root
        self.tasks["root"] = root
        root.gen = self.root_driver(entry_fn, args)
        self.ready.append(root)
        ending = Ending(self.load)
        try:
            self.loop()
            result = root.result
            self.stop_owned(root)
            self.send({"op": "end", "outcome": ending.completed(result)})
        except FAULTS as problem:
            self.send({"op": "end", "outcome": ending.faulted(problem)})
        finally:
            try:
                self.wire.flush()
            except OSError:
                pass  # the host is gone

    def resume_at(self, n: int, parked: list) -> None:
        """Run from the run's nth checkpoint, the tasks it carried (`checkpoints.restore`)
        waiting again on their calls, owned by the root."""
        finished = []
        for task, desc in parked:
            self.tasks[task.id] = task
            # A generic Tool's reply decodes at the type arguments its parked call recorded.
            types = tuple(R.rt_type(t["term"], t["defs"]) for t in (task.last_call or {}).get("types", ()))
            self.by_call[task.open_calls[0]] = (task, desc, types)
            if task.reply is not None:
                finished.append(task)
        # Tasks that had finished on their reply when the checkpoint was taken finish again on it,
        # in the order they finished then (task.first picks by that order), before anything runs.
        for task in sorted(finished, key=lambda t: t.finished_at):
            outcome, task.reply = task.reply, None
            self.admit(task.open_calls[0], outcome)
            if type(task.resume_with) is Throw:
                continue  # it no longer decodes (a fork onto another program): it faults as it runs
            self.ready.remove(task)
            self.step(task)
        root = self.root
        for task in self.tasks.values():
            task.owner_frame = root.frames[0]
            root.frames[0].append(task)
        self.prefix = f"c{n}:"
        self.checkpoints.count = n

    def root_driver(self, fn, args: tuple):
        """The root task: the entry, with its tail calls bounced here (where checkpoints go)."""
        result = fn(*args)
        while True:
            if type(result) is GeneratorType:
                result = yield from result
            if type(result) is R.Tail:
                self.checkpoint_place(result)
                result = result.fn(*result.args)
                continue
            return result

    def checkpoint_place(self, tail) -> None:
        """A tail call made by the root task's outermost function: a place where a checkpoint
        may be taken (`sandbox.checkpoints`). A place with no fact written since the start or
        the last checkpoint adds nothing a checkpoint could let go of, so none is taken there
        (pure loops stay fast)."""
        checkpoints = self.checkpoints
        if self.wire.facts == checkpoints.mark:
            return
        plan = checkpoints.plan(tail.fn)
        if plan is None:
            return
        root = self.root
        live = {t for t in self.tasks.values() if t is not root and (t.state == "ready" or t.state == "blocked")}
        message = checkpoints.place(plan, tail.args, live)
        if message is None:
            return
        self.send(message)
        if message["taken"]:
            self.begin_after_checkpoint(checkpoints.count + 1)

    def begin_after_checkpoint(self, n: int) -> None:
        """Ids after the run's nth checkpoint carry `cn:`, and counters restart under it."""
        self.checkpoints.count = n
        self.checkpoints.mark = self.wire.facts
        self.prefix = f"c{n}:"
        self.root.calls = 0
        self.root.spawns = 0

    def task_label(self, task: Task) -> str:
        return self.prefix + "root" if task is self.root else task.id

    def loop(self) -> None:
        wire = self.wire
        record = self.record
        while True:
            while self.ready:
                task = self.ready.pop(0)
                if wire.out and not record.replaying:
                    wire.flush()  # a call made live goes out before another task computes
                self.step(task)
                if self.root.state == "finished":
                    return
            if not self.by_call:
                blocked = sorted(t.id for t in self.tasks.values() if t.state == "blocked")
                raise R.Fault("deadlock", "no task can proceed: " + ", ".join(blocked) + " wait on each other "
                              "and no call is out")
            wire.ask_reply()
            self.receive_reply()

    def receive_reply(self) -> None:
        reply = self.record.take_reply(self.by_call) if self.record.replaying else None
        if reply is None:
            reply = self.wire.reply(self.by_call)
        self.admit(*reply)

    def admit(self, call_id: str, outcome) -> None:
        task, desc, type_args = self.by_call.pop(call_id)
        task.open_calls.remove(call_id)
        if task.park is not None:
            task.reply = outcome
        try:
            value = self.codec.decode_reply(desc, outcome, type_args)
        except R.Fault as fault:
            value = Throw(fault)
        self.make_ready(task, value)

    def step(self, task: Task) -> None:
        """Run one task until it blocks or finishes."""
        value = task.resume_with
        task.resume_with = None
        while True:
            try:
                if type(value) is Throw:
                    request = task.gen.throw(value.exc)
                else:
                    request = task.gen.send(value)
            except StopIteration as done:
                self.finish(task, done.value)
                return
            except BaseException as problem:
                problem.flow_task = task.id  # type: ignore[attr-defined]
                raise
            value = self.serve(task, request)
            if value is BLOCKED:
                return

    def finish(self, task: Task, result) -> None:
        task.state = "finished"
        task.result = result
        self.completed += 1
        task.finished_at = self.completed
        if task is not self.root:
            self.stop_owned(task, keep=tasks_in(result))
        self.wake_waiters(task)

    def wake_waiters(self, task: Task) -> None:
        for other in list(self.tasks.values()):
            if other.state != "blocked" or other.waiting is None or other.waiting[0] == "call":
                continue
            kind, target = other.waiting
            if kind == "wait" and target is task:
                if task.state == "finished":
                    self.make_ready(other, task.result)
                else:
                    self.make_ready(other, Throw(R.Fault(
                        "task-stopped", f"task {task.id} was stopped; waiting on it can never end")))
            elif kind == "first" and task in target:
                if task.state == "finished":
                    self.send({"op": "choice", "task": self.task_label(other), "picked": task.id})
                    if self.record.replaying:
                        self.record.pass_fact()
                    self.make_ready(other, (target.index(task), task.result))
                elif all(t.state == "stopped" for t in target):
                    self.make_ready(other, Throw(R.Fault("task-stopped", "every task given to task.first was stopped")))

    def make_ready(self, task: Task, value=None) -> None:
        if task.state == "blocked":
            task.state = "ready"
            task.waiting = None
            task.resume_with = value
            self.ready.append(task)

    def release(self, owner: Task, frame: list[Task], keep: set, heir: list[Task] | None) -> None:
        """A call returns (or a task ends): the running tasks its frame still owns are stopped
        and recorded, except the ones it hands back in its result, which change owner."""
        for task in list(frame):
            if task.state not in ("ready", "blocked"):
                continue
            if task in keep and heir is not None:
                task.owner_frame = heir
                heir.append(task)
                continue
            self.stop_task(task, by=owner)
        frame.clear()

    def stop_owned(self, owner: Task, keep: set | None = None) -> None:
        """A task ends: what each of its frames still owns is released."""
        keep = keep or set()
        while owner.frames:
            self.release(owner, owner.frames.pop(), keep, owner.owner_frame)
        owner.frames = [[]]

    # -- requests from generated code

    def serve(self, task: Task, request):
        kind = request[0]
        if kind == "call":
            _, desc, args, type_args = request
            task.calls += 1
            label = self.prefix + "root" if task is self.root else task.id
            call_id = f"{label}#{task.calls}"
            arguments = self.codec.encode_arguments(desc, args, type_args)
            message = {"op": "call", "id": call_id, "task": label, "tool": desc.identity, "arguments": arguments}
            if type_args:
                message["types"] = [{"term": t.term, "defs": t.defs} for t in type_args]
            self.send(message)
            if self.record.replaying:
                self.record.pass_fact()
            self.by_call[call_id] = (task, desc, type_args)
            if task.park is not None:  # what a checkpoint records of a parked task
                task.last_call = {"call": call_id, "tool": desc.identity, "arguments": arguments}
                if type_args:  # a generic Tool's reply, after a resume, decodes at these types
                    task.last_call["types"] = message["types"]
            task.open_calls.append(call_id)
            task.state = "blocked"
            task.waiting = ("call", call_id)
            return BLOCKED
        if kind == "spawn":
            task.spawns += 1
            child = Task(f"{self.task_label(task)}/{task.spawns}", R.rt_fcall(request[1], ()), task)
            if len(request) > 2:
                child.park = request[2] or ()
            child.owner_frame = task.frames[-1]
            task.frames[-1].append(child)
            self.tasks[child.id] = child
            self.ready.append(child)
            return TaskHandle(child)
        if kind == "enter":
            task.frames.append([])
            return None
        if kind == "leave":
            result = request[1]
            frame = task.frames.pop() if len(task.frames) > 1 else []
            self.release(task, frame, tasks_in(result), task.frames[-1])
            return result
        if kind == "wait":
            target = request[1].task
            if target.state == "finished":
                return target.result
            if target.state == "stopped":
                return Throw(R.Fault("task-stopped", f"task {target.id} was stopped; waiting on it can never end"))
            self.block(task, ("wait", target))
            return BLOCKED
        if kind == "first":
            targets = [h.task for h in request[1]]
            if not targets:
                return Throw(R.Fault("empty-first", "task.first was given no tasks"))
            done = [t for t in targets if t.state == "finished"]
            if done:
                winner = min(done, key=lambda t: t.finished_at)
                self.send({"op": "choice", "task": self.task_label(task), "picked": winner.id})
                if self.record.replaying:
                    self.record.pass_fact()
                return (targets.index(winner), winner.result)
            if all(t.state == "stopped" for t in targets):
                return Throw(R.Fault("task-stopped", "every task given to task.first was stopped"))
            self.block(task, ("first", targets))
            return BLOCKED
        if kind == "stop":
            return self.stop(task, request[1].task)
        return Throw(R.Fault("internal", f"unknown request {kind!r}"))

    def block(self, task: Task, waiting) -> None:
        task.state = "blocked"
        task.waiting = waiting

    def stop(self, task: Task, target: Task):
        stopped = V.enum_type("std@v1/task.Stopped", (("Finished", "positional", ()), ("WasRunning", "bare", ())))
        if target.state == "finished":
            self.send({"op": "stop", "task": target.id, "by": self.task_label(task),
                       "found": {"Finished": self.to_wire(target.result)}, "calls": []})
            if self.record.replaying:
                self.record.pass_fact()
            return stopped.make("Finished", target.result)
        if target.state != "stopped":
            self.stop_task(target, by=task)
        return stopped.flow_bare["WasRunning"]

    def stop_task(self, target: Task, by: Task) -> None:
        calls = list(target.open_calls)
        self.send({"op": "stop", "task": target.id, "by": self.task_label(by), "found": "Running", "calls": calls})
        if self.record.replaying:
            self.record.pass_fact(frozenset(calls))
        for call_id in calls:
            self.by_call.pop(call_id, None)
        target.open_calls.clear()
        target.state = "stopped"
        if target in self.ready:
            self.ready.remove(target)
        try:
            target.gen.close()
        except Exception:
            pass
        self.stop_owned(target)
        self.wake_waiters(target)

    def to_wire(self, value):
        try:
            return R.to_json(value)
        except R.Fault:
            return None

    def new_call_id(self, task: Task) -> str:
        task.calls += 1
        return f"{self.task_label(task)}#{task.calls}"
