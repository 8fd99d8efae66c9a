"""What the Python API returns (frozen dataclasses) and the one exception it raises (`Refused`).

A Flow outcome is always a result, never an exception: a run that completed, ended with its own
Err, faulted, paused, was halted, or hit a storage failure comes back as a `RunResult` with that
`status`. Only a refusal, something the host would not start or accept (a program that does not
check, a binding that does not match, an input or a reply that does not decode, a run that does
not exist), raises `Refused`, and nothing was recorded for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from flowc.diagnostics import Diagnostic
from flowrt.api_values import from_json
from flowrt.refusal import Refused as _Refused
from flowrt.store import Hole, RunLog

Status = Literal["completed", "err", "faulted", "paused", "halted", "storage-failure"]

#: `RunResult.status` by the CLI's exit code (docs/cli.md)
STATUS_BY_EXIT: dict[int, Status] = {0: "completed", 4: "err", 1: "faulted", 3: "paused", 130: "halted", 5: "storage-failure"}


class Refused(_Refused):
    """The host refused: nothing was recorded (for `resume`, the call stays open). `diagnostics`
    say why at the place concerned (with `sources` to quote); `message` says it in one text.
    A refused reply also has `path` (where in the outcome it failed) and `schema` (the JSON
    Schema of the outcome the call expects)."""

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None,
                 sources: dict[str, str] | None = None, *, path: str | None = None,
                 schema: dict | None = None) -> None:
        super().__init__(list(diagnostics or []), sources)
        self.args = (message,)
        self.message = message
        self.path = path
        self.schema = schema

    def __str__(self) -> str:
        return self.message


def refused_from(diagnostics: list[Diagnostic], sources: dict[str, str] | None, message: str | None) -> Refused:
    text = message or "; ".join(f"{d.code}: {d.message}" for d in diagnostics) or "refused"
    return Refused(text, diagnostics, sources)


@dataclass(frozen=True)
class PendingCall:
    """A call a paused run waits on: answer it with `host.resume(run_id, call=call, reply=...)`.
    `schema` is the JSON Schema of the outcome it expects (`{"Ok": ...}` or `{"Err": ...}`)."""

    call: str
    tool: str
    arguments: dict[str, Any]
    schema: dict


@dataclass(frozen=True)
class Fault:
    """Why a run faulted: `kind` (`panic`, `limit`, `internal`, ...), the message, the Flow
    source location (`{"file", "line", "column"}` where there is one) and the task."""

    kind: str
    message: str
    location: dict | None
    task: str | None


@dataclass(frozen=True)
class RunResult:
    """A run (or a resume, or a fork) as far as it went: to its End, a pause, a halt, or a
    storage failure. `output` is the entry's result as Python values (docs/api.md §Values) and
    `output_json` its canonical JSON bytes; both None unless the run completed (`completed`, or
    `err` when the entry's own Result is an Err)."""

    run_id: str | None
    status: Status
    exit_code: int
    output: Any = None
    output_json: bytes | None = None
    pending: tuple[PendingCall, ...] = ()
    fault: Fault | None = None
    message: str | None = None


@dataclass(frozen=True)
class ReplayResult:
    """A replay's verdict: `Matched` (exit 0), `Diverged` at `fact` (1) or `Incomplete` (3),
    covering the facts from `start` on; a damaged history is `storage-failure` (5), no verdict."""

    run_id: str
    verdict: Literal["Matched", "Diverged", "Incomplete"] | None
    exit_code: int
    fact: int | None = None
    reason: str = ""
    start: int = 1
    message: str | None = None


@dataclass(frozen=True)
class HoleValue:
    """A redacted value: only its hash is left."""

    hash: str


@dataclass(frozen=True)
class Fact:
    """One fact of a history: its number, kind and hash. Values are the recorded JSON data
    (a redacted one is a `HoleValue`)."""

    n: int
    kind: str
    hash: str


@dataclass(frozen=True)
class StartFact(Fact):
    program: str
    entry: str  # "module.function"
    input: Any
    parent: dict | None = None  # a fork: {"run", "checkpoint"}
    outer: dict | None = None  # a nested run: {"run", "call"}


@dataclass(frozen=True)
class CallFact(Fact):
    call: str
    tool: str
    arguments: Any
    types: Any = None


@dataclass(frozen=True)
class ReplyFact(Fact):
    call: str
    outcome: Any


@dataclass(frozen=True)
class ChoiceFact(Fact):
    task: str
    picked: str


@dataclass(frozen=True)
class StopFact(Fact):
    task: str
    by: str | None
    found: Any
    closed: tuple[str, ...]


@dataclass(frozen=True)
class CheckpointFact(Fact):
    function: str  # "module.name"
    arguments: Any


@dataclass(frozen=True)
class EndFact(Fact):
    outcome: Any


@dataclass(frozen=True)
class HistoryPage:
    """A page of a run's facts: those after fact `after` (of the kinds asked for), at most
    `limit`; `next_after` is the `after` of the next page, None on the last."""

    run_id: str
    state: str  # running | paused | halted | crashed | ended | unknown (flowrt.run_state)
    total: int
    facts: tuple[Fact, ...]
    next_after: int | None


@dataclass(frozen=True)
class RunInfo:
    """A stored run as discovery finds it (docs/trace.md §11, without reading its history whole)."""

    run_id: str
    record: str  # complete | incomplete | damaged | ...
    ending: str | None
    entry: str | None
    facts: int
    host_decision: str | None  # paused | halted | None
    problem: dict | None = None


@dataclass(frozen=True)
class RunsPage:
    runs: tuple[RunInfo, ...]
    next_after: str | None
    problems: tuple[dict, ...] = field(default_factory=tuple)


def fact_of(store: RunLog, fact: dict) -> Fact:
    """The typed form of a stored fact (its values read, a hole as HoleValue)."""

    def value(name: str) -> Any:
        try:
            return store.value(fact, name)
        except Hole as hole:
            return HoleValue(hole.hash)
        except KeyError:
            return None

    head = (fact["n"], fact["kind"], fact["hash"])
    kind = fact["kind"]
    if kind == "Start":
        entry = fact["entry"]
        return StartFact(*head, fact["program"], f"{entry['module']}.{entry['function']}", value("input"),
                         fact.get("parent"), fact.get("outer"))
    if kind == "Call":
        return CallFact(*head, fact["call"], fact["tool"], value("arguments"), fact.get("types"))
    if kind == "Reply":
        return ReplyFact(*head, fact["call"], value("outcome"))
    if kind == "Choice":
        return ChoiceFact(*head, fact["task"], fact["picked"])
    if kind == "Stop":
        return StopFact(*head, fact["task"], fact.get("by"), value("found"), tuple(fact.get("closed", [])))
    if kind == "Checkpoint":
        function = fact["function"]
        return CheckpointFact(*head, f"{function['module']}.{function['name']}", value("arguments"))
    return EndFact(*head, value("outcome"))


def run_info(row: dict) -> RunInfo:
    entry = row.get("entry")
    decision = row.get("hostDecision")
    return RunInfo(row["run"], row.get("record", "unknown"), row.get("ending"),
                   f"{entry['module']}.{entry['function']}" if isinstance(entry, dict) else None,
                   (row.get("lastFact") or {}).get("n", 0),
                   decision.get("kind") if isinstance(decision, dict) else decision, row.get("problem"))


def run_result(outcome: Any, pending_arguments: dict[str, Any] | None = None) -> RunResult:
    """The RunResult of a `flowrt.run.RunOutcome` whose exit code is not a refusal (2)."""
    from flowdata import codec

    status: Status = STATUS_BY_EXIT.get(outcome.exit_code, "faulted")
    output = None
    if outcome.output is not None:
        data = codec.parse_json(outcome.output)
        output = from_json(data, *outcome.result_type) if outcome.result_type is not None else data
    pending = tuple(PendingCall(call, tool, (pending_arguments or {}).get(call, {}), typed.outcome_schema)
                    for call, (tool, typed) in sorted(outcome.pending_types.items()))
    fault = None
    if outcome.fault is not None:
        f = outcome.fault
        fault = Fault(str(f.get("kind")), str(f.get("message")), f.get("location"), f.get("task"))
    return RunResult(outcome.run_id, status, outcome.exit_code, output, outcome.output, pending, fault,
                     outcome.message)
