"""Replay and resume: re-run a recorded program against its history.

Both read one history. The program is re-formed from the module sources the history stores
(never the working files), re-checked, and re-run in a fresh sandbox; the child's requests are
served from the record in the recorded order:

* each Call the program makes must be the next fact, with the same id, Tool and arguments;
* when every task waits, the next fact must be a Reply to an open call, and it is handed over;
* End must record what the program computes.

`replay` binds nothing and calls nothing: it reports Matched, Incomplete (the record ends first,
or a needed value is a hole) or Diverged at fact N with the reason. A damaged history is a
storage failure, never a verdict. `resume` does the same and, where the record ends, admits the
supplied reply, settles the other open calls and continues live on the same history. `rounds`
(the rounds view of `flow history`) is a replay that notes each checkpoint place it passes, and
`fork` a resume of a new history that starts at a copied Checkpoint.

Over 800 lines, on purpose: replay, rounds, resume and fork are the four ways of serving one
record to the one `ReplayDriver`; they share how the recorded program is re-formed, where the
record starts (Start or a checkpoint) and ends, and what a divergence, a hole or damage becomes,
and `ReplayDriver` (about 320 lines) is the rule that Call, Reply, Choice, Checkpoint and End
are served by. Split apart, each command would have to reach into the driver's state.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import json
import posixpath
import threading
from dataclasses import dataclass, field
from typing import Any

import flowc
from flowc.compiled import Compiled
from flowdata import canonical, codec
from flowrt.bind import RunHost, bind
from flowrt.refusal import Refused
from flowrt import timers
from flowrt.admission import admitted_by
from flowrt.halts import halt_reason
from flowrt.run import Driver, Prepared, RunOutcome, let_go_record
from flowrt.store import Hole, RunLog, open_store, StorageError
from flowrt.store.shelf import FactShelf


@dataclass
class Verdict:
    kind: str  # Matched | Incomplete | Diverged
    fact: int | None = None
    reason: str = ""
    #: the fact the re-run started at: 1 (Start), or the Checkpoint it started from; what a
    #: verdict covers is the facts from there on
    start: int = 1
    #: what the re-run did instead of the fact it diverged at, in that fact's shape, when the
    #: two are comparable (the End's outcome, a Call's arguments): `flow test` shows them side by side
    found: dict | None = None

    def exit_code(self) -> int:
        return {"Matched": 0, "Diverged": 1, "Incomplete": 3}[self.kind]

    def to_json(self) -> dict:
        return {"verdict": self.kind, "fact": self.fact, "reason": self.reason, "from": self.start}


class _Diverged(Exception):
    def __init__(self, fact: int | None, reason: str, found: dict | None = None) -> None:
        super().__init__(reason)
        self.fact = fact
        self.reason = reason
        self.found = found


class _Incomplete(Exception):
    def __init__(self, reason: str, fact: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fact = fact


# ---- re-forming the recorded program -----------------------------------------------------------


#: programs re-formed in this process, by what determines them (`_program_key`), newest last: a
#: worker resumes many runs of one program, and each would otherwise check it again
_RECORDED_PROGRAMS: collections.OrderedDict[tuple, Compiled] = collections.OrderedDict()
_RECORDED_PROGRAMS_KEPT = 32
_RECORDED_PROGRAMS_LOCK = threading.Lock()


def _program_key(start: dict) -> tuple:
    """What a recorded program's compile is a function of: its identity (content-addressed), the
    hash of each stored module source, the pins, and the compiler's own digest. Compiling is
    pure, so equal keys give equal programs."""
    from flowc.emit import compiler_digest

    modules = tuple((m["module"], m["hash"]) for m in start.get("modules", []))
    pins = tuple((p["repo"], p.get("commit")) for p in start.get("pins", []))
    return start["program"], start["entry"]["module"], modules, pins, compiler_digest()


def recorded_program(store: RunLog) -> tuple[Compiled, dict]:
    """Check the program exactly as the history's Start recorded it, from its stored sources.
    Kept in the process by `_program_key`; the sources are still read (and so checked against
    their hashes) on every call, so a damaged store is found whether or not the program is kept."""
    start = store.fact(1)
    texts: dict[str, str] = {}
    for module in start.get("modules", []):
        texts[module["module"]] = store.source(module["hash"])
    key = _program_key(start)
    with _RECORDED_PROGRAMS_LOCK:
        kept = _RECORDED_PROGRAMS.get(key)
        if kept is not None:
            _RECORDED_PROGRAMS.move_to_end(key)
            return kept, start
    compiled = _compile_recorded(start, texts)
    with _RECORDED_PROGRAMS_LOCK:
        _RECORDED_PROGRAMS[key] = compiled
        while len(_RECORDED_PROGRAMS) > _RECORDED_PROGRAMS_KEPT:
            _RECORDED_PROGRAMS.popitem(last=False)
    return compiled, start


def _compile_recorded(start: dict, texts: dict[str, str]) -> Compiled:
    """Compile the recorded sources `texts` (by module identity) as Start recorded them; only a
    program that checks and forms Start's identity is returned (and so ever kept)."""
    root = start["entry"]["module"]
    manifest = _recorded_manifest(start.get("pins", []))

    def read(path: str) -> str:
        if path == "flow.toml" and manifest is not None:
            return manifest
        identity = path[:-5] if path.endswith(".flow") else path
        identity = posixpath.normpath(identity)
        if identity in texts:
            return texts[identity]
        raise FileNotFoundError(2, "not in the recorded sources", path)

    def std_read(path: str) -> str:
        name = posixpath.basename(path)[:-5]
        identity = f"std@v1/{name}"
        if identity in texts:
            return texts[identity]
        raise FileNotFoundError(2, "not in the recorded sources", path)

    compiled = flowc.compile(root + ".flow", read, std_read=std_read, disk=None)
    if not compiled.ok:
        raise Refused(list(compiled.diagnostics), compiled.sources())
    if compiled.identity != start["program"]:
        raise StorageError(f"the recorded sources form program {compiled.identity}, but Start names "
                           f"{start['program']}", 1)
    return compiled


