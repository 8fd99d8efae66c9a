"""`flow run`: check, bind, decode the input, then drive the sandboxed program, recording history.

Order of work (execution seed, Entry): the program is checked, every Tool the entry can reach is
bound, and the input is decoded before the first fact; any failure refuses the run and records
nothing. Then Start is written, the child is started, and each message from the child is
recorded before its consequence: a Call before the call is dispatched, a Reply before the
program sees it, End once.
"""

from __future__ import annotations

import hashlib
import os
import queue
import secrets
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import flowc
from flowc.compiled import Compiled, Function
from flowc.diagnostics import Diagnostic
from flowc.diagnostics import M
from flowc.emit import Generated
from flowc.compile_cache import CompileCache
from flowc.disk import DiskChecks
from flowdata import canonical
from flowrt import bindings as B
from flowc.files import read_text
from flowrt.store import RunLog, open_store, StorageError
from flowrt.halts import DeadlineHalt, HaltRequested, halt_reason
from flowdata.codec import TermError
from flowrt.bind import RunHost, bind, close_bound
from flowrt.refusal import Refused, _line_of, refuse
from flowrt.run_input import decode_input
from flowrt.tool_types import Typed, ToolTypes
from flowrt import run_hub, timers
from flowrt.admission import admitted_by


HALT_TICK = 0.05  # seconds between looks at a run's `halt` event while it waits for a reply
TIMES_WAIT = 0.05  # seconds a host waits for a reply before it records its facts' times
#: This process's compiles of the programs it runs: a program run again unchanged (every file it
#: read reads the same) is not checked or generated again (flowc/compile_cache.py)
COMPILES = CompileCache()


@dataclass
class RunOutcome:
    """What `flow run` reports; the CLI renders it and exits with `exit_code`."""

    exit_code: int
    run_id: str | None = None
    output: bytes | None = None  # canonical JSON of the entry's result
    diagnostics: list[Diagnostic] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)
    fault: dict | None = None
    message: str | None = None
    #: (the entry's result type term, its defs), for an embedding that decodes `output`
    result_type: tuple[Any, dict] | None = None
    #: for a pause: each pending call's (Tool, `Typed`), for the shape of the reply it expects
    pending_types: dict[str, tuple[str, Typed]] = field(default_factory=dict)
    #: a run let go of while it waits on timers (exit 3): the earliest deadline (ns since the
    #: epoch) and each open timer's deadline by call id; `pending` lists the other open calls
    sleeping_until: int | None = None
    timers: dict[str, int] | None = None
    #: a supplied reply refused before admission (flowrt/reply_check.py), as data
    refusal: dict | None = None
    #: queued for a worker (`--detach`), not driven here (exit 0)
    queued: bool = False


# ---- preparing a run ---------------------------------------------------------------------------


@dataclass
class Prepared:
    compiled: Compiled
    entry: Function
    args_json: dict[str, Any]
    tools: dict[str, dict]  # identity -> description (flow tools shape) + type_params
    implementations: dict[str, B.Implementation]  # identity -> implementation
    generated: Generated
    #: the approval decisions binding made, written as host records once the run has a store
    approvals: list = field(default_factory=list)


def prepare(path: str, entry_name: str, input_text: str, *, python_tools: dict | None = None,
            allow: bool = False, ask=None, read=read_text, host: "RunHost | None" = None,
            manifest_dir: str | None = None, jail: str | None = None) -> Prepared:
    """Check, bind and decode the input: everything that can refuse a run before its Start.
    `read` reads the program's files (a nested run's reads its submitted source); `host` is what
    the host's own std Tools need to know of the run (`std@v1/runner`); `manifest_dir` is where
    flow.toml is (default: beside `path`)."""
    # Only the file reader reads real files; a nested run's reader serves its submitted source.
    compiled = flowc.compile(path, read, disk=DiskChecks(jail) if read is read_text else None, cache=COMPILES)
    if not compiled.ok:
        raise Refused(list(compiled.diagnostics), compiled.sources())
    fn = compiled.entry(entry_name)
    root_file = compiled.modules[0].file if fn is None else fn.file
    if fn is None or not fn.pub:
        raise refuse(M.entry_not_found(entry=entry_name, root_file=root_file),
                     None if fn is None else _line_of(fn.file, fn.line), compiled.sources())
    for p in fn.params:
        if p.type is None or p.task or fn.generic:
            raise refuse(M.not_data_entry_input(name=p.name), _line_of(fn.file, fn.line), compiled.sources())
    args_json = decode_input(fn, input_text)
    tools = compiled.reachable_tools(fn.identity)
    approvals: list = []
    implementations = bind(compiled, path, tools, python_tools or {}, allow=allow, ask=ask, host=host,
                           manifest_dir=manifest_dir, approvals=approvals)
    return Prepared(compiled, fn, args_json, tools, implementations, compiled.generated, approvals)


