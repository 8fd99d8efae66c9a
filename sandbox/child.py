"""The sandboxed child: load the generated program and run it under a deterministic scheduler.

The child speaks framed canonical JSON on fds 0 (from the host) and 1 (to the host); that pipe is
its only egress (`host.invoke`). One run, one process:

  host  -> {"op": "load", "modules": [...], "entry": {...}, "args": [...], "tools": {...},
            "checkpoints": policy, "replay": true?}
  child -> {"op": "call", "id": "root#1", "task": "root", "tool": "planner.next",
            "arguments": {...}, "types": {...}?}         a Tool call (the host records it first)
  child -> {"op": "choice", ...} / {"op": "stop", ...}    task.first's pick, a stopped task
  child -> {"op": "place", "function": {...}, "arguments": {...}, "taken": bool}
                                                           a checkpoint place (a root tail call)
  child -> {"op": "wait"}                                  every task waits: admit the next reply
            (or `"wait": true` on the call just before: the same, one message fewer)
  host  -> {"op": "reply", "id": "root#1", "outcome": {...}}
  child -> {"op": "end", "outcome": {"Completed": value} | {"Faulted": {...}}}

Only `wait` needs an answer. Whether a checkpoint is taken at a place follows from the policy
(`every`, `off`, or every Nth place), which the child applies itself and the host checks, so a
place costs no round trip. The child sends in batches: what it has to say goes out when it is
about to wait for the host, before it runs another task, and every `FLUSH_AT` messages.

Replay and resume stream the record instead of answering: after `load` (with `"replay": true`,
and `"places": false` when only places where a checkpoint is taken need reporting)
the host sends `{"op": "record", "facts": [...]}` frames holding, for every recorded fact from the
start (or the checkpoint) on, the kind (`"Call"`, `"Checkpoint"`, ...), or for a Reply
`["Reply", call id, outcome]` (`["Reply", call id]` when the outcome cannot be had: a hole, a lost
value), then `{"op": "record-end", "checkpoints": policy}`. The child steps through the record as
the host does: each call, choice and stop passes one fact (a stop also the Replies to its open
calls that follow it), a wait takes the next Reply, and a place is taken exactly when the next
fact is a Checkpoint. So it never waits for an answer the record already holds; the host checks
every message against the same facts, in order, and reports the first difference. Past the end
of the record the run is live (resume) and waits are answered as above. Everything the child
decides depends only on what the record says, never on when its frames arrive.

Scheduling is deterministic: every runnable task runs until it waits, in task creation order;
only then does the child ask the host for a reply. So the order of replies alone decides every
interleaving, live and in replay.
"""

from __future__ import annotations

import collections
import os
import sys
from types import GeneratorType

from flowdata import codec as abi
from flowdata import framing as channel
from sandbox import lockdown
from sandbox import runtime as R
from flowdata import values as V


class Task:
    """A task: its generator, its place in the id tree, what it waits on."""

    __slots__ = ("id", "gen", "calls", "spawns", "state", "waiting", "result", "owner", "resume_with",
                 "open_calls", "finished_at", "frames", "owner_frame", "park", "last_call")

    def __init__(self, task_id: str, gen, owner: "Task | None") -> None:
        self.id = task_id
        self.gen = gen
        self.calls = 0
        self.spawns = 0
        self.state = "ready"  # ready | blocked | finished | stopped
        self.waiting = None  # ("call", id) | ("wait", task) | ("first", tasks)
        self.result = None
        self.owner = owner
        self.resume_with = None  # the value (or exception) the task resumes with
        self.open_calls: list[str] = []
        self.finished_at = 0  # completion order, for task.first
        #: the calls in progress in this task, innermost last; each owns the tasks it spawned
        #: (frames[0] is the task's own level: what its outermost function owns)
        self.frames: list[list["Task"]] = [[]]
        self.owner_frame: list["Task"] | None = None  # the frame that owns this task
        #: for a task whose work is one Tool call (optionally in a constructor): the constructor
        #: as (type identity, name, function), or () for the bare reply; None: not parkable
        self.park = None
        self.last_call: dict | None = None


BLOCKED = object()
FLUSH_AT = 256  # messages held back at most before they are written