def _recorded_manifest(pins: list) -> str | None:
    """A flow.toml holding only the recorded `[pins]`, each pinned to a directory named as the
    repository itself, so that its modules are read as `<repo>@<version>/<path>.flow`, which
    `read` finds among the recorded sources by identity. Nothing on disk is read or verified:
    the sources are the recorded ones, and the commits are part of the identity checked below."""
    if not pins:
        return None
    lines = ["[pins]"]
    for pin in pins:
        spec = f"path = {json.dumps(pin['repo'])}"
        if pin.get("commit") is not None:
            spec += f", commit = {json.dumps(pin['commit'])}"
        lines.append(f"{json.dumps(pin['repo'])} = {{ {spec} }}")
    return "\n".join(lines) + "\n"


def prepared_from_history(store: RunLog, *, bind_tools: bool, python_tools: dict | None = None,
                          allow: bool = False, ask=None, path_for_manifest: str | None = None,
                          current: Compiled | None = None, host: RunHost | None = None) -> Prepared:
    """The program to re-run: the one the history recorded, or `current` (a saved history replayed
    as a regression test against today's program)."""
    if current is None:
        compiled, start = recorded_program(store)
    else:
        compiled, start = current, store.fact(1)
        if compiled.entry(start["entry"]["function"]) is None:
            raise Refused([], {})
    entry = compiled.functions[f"{start['entry']['module']}.{start['entry']['function']}"]
    tools = compiled.reachable_tools(entry.identity)
    implementations: dict = {}
    approvals: list = []
    if bind_tools:
        implementations = bind(compiled, path_for_manifest or ".", tools, python_tools or {}, allow=allow, ask=ask,
                               host=host, approvals=approvals)
    try:
        recorded_input = store.value(start, "input")
    except Hole as hole:
        raise _Incomplete(f"the run's input is a hole ({hole.hash})", 1) from None
    prepared = Prepared(compiled, entry, dict(recorded_input), tools, implementations, compiled.generated,
                        approvals)
    for record in approvals:
        store.host_record(record)  # a resume or fork writes to the run it continues
    return prepared


# ---- serving the record ------------------------------------------------------------------------