def new_run_id() -> str:
    return "run-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def source_digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def recorded_modules(compiled: Compiled) -> tuple[list[dict], list[str]]:
    """What Start records of a program's modules (identity and source hash), and the sources
    the store keeps by hash, so resume and replay never need the working files."""
    modules = [{"module": m.identity, "hash": source_digest(m.source)} for m in compiled.modules]
    return modules, [m.source for m in compiled.modules]


def start_fields(prepared: Prepared) -> tuple[dict, list[str]]:
    compiled = prepared.compiled
    modules, sources = recorded_modules(compiled)
    fields = {
        "program": compiled.identity,
        "std": "std@v1",
        "entry": {"module": prepared.entry.module, "function": prepared.entry.name},
        "input": prepared.args_json,
        "modules": modules,
    }
    if compiled.pins:
        fields["pins"] = [{"repo": repo, "commit": commit} for repo, commit in compiled.pins]
    return fields, sources


def load_message(prepared: Prepared) -> dict:
    entry = prepared.entry
    return {
        "op": "load",
        "modules": [{"key": m.key, "filename": m.filename, "source": m.source, "flow_file": m.flow_file,
                     "line_map": [list(x) for x in m.line_map]} for m in prepared.generated.modules],
        "entry": {"module": entry.key.split(".", 1)[0], "function": entry.key.split(".", 1)[1],
                  "params": [p.type for p in entry.params], "result": entry.result, "defs": dict(entry.defs)},
        "args": [prepared.args_json[p.name] for p in entry.params],
        "tools": prepared.tools,
        "functions": checkpoint_functions(prepared.compiled),
    }


def checkpoint_functions(compiled: Compiled) -> dict[str, dict]:
    """The top-level functions a checkpoint may name, keyed as the child finds them
    (`<module key>.<python name>`): non-generic, with a body, every parameter data or a task."""
    return {key: {"module": fn.module, "name": fn.name,
                  "params": [{"name": p.name, "task": True} if p.task else {"name": p.name, "type": p.type}
                             for p in fn.params],
                  "defs": dict(fn.defs)}
            for key, fn in compiled.checkpoint_functions().items()}


def let_go_record(store: RunLog, outcome: RunOutcome) -> None:
    """The host's decision for a run it lets go of with exit 3: `sleeping` (waiting on timers,
    flowrt/timers.py) or `paused`. Written while the host still holds the run (before `close`
    drops the lock), so a reader that finds no appender finds the decision too, and never takes
    the pause for a crash."""
    if outcome.sleeping_until is not None:
        store.host_record(timers.sleeping_record(store.head, outcome.sleeping_until, outcome.timers or {},
                                                 outcome.pending))
    else:
        store.host_record({"kind": "paused", "head": store.head, "pending": outcome.pending})


