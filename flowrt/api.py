"""The Python API: `Host` drives runs from an application's own threads, `AsyncHost` from its
asyncio loop (docs/api.md is the reference, each of its examples a test).

Both are thin over the CLI's own functions (`flowrt.run.run`, `flowrt.replay.resume`/`replay`/
`fork`, the store's discovery), so a run started here is the run `flow` would record: the API
adds Python values in and out, typed results, refusals as one exception (`Refused`), a supplied
reply checked against its call's declared types before it is admitted (`flowrt.reply_check`),
runs driven in the background (`start`/`resume` with `detach=True`) and their halt, a run's open
calls read from its history (`pending`), and the live feed (`watch`, over `flowrt.watch`). A
detached resume returns once the history has grown (the reply recorded): `flowrt.replay.resume`
has no hook for the moment it takes the run, and the history is what every reader trusts.
`AsyncHost` is in flowrt/api_async.py.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from flowdata import canonical
from flowrt.api_results import (
    HistoryPage, HoleValue, PendingCall, ReplayResult, Refused, RunResult, RunsPage, fact_of, refused_from, run_info,
    run_result,
)
from flowrt import run_hub
from flowrt.api_values import to_json

#: seconds between looks at whether a detached run has started, and whether the application's
#: loop still runs while a Tool call waits on it
TICK = 0.05

_NO_REPLY = object()


class RunHandle:
    """A run going on in the background (`Host.start(..., detach=True)`), past its Start: driven
    with the process's other background runs by one thread (flowrt/run_hub.py), or, on a
    database store, by a thread of its own (`run_hub.in_background`)."""

    def __init__(self, run_id: str, thread: "run_hub.Task", box: dict, halt: threading.Event) -> None:
        self.run_id = run_id
        self._thread = thread
        self._box = box
        self._halt = halt

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> RunResult:
        """The run's result once it reaches its End, a pause or a halt; TimeoutError if it has
        not within `timeout` seconds (it goes on)."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"run {self.run_id} is still going after {timeout} s")
        return _unboxed(self._box)

    def halt(self) -> None:
        """Ask the run to halt as an interrupt would (within a tick, or once a Tool call served on
        the run's thread returns); `wait` then gives its `halted` result."""
        self._halt.set()


def _close_kept(processes: Any, spare: Any) -> None:
    processes.close()
    spare.close()