class ReplayDriver(Driver):
    """A Driver whose child is fed from recorded facts until they run out. With `live` it then
    continues as a live run on the same store (resume); without, running out is Incomplete."""

    def __init__(self, prepared: Prepared, store: RunLog, run_id: str, *, live: bool,
                 supplied: tuple[str, Any] | None = None, resend: set[str] | None = None,
                 from_start: bool = False, child=None, rounds: bool = False) -> None:
        super().__init__(prepared, store, run_id, child=child, checkpoints=_recorded_policy(store))
        # From the start, every Checkpoint on the way is checked against what the program
        # computes; from the latest checkpoint (resume, or replay asked to be quick) the facts
        # before it are never read again. A history whose early facts were archived starts at
        # the checkpoint it resumes at either way: nothing before it is held.
        latest = earliest_held_checkpoint(store) if from_start else store.latest_checkpoint()
        if latest is not None:
            facts = store.verified_facts()  # verified through `latest` by now
            self.checkpoint = facts[latest]
            self.checkpoint_number = store.archived_checkpoints + (
                facts.checkpoints_through(latest) if isinstance(facts, FactShelf)
                else sum(1 for f in facts[1:latest + 1] if f["kind"] == "Checkpoint"))
        else:
            self.checkpoint = None
            self.checkpoint_number = 0
        #: the record is the store's facts from `base` on (a deferred store verifies them as
        #: they are reached); `position` counts the ones served
        self.base = latest + 1 if latest is not None else 1
        self.position = 0
        #: the position up to which the store was told the facts are passed (`release_before`)
        self.released = 0
        #: the index of the first fact the record stream has not sent yet (`_far_ahead`)
        self.streamed = self.base
        self.verified = store.verified_facts()  # grows as a deferred store verifies
        #: where the record ends: facts appended live (resume) are not part of it; a deferred
        #: store (replay: read only) ends where its verified facts end
        self.end = len(self.verified) if not store.deferred else float("inf")
        self.live = live
        self.recorded_open: dict[str, dict] = {}
        if self.checkpoint is not None:
            # Tasks parked in the checkpoint wait again on their calls: those calls are open. A
            # task carried with the reply it finished on waits on nothing.
            function = self.checkpoint["function"]
            fn = prepared.compiled.functions[f"{function['module']}.{function['name']}"]
            arguments = self.value(self.checkpoint, "arguments")
            for p in fn.params:
                if p.task and "reply" not in arguments[p.name]:
                    parked = arguments[p.name]
                    self.recorded_open[parked["call"]] = {"tool": parked["tool"], "arguments": parked["arguments"],
                                                          "types": parked.get("types")}
        self.supplied = supplied
        self.resend = resend or set()
        self.settled = False
        self.verdict: Verdict | None = None
        #: every checkpoint place the re-run passes (the rounds view of `flow history`), when asked
        self.rounds: list[dict] | None = [] if rounds else None
        #: Replies the record stream could not carry to the child, by fact number (see `stream`)
        self.unsent: set[int] = set()

    def next_fact(self) -> dict | None:
        index = self.base + self.position
        facts = self.verified
        if index < len(facts):
            return facts[index] if index < self.end else None
        return self.store.fact_at(index)

    def value(self, fact: dict, name: str) -> Any:
        if name in fact:  # inline (the facts are the store's own)
            return fact[name]
        try:
            return self.store.value(fact, name)
        except Hole:
            raise _Incomplete(f"fact {fact['n']} is a hole: its {name} was withheld", fact["n"]) from None

    # -- streaming the record

    def load_message(self) -> dict:
        message = self._load_message()
        message["replay"] = True
        # Where the record has no Checkpoint a place is not taken and nothing is checked, so
        # only `flow history`, which lists the places, needs to hear of those.
        message["places"] = self.rounds is not None
        return message

    def begin(self) -> None:
        self.child.feed(self.stream(), hold=self._far_ahead)

    def _far_ahead(self) -> bool:
        """Whether the record stream is far enough ahead of the facts checked: every fact in
        between is held until it is checked. (The child then has the record's next
        `STREAM_AHEAD` facts, at least, to go on with: every fact it passes is a message to
        the driver, which moves the driver on, so the stream cannot stop in front of a child
        waiting for it.)"""
        return self.streamed - (self.base + self.position) > STREAM_AHEAD

    def stream(self):
        """The record as the child steps through it (sandbox/record.py): frames of facts, then
        the end of the record and the policy for what follows. Nothing is decided here: a
        Reply whose outcome cannot be had or sent goes without it, and the check of the wait
        that reaches it (in order, like every check) reports why."""
        from flowdata import framing

        store = self.store
        start = self.base
        while start < self.end:
            facts = store.facts_from(start, int(min(STREAM_BATCH, self.end - start)))
            if not facts:
                break
            self.streamed = start + len(facts)
            items: list = []
            for fact in facts:
                kind = fact["kind"]
                if kind != "Reply":
                    items.append(kind)
                    continue
                outcome = fact.get("outcome", _ABSENT)
                if outcome is _ABSENT:
                    try:
                        outcome = store.value(fact, "outcome")
                    except Exception:  # a hole, a lost or damaged value: on_wait says which
                        items.append(["Reply", fact.get("call")])
                        continue
                items.append(["Reply", fact.get("call"), outcome])
            try:
                frame = framing.encode({"op": "record", "facts": items})
            except framing.ChannelError:  # not JSON the channel carries, or too large together
                for index, item in enumerate(items):
                    try:
                        frame = framing.encode({"op": "record", "facts": [item]})
                    except framing.ChannelError:
                        self.unsent.add(facts[index]["n"])
                        frame = framing.encode({"op": "record", "facts": [item[:2]]})
                    yield frame
            else:
                yield frame
            start += len(facts)
        yield framing.encode({"op": "record-end", "checkpoints": self.policy if self.live else "off"})

    def replaying(self) -> bool:
        return self.next_fact() is not None

    def on_call(self, message: dict) -> None:
        index = self.base + self.position
        fact = self.verified[index] if index < self.end and index < len(self.verified) else self.next_fact()
        if fact is None:
            if not self.live:
                raise _Incomplete("the history ends before the program does")
            self.settle()
            return super().on_call(message)
        n = fact["n"]
        if fact["kind"] != "Call":
            raise _Diverged(n, f"the program calls {message['tool']} ({message['id']}), but fact {n} is a "
                               f"{fact['kind']}")
        if fact["call"] != message["id"] or fact["tool"] != message["tool"]:
            raise _Diverged(n, f"the program calls {message['tool']} as {message['id']}, but fact {n} records "
                               f"{fact['tool']} as {fact['call']}")
        recorded = fact["arguments"] if "arguments" in fact else self.value(fact, "arguments")
        arguments = message["arguments"]
        if canonical.dumps(recorded) != canonical.dumps(arguments):
            raise _Diverged(n, f"the program calls {fact['tool']} ({fact['call']}) with other arguments than "
                               f"fact {n} records", {"kind": "Call", "arguments": arguments})
        types = message.get("types")
        if fact.get("types") != types:
            raise _Diverged(n, f"the program calls {fact['tool']} at another type than fact {n} records")
        self.position += 1
        self.recorded_open[fact["call"]] = {"tool": fact["tool"], "arguments": arguments, "types": types}

    def on_wait(self) -> RunOutcome | None:
        index = self.base + self.position
        fact = self.verified[index] if index < self.end and index < len(self.verified) else self.next_fact()
        if fact is None:
            if not self.live:
                raise _Incomplete("the history ends while the program waits for a reply")
            self.settle()
            return super().on_wait()
        n = fact["n"]
        if fact["kind"] != "Reply":
            raise _Diverged(n, f"every task of the program waits, but fact {n} is a {fact['kind']}")
        call = fact["call"]
        if call not in self.recorded_open:
            raise _Diverged(n, f"fact {n} replies to {call}, which the program has not called")
        outcome = fact["outcome"] if "outcome" in fact else self.value(fact, "outcome")
        if n in self.unsent:
            from flowdata import framing

            framing.encode({"op": "reply", "id": call, "outcome": outcome})  # raises why
        self.position += 1
        del self.recorded_open[call]
        if self.position >= self.released + RELEASE_EVERY:
            # What lies behind is never read again here: a long history is not held whole.
            self.released = self.position
            self.store.release_before(self.base + self.position)
        return None  # the child has the reply from the record stream

    def _load_message(self) -> dict:
        message = super().load_message()
        if self.checkpoint is not None:
            function = self.checkpoint["function"]
            fn = self.prepared.compiled.functions[f"{function['module']}.{function['name']}"]
            message["start"] = {"function": fn.key,
                                "arguments": self.value(self.checkpoint, "arguments"),
                                "checkpoint": self.checkpoint_number}
        return message

    def on_place(self, message: dict) -> None:
        fact = self.next_fact()
        if self.rounds is not None:
            self.rounds.append({"function": message["function"], "arguments": message["arguments"],
                                "after_fact": self.store.fact_at(self.base + self.position - 1)["n"] if self.position
                                else (self.checkpoint["n"] if self.checkpoint else 1),
                                "checkpoint": fact["n"] if fact is not None and fact["kind"] == "Checkpoint" else None})
        if fact is None:
            if not self.live:
                # A place past the end of the record: no checkpoint; the program goes on to ask
                # for what the record lacks, which is where replay reports Incomplete.
                _expect_taken(message, False)
                return
            self.settle()
            return super().on_place(message)
        if fact["kind"] != "Checkpoint":
            _expect_taken(message, False)
            return
        n = fact["n"]
        if fact["function"] != message["function"]:
            raise _Diverged(n, f"the program reaches {message['function']['name']}, but checkpoint {n} records "
                               f"{fact['function']['name']}")
        recorded = self.value(fact, "arguments")
        if canonical.dumps(recorded) != canonical.dumps(message["arguments"]):
            raise _Diverged(n, f"checkpoint {n} holds other arguments than the program computes")
        self.position += 1
        _expect_taken(message, True)

    def on_choice(self, message: dict) -> None:
        fact = self.next_fact()
        if fact is None:
            if not self.live:
                raise _Incomplete("the history ends before the program's choice")
            self.settle()
            return super().on_choice(message)
        n = fact["n"]
        if fact["kind"] != "Choice" or fact["task"] != message["task"]:
            raise _Diverged(n, f"task {message['task']} picks {message['picked']}, but fact {n} is a {fact['kind']}")
        if fact["picked"] != message["picked"]:
            raise _Diverged(n, f"task {message['task']} picks {message['picked']}, but fact {n} records "
                               f"{fact['picked']}")
        self.position += 1

    def on_stop(self, message: dict) -> None:
        fact = self.next_fact()
        if fact is None:
            if not self.live:
                raise _Incomplete("the history ends before the program's stop")
            self.settle()
            return super().on_stop(message)
        n = fact["n"]
        if fact["kind"] != "Stop" or fact["task"] != message["task"]:
            raise _Diverged(n, f"{message['by']} stops {message['task']}, but fact {n} is a {fact['kind']}"
                               + (f" of {fact['task']}" if fact["kind"] == "Stop" else ""))
        found = self.value(fact, "found")
        if (found == "Running") != (message["found"] == "Running"):
            raise _Diverged(n, f"task {message['task']} is found otherwise than fact {n} records")
        self.position += 1
        # Replies that had arrived when the task was stopped follow the Stop; they reach no value.
        calls = set(message.get("calls", []))
        while True:
            following = self.next_fact()
            if following is None or following["kind"] != "Reply" or following["call"] not in calls:
                break
            self.position += 1
        for call_id in calls:
            self.recorded_open.pop(call_id, None)

    def on_end(self, outcome: dict) -> RunOutcome:
        fact = self.next_fact()
        if fact is None:
            if not self.live:
                raise _Incomplete("the history ends before the program's End")
            self.settle()
            return super().on_end(outcome)
        n = fact["n"]
        if fact["kind"] != "End":
            raise _Diverged(n, f"the program ends, but fact {n} ({fact['kind']}) is unused")
        recorded = self.value(fact, "outcome")
        if canonical.dumps(_comparable(recorded)) != canonical.dumps(_comparable(outcome)):
            raise _Diverged(n, "the program ends otherwise than fact n records".replace("fact n", f"fact {n}"),
                            {"kind": "End", "outcome": outcome})
        self.position += 1
        following = self.next_fact()
        if following is not None:
            raise _Diverged(following["n"], "facts after End are unused")
        self.verdict = Verdict("Matched")
        return RunOutcome(0, self.run_id)

    def on_died(self, fault: dict) -> RunOutcome:
        """The child died while re-running the record. The record ending the same way is a match;
        anything else says nothing about the program (the evaluator's death is the machine's
        doing as much as the program's), so the re-run is Incomplete, not Diverged."""
        fact = self.next_fact()
        if fact is None and self.live:
            self.settle()
            return super().on_died(fault)
        if fact is not None and fact["kind"] == "End" and \
                canonical.dumps(self.value(fact, "outcome")) == canonical.dumps({"Faulted": fault}):
            return self.on_end({"Faulted": fault})
        raise _Incomplete(f"the re-run could not go on: {fault['message']}", fact["n"] if fact else None)

    # -- continuing live

    def settle(self) -> None:
        """Where the record ends: admit the supplied reply, then settle every other open call."""
        if self.settled:
            return
        self.settled = True
        paused = _paused_calls(self.store)
        supplied_id = self.supplied[0] if self.supplied else None
        deadlines = None
        for call_id in sorted(self.recorded_open):
            entry = self.recorded_open[call_id]
            typed = self.typed(entry["tool"], entry["types"], call_id)
            if call_id == supplied_id:
                admitted = admitted_by(typed)(self.supplied[1])
                self.deliver(call_id, admitted)
                self.open_calls[call_id] = {"tool": entry["tool"], "pending": False, "typed": typed}
            elif self.serves_clock(entry["tool"]):
                # The host's own clock is the host's to settle (DESIGN.md §3): sent again, a
                # sleep for what remains of it (flowrt/timers.py).
                if deadlines is None:
                    deadlines = timers.recorded_deadlines(self.store.host_records())
                self.resend_clock(call_id, entry["tool"], entry["arguments"], typed, deadlines)
            elif call_id in paused:
                # Left pending at a pause: it stays open; its implementation may answer it.
                self.open_calls[call_id] = {"tool": entry["tool"], "pending": True, "typed": typed}
                implementation = self.prepared.implementations[entry["tool"]]
                implementation.call(self.run_id, call_id, entry["tool"], entry["arguments"], typed,
                                    self.deliver)
            elif call_id in self.resend:
                self.store.host_record({"kind": "resent", "call": call_id, "head": self.store.head})
                self.open_calls[call_id] = {"tool": entry["tool"], "pending": False, "typed": typed}
                implementation = self.prepared.implementations[entry["tool"]]
                implementation.call(self.run_id, call_id, entry["tool"], entry["arguments"], typed,
                                    self.deliver)
            else:
                # Out when the process died: by default its reply is Unknown (a host decision).
                self.store.host_record({"kind": "settled", "call": call_id, "as": "Unknown", "head": self.store.head})
                self.deliver(call_id, {"Err": {"Unknown": "the run stopped while the call was out"}})
                self.open_calls[call_id] = {"tool": entry["tool"], "pending": False, "typed": typed}
        self.recorded_open.clear()