class Driver:
    """Runs the child and records facts. One per live run (and per resume)."""

    def __init__(self, prepared: Prepared, store: RunLog, run_id: str, child=None,
                 checkpoints: str = "every") -> None:
        self.prepared = prepared
        self.policy = checkpoints
        self.places = 0
        self.store = store
        self.run_id = run_id
        hub = run_hub.current()
        #: SimpleQueue (C): a reply's hop from a reader thread costs ~4 µs less than through queue.Queue;
        #: in a run hub, the hub's queue, whose wait lets the hub's other runs go on
        self.replies: "queue.SimpleQueue[tuple[str, Any]] | run_hub.HubQueue" = \
            queue.SimpleQueue() if hub is None else hub.queue()
        #: a call the program waits on alone may be served on the driving thread (in a run hub,
        #: only by a Tool that never holds it for long: `serves_in_hub`)
        self.serve_inline = hub is None
        self.open_calls: dict[str, dict] = {}  # call id -> {"tool", "pending"}
        self.arrived: list[tuple[str, Any]] = []  # replies taken off the queue, not yet admitted
        self.child = child
        #: facts to write in one write (and one fsync) with the next fact: a Checkpoint, whose
        #: consequence is only the facts after it
        self.deferred: list[tuple[str, dict]] = []
        #: a call to serve on this thread at the next wait (see `on_call`)
        self.inline: tuple | None = None
        #: calls recorded but not yet synced, so not yet sent: the calls of one frame of the
        #: child's share one sync (group commit), and each goes out only once it is durable
        #: (`send_held`)
        self.held: list[tuple] = []
        self.kill_after = kill_target()
        #: per (Tool, type arguments): the types its replies decode against, their schemas, and
        #: the `admitter` made for them
        self.tool_types = ToolTypes(prepared.tools)
        #: set from another thread to halt the run as an interrupt does: noticed within a poll
        #: tick while the host waits on the child or for a reply, and after a Tool call served
        #: on the host's own thread returns
        self.halt: threading.Event | None = None
        #: the deadline (ns since the epoch) of each open `clock.sleep` the host serves itself
        self.timers: dict[str, int] = {}
        #: let go of the run (a `sleeping` decision) when it waits only on timers and pending
        #: calls, the earliest timer due more than this many ns from now; also, with a halt
        #: asked for, whenever it waits only on those. None: wait in the process (the default)
        self.park_after: int | None = None
        #: the program's identity when its child may be kept for the next run of it
        #: (flowrt/kept_child.py: a live run's, with a child from a host's spares), and whether
        #: the run reached its End with the child as the End left it
        self.kept_program: str | None = None
        self.ended_cleanly = False

    def check_halt(self) -> None:
        halt = self.halt
        if halt is not None and halt.is_set():
            raise HaltRequested(getattr(halt, "reason", None))

    def next_reply(self) -> tuple[str, Any]:
        """The next reply delivered, waiting as long as it takes (looking at `halt` meanwhile).
        The facts' times were left to the store's next record (`make_durable(times=False)`): if
        no reply comes within TIMES_WAIT they are recorded then, so a follower of a run that
        waits long sees them (a reply that comes sooner costs no record)."""
        try:
            return self.replies.get(timeout=TIMES_WAIT)
        except queue.Empty:
            self.store.sync()
        if self.halt is None:
            return self.replies.get()
        while True:
            try:
                return self.replies.get(timeout=HALT_TICK)
            except queue.Empty:
                self.check_halt()

    def deliver(self, call_id: str, outcome: Any) -> None:
        self.replies.put((call_id, outcome))

    def record(self, kind: str, fields: dict, *, sync: bool = True) -> dict:
        """Append a fact (with any deferred before it); it is durable before this returns (and
        so before its consequence). `sync=False` (a Reply): written now, durable with the next
        fact, before a wait (`make_durable`) or when the child is quiet: its only consequence
        until then is inside the child, which nothing outside can observe."""
        if self.deferred:
            # With the deferred Checkpoint in one write and one sync, End included: a crash can
            # keep the Checkpoint without the End (a torn write: the run resumes from it), never
            # the End without the Checkpoint. (Apart, End cost a sync of its own.)
            self.deferred.append((kind, fields))
            return self.write_deferred(sync=sync)
        fact = self.store.append(kind, fields, sync=sync)
        if self.kill_after is not None:
            crash_after(fact["n"], self.kill_after)
        return fact

    def write_deferred(self, *, sync: bool = True) -> dict | None:
        """Write the deferred facts now (one write, one fsync): before the host waits on anything
        outside, and before the run pauses, halts or ends."""
        if not self.deferred:
            return None
        items, self.deferred = self.deferred, []
        facts = self.store.append_many(items, sync=sync)
        if self.kill_after is not None:
            for fact in facts:
                crash_after(fact["n"], self.kill_after)
        return facts[-1]

    def make_durable(self, *, times: bool = True) -> None:
        """Everything the run has admitted is durable: the deferred facts written, a Reply
        written without sync synced. Before the host waits on anything but the child, and before
        the run pauses or halts (a call sent, an End, output: each syncs with its own fact).
        `times`: their times recorded too (see `RunLog.sync`)."""
        self.write_deferred()
        self.store.sync(times=times)

    def sync_written(self) -> None:
        """The child has been quiet a while: a Reply written without a sync is made durable.
        With none (never, without fsync), the facts' times wait for the store's next record
        (`TIMES_EVERY_MS`) rather than take one per wait (a run hub's runs wait past 2 ms)."""
        if not self.store.synced:
            self.store.sync()

    def durable_before_halt(self, *, record_arrived: bool = False) -> None:
        """What the run had reached is recorded before it halts (with `record_arrived`, the
        Replies that came in too). A storage failure here does not stop the halt, which is still
        reported: the run resumes from the facts before."""
        try:
            if record_arrived:
                self.record_arrived()
            self.make_durable()
        except StorageError:
            pass

    def run(self) -> RunOutcome:
        from flowrt.sandbox_process import Child, ChildDeadline, ChildDied

        if self.child is None:
            self.child = Child.start()
        elif hasattr(self.child, "started"):  # a child to come (flowrt/spare_child.py): here now
            program = self.prepared.compiled.identity if type(self) is Driver else None
            self.child = self.child.started(program)
            if program is not None and self.child.kept_by is not None:
                self.kept_program = program
        # The child usually asks for the next call within a spin, and that Call's fsync covers
        # the Reply before it; when it does not, the Reply is synced while the host sleeps.
        self.child.before_sleep = self.sync_written
        self.child.check_halt = self.check_halt
        try:
            self.check_halt()
            self.child.send(self.load_message())
            self.begin()
            recv = self.child.recv
            while True:
                message = recv(None)
                op = message.get("op")
                if op == "call":
                    self.on_call(message)
                    wait = message.get("wait")
                    if self.held and (wait or not self.child.has_message()):
                        self.send_held()
                    if wait:  # the child waits right after this call
                        outcome = self.on_wait()
                        if outcome is not None:
                            return outcome
                    continue
                if self.held and op != "place":
                    self.send_held()  # a choice, a stop or an end follows every call before it
                if op == "wait":
                    outcome = self.on_wait()
                    if outcome is not None:
                        return outcome
                elif op == "place":
                    self.on_place(message)
                elif op == "end":
                    return self.on_end(message["outcome"])
                elif op == "choice":
                    self.on_choice(message)
                elif op == "stop":
                    self.on_stop(message)
                elif op == "refused":
                    return RunOutcome(1, self.run_id, message=f"the sandbox refused the program: {message.get('message')}")
                elif op == "stuck":
                    raise RuntimeError(f"the sandbox and the host disagree about the record: {message.get('message')}")
        except ChildDied as died:
            if died.halt is not None:  # (its template, or a child it shared, ended: a halt)
                self.durable_before_halt(record_arrived=True)
                raise died.halt(str(died)) from None
            fault = {"kind": "limit" if died.signal else "internal",
                     "message": f"the sandboxed evaluator died: {died}", "location": None, "task": "root"}
            return self.on_died(fault)
        except ChildDeadline as passed:
            self.durable_before_halt()
            raise DeadlineHalt(str(passed)) from None
        except KeyboardInterrupt:
            self.durable_before_halt()
            raise
        finally:
            # The outcome is recorded: the child is killed now and reaped off the run's path, or
            # kept for the next run of the program (flowrt/kept_child.py).
            child = self.child
            if not (self.ended_cleanly and self.kept_program is not None
                    and child.kept_by.keep(child, self.kept_program)):
                child.let_go()
            self.record_sandbox()
            close_bound(self.prepared.implementations)

    def record_sandbox(self) -> None:
        """A `sandbox` host record: which isolation layers the child ran under, and which were
        missing (docs/sandbox.md §5), so a run on a weaker kernel says so. A report: written
        with the store's next durable host records (the close's), not synced on its own."""
        layers = getattr(self.child, "layers", None)
        if not layers:
            return
        try:
            self.store.host_record_soon({"kind": "sandbox", "layers": layers,
                                         "missing": sorted(n for n, layer in layers.items() if not layer["applied"]),
                                         "origin": self.child.origin})
        except (StorageError, ValueError):
            pass  # the run's outcome stands; only this report is lost

    def on_died(self, fault: dict) -> RunOutcome:
        """The child died (a limit, or a crash): the run ends Faulted."""
        self.record("End", {"outcome": {"Faulted": fault}})
        return RunOutcome(1, self.run_id, fault=fault)

    def begin(self) -> None:
        """After `load`: what the child is sent before it asks for anything (replay: the record)."""

    def on_call(self, message: dict) -> None:
        tool = message["tool"]
        description = self.prepared.tools[tool]
        call_id = message["id"]
        fields = {"call": call_id, "tool": tool, "fingerprint": description["fingerprint"],
                  "arguments": message["arguments"]}
        if "types" in message:
            fields["types"] = message["types"]
        typed = self.typed(tool, message.get("types"), call_id)
        implementation = self.prepared.implementations[tool]
        # More of the child's frame is already here: when it holds more calls (many tasks
        # calling at one step), their Calls are written now and synced together before any of
        # them is sent (`send_held`, called by `run` once the frame's calls are in).
        wait = message.get("wait")
        following = None if wait else self.child.peek()
        hold = bool(self.held) or (following is not None and following.get("op") == "call")
        self.record("Call", fields, sync=not hold)
        self.open_calls[call_id] = {"tool": tool, "pending": False, "typed": typed}
        if hold:
            self.held.append((implementation, call_id, tool, message["arguments"], typed))
            return
        # The only call out, and the child waits for it next: nothing can run beside it, so a
        # plain Python function serves it on this thread (no hop to a worker thread and back).
        if len(self.open_calls) == 1 and implementation.runs_inline(tool) and \
                (self.serve_inline or implementation.serves_in_hub(tool)):
            if wait or (following is not None and following.get("op") == "wait"):
                self.inline = (implementation, call_id, tool, message["arguments"], typed)
                return
        if tool == timers.SLEEP and type(implementation) is B.ClockTools:
            self.start_timer(implementation, call_id, message["arguments"])
            return
        implementation.call(self.run_id, call_id, tool, message["arguments"], typed, self.deliver)

    def start_timer(self, clock: "B.ClockTools", call_id: str, arguments: dict) -> None:
        """Serve a sleep: its deadline a durable host record first (the Call already is), then
        the wait until it, so that a crash from here on costs the run none of the time slept."""
        deadline = timers.deadline_of(arguments, timers.now_ns())
        self.store.host_record(timers.timer_record(call_id, deadline))
        self.timers[call_id] = deadline
        clock.sleep_until(call_id, deadline, self.deliver)

    def resend_clock(self, call_id: str, tool: str, arguments: dict, typed: Typed,
                     deadlines: dict[str, int]) -> None:
        """After a crash or a halt (resume's settling): the host's own clock call sent again
        under the same id, a sleep for the time that remains until its recorded deadline
        (`deadlines`, from the timer records), `now` as it is. Recorded as a `resent` decision."""
        implementation = self.prepared.implementations[tool]
        self.open_calls[call_id] = {"tool": tool, "pending": False, "typed": typed}
        if tool != timers.SLEEP:
            self.store.host_record({"kind": "resent", "call": call_id, "head": self.store.head})
            implementation.call(self.run_id, call_id, tool, arguments, typed, self.deliver)
            return
        deadline = deadlines.get(call_id)
        if deadline is None:
            # No timer record: the host stopped before the sleep started, so all of it is left.
            deadline = timers.deadline_of(arguments, timers.now_ns())
            self.store.host_record(timers.timer_record(call_id, deadline))
        self.store.host_record({"kind": "resent", "call": call_id, "head": self.store.head,
                                "deadline": timers.deadline_text(deadline),
                                "remaining": timers.remaining_text(deadline)})
        self.timers[call_id] = deadline
        implementation.sleep_until(call_id, deadline, self.deliver)

    def serves_clock(self, tool: str) -> bool:
        """Whether `tool` is the host's own clock (not a stand-in an embedding bound)."""
        return tool in (timers.SLEEP, timers.NOW) and \
            type(self.prepared.implementations.get(tool)) is B.ClockTools

    def park(self, until: int) -> RunOutcome:
        """Let go of a run that waits only on timers (and pending calls): exit 3, and the
        caller writes the `sleeping` decision (`let_go_record`)."""
        self.make_durable()
        open_calls = self.open_calls
        pending = sorted(c for c, e in open_calls.items() if e["pending"])
        return RunOutcome(3, self.run_id, pending=pending,
                          pending_types={c: (open_calls[c]["tool"], open_calls[c]["typed"]) for c in pending},
                          sleeping_until=until,
                          timers={c: self.timers[c] for c in sorted(open_calls) if c in self.timers})
    def send_held(self) -> None:
        """Make the held Calls durable with one sync, then send each, in order."""
        self.store.sync()
        held, self.held = self.held, []
        for implementation, call_id, tool, arguments, typed in held:
            if tool == timers.SLEEP and type(implementation) is B.ClockTools:
                self.start_timer(implementation, call_id, arguments)  # its deadline recorded first
            else:
                implementation.call(self.run_id, call_id, tool, arguments, typed, self.deliver)

    def typed(self, tool: str, types: Any, call_id: str) -> Typed:
        """The Tool at the call's type arguments. Arguments that do not fit its declaration are
        the child's error, not the program's: the host stops rather than guess a type."""
        try:
            return self.tool_types.of(tool, types)
        except (ValueError, KeyError, TypeError, TermError) as problem:
            raise RuntimeError(f"the sandbox called {tool} ({call_id}) at types the host cannot read: "
                               f"{problem}") from None

    def on_wait(self) -> RunOutcome | None:
        if self.inline is not None:
            implementation, call_id, tool, arguments, types = self.inline
            self.inline = None
            if self.deferred:
                self.write_deferred()  # the call may take long: the facts before it are durable first
            implementation.call_here(self.run_id, call_id, tool, arguments, types, self.arrive, self.deliver)
        open_calls = self.open_calls
        while True:
            # (a loop rather than all() over a generator: this runs for every reply)
            all_pending = bool(open_calls)
            for entry in open_calls.values():
                if not entry["pending"]:
                    all_pending = False
                    break
            if all_pending:
                self.make_durable()
                ids = sorted(open_calls)
                return RunOutcome(3, self.run_id, pending=ids,
                                  pending_types={c: (open_calls[c]["tool"], open_calls[c]["typed"]) for c in ids})
            if self.timers and self.park_after is not None:
                until = timers.parked_until(open_calls, self.timers, self.park_after)
                if until is not None:
                    return self.park(until)
            try:
                self.check_halt()
                if self.arrived:
                    call_id, outcome = self.arrived.pop(0)
                else:
                    try:
                        # Replies that came in together are admitted without a sync each: what
                        # the last admitted Reply wrote is synced with the next Call, or here once
                        # the host would wait.
                        call_id, outcome = self.replies.get_nowait()
                    except queue.Empty:
                        # Their times only if the reply is slow to come: a Tool served on a
                        # worker answers in microseconds, and a record each call cost a write
                        # (a database statement on PostgreSQL).
                        self.make_durable(times=False)
                        call_id, outcome = self.next_reply()
                        if self.halt is not None and self.halt.is_set():
                            # a halt asked for while the call was out wins, as over `call_here`
                            self.arrived.insert(0, (call_id, outcome))
                            self.check_halt()
            except HaltRequested:
                # A host asked to let go of sleeping runs lets go of one that waits only on
                # timers as sleeping (a worker wakes it at its deadline) rather than halted.
                until = timers.parked_until(open_calls, self.timers, timers.ANY_TIME) \
                    if self.park_after is not None else None
                if until is None:
                    raise
                return self.park(until)
            if call_id not in open_calls:
                continue
            if outcome is B.PENDING:
                open_calls[call_id]["pending"] = True
                continue
            if self.timers:
                self.timers.pop(call_id, None)
            typed = open_calls.pop(call_id)["typed"]
            admitted = (typed.admit or admitted_by(typed))(outcome)
            self.record("Reply", {"call": call_id, "outcome": admitted}, sync=False)
            self.child.post({"op": "reply", "id": call_id, "outcome": admitted})
            return None

    def record_arrived(self) -> None:
        """The Replies that came in and were not yet admitted, recorded (in the order they came)
        before the run halts: those calls happened, and a resume replays their replies instead of
        settling them Unknown. Calls still out stay open, as at any halt."""
        self.take_delivered()
        arrived, self.arrived = self.arrived, []
        for call_id, outcome in arrived:
            entry = self.open_calls.get(call_id)
            if entry is None or outcome is B.PENDING:
                continue
            del self.open_calls[call_id]
            self.timers.pop(call_id, None)
            typed = entry["typed"]
            self.record("Reply", {"call": call_id, "outcome": (typed.admit or admitted_by(typed))(outcome)}, sync=False)

    def take_delivered(self) -> None:
        """Move every reply delivered so far off the queue into `arrived`, in order."""
        while True:
            try:
                self.arrived.append(self.replies.get_nowait())
            except queue.Empty:
                return

    def arrive(self, call_id: str, outcome: Any) -> None:
        """An outcome delivered on this thread (`call_here`)."""
        self.arrived.append((call_id, outcome))

    def load_message(self) -> dict:
        message = load_message(self.prepared)
        message["checkpoints"] = self.policy
        if self.kept_program is not None:
            message["keep"] = True  # (the child then waits for the next run of it: sandbox/child.py)
        return message

    def place_taken(self) -> bool:
        """Whether the policy takes a checkpoint at this live place (the child decides the same)."""
        self.places += 1
        policy = self.policy
        return policy == "every" or (policy.isdigit() and int(policy) > 0 and self.places % int(policy) == 0)

    def on_place(self, message: dict) -> None:
        """A checkpoint place: take a checkpoint there when the policy says so."""
        taken = self.place_taken()
        if message.get("taken") is not taken:
            raise RuntimeError(f"the sandbox {'took' if message.get('taken') else 'passed'} a checkpoint place "
                               f"the policy {self.policy!r} {'passes' if message.get('taken') else 'takes'}")
        if taken:
            self.deferred.append(("Checkpoint", {"function": message["function"], "arguments": message["arguments"]}))

    def on_choice(self, message: dict) -> None:
        self.record("Choice", {"task": message["task"], "picked": message["picked"]})

    def on_stop(self, message: dict) -> None:
        """Record the Stop first, then close each open call of the stopped task: a reply that
        already arrived is recorded as that call's Reply; a call with none is closed as having
        none, and its implementation is told to cancel."""
        self.take_delivered()
        calls = [c for c in message.get("calls", []) if c in self.open_calls]
        answered = {call_id: outcome for call_id, outcome in self.arrived
                    if call_id in calls and outcome is not B.PENDING}
        closed = [c for c in calls if c not in answered]
        self.record("Stop", {"task": message["task"], "by": message["by"], "found": message["found"],
                                   "closed": closed})
        for call_id in calls:
            entry = self.open_calls.pop(call_id)
            self.timers.pop(call_id, None)
            tool = entry["tool"]
            if call_id in answered:
                self.record("Reply", {"call": call_id, "outcome": admitted_by(entry["typed"])(answered[call_id])})
            else:
                self.prepared.implementations[tool].cancel(call_id)
        self.arrived = [(c, o) for c, o in self.arrived if c not in calls]

    def on_end(self, outcome: dict) -> RunOutcome:
        self.record("End", {"outcome": outcome})
        self.ended_cleanly = True
        if "Completed" in outcome:
            value = outcome["Completed"]
            code = 0
            if self.prepared.entry.returns_result and isinstance(value, dict) and "Err" in value:
                code = 4
            entry = self.prepared.entry
            return RunOutcome(code, self.run_id, output=canonical.dumps(value), result_type=(entry.result, entry.defs))
        return RunOutcome(1, self.run_id, fault=outcome.get("Faulted"))