class _Throw:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Scheduler:
    """Deterministic cooperative scheduling: every ready task runs, in the order it became ready,
    until it waits; only then is the host asked for the next reply."""

    def __init__(self, receiver: channel.Receiver, write_fd: int, load: dict) -> None:
        self.receiver = receiver
        self.write_fd = write_fd
        self.load = load
        self.tools: dict = load.get("tools", {})
        self.line_maps: dict[str, list] = {m["filename"]: m.get("line_map", []) for m in load["modules"]}
        self.flow_files: dict[str, str] = {m["filename"]: m.get("flow_file", m["filename"]) for m in load["modules"]}
        self.tasks: dict[str, Task] = {}
        self.ready: list[Task] = []
        self.by_call: dict[str, tuple[Task, object, tuple]] = {}
        self.completed = 0
        self.prefix = ""
        self.checkpoints = 0
        #: facts the run has written since Start or the last checkpoint: a place with none adds
        #: nothing a checkpoint could let go of, so none is taken there (pure loops stay fast)
        self.facts_since = 0
        self.root: Task | None = None
        #: top-level functions a checkpoint can name: function object -> description
        self.functions: dict = {}
        self.out: list[dict] = []  # messages not yet written
        #: replaying: the recorded facts received and not yet stepped through
        self.replaying = bool(load.get("replay"))
        self.record: collections.deque = collections.deque()
        #: where the run is live: the checkpoint policy and the places passed so far
        self.policy = str(load.get("checkpoints", "off"))
        self.live_places = 0
        #: replaying: report places where no checkpoint is taken too (`flow history` lists them)
        self.every_place = bool(load.get("places", True))
        #: per Tool, what encoding its arguments and decoding its replies needs (no type args)
        self.codecs: dict = {}
        #: per checkpoint function: what a place sends, and how each argument is encoded
        self.plans: dict = {}

    # -- messages

    def send(self, message: dict) -> None:
        op = message["op"]
        if op == "call" or op == "choice" or op == "stop":
            self.facts_since += 1
        self.out.append(message)
        if len(self.out) >= FLUSH_AT or (not self.replaying and (op == "choice" or op == "stop")):
            self.flush()

    def flush(self) -> None:
        if self.out:
            out, self.out = self.out, []
            channel.send_many(self.write_fd, out)

    def recv(self) -> dict:
        if not self.receiver.buffered():
            self.flush()  # about to wait for the host: it must have everything said so far
        message = self.receiver.recv()
        if message is None:
            os._exit(0)  # the host went away
        return message

    # -- the record (replay and resume)

    def _fill(self) -> bool:
        """Receive until a recorded fact is at hand (True) or the record has ended (False)."""
        while not self.record:
            message = self.recv()
            op = message.get("op")
            if op == "record":
                self.record.extend(message["facts"])
            elif op == "record-end":
                self.replaying = False
                self.policy = str(message.get("checkpoints", "off"))
                return False
            else:
                raise R.Fault("internal", f"the host sent {op!r} while the record was being read")
        return True

    def next_fact(self):
        """The next recorded fact (not taken), or None: the record has ended and the run is live."""
        if not self.replaying or (not self.record and not self._fill()):
            return None
        return self.record[0]

    def pass_fact(self, closed=()) -> None:
        """A call, choice or stop was sent: it stands for the next recorded fact, and a stop also
        for the Replies to the calls it closed that follow it (they reach no value)."""
        if self.next_fact() is None:
            return
        self.record.popleft()
        if closed:
            while True:
                item = self.next_fact()
                if item is None or type(item) is not list or item[1] not in closed:
                    return
                self.record.popleft()

    def stuck(self, why: str) -> None:
        """The record holds what cannot be handed over here. The host, checking the same facts,
        reports why; this is only a safety net against a child and host that disagree."""
        self.send({"op": "stuck", "message": why})
        self.flush()
        while self.receiver.recv() is not None:
            pass
        os._exit(0)

    def live_place_taken(self) -> bool:
        self.live_places += 1
        policy = self.policy
        if policy == "every":
            return True
        return policy.isdigit() and int(policy) > 0 and self.live_places % int(policy) == 0

    # -- running

    def run(self, entry_fn, args: tuple) -> None:
        root = self.root if self.root is not None else Task("root", None, None)  # a restore made it
        self.root = root
        self.tasks["root"] = root
        root.gen = self.root_driver(entry_fn, args)
        self.ready.append(root)
        try:
            self.loop()
            result = root.result
            self.stop_owned(root)
            self.send({"op": "end", "outcome": {"Completed": self.encode_result(result)}})
        except R.Fault as fault:
            self.send({"op": "end", "outcome": {"Faulted": self.fault_data(fault, fault.kind, fault.message)}})
        except RecursionError as problem:
            self.send({"op": "end", "outcome": {"Faulted": self.fault_data(
                problem, "limit", "the call depth limit was exceeded (a call that is not a tail call recursed too deep)")}})
        except MemoryError as problem:
            self.send({"op": "end", "outcome": {"Faulted": self.fault_data(problem, "limit", "out of memory")}})
        except V.IntOverLimit as problem:
            # Int arithmetic is Python's own; an Int over the limit is caught where it is turned
            # into text or leaves the evaluator (a result, a Tool's arguments, interpolation).
            self.send({"op": "end", "outcome": {"Faulted": self.fault_data(problem, "limit", str(problem))}})
        except V.DecimalOverLimit as problem:
            self.send({"op": "end", "outcome": {"Faulted": self.fault_data(problem, "limit", str(problem))}})
        finally:
            try:
                self.flush()
            except OSError:
                pass  # the host is gone

    def root_driver(self, fn, args: tuple):
        """The root task: the entry, with its tail calls bounced here (where checkpoints go)."""
        result = fn(*args)
        while True:
            if _is_generator(result):
                result = yield from result
            if type(result) is R.Tail:
                self.checkpoint_place(result)
                result = result.fn(*result.args)
                continue
            return result

    def checkpoint_place(self, tail) -> None:
        """A tail call made by the root task's outermost function: a checkpoint can be taken here
        when the function is a top-level one whose arguments are data and no other task is live.
        Whether it is taken follows from the record while replaying (a Checkpoint is next), and
        from the policy where the run is live; the host checks the same."""
        if self.facts_since == 0:
            return
        if self.replaying and not self.every_place:
            following = self.next_fact()
            if following is not None and following != "Checkpoint":
                return  # not taken, and the host asked to hear only of places that are
        plan = self.plans.get(tail.fn)
        if plan is None:
            entry = self.functions.get(tail.fn)
            if entry is None:
                return
            plan = self.plans[tail.fn] = _place_plan(entry)
        root = self.root
        live = {t for t in self.tasks.values() if t is not root and (t.state == "ready" or t.state == "blocked")}
        # Other live tasks are allowed only parked on their only Tool call, and carried in the
        # arguments (so the checkpoint holds them: their call, constructor and data).
        if live and any(not _parked(t) for t in live):
            return
        carried: set = set()
        arguments = {}
        try:
            for (name, encode), v in zip(plan[1], tail.args):
                if encode is None:  # a task parameter
                    if type(v) is not TaskHandle or v.task not in live:
                        return
                    carried.add(v.task)
                    arguments[name] = _parked_record(v.task)
                else:
                    arguments[name] = encode(v)
        except Exception:
            return
        if carried != live:
            return
        if self.replaying and self.next_fact() is not None:
            taken = self.record[0] == "Checkpoint"
            if taken:
                self.record.popleft()
        else:
            taken = self.live_place_taken()
        self.send({"op": "place", "function": plan[0], "arguments": arguments, "taken": taken})
        if taken:
            self.begin_after_checkpoint(self.checkpoints + 1)

    def begin_after_checkpoint(self, n: int) -> None:
        """Ids after the run's nth checkpoint carry `cn:`, and counters restart under it."""
        self.checkpoints = n
        self.prefix = f"c{n}:"
        self.facts_since = 0
        self.root.calls = 0
        self.root.spawns = 0

    def task_label(self, task: Task) -> str:
        return self.prefix + "root" if task is self.root else task.id

    def loop(self) -> None:
        while True:
            while self.ready:
                task = self.ready.pop(0)
                if self.out and not self.replaying:
                    self.flush()  # a call made live goes out before another task computes
                self.step(task)
                if self.root.state == "finished":
                    return
            if not self.by_call:
                blocked = sorted(t.id for t in self.tasks.values() if t.state == "blocked")
                raise R.Fault("deadlock", "no task can proceed: " + ", ".join(blocked) + " wait on each other "
                              "and no call is out")
            out = self.out
            if out and out[-1]["op"] == "call" and "wait" not in out[-1]:
                out[-1]["wait"] = True  # the same as a `wait` after it, one message fewer
            else:
                self.send({"op": "wait"})
            self.receive_reply()

    def receive_reply(self) -> None:
        if self.replaying:
            item = self.next_fact()
            if item is not None:
                self.record.popleft()
                if type(item) is not list or len(item) < 3:
                    self.stuck(f"the record holds {item!r} where the program waits for a reply")
                if item[1] not in self.by_call:
                    self.stuck(f"the record replies to {item[1]}, which is not open")
                self.admit(item[1], item[2])
                return
        while True:
            message = self.recv()
            if message.get("op") != "reply":
                continue
            if message["id"] not in self.by_call:
                continue  # a reply for a call closed by a stop
            self.admit(message["id"], message["outcome"])
            return

    def admit(self, call_id: str, outcome) -> None:
        task, desc, type_args = self.by_call.pop(call_id)
        task.open_calls.remove(call_id)
        try:
            value = self.decode_reply(desc, outcome, type_args)
        except R.Fault as fault:
            value = _Throw(fault)
        self.make_ready(task, value)

    def step(self, task: Task) -> None:
        """Run one task until it blocks or finishes."""
        value = task.resume_with
        task.resume_with = None
        while True:
            try:
                if type(value) is _Throw:
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
            self.stop_owned(task, keep=_tasks_in(result))
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
                    self.make_ready(other, _Throw(R.Fault(
                        "task-stopped", f"task {task.id} was stopped; waiting on it can never end")))
            elif kind == "first" and task in target:
                if task.state == "finished":
                    self.send({"op": "choice", "task": self.task_label(other), "picked": task.id})
                    if self.replaying:
                        self.pass_fact()
                    self.make_ready(other, (target.index(task), task.result))
                elif all(t.state == "stopped" for t in target):
                    self.make_ready(other, _Throw(R.Fault("task-stopped", "every task given to task.first was stopped")))

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
            arguments = self.encode_arguments(desc, args, type_args)
            message = {"op": "call", "id": call_id, "task": label, "tool": desc.identity, "arguments": arguments}
            if type_args:
                message["types"] = [{"term": t.term, "defs": t.defs} for t in type_args]
            self.send(message)
            if self.replaying:
                self.pass_fact()
            self.by_call[call_id] = (task, desc, type_args)
            if task.park is not None:  # what a checkpoint records of a parked task
                task.last_call = {"call": call_id, "tool": desc.identity, "arguments": arguments}
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
            self.release(task, frame, _tasks_in(result), task.frames[-1])
            return result
        if kind == "wait":
            target = request[1].task
            if target.state == "finished":
                return target.result
            if target.state == "stopped":
                return _Throw(R.Fault("task-stopped", f"task {target.id} was stopped; waiting on it can never end"))
            self.block(task, ("wait", target))
            return BLOCKED
        if kind == "first":
            targets = [h.task for h in request[1]]
            if not targets:
                return _Throw(R.Fault("empty-first", "task.first was given no tasks"))
            done = [t for t in targets if t.state == "finished"]
            if done:
                winner = min(done, key=lambda t: t.finished_at)
                self.send({"op": "choice", "task": self.task_label(task), "picked": winner.id})
                if self.replaying:
                    self.pass_fact()
                return (targets.index(winner), winner.result)
            if all(t.state == "stopped" for t in targets):
                return _Throw(R.Fault("task-stopped", "every task given to task.first was stopped"))
            self.block(task, ("first", targets))
            return BLOCKED
        if kind == "stop":
            return self.stop(task, request[1].task)
        return _Throw(R.Fault("internal", f"unknown request {kind!r}"))

    def block(self, task: Task, waiting) -> None:
        task.state = "blocked"
        task.waiting = waiting

    def stop(self, task: Task, target: Task):
        stopped = V.enum_type("std@v1/task.Stopped", (("Finished", "positional", ()), ("WasRunning", "bare", ())))
        if target.state == "finished":
            self.send({"op": "stop", "task": target.id, "by": self.task_label(task),
                       "found": {"Finished": self.to_wire(target.result)}, "calls": []})
            if self.replaying:
                self.pass_fact()
            return stopped.make("Finished", target.result)
        if target.state != "stopped":
            self.stop_task(target, by=task)
        return stopped.flow_bare["WasRunning"]

    def stop_task(self, target: Task, by: Task) -> None:
        calls = list(target.open_calls)
        self.send({"op": "stop", "task": target.id, "by": self.task_label(by), "found": "Running", "calls": calls})
        if self.replaying:
            self.pass_fact(frozenset(calls))
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

    # -- values across the pipe

    def codec(self, identity: str) -> tuple:
        """A Tool's argument encoders and reply decoder (for calls without type arguments)."""
        codec = self.codecs.get(identity)
        if codec is None:
            tool = self.tools[identity]
            defs = tool.get("types", {})
            codec = ([abi.encoder(p["type"], defs) for p in tool["params"]],
                     abi.outcome_decoder(tool["ok"], tool.get("err"), defs), tool.get("err") is None,
                     abi.decoder(tool["ok"], defs))
            self.codecs[identity] = codec
        return codec

    def encode_arguments(self, desc, args, type_args) -> dict:
        if not type_args and desc.identity in self.tools:
            encoders = self.codec(desc.identity)[0]
            if len(encoders) >= len(desc.params):
                return {name: encode(value) for name, value, encode in zip(desc.params, args, encoders)}
        tool = self.tools.get(desc.identity)
        out = {}
        for index, (name, value) in enumerate(zip(desc.params, args)):
            if tool is None:
                out[name] = R.to_json(value)
                continue
            term = tool["params"][index]["type"]
            defs = dict(tool.get("types", {}))
            term = _substitute(term, tool, type_args, defs)
            out[name] = abi.encode(value, term, defs)
        return out

    def decode_reply(self, desc, outcome: dict, type_args):
        if type_args:
            tool = self.tools[desc.identity]
            defs = dict(tool.get("types", {}))
            ok = _substitute(tool["ok"], tool, type_args, defs)
            err = tool.get("err")
            if err is not None:
                err = _substitute(err, tool, type_args, defs)
            result = abi.decode_outcome(outcome, ok, err, defs)
            faults = err is None
        else:
            _, decode, faults, decode_ok = self.codec(desc.identity)
            if faults and type(outcome) is dict and len(outcome) == 1 and "Ok" in outcome:
                # The common reply of a Tool without Result: its value, as decode_outcome would
                # give it (anything else goes the full way, which says why it is a BadReply).
                try:
                    return decode_ok(outcome["Ok"])
                except abi.DecodeError:
                    pass
            result = decode(outcome)
        if faults:
            if result[0] == "Ok":
                return result[1]
            problem = result[1]
            raise R.Fault("tool-problem", f"{desc.identity} ended in {problem[0]}: {problem[1] if len(problem) > 1 else ''}")
        return result

    def encode_result(self, value):
        entry = self.load["entry"]
        return abi.encode(value, entry["result"], entry.get("defs", {}))

    # -- faults

    def fault_data(self, problem: BaseException, kind: str, message: str) -> dict:
        location = None
        tb = problem.__traceback__
        while tb is not None:  # as traceback.walk_tb, which the locked-down child cannot import
            filename, line = tb.tb_frame.f_code.co_filename, tb.tb_lineno
            tb = tb.tb_next
            if filename in self.line_maps:
                mapped = _map_line(self.line_maps[filename], line)
                if mapped is not None:
                    location = {"file": self.flow_files[filename], "line": mapped[0], "column": mapped[1]}
        return {"kind": kind, "message": message, "location": location,
                "task": getattr(problem, "flow_task", "root")}