STREAM_BATCH = 2048  # recorded facts per frame of the record stream
#: Replies passed between two `release_before`s: a history of 100,000 calls held ~350 MB of
#: facts in a replay; now what lies between the driver and the record stream (~10,000 facts).
RELEASE_EVERY = 4096
#: How far the record stream may run ahead of the facts checked, in facts (it then waits for the
#: driver, whose facts in between it holds): the pipe and outbox alone held ~80,000.
STREAM_AHEAD = 8192
_ABSENT = object()


def _expect_taken(message: dict, taken: bool) -> None:
    """The child decides a place from the record as the host does; a difference is a bug."""
    if message.get("taken") is not taken:
        raise RuntimeError(f"the sandbox {'took' if message.get('taken') else 'passed'} a checkpoint place where "
                           f"the record {'has none' if message.get('taken') else 'has one'}")


def _comparable(outcome: dict) -> dict:
    """End outcomes compare by what the program computed (a fault's location is part of it)."""
    return outcome


def earliest_held_checkpoint(store: RunLog) -> int | None:
    """Where a replay from the start begins, as an index into the facts: None for Start itself,
    or 1 when facts after Start were archived (the history then goes on at a Checkpoint)."""
    second = store.fact_at(1)
    return 1 if second is not None and second["n"] != 2 else None