class Host:
    """An embedding host. `tools` binds Python callables to Tool identities (`module.tool`);
    Tools it does not name are bound by the program's flow.toml. `runs` is where runs are kept
    (a runs directory, or any location `flowrt.store.open_store` takes); `durability` is
    `"fsync"` (a fact is durable before its consequence) or `"none"` (tests, throwaway runs).
    `allow` approves the commands flow.toml names without asking (as `flow run --allow`).
    `telemetry`: an OpenTelemetry TracerProvider (or Tracer) for a span per run and per Tool call
    (docs/telemetry.md); None follows FLOW_OTEL / OTEL_* in the environment; False: none."""

    def __init__(self, tools: Mapping[str, Callable[..., Any]] | None = None, *, runs: str | None = None,
                 durability: str = "fsync", allow: bool = False, runs_dir: str | None = None,
                 telemetry: Any = None) -> None:
        self.tools: dict[str, Callable[..., Any]] = dict(tools or {})
        # `runs_dir` is the name this argument had before `runs` (kept for embeddings that use it).
        self.location: str = runs or runs_dir or ".flow/runs"
        self.durability = durability
        self.allow = allow
        self.telemetry = telemetry
        self._live: dict[str, threading.Event] = {}  # run id -> halt, for the runs this host drives
        self._lock = threading.Lock()
        self._processes = None  # the flow.toml Tool processes kept across runs (flowrt/tool_processes.py)
        self._spare = None  # the sandbox child started ahead of the next run (flowrt/spare_child.py)

    @property
    def runs_dir(self) -> str:
        return self.location

    # -- running ---------------------------------------------------------------------------

    def run(self, path: str, input: Mapping[str, Any] | str | None = None, *, entry: str = "main",
            allow: bool | None = None) -> RunResult:
        """Run a program live, to its End or a pause. `input` maps the entry's parameters to
        Python values (or is the JSON text of that object)."""
        return self._run(path, input, entry, allow, self.tools, threading.Event(), None)

    def start(self, path: str, input: Mapping[str, Any] | str | None = None, *, entry: str = "main",
              detach: bool = False, allow: bool | None = None) -> RunResult | RunHandle:
        """As `run`; with `detach=True`, returns a `RunHandle` as soon as the run's Start is
        recorded (a refusal is still raised here) while the run goes on in a thread. A run that
        ends before its Start (a storage failure making it) returns its `RunResult` instead."""
        if not detach:
            return self.run(path, input, entry=entry, allow=allow)
        return self._detached(lambda halt, on_start: self._run(path, input, entry, allow, self.tools, halt, on_start))

    def queue(self, path: str, input: Mapping[str, Any] | str | None = None, *, entry: str = "main",
              allow: bool | None = None) -> str:
        """Record a run's Start and queue it for a worker (`flow worker`), as `flow run
        --detach` does, without driving it: its run id. Checked and bound as any run, its Tools
        from flow.toml (a refusal is raised here, nothing recorded). The flow.toml commands bound to check their Tools are
        kept by this host for the next `queue` (`close` ends them), so queueing many runs starts
        each command once."""
        from flowrt.run import run

        # Bound from flow.toml only, as the worker that drives it binds it.
        outcome = run(path, entry=entry, input_text=_input_text(input), runs_dir=self.location,
                      allow=self.allow if allow is None else allow,
                      durability=self.durability, telemetry=self.telemetry, detach=True,
                      processes=self._tool_processes())
        if outcome.exit_code == 2:
            raise refused_from(outcome.diagnostics, outcome.sources, outcome.message)
        if not outcome.queued:
            from flowrt.store import StorageError

            raise StorageError(outcome.message or f"the run was not queued (exit {outcome.exit_code})")
        return outcome.run_id

    def _kept(self) -> tuple[Any, Any]:
        """What this host keeps from one run to the next, made on first use: the flow.toml Tool
        processes, each lent to one run at a time as a worker's are (flowrt/tool_processes.py;
        `reuse = false` opts an entry out), and the sandbox children started ahead of its runs
        (flowrt/spare_child.py: a run or resume takes one, and a spare starts when one ends)."""
        from flowrt.spare_child import SpareChild
        from flowrt.tool_processes import ToolProcesses

        with self._lock:
            if self._processes is None:
                self._processes, self._spare = ToolProcesses(), SpareChild()
                # a host dropped without close() ends them when it is collected
                weakref.finalize(self, _close_kept, self._processes, self._spare)
            return self._processes, self._spare

    def _tool_processes(self) -> Any:
        return self._kept()[0]

    def _spares(self) -> Any:
        return self._kept()[1]

    def _child(self) -> Any:
        return self._spares().take_soon()

    def close(self) -> None:
        """End the Tool processes this host keeps (started by its runs, resumes and queued runs)
        and the sandbox child it started ahead; the host stays usable. Processes a run still
        holds end when it lets them go."""
        with self._lock:
            processes, spare = self._processes, self._spare
            self._processes = self._spare = None
        if processes is not None:
            _close_kept(processes, spare)

    def __enter__(self) -> "Host":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _detached(self, drive: Callable[[threading.Event, Callable], RunResult]) -> RunHandle:
        halt = threading.Event()
        started = threading.Event()
        box: dict = {}

        def on_start(run_id: str, fact: dict) -> None:
            box["run_id"] = run_id
            started.set()

        def work() -> None:
            try:
                box["result"] = drive(halt, on_start)
            except BaseException as problem:  # handed to whoever waits (a refusal, a bug)
                box["error"] = problem

        thread = run_hub.in_background(self.location, work)
        while not started.wait(TICK):
            if not thread.is_alive():
                break
        if "run_id" not in box:  # refused (or failed) before Start
            thread.join()
            return _unboxed(box)  # raises, unless the run somehow ended without a Start
        return RunHandle(box["run_id"], thread, box, halt)

    def _run(self, path: str, input: Mapping[str, Any] | str | None, entry: str, allow: bool | None,
             tools: Mapping[str, Callable[..., Any]], halt: threading.Event, on_start) -> RunResult:
        from flowrt.run import run

        text = _input_text(input)
        live = self._live

        def started(run_id: str, fact: dict) -> None:
            with self._lock:
                live[run_id] = halt
            if on_start is not None:
                on_start(run_id, fact)

        try:
            outcome = run(path, entry=entry, input_text=text, runs_dir=self.location, python_tools=dict(tools),
                          allow=self.allow if allow is None else allow, durability=self.durability, halt=halt,
                          on_start=started, telemetry=self.telemetry, processes=self._tool_processes(),
                          child=self._child())
        finally:
            self._spares().refill()
            with self._lock:
                for run_id in [r for r, h in live.items() if h is halt]:
                    del live[run_id]
        return self._result(outcome)

    def _result(self, outcome: Any) -> RunResult:
        if outcome.exit_code == 2:
            raise refused_from(outcome.diagnostics, outcome.sources, outcome.message)
        arguments: dict[str, Any] = {}
        if outcome.exit_code == 3 and outcome.run_id is not None:
            arguments = self._call_arguments(outcome.run_id, outcome.pending)
        return run_result(outcome, arguments)

    def _call_arguments(self, run_id: str, calls: Iterable[str]) -> dict[str, Any]:
        """The arguments of these calls, as recorded (what a person answering them needs)."""
        from flowrt.store import StorageError, open_store

        wanted = set(calls)
        try:
            with open_store(self.location).open(run_id, for_append=False) as store:
                return {f["call"]: store.value(f, "arguments") for f in store.facts()
                        if f["kind"] == "Call" and f["call"] in wanted}
        except (StorageError, KeyError):
            return {}  # the result stands without them

    # -- continuing, checking, forking -------------------------------------------------------

    def resume(self, run_id: str, *, call: str | None = None, reply: Any = _NO_REPLY,
               resend: Iterable[str] = (), allow: bool | None = None,
               detach: bool = False) -> RunResult | RunHandle:
        """Continue a paused, halted or crashed run. `call` and `reply` answer one pending call:
        `reply` is what a Tool callable would return (a value, meaning Ok(value); `flowrt.failed(e)`,
        `flowrt.not_run(text)`, `flowrt.unknown(text)`; or an outcome dict). A reply that does not
        decode against the call's declared types is refused (`Refused` with `path` and `schema`):
        nothing is recorded and the call stays open. With `detach=True` the reply is checked here
        (a refusal raised here) and a `RunHandle` returned once the resume has recorded the reply
        (without one: once it holds the run) or finished, while the run goes on in a thread."""
        if detach:
            return self._resume_detached(run_id, call, reply, resend, allow, self.tools)
        return self._resume(run_id, call, reply, resend, allow, self.tools, threading.Event())

    def _resume(self, run_id: str, call: str | None, reply: Any, resend: Iterable[str], allow: bool | None,
                tools: Mapping[str, Callable[..., Any]], halt: threading.Event) -> RunResult:
        reply_text = self._reply_text(run_id, call, reply)
        return self._drive_resume(run_id, call, reply_text, resend, allow, tools, halt)

    def _reply_text(self, run_id: str, call: str | None, reply: Any) -> str | None:
        if call is not None:
            if reply is _NO_REPLY:
                raise Refused(f"answering call {call} needs a reply")
            return canonical.dumps(self._checked_reply(run_id, call, reply)).decode("utf-8")
        if reply is not _NO_REPLY:
            raise Refused("a reply needs the call it answers (call=...)")
        return None

    def _drive_resume(self, run_id: str, call: str | None, reply_text: str | None, resend: Iterable[str],
                      allow: bool | None, tools: Mapping[str, Callable[..., Any]], halt: threading.Event) -> RunResult:
        from flowrt.replay import resume

        with self._lock:
            self._live[run_id] = halt
        try:
            outcome = resume(self.location, run_id, call=call, reply_text=reply_text, resend=set(resend),
                             python_tools=dict(tools), allow=self.allow if allow is None else allow,
                             durability=self.durability, halt=halt, telemetry=self.telemetry,
                             processes=self._tool_processes(), child=self._child())
        finally:
            self._spares().refill()
            with self._lock:
                if self._live.get(run_id) is halt:
                    del self._live[run_id]
        return self._result(outcome)

    def _resume_detached(self, run_id: str, call: str | None, reply: Any, resend: Iterable[str],
                         allow: bool | None, tools: Mapping[str, Callable[..., Any]]) -> RunHandle:
        """The resume on a thread of its own, returned once the history has grown past what it
        was (the resume took the run and recorded something) or the resume finished: an
        application that answers a question can show the answer recorded, or the refusal."""
        reply_text = self._reply_text(run_id, call, reply)
        halt = threading.Event()
        box: dict = {}

        def work() -> None:
            try:
                box["result"] = self._drive_resume(run_id, call, reply_text, resend, allow, tools, halt)
            except BaseException as problem:  # handed to whoever waits (a refusal, a bug)
                box["error"] = problem

        with self._open(run_id) as seen:
            before = len(seen)
            # On a thread of its own: a resume's Tools are bound from the run's flow.toml, often
            # Tool processes, which the run hub does not drive well (flowrt/run.py `run`)
            thread = threading.Thread(target=work, name="flow resume", daemon=True)
            thread.start()
            while thread.is_alive() and not self._taken(seen, run_id, before, answered=reply_text is not None):
                thread.join(TICK)
        if not thread.is_alive() and "error" in box:
            raise box["error"]  # refused: nothing was recorded
        return RunHandle(run_id, thread, box, halt)

    def _taken(self, seen: Any, run_id: str, before: int, *, answered: bool) -> bool:
        """Whether the resume has visibly taken the run: its history grew (the reply is the first
        fact an answer records), or, for a resume that answers nothing (resending calls whose
        replies may be long in coming), the run is held for appending."""
        if not answered and seen.appender_active():
            return True
        new = seen.refresh()
        if new is None:  # this store cannot read on: count afresh
            with self._open(run_id) as again:
                return len(again) > before
        return len(seen) > before

    def pending(self, run_id: str) -> tuple[PendingCall, ...]:
        """The calls the run waits on (a Call with no Reply that no Stop closed; on a running run,
        the calls out now), by call id, each with its recorded arguments and the JSON Schema of the
        outcome it expects: what a person answering needs, whoever started or paused the run.
        Empty for an ended run. `schema` is `{}` (anything) when the recorded program no longer
        checks here; a damaged history raises `flowrt.store.StorageError`."""
        from flowrt.refusal import Refused as NotChecking
        from flowrt.replay import recorded_program
        from flowrt.reply_check import call_types
        from flowrt.store import Hole

        with self._open(run_id) as store:
            if store.ended:
                return ()
            facts = store.open_calls()  # (call id -> its Call fact)
            calls = sorted(facts)
            if not calls:
                return ()
            try:
                tools = recorded_program(store)[0].tools
            except NotChecking:
                tools = None
            out = []
            for call in calls:
                fact = facts[call]
                try:
                    arguments = store.value(fact, "arguments")
                except Hole as hole:
                    arguments = HoleValue(hole.hash)
                schema = call_types(store, call, tools)[1].outcome_schema if tools is not None else {}
                out.append(PendingCall(call, fact["tool"], arguments, schema))
            return tuple(out)

    def _checked_reply(self, run_id: str, call: str, reply: Any) -> Any:
        """The reply's outcome JSON, written by the call's declared types and checked against
        them (`flowrt.reply_check`); Refused if admission would not take it as given. Where the
        types cannot be had (no such open call, a damaged record), it is written untyped and
        `resume` says what is wrong."""
        from flowrt.refusal import Refused as NotChecking
        from flowrt.replay import open_calls, recorded_program
        from flowrt.reply_check import call_types, check_reply
        from flowrt.store import StorageError, open_store

        untyped = _reply_outcome(reply, None)
        try:
            store = open_store(self.location).open(run_id, for_append=False)
        except StorageError:
            return untyped
        except Exception as problem:  # RunNotFound, an invalid id
            raise Refused(str(problem)) from None
        with store:
            if store.ended or call not in open_calls(store):
                return untyped  # resume refuses it, naming the calls that are open
            try:
                compiled, _ = recorded_program(store)
            except (NotChecking, StorageError):
                return untyped
            _, typed = call_types(store, call, compiled.tools)
            outcome_json = _reply_outcome(reply, typed)
            refusal = check_reply(store, call, outcome_json)
        if refusal is not None:
            expected = canonical.dumps(refusal.schema).decode("utf-8")
            raise Refused(f"{refusal.text}; the reply must be an outcome of this JSON Schema: {expected}",
                          path=refusal.path, schema=refusal.schema)
        return outcome_json

    def replay(self, run_id: str, *, from_start: bool = True) -> ReplayResult:
        """Re-run a run against its history, calling nothing: Matched, Diverged or Incomplete."""
        from flowrt.replay import replay

        result = replay(self.location, run_id, from_start=from_start)
        if result.exit_code == 2:
            raise refused_from(result.diagnostics, result.sources, result.message)
        verdict = result.verdict
        if verdict is None:
            return ReplayResult(run_id, None, result.exit_code, message=result.message)
        kind: Any = verdict.kind  # Matched | Diverged | Incomplete (flowrt.replay.Verdict)
        return ReplayResult(run_id, kind, result.exit_code, verdict.fact, verdict.reason, verdict.start,
                            result.message)

    def fork(self, run_id: str, *, checkpoint: int, input: Mapping[str, Any] | str | None = None,
             program: str | None = None, allow: bool | None = None) -> RunResult:
        """A new run from Checkpoint fact `checkpoint` of `run_id` (which is never changed): on
        the recorded program or on `program` (a newer file), with some of the checkpoint's
        arguments replaced by `input`."""
        return self._fork(run_id, checkpoint, input, program, allow, self.tools)

    def _fork(self, run_id: str, checkpoint: int, input: Mapping[str, Any] | str | None, program: str | None,
              allow: bool | None, tools: Mapping[str, Callable[..., Any]]) -> RunResult:
        from flowrt.replay import fork

        outcome = fork(self.location, run_id, checkpoint, input_text=None if input is None else _input_text(input),
                       program_file=program, python_tools=dict(tools),
                       allow=self.allow if allow is None else allow, durability=self.durability)
        return self._result(outcome)

    def halt(self, run_id: str) -> None:
        """Halt a run this host is driving (a detached run, or one another thread waits on); it
        stops as an interrupt stops it, resumable. A run driven elsewhere is refused."""
        with self._lock:
            halt = self._live.get(run_id)
        if halt is None:
            raise Refused(f"run {run_id} is not driven by this host (a run driven by another process halts when "
                          "that process is interrupted)")
        halt.set()

    # -- inspecting --------------------------------------------------------------------------

    def history(self, run_id: str, *, kinds: Iterable[str] | None = None, after: int = 0,
                limit: int = 100) -> HistoryPage:
        """A page of the run's facts after fact `after`, at most `limit`, of `kinds` (`"Call"`,
        `"Reply"`, ...; any case) when given. A damaged history raises `flowrt.store.StorageError`."""
        from flowrt.history_scan import scan_history
        from flowrt.run_state import run_state
        from flowrt.store import KINDS

        wanted = None
        if kinds is not None:
            by_lower = {k.lower(): k for k in KINDS}
            wanted = set()
            for kind in [kinds] if isinstance(kinds, str) else kinds:
                if kind.lower() not in by_lower:
                    raise Refused(f"there is no fact kind {kind!r} (kinds: {', '.join(KINDS)})")
                wanted.add(by_lower[kind.lower()])
        if limit < 1:
            raise Refused("limit must be at least 1")
        store = self._open(run_id, defer=True)
        with store:
            # One pass, holding the page only (flowrt/history_scan.py), the whole history verified
            page: list[dict] = []
            more = False

            def visit(f: dict) -> None:
                nonlocal more
                if f["n"] > after and (wanted is None or f["kind"] in wanted):
                    if len(page) < limit:
                        page.append(f)
                    else:
                        more = True

            scanned = scan_history(store, visit)
            return HistoryPage(run_id, run_state(store, open_calls=scanned.open_calls)["state"], scanned.count,
                               tuple(fact_of(store, f) for f in page), page[-1]["n"] if more else None)

    def _open(self, run_id: str, *, defer: bool = False):
        from flowrt.store import StorageError, open_store

        try:
            return open_store(self.location).open(run_id, for_append=False, defer=defer)
        except StorageError:
            raise
        except Exception as problem:  # RunNotFound, an invalid id
            raise Refused(str(problem)) from None

    def runs(self, *, limit: int = 50, after: str | None = None) -> RunsPage:
        """Discovery: a page of the stored runs, by id, after run `after`; `next_after` is the
        `after` of the next page. Reads within bounds, changes nothing (docs/trace.md §11)."""
        from flowrt.store import open_store

        page = open_store(self.location).scan(limit=limit, after=after)
        return RunsPage(tuple(run_info(r) for r in page["runs"]), page.get("nextAfter"), tuple(page["problems"]))

    def watch(self, run_id: str, *, after: int = 0, poll: float = 0.05, timeout: float | None = None) -> "Watch":
        """The run's facts after fact `after` (each as `flow history --json` shows it, with
        `acceptedAt` where known) as they are accepted, whichever process writes them, ending at
        End, a pause, a halt or a crash (`flowrt.watch`); `Watch.ending` then says which.
        TimeoutError when `timeout` seconds pass first. An absent run is refused here."""
        _check_watch(after, poll, timeout)
        return Watch(self._watch_of(run_id, after), poll, timeout)

    def _watch_of(self, run_id: str, after: int) -> Any:
        from flowrt.store import StorageError
        from flowrt.watch import RunWatch

        try:
            return RunWatch(self.location, run_id, since=after)
        except StorageError:
            raise
        except Exception as problem:  # RunNotFound, an invalid id
            raise Refused(str(problem)) from None