def crash_after(n: int, target: int | None = None) -> None:
    """Fault injection for the crash tests (scripts/reliability.py): with FLOW_FAULT_KILL_AFTER=N
    the host kills itself with SIGKILL right after fact N is durable. Never set in normal use.
    `target` is `kill_target()` read once by the caller (reading the environment per fact costs
    more than writing a fact without fsync)."""
    if target is None:
        target = kill_target()
    if target is not None and target == n:
        os.kill(os.getpid(), signal.SIGKILL)


def kill_target() -> int | None:
    target = os.environ.get("FLOW_FAULT_KILL_AFTER")
    return int(target) if target is not None and target.isdigit() else None


class _NoChild:
    def kill(self) -> None:
        return None


_NO_CHILD = _NoChild()
def start_records(prepared: Prepared, origin: str, checkpoints: str) -> list[dict]:
    """The host records a run's start writes after Start: where its program came from, the
    approvals given, each Tool's binding, and the checkpoint policy (docs/trace.md section 7)."""
    records = [{"kind": "origin", "root": origin}, *prepared.approvals]
    records += [{"kind": "binding", "tool": identity, "implementation": implementation.label()}
                for identity, implementation in sorted(prepared.implementations.items())]
    records.append({"kind": "checkpoints", "policy": checkpoints})
    return records


