"""What the child's scheduler runs: a task (its generator, its place in the id tree, what it waits
on) and the `Task<T>` value Flow code holds for one. Apart from the scheduler (`sandbox.scheduler`)
so that checkpoints (`sandbox.checkpoints`), which record and restore parked tasks, need not
import the scheduler that owns them."""

from __future__ import annotations

BLOCKED = object()  # what serving a request returns when the task cannot go on yet


class Task:
    """A task: its generator, its place in the id tree, what it waits on."""

    __slots__ = ("id", "gen", "calls", "spawns", "state", "waiting", "result", "owner", "resume_with",
                 "open_calls", "finished_at", "frames", "owner_frame", "park", "last_call", "reply")

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
        #: a parkable task's reply as the wire carried it, once admitted: a checkpoint carries a
        #: task that finished on it by its call and this outcome (the history seed: a parked task
        #: counts whether or not its reply has arrived)
        self.reply = None


class Throw:
    """A task resumes by raising this exception where it waited (a fault it is answered with),
    rather than receiving a value."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class TaskHandle:
    """A `Task<T>` value as Flow code holds it."""

    __slots__ = ("task",)

    def __init__(self, task: Task) -> None:
        self.task = task

    def __repr__(self) -> str:
        return f"Task({self.task.id})"


def tasks_in(value) -> set:
    """The tasks a value holds handles of (in tuples, as records and lists are)."""
    found: set = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is TaskHandle:
            found.add(v.task)
        elif isinstance(v, tuple):
            stack.extend(v)
    return found