class Watch:
    """An iterator over a run's facts as they are accepted (`Host.watch`). Once it is exhausted,
    `ending` is why it ended (`ended`, `paused`, `halted`, `crashed`, or `unknown`: nobody holds
    the run and it recorded no decision) and `head` the number of the last fact read, the `after`
    of a later watch. `close()` (or a `with` block) lets go of the run early."""

    def __init__(self, watch: Any, poll: float, timeout: float | None) -> None:
        from flowrt.watch import follow

        self._watch = watch
        self._rows = follow(watch, poll=poll, timeout=timeout)

    @property
    def ending(self) -> str | None:
        return self._watch.ending

    @property
    def head(self) -> int:
        return self._watch.head_n

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> dict:
        try:
            return next(self._rows)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._rows.close()
        self._watch.close()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- helpers -------------------------------------------------------------------------------------


def _check_watch(after: Any, poll: Any, timeout: Any) -> None:
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValueError("after is a fact number >= 0")
    if isinstance(poll, bool) or not isinstance(poll, (int, float)) or not poll > 0:
        raise ValueError("poll is a number of seconds > 0")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
        raise ValueError("timeout is None or a number of seconds >= 0")


def _input_text(input: Mapping[str, Any] | str | None) -> str:
    if isinstance(input, str):
        return input
    try:
        return canonical.dumps(to_json(dict(input or {}))).decode("utf-8")
    except (TypeError, ValueError) as problem:
        raise Refused(f"the input is not data a Flow entry can take: {problem}") from None


