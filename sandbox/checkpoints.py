"""Checkpoints: where one can be taken, whether it is, and how it is encoded and restored.

A place is a tail call made by the root task's outermost function (`Scheduler.root_driver`). A
checkpoint can be taken there when the function is a top-level one whose arguments are data, and
every other live task is parked on its only Tool call and carried in those arguments (so the
checkpoint holds them: their call, constructor and data). Whether it is taken follows from the
record while replaying (a Checkpoint is next) and from the policy where the run is live (`every`,
`off`, or every Nth place); the host checks the same. A resume or a replay from a checkpoint
starts from the function and its arguments alone, the parked tasks waiting again on their calls;
a parked task whose reply had arrived, and that finished on it, is carried with that reply (and
its rank in the order such tasks finished) and finishes on it again.
"""

from __future__ import annotations

from flowdata import codec as abi
from sandbox import runtime as R
from flowdata import values as V
from sandbox.record import Record
from sandbox.tasks import Task, TaskHandle


class Checkpoints:
    """The run's checkpoint places: their plans, the count taken, the live policy's progress."""

    def __init__(self, load: dict, record: Record) -> None:
        self.record = record
        self.count = 0  # checkpoints taken (or the one the run starts from)
        #: the wire's fact count at the start or the last checkpoint (`Wire.facts`)
        self.mark = 0
        self.live_places = 0  # places passed where the run is live
        #: replaying: report places where no checkpoint is taken too (`flow history` lists them)
        self.every_place = bool(load.get("places", True))
        #: top-level functions a checkpoint can name: function object -> description
        self.functions: dict = {}
        #: per checkpoint function: what a place sends, and how each argument is encoded
        self.plans: dict = {}

    def plan(self, fn) -> tuple | None:
        """The plan of a place that calls `fn`, or None: no place to report here (not a
        top-level function, or a replay that hears only of places where one is taken and the
        record takes none)."""
        record = self.record
        if record.replaying and not self.every_place:
            following = record.next_fact()
            if following is not None and following != "Checkpoint":
                return None
        plan = self.plans.get(fn)
        if plan is None:
            entry = self.functions.get(fn)
            if entry is None:
                return None
            plan = self.plans[fn] = _place_plan(entry)
        return plan

    def place(self, plan: tuple, args: tuple, live: set) -> dict | None:
        """The `place` message of a tail call to the plan's function with `args` while the tasks
        `live` (other than the root) run, or None where no checkpoint can be taken."""
        if live and any(not _parked(t) for t in live):
            return None
        carried: set = set()
        finished: dict = {}  # task -> its record, for tasks that finished on their reply
        arguments = {}
        try:
            for (name, encode), v in zip(plan[1], args):
                if encode is None:  # a task parameter
                    if type(v) is not TaskHandle:
                        return None
                    task = v.task
                    if task in live:
                        carried.add(task)
                        arguments[name] = _parked_record(task)
                    elif _finished_on_reply(task):
                        arguments[name] = finished[task] = dict(_parked_record(task), reply=task.reply)
                    else:
                        return None
                else:
                    arguments[name] = encode(v)
        except Exception:
            return None
        if carried != live:
            return None
        # Their order of finishing, which task.first decides by, is part of the state.
        for rank, task in enumerate(sorted(finished, key=lambda t: t.finished_at), 1):
            finished[task]["finished"] = rank
        taken = self.record.take_checkpoint()
        if taken is None:
            taken = self.live_place_taken()
        return {"op": "place", "function": plan[0], "arguments": arguments, "taken": taken}

    def live_place_taken(self) -> bool:
        self.live_places += 1
        policy = self.record.policy
        if policy == "every":
            return True
        return policy.isdigit() and int(policy) > 0 and self.live_places % int(policy) == 0


def restore(start: dict, description: dict, root: Task, tools: dict) -> tuple[tuple, list]:
    """A checkpoint's arguments decoded, for the function `description` describes: (the
    arguments, the parked tasks among them with their Tools), the tasks owned by `root`."""
    args = []
    parked = []
    for p in description["params"]:
        value = start["arguments"][p["name"]]
        if p.get("task"):
            task, desc = _parked_task(value, root, tools)
            parked.append((task, desc))
            args.append(TaskHandle(task))
        else:
            args.append(abi.decode(value, p["type"], description["defs"]))
    return tuple(args), parked


def _place_plan(entry: dict) -> tuple:
    """A checkpoint function's `function` member and (name, encoder or None for a task) per
    parameter."""
    return ({"module": entry["module"], "name": entry["name"]},
            [(p["name"], None if p.get("task") else abi.encoder(p["type"], entry["defs"])) for p in entry["params"]])


def _parked(task: Task) -> bool:
    return task.park is not None and task.state == "blocked" and task.waiting is not None \
        and task.waiting[0] == "call" and task.calls == 1


def _finished_on_reply(task: Task) -> bool:
    """A parkable task that made its one call and finished on the reply (its constructor's data
    computed): a checkpoint carries it by its call and that reply."""
    return task.park is not None and task.state == "finished" and task.calls == 1 and task.reply is not None \
        and task.last_call is not None


def _parked_record(task: Task) -> dict:
    ctor = [task.park[0], task.park[1]] if task.park else None
    return dict(task.last_call, ctor=ctor)


def _parked_gen(ctor):
    value = yield None
    return ctor(value) if ctor is not None else value


def _parked_task(record: dict, owner: Task, tools: dict) -> tuple[Task, R.ToolDesc]:
    """A task parked in a checkpoint, waiting again on the call it made (under its own id), and
    the Tool its call went to."""
    ctor = None
    if record.get("ctor"):
        identity, name = record["ctor"]
        cls = next(c for (ident, _), c in V._ENUM_CLASSES.items() if ident == identity)
        ctor = R.rt_ctor(cls, name)
    gen = _parked_gen(ctor)
    next(gen)
    task = Task(record["call"].rsplit("#", 1)[0], gen, owner)
    task.state = "blocked"
    task.waiting = ("call", record["call"])
    task.calls = 1
    task.park = tuple(record["ctor"]) + (ctor,) if ctor else ()
    task.last_call = {"call": record["call"], "tool": record["tool"], "arguments": record["arguments"]}
    if record.get("types"):
        task.last_call["types"] = record["types"]
    task.open_calls = [record["call"]]
    if "reply" in record:  # it had finished on this reply: `Scheduler.resume_at` finishes it again
        task.reply = record["reply"]
        task.finished_at = record.get("finished", 0)
    params = tuple(p["name"] for p in tools.get(record["tool"], {}).get("params", []))
    return task, R.ToolDesc(record["tool"], params)