def _recorded_policy(store: RunLog) -> str:
    for record in reversed(store.host_records()):
        if record.get("kind") == "checkpoints":
            return str(record.get("policy", "every"))
    return "every"


def _paused_calls(store: RunLog) -> set[str]:
    records = store.host_records()
    for record in reversed(records):
        if record.get("kind") in ("paused", "halted", "sleeping", "queued") and record.get("head") == store.head:
            return set(record.get("pending", [])) if record["kind"] != "halted" else set()
    return set()


def open_calls(store: RunLog) -> list[str]:
    """Calls with a Call and no Reply that no Stop closed (`flowrt.store.open_calls`), in order."""
    return list(store.open_calls())


# ---- the commands ------------------------------------------------------------------------------


@dataclass
class ReplayResult:
    exit_code: int
    verdict: Verdict | None = None
    message: str | None = None
    diagnostics: list = field(default_factory=list)
    sources: dict = field(default_factory=dict)


@contextlib.contextmanager
def _cycle_collection_paused():
    """Replay builds and holds one dict per fact and one per message, all acyclic JSON data;
    the cyclic collector, run every 700 new objects, would walk all the facts held so far again
    and again (a third of the host's time on a 100,000-fact history). Paused for the replay,
    as it was before it, whatever happens."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def rounds(runs_dir: str, run_id: str) -> tuple[list[dict], Verdict]:
    """The places a checkpoint can be taken that a re-run of the whole run passes, with the
    function called and its arguments (calling nothing; the facts before the latest checkpoint
    must still be there)."""
    with _cycle_collection_paused():
        return _rounds(runs_dir, run_id)


def _rounds(runs_dir: str, run_id: str) -> tuple[list[dict], Verdict]:
    from flowrt.sandbox_process import Child

    child = Child.start()  # it starts while the history is read
    try:
        store = open_store(runs_dir).open(run_id, for_append=False, defer=True)
    except BaseException:
        child.kill()
        raise
    try:
        try:
            prepared = prepared_from_history(store, bind_tools=False)
            driver = ReplayDriver(prepared, store, run_id, live=False, from_start=True, child=child, rounds=True)
            verdict, refusal = _re_run(driver)
        except _Incomplete as incomplete:  # before the re-run: the input is a hole
            return [], Verdict("Incomplete", incomplete.fact, incomplete.reason)
        except Exception:
            store.verify()  # damage anywhere is reported first, as a full open would have
            raise
        store.verify()
        if verdict is None:
            raise RoundsRefused(refusal)
        for r in driver.rounds:
            r["tasks"] = _round_tasks(prepared, r)
        return driver.rounds, verdict
    finally:
        child.kill()
        store.close()


class RoundsRefused(Exception):
    """The re-run behind the rounds view reached no verdict: the sandbox refused the program."""


def _re_run(driver: ReplayDriver) -> tuple[Verdict | None, str]:
    """Re-run the record to its verdict, which covers the facts from where the re-run started
    (Start, or the earliest held checkpoint of an archived history). No verdict, and why, when
    the sandbox refused the program: it reached no End, so nothing matched."""
    start = driver.checkpoint["n"] if driver.checkpoint is not None else 1
    try:
        outcome = driver.run()
    except _Diverged as diverged:
        return Verdict("Diverged", diverged.fact, diverged.reason, start, diverged.found), ""
    except _Incomplete as incomplete:
        return Verdict("Incomplete", incomplete.fact, incomplete.reason, start), ""
    if driver.verdict is None:
        return None, outcome.message or "the sandbox refused the program"
    return Verdict("Matched", start=start), ""


def _round_tasks(prepared: Prepared, place: dict) -> list[dict]:
    """The tasks a round's arguments carry: each parameter of a task type holds a task parked on
    its only call (sandbox/checkpoints.py records it by that call), `{"param", "call", "tool"}`."""
    function = place["function"]
    fn = prepared.compiled.functions[f"{function['module']}.{function['name']}"]
    return [{"param": p.name, "call": place["arguments"][p.name]["call"], "tool": place["arguments"][p.name]["tool"]}
            for p in fn.params if p.task]


def replay(runs_dir: str, run_id: str, current: Compiled | None = None, *,
           from_start: bool = True) -> ReplayResult:
    """Replay a run against its history. The child starts while the history is read, and the
    history is verified while the child runs; whatever the re-run found, damage anywhere in the
    history is reported instead (a storage failure, never a verdict), as if it had been read
    whole first.

    `from_start` (the default): re-run from Start, so every Checkpoint is checked against what
    the program computes there and a verdict covers the whole held record (docs/cli.md says
    why this is the default). Otherwise from the latest checkpoint, trusting the facts before it."""
    with _cycle_collection_paused():
        return _replay(runs_dir, run_id, current, from_start)


def _replay(runs_dir: str, run_id: str, current: Compiled | None, from_start: bool) -> ReplayResult:
    from flowrt.sandbox_process import Child

    child = Child.start()
    try:
        store = open_store(runs_dir).open(run_id, for_append=False, defer=True)
    except StorageError as problem:
        child.kill()
        return ReplayResult(5, message=f"storage failure: {problem}")
    except Exception as problem:  # RunNotFound, an invalid id
        child.kill()
        return ReplayResult(2, message=str(problem))
    except BaseException:
        child.kill()
        raise
    try:
        try:
            prepared = prepared_from_history(store, bind_tools=False, current=current)
            driver = ReplayDriver(prepared, store, run_id, live=False, from_start=from_start, child=child)
            verdict, refusal = _re_run(driver)
            result = ReplayResult(verdict.exit_code(), verdict) if verdict is not None else \
                ReplayResult(2, message=refusal)
        except _Incomplete as incomplete:  # before the re-run: the input is a hole
            result = ReplayResult(3, Verdict("Incomplete", incomplete.fact, incomplete.reason))
        except Refused as refused:
            result = ReplayResult(2, diagnostics=refused.diagnostics, sources=refused.sources,
                                  message="the recorded program does not check with this compiler")
        except StorageError as problem:
            result = ReplayResult(5, message=f"storage failure: {problem}")
        except Exception:
            store.verify()
            raise
        store.verify()
        return result
    except StorageError as problem:
        return ReplayResult(5, message=f"storage failure: {problem}")
    finally:
        child.kill()
        store.close()


def resume(runs_dir: str, run_id: str, *, call: str | None = None, reply_text: str | None = None,
           resend: set[str] | None = None, python_tools: dict | None = None, allow: bool = False, ask=None,
           durability: str = "fsync", halt=None, park_after: float | None = None,
           manifest: str | None = None, admit_bad_reply: bool = False, telemetry=None,
           processes=None, child=None) -> RunOutcome:
    """Continue a paused, halted, sleeping or crashed run. `halt`, `park_after`, `telemetry` and
    `processes`: as for `flowrt.run.run`, and `child` as for `resume_claimed`; `manifest`: a
    flow.toml to bind from instead of the one beside the file the run was started from. A reply
    that does not decode against the call's declared types is refused before anything is
    recorded (flowrt/reply_check.py), unless `admit_bad_reply` admits it as BadReply, as a live
    one is."""
    try:
        store = open_store(runs_dir).open(run_id, for_append=True, durability=durability)
    except BaseException as problem:
        if child is not None:
            child.kill()
        if isinstance(problem, StorageError):
            return RunOutcome(5, run_id, message=f"storage failure: {problem}")
        if isinstance(problem, Exception):
            return RunOutcome(2, run_id, message=str(problem))
        raise
    return resume_claimed(store, runs_dir, call=call, reply_text=reply_text, resend=resend,
                          python_tools=python_tools, allow=allow, ask=ask, durability=durability, halt=halt,
                          park_after=park_after, manifest=manifest, admit_bad_reply=admit_bad_reply,
                          telemetry=telemetry, processes=processes, child=child)


def resume_claimed(store: RunLog, runs_dir: str, *, call: str | None = None, reply_text: str | None = None,
                   resend: set[str] | None = None, python_tools: dict | None = None, allow: bool = False,
                   ask=None, durability: str = "fsync", halt=None, park_after: float | None = None,
                   manifest: str | None = None, admit_bad_reply: bool = False, telemetry=None,
                   processes=None, child=None) -> RunOutcome:
    """`resume` of a run already opened for appending (`store`, which this closes): what a
    worker calls once it holds the run (flowrt/worker.py), and `flow resume` after opening it.
    `processes`: the Tool processes the worker keeps across runs (flowrt/tool_processes.py);
    `child`: a sandbox child started and not spoken to (flowrt/spare_child.py), which the resume
    then owns (killed if it drives nothing)."""
    run_id = store.run_id
    handed = False
    try:
        if store.ended:
            # A damaged record is a storage failure even when nothing would be read from it.
            store.verify_files()
            return RunOutcome(2, run_id, message=f"run {run_id} has ended: there is nothing to resume")
        outstanding = open_calls(store)
        supplied = supplied_reply(run_id, outstanding, call, reply_text)
        if isinstance(supplied, RunOutcome):
            return supplied
        if supplied is not None and not admit_bad_reply:
            refused = refused_reply(store, call, supplied[1])
            if refused is not None:
                return refused
        for call_id in sorted(resend or ()):
            if call_id not in outstanding:
                return RunOutcome(2, run_id, message=f"--resend {call_id}: that call is not open")
        if manifest is not None:
            import os

            # bind() looks for flow.toml beside the root file it is given
            manifest = os.path.join(os.path.dirname(os.path.abspath(manifest)), "main.flow")
        else:
            manifest = _manifest_path(store)
        try:
            prepared = prepared_from_history(store, bind_tools=True, python_tools=python_tools, allow=allow,
                                             ask=ask, path_for_manifest=manifest,
                                             host=RunHost(runs_dir, durability, processes))
        except Refused as refused:
            return RunOutcome(2, run_id, diagnostics=refused.diagnostics, sources=refused.sources)
        except _Incomplete as incomplete:
            return RunOutcome(3, run_id, message=f"cannot resume: {incomplete.reason}")
        driver = ReplayDriver(prepared, store, run_id, live=True, supplied=supplied, resend=resend, child=child)
        handed = True
        driver.halt = halt
        driver.park_after = timers.seconds_ns(park_after)
        if telemetry is False:
            return drive_live(driver)
        from flowrt.telemetry import traced

        spans = traced(driver, telemetry, "flow.resume")
        outcome = None
        try:
            outcome = drive_live(driver)
        finally:
            if spans is not None:
                spans.finish_with(outcome)
        return outcome
    except StorageError as problem:
        return RunOutcome(5, run_id, message=f"storage failure: {problem}")
    finally:
        if child is not None and not handed:
            child.kill()
        store.close()


def refused_reply(store: RunLog, call: str, outcome: Any) -> RunOutcome | None:
    """The refusal of a supplied reply that would be admitted as BadReply, before anything is
    bound or recorded (a person who mistyped answers again); None when it fits."""
    from flowrt.reply_check import CallNotFound, check_reply

    try:
        refusal = check_reply(store, call, outcome)
    except Refused as refused:
        return RunOutcome(2, store.run_id, diagnostics=refused.diagnostics, sources=refused.sources)
    except CallNotFound as problem:
        return RunOutcome(2, store.run_id, message=str(problem))
    if refusal is None:
        return None
    return RunOutcome(2, store.run_id, diagnostics=[refusal.diagnostic()], refusal=refusal.to_json())
def supplied_reply(run_id: str, outstanding: list[str], call: str | None,
                   reply_text: str | None) -> tuple[str, Any] | None | RunOutcome:
    """`--call` and `--reply` read: (call, outcome), None when no reply is given, or the refusal
    (exit 2) when the call is not open or the reply is not an outcome."""
    if call is None:
        return None
    if call not in outstanding:
        return RunOutcome(2, run_id, message=f"call {call} is not open in run {run_id} "
                                            f"(open: {', '.join(outstanding) or 'none'})")
    try:
        supplied = (call, codec.parse_json(reply_text or ""))
    except Exception as problem:
        return RunOutcome(2, run_id, message=f"the reply is not JSON: {problem}")
    if not (isinstance(supplied[1], dict) and len(supplied[1]) == 1 and
            ("Ok" in supplied[1] or "Err" in supplied[1])):
        return RunOutcome(2, run_id, message='a reply is an outcome: {"Ok": value} or {"Err": problem}')
    return supplied


def drive_live(driver: ReplayDriver) -> RunOutcome:
    """Serve the record, then continue live; a pause and an interrupt leave host records."""
    store, run_id = driver.store, driver.run_id
    try:
        outcome = driver.run()
    except _Diverged as diverged:
        return RunOutcome(1, run_id, message=f"the recorded program diverged from its history at fact "
                                             f"{diverged.fact}: {diverged.reason}")
    except _Incomplete as incomplete:
        return RunOutcome(3, run_id, message=f"cannot resume: {incomplete.reason}")
    except KeyboardInterrupt as interrupt:
        reason, message = halt_reason(interrupt)
        store.host_record({"kind": "halted", "head": store.head, "reason": reason})
        return RunOutcome(130, run_id, message=message)
    if outcome.exit_code == 3:
        let_go_record(store, outcome)
    return outcome


def _manifest_path(store: RunLog) -> str:
    """The root file the run was started from (a host record), for finding flow.toml."""
    for record in store.host_records():
        if record.get("kind") == "origin":
            return record.get("root", ".")
    # No record of where the run started: look for flow.toml in the working directory.
    import os

    return os.path.join(os.getcwd(), "main.flow")


class CheckpointMisfit(Exception):
    """A checkpoint's arguments cannot continue in a function (the execution seed's Forks rule);
    `param` names the parameter at fault."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def fit_checkpoint_arguments(fn, arguments: dict, *, replaced: set[str] = frozenset()) -> dict[str, Any]:
    """The checkpoint's `arguments` re-encoded at `fn`'s parameter types (a newer program's
    function may have changed them), parked tasks kept as they are; `replaced` names arguments the
    forker supplied, which a task parameter refuses. CheckpointMisfit when one does not fit."""
    fitted: dict[str, Any] = {}
    for p in fn.params:
        if p.name not in arguments:
            raise CheckpointMisfit(f"the checkpoint has no argument for `{p.name}` of `{fn.name}`", p.name)
        if p.task:
            # A parked task keeps its call; it cannot be given as input.
            parked = arguments[p.name]
            if p.name in replaced or not isinstance(parked, dict) or "call" not in parked:
                raise CheckpointMisfit(f"`{p.name}` is a task: the fork keeps the checkpoint's", p.name)
            fitted[p.name] = parked
            continue
        if p.type is None:
            raise CheckpointMisfit(f"`{fn.name}` cannot continue a checkpoint: `{p.name}` is not data", p.name)
        try:
            fitted[p.name] = codec.encode(codec.decode(arguments[p.name], p.type, fn.defs), p.type, fn.defs)
        except codec.DecodeError as problem:
            raise CheckpointMisfit(f"argument `{p.name}` does not fit `{fn.name}`: {problem}", p.name) from None
    return fitted