class TaskHandle:
    """A `Task<T>` value as Flow code holds it."""

    __slots__ = ("task",)

    def __init__(self, task: Task) -> None:
        self.task = task

    def __repr__(self) -> str:
        return f"Task({self.task.id})"


def _place_plan(entry: dict) -> tuple:
    """A checkpoint function's `function` member and (name, encoder or None for a task) per
    parameter."""
    return ({"module": entry["module"], "name": entry["name"]},
            [(p["name"], None if p.get("task") else abi.encoder(p["type"], entry["defs"])) for p in entry["params"]])


def _parked(task: Task) -> bool:
    return task.park is not None and task.state == "blocked" and task.waiting is not None \
        and task.waiting[0] == "call" and task.calls == 1


def _parked_record(task: Task) -> dict:
    ctor = [task.park[0], task.park[1]] if task.park else None
    return dict(task.last_call, ctor=ctor)


def _parked_gen(ctor):
    value = yield None
    return ctor(value) if ctor is not None else value


def restore_parked(scheduler: "Scheduler", record: dict, namespaces: dict) -> "TaskHandle":
    """A task parked in a checkpoint, waiting again on the call it made (under its own id)."""
    ctor = None
    if record.get("ctor"):
        identity, name = record["ctor"]
        cls = next(c for (ident, _), c in V._ENUM_CLASSES.items() if ident == identity)
        ctor = R.rt_ctor(cls, name)
    gen = _parked_gen(ctor)
    next(gen)
    task = Task(record["call"].rsplit("#", 1)[0], gen, scheduler.root)
    task.state = "blocked"
    task.waiting = ("call", record["call"])
    task.calls = 1
    task.park = tuple(record["ctor"]) + (ctor,) if ctor else ()
    task.last_call = {"call": record["call"], "tool": record["tool"], "arguments": record["arguments"]}
    task.open_calls = [record["call"]]
    scheduler.tasks[task.id] = task
    params = tuple(p["name"] for p in scheduler.tools.get(record["tool"], {}).get("params", []))
    scheduler.by_call[record["call"]] = (task, R.ToolDesc(record["tool"], params), ())
    return TaskHandle(task)