def _reply_outcome(reply: Any, typed: Any) -> Any:
    """The outcome JSON of a reply given as a Tool callable would return it, its value written
    by the call's types (`typed`, a `flowrt.tool_types.Typed`) when they are known."""
    from flowrt.bindings import PENDING, Problem

    if reply is PENDING:
        raise Refused("a supplied reply cannot leave the call pending: give its outcome")
    ok_term = typed.ok if typed is not None else None
    err_term = typed.err if typed is not None else None
    defs = typed.defs if typed is not None else None
    try:
        if isinstance(reply, Problem):
            kind, value = reply.kind, reply.value
        elif isinstance(reply, dict) and len(reply) == 1 and "Err" in reply and isinstance(reply["Err"], dict) \
                and len(reply["Err"]) == 1:
            (kind, value), = reply["Err"].items()
        elif isinstance(reply, dict) and len(reply) == 1 and "Err" in reply:
            return to_json(reply)  # not an outcome: the check says so
        else:
            value = reply["Ok"] if isinstance(reply, dict) and len(reply) == 1 and "Ok" in reply else reply
            return {"Ok": to_json(value, ok_term, defs)}
        return {"Err": {kind: to_json(value, err_term if kind == "Failed" else None, defs)}}
    except TypeError as problem:
        raise Refused(f"the reply is not data: {problem}") from None


def _unboxed(box: dict) -> Any:
    if "error" in box:
        raise box["error"]
    return box["result"]