def run(path: str, *, entry: str = "main", input_text: str = "{}", runs_dir: str = ".flow/runs",
        python_tools: dict | None = None, allow: bool = False, ask=None, durability: str = "fsync",
        checkpoints: str = "every", inline_limit: int | None = None, child=None,
        halt: threading.Event | None = None, on_start=None, read=read_text, run_id: str | None = None,
        outer: dict | None = None, manifest_dir: str | None = None, jail: str | None = None,
        park_after: float | None = None, telemetry=None, detach: bool = False, processes=None) -> RunOutcome:
    """Run a program live. Never raises for bad input: refusals come back as exit code 2.

    `child`: a sandbox child already started (`Child.start()`) and not yet spoken to, which the
    run then owns (the CLI starts it before it imports the compiler, see `flowrt.cli`).
    `halt`: an event another thread may set to halt the run as an interrupt does (before Start,
    the run does not start: exit 130, nothing recorded). `on_start(run_id, start_fact)` is called
    once storage has accepted Start, before the program is driven. A nested run (flowrt/nested.py)
    passes `read` (its submitted source), its `run_id`, `outer` ({run, call}, named in Start) and
    the outer program's `manifest_dir`. `jail` (`flow mcp --root`): no module or pinned directory
    outside it is read. `park_after` (seconds): let go of the run, as sleeping, when it waits
    only on timers due later than that (flowrt/timers.py); None waits in the process. `detach`:
    checked, bound and with its input decoded as always, the run is recorded (Start) and queued
    for a worker (a `queued` host decision) instead of driven here: exit 0, `queued`.
    `telemetry`: a TracerProvider or Tracer for host-side spans, False for none; None reads the
    environment (flowrt/telemetry.py, docs/telemetry.md). `processes`: the Tool processes a
    long-lived host keeps across runs (flowrt/tool_processes.py)."""
    if child is None and detach:
        child = _NO_CHILD  # a queued run is driven elsewhere: nothing to start here
    elif child is None:
        from flowrt.sandbox_process import Child

        # The child starts (and imports its runtime) while the host checks and binds.
        child = Child.start()
    try:
        prepared = prepare(path, entry, input_text, python_tools=python_tools, allow=allow, ask=ask, read=read,
                           host=RunHost(runs_dir, durability, processes), manifest_dir=manifest_dir, jail=jail)
    except Refused as refused:
        child.kill()
        return RunOutcome(2, diagnostics=refused.diagnostics, sources=refused.sources)
    except BaseException:
        child.kill()
        raise

    def drive() -> RunOutcome:
        nonlocal run_id
        if halt is not None and halt.is_set():
            child.kill()
            close_bound(prepared.implementations)
            return RunOutcome(130, message="halted before the run started")
        run_id = run_id or new_run_id()
        fields, sources = start_fields(prepared)
        if outer is not None:
            fields["outer"] = outer
        try:
            extra = {} if inline_limit is None else {"inline_limit": inline_limit}
            store = open_store(runs_dir).create(run_id, fields, sources=sources, durability=durability, **extra)
        except StorageError as problem:
            child.kill()
            close_bound(prepared.implementations)
            return RunOutcome(5, message=f"storage failure: {problem}")
        origin = os.path.join(manifest_dir, os.path.basename(path)) if manifest_dir else os.path.abspath(path)
        # One write and one sync for all of them (they are durable before the first Call goes out).
        try:
            records = start_records(prepared, origin, checkpoints)
            if detach:  # queued for a worker, in the same write
                records.append({"kind": "queued", "head": store.head, "pending": []})
            store.host_records_many(records)
        except StorageError as problem:
            store.close()
            child.kill()
            close_bound(prepared.implementations)
            return RunOutcome(5, run_id, message=f"storage failure: {problem}")
        crash_after(1)
        if detach:  # bound only to check the Tools: they serve the worker's drive, not this process
            child.kill()
            close_bound(prepared.implementations)
            store.close()
            return RunOutcome(0, run_id, queued=True)
        driver = Driver(prepared, store, run_id, child, checkpoints)
        driver.halt = halt
        driver.park_after = timers.seconds_ns(park_after)
        spans = None
        if telemetry is not False:
            from flowrt.telemetry import traced

            spans = traced(driver, telemetry)
        outcome = None
        try:
            if on_start is not None:
                on_start(run_id, store.fact_at(0))
            outcome = driver.run()
            if outcome.exit_code == 3:
                try:
                    let_go_record(store, outcome)
                except StorageError:
                    pass
        except StorageError as problem:
            outcome = RunOutcome(5, run_id, message=f"storage failure: {problem}")
        except KeyboardInterrupt as interrupt:
            reason, message = halt_reason(interrupt)
            store.host_record({"kind": "halted", "head": store.head, "reason": reason})
            outcome = RunOutcome(130, run_id, message=message)
        finally:
            store.close()
            if spans is not None:
                spans.finish_with(outcome)
        return outcome

    hub = run_hub.current()
    if hub is not None and not all(i.drives_in_hub for i in prepared.implementations.values()):
        # Its Tool processes (or servers) answer on threads of their own, each answer then waiting
        # for the hub's thread (8 such runs: 0.5x in the hub), so it is driven on a thread of its own
        return hub.on_own_thread(drive)
    return drive()