def _tasks_in(value) -> set:
    found: set = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is TaskHandle:
            found.add(v.task)
        elif isinstance(v, tuple):
            stack.extend(v)
    return found


def _substitute(term, tool: dict, type_args, defs: dict):
    if not type_args:
        return term
    names = tool.get("type_params", [])
    mapping = {}
    for name, arg in zip(names, type_args):
        mapping[name] = arg.term
        defs.update(arg.defs)
    return _subst(term, mapping)


def _subst(term, mapping):
    if isinstance(term, dict):
        if "Param" in term:
            return mapping.get(term["Param"], term)
        return {k: _subst(v, mapping) for k, v in term.items()}
    if isinstance(term, list):
        return [_subst(v, mapping) for v in term]
    return term


def _map_line(line_map: list, line: int):
    best = None
    for py, fl, fc in line_map:
        if py <= line:
            best = (fl, fc)
        else:
            break
    return best


def _is_generator(value) -> bool:
    return type(value) is GeneratorType


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


def main() -> None:
    read_fd, write_fd = channel.claim_stdio()
    receiver = channel.Receiver(read_fd)
    config = lockdown.parse_argv(sys.argv[1:])
    # Imported before the first message, not after: the host checks the program and opens the
    # run while this process starts, so these imports usually end before the load arrives.
    from sandbox.intrinsics import INTRINSICS
    from sandbox.loader import SandboxRefusal, load as load_modules

    load = receiver.recv()
    if load is None or load.get("op") not in ("load", "test"):
        return
    sys.setrecursionlimit(12_000)

    injected = dict(R.names())
    injected.update(INTRINSICS)
    injected.update(R.TASK_INTRINSICS)
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
    lock_down(config, write_fd)
    if load["op"] == "test":
        channel.send(write_fd, {"op": "results", "results": run_tests(load, namespaces, counter)})
        return
    scheduler = Scheduler(receiver, write_fd, load)
    by_key = {}
    for key, description in load.get("functions", {}).items():
        module, name = key.rsplit(".", 1)
        function = getattr(namespaces[module[2:]], name, None)
        if function is not None:
            scheduler.functions[function] = description
            by_key[key] = (function, description)
    start = load.get("start")
    if start is not None:
        # Resume or replay from a checkpoint: the whole future is the function and its arguments.
        fn, description = by_key[start["function"]]
        scheduler.root = Task("root", None, None)
        args = tuple(restore_parked(scheduler, start["arguments"][p["name"]], namespaces) if p.get("task")
                     else abi.decode(start["arguments"][p["name"]], p["type"], description["defs"])
                     for p in description["params"])
        for task in scheduler.tasks.values():
            task.owner_frame = scheduler.root.frames[0]
            scheduler.root.frames[0].append(task)
        scheduler.prefix = f"c{start['checkpoint']}:"
        scheduler.checkpoints = start["checkpoint"]
    else:
        entry = load["entry"]
        fn = getattr(namespaces[entry["module"][2:]], entry["function"])
        defs = entry.get("defs", {})
        args = tuple(abi.decode(value, term, defs) for value, term in zip(load["args"], entry["params"]))
    scheduler.run(fn, args)


if __name__ == "__main__":
    main()