def fork(runs_dir: str, parent_id: str, checkpoint: int, *, input_text: str | None = None,
         program_file: str | None = None, python_tools: dict | None = None, allow: bool = False, ask=None,
         durability: str = "fsync") -> RunOutcome:
    """A new run from a checkpoint of another: the same program or a newer one, with the
    checkpoint's arguments or some of them replaced. The parent is never changed."""
    from flowc.files import read_text
    from flowrt.run import new_run_id, recorded_modules

    try:
        parent = open_store(runs_dir).open(parent_id, for_append=False)
    except StorageError as problem:
        return RunOutcome(5, message=f"storage failure: {problem}")
    except Exception as problem:
        return RunOutcome(2, message=str(problem))
    try:
        try:
            fact = parent.fact(checkpoint)
        except (IndexError, KeyError, ValueError):
            fact = None
        if fact is None or fact["kind"] != "Checkpoint":
            return RunOutcome(2, message=f"fact {checkpoint} of run {parent_id} is not a checkpoint")
        try:
            arguments = dict(parent.value(fact, "arguments"))
            recorded_input = parent.value(parent.facts()[0], "input")
        except Hole as hole:
            return RunOutcome(3, message=f"cannot fork: {hole}")
        start = parent.facts()[0]
        try:
            if program_file is not None:
                compiled = flowc.compile(program_file, read_text)
                if not compiled.ok:
                    return RunOutcome(2, diagnostics=list(compiled.diagnostics), sources=compiled.sources())
            else:
                compiled, _ = recorded_program(parent)
        except Refused as refused:
            return RunOutcome(2, diagnostics=refused.diagnostics, sources=refused.sources)
        function = fact["function"]
        fn = compiled.functions.get(f"{function['module']}.{function['name']}")
        if fn is None:
            return RunOutcome(2, message=f"the program has no top-level function `{function['name']}` in module "
                                         f"`{function['module']}` to continue the checkpoint with")
        names = [p.name for p in fn.params]
        replacement = None
        if input_text is not None:
            try:
                replacement = codec.parse_json(input_text)
            except Exception as problem:
                return RunOutcome(2, message=f"the input is not JSON: {problem}")
            if not isinstance(replacement, dict):
                return RunOutcome(2, message="the input is a JSON object keyed by parameter name")
            for key in sorted(replacement):
                if key not in names:
                    return RunOutcome(2, message=f"`{fn.name}` has no parameter `{key}`")
            arguments.update(replacement)
        try:
            fitted = fit_checkpoint_arguments(fn, arguments, replaced=set(replacement or ()))
        except CheckpointMisfit as misfit:
            return RunOutcome(2, message=str(misfit))
        entry = start["entry"]
        if entry["module"] != compiled.root or compiled.entry(entry["function"]) is None:
            entry = {"module": fn.module, "function": fn.name}
        modules, sources = recorded_modules(compiled)
        run_id = new_run_id()
        fields = {"program": compiled.identity, "std": "std@v1", "entry": entry, "input": recorded_input,
                  "modules": modules, "parent": {"run": parent_id, "checkpoint": checkpoint}}
        try:
            store = open_store(runs_dir).create(run_id, fields, sources=sources, durability=durability)
        except StorageError as problem:
            return RunOutcome(5, message=f"storage failure: {problem}")
    finally:
        parent.close()
    try:
        store.append("Checkpoint", {"function": function, "arguments": fitted})
        origin = program_file or _manifest_path(parent)
        store.host_record({"kind": "origin", "root": origin})
        store.host_record({"kind": "forked", "parent": parent_id, "checkpoint": checkpoint})
        try:
            prepared = prepared_from_history(store, bind_tools=True, python_tools=python_tools, allow=allow,
                                             ask=ask, path_for_manifest=origin, host=RunHost(runs_dir, durability))
        except Refused as refused:
            return RunOutcome(2, run_id, diagnostics=refused.diagnostics, sources=refused.sources)
        return drive_live(ReplayDriver(prepared, store, run_id, live=True))
    except StorageError as problem:
        return RunOutcome(5, run_id, message=f"storage failure: {problem}")
    finally:
        store.close()

