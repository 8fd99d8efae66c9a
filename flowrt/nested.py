"""Nested runs: the host's implementation of `std@v1/runner` (check, run, resume).

A nested run is a run of its own, in the same runs directory as the run that started it, with a
Start that names the outer run and the call (`outer: {run, call}`). Its id is made from those two,
so the same call sent again (`flow resume --resend` after a crash) finds the run it started and
continues it rather than starting another. The submitted source is one file, `main.flow`, started
at its `main`; it is bound with the outer run's bindings (its Python callables, and the flow.toml
beside the outer program, with the outer run's approval: a nested run never asks).

Each call is driven on a thread of its own, so the outer run goes on while a nested run works.
Endings become values: Completed (the entry's result as canonical JSON), Faulted, or Paused with
the run as a `Run` token and its open calls; a refused run or resume is `Err` with diagnostics;
a storage failure is Unknown. When the outer run closes a call that drives a nested run, the
nested run is halted and the call answered by nothing; when the outer run stops (it halts, pauses
or ends), every nested run it drives is halted first, and each records its own halt.

Replay never gets here: a replay serves the recorded replies of these calls.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from flowrt import bindings as B
from flowrt.store import RunNotFound, RunLog, open_store, StorageError

SOURCE_FILE = "main.flow"
TOOLS = "std@v1/runner."


def nested_run_id(outer_run: str, call_id: str) -> str:
    """The id of the run that call `call_id` of `outer_run` starts: the same every time."""
    return f"{outer_run}.n-{hashlib.sha256(call_id.encode()).hexdigest()[:16]}"


class RunnerTools(B.Implementation):
    def __init__(self, host, *, python_tools: dict, allow: bool, manifest_dir: str) -> None:
        self.host = host  # flowrt.run.RunHost: the runs directory and durability
        self.python_tools = dict(python_tools)
        self.allow = allow
        self.manifest_dir = manifest_dir  # the outer program's: its flow.toml binds the nested run too
        self.lock = threading.Lock()
        self.driving: dict[str, tuple[threading.Event, threading.Thread]] = {}

    def label(self) -> str:
        return "host runner"

    def call(self, run: str, call_id: str, tool: str, arguments: dict, types: Any, deliver) -> None:
        halt = threading.Event()

        def work() -> None:
            try:
                outcome = self._serve(run, call_id, tool[len(TOOLS):], arguments, halt)
            except Exception as problem:  # noqa: BLE001 - the host failed; the effects are unknown
                outcome = {"Err": {"Unknown": f"{type(problem).__name__}: {problem}"}}
            finally:
                with self.lock:
                    self.driving.pop(call_id, None)
            if outcome is not None and not halt.is_set():
                deliver(call_id, outcome)

        thread = threading.Thread(target=work, name=f"nested {call_id}", daemon=True)
        with self.lock:
            self.driving[call_id] = (halt, thread)
        thread.start()

    def cancel(self, call_id: str) -> None:
        """The outer run closed the call: halt the nested run it drives; it is answered by nothing."""
        with self.lock:
            entry = self.driving.get(call_id)
        if entry is not None:
            entry[0].set()

    def close(self) -> None:
        """The outer run stops: halt every nested run it drives, and wait until each has recorded
        its own halt."""
        with self.lock:
            entries = list(self.driving.values())
        for halt, _ in entries:
            halt.set()
        for _, thread in entries:
            thread.join()

    # -- the three Tools --------------------------------------------------------------------------

    def _serve(self, outer_run: str, call_id: str, name: str, arguments: dict, halt: threading.Event):
        if name == "check":
            return self._check(arguments["source"])
        if name == "run":
            return self._run(outer_run, call_id, arguments["source"], arguments["input"], halt)
        if name == "resume":
            return self._resume(arguments["run"], arguments["call"], arguments["reply"], halt)
        return {"Err": {"NotRun": f"the host's runner has no Tool `{name}`"}}

    def _reader(self, source: str):
        def read(file: str) -> str:
            if file == SOURCE_FILE:
                return source
            raise FileNotFoundError(2, "a nested run's source is one file, main.flow", file)

        return read

    def _check(self, source: str):
        import flowc

        checked = flowc.check_program(SOURCE_FILE, self._reader(source), disk=None)
        if checked.ok:
            return {"Ok": None}
        return {"Err": {"Failed": [diagnostic_value(d) for d in checked.diagnostics]}}

    def _run(self, outer_run: str, call_id: str, source: str, input_text: str, halt: threading.Event):
        from flowrt.replay import resume
        from flowrt.run import run

        run_id = nested_run_id(outer_run, call_id)
        runs_dir, durability = self.host.runs_dir, self.host.durability
        try:
            existing = open_store(runs_dir).open(run_id, for_append=False)
        except RunNotFound:
            existing = None
        except StorageError as problem:
            return {"Err": {"Unknown": f"storage failure: {problem}"}}
        if existing is None:
            outcome = run(SOURCE_FILE, input_text=input_text, runs_dir=runs_dir, python_tools=self.python_tools,
                          allow=self.allow, ask=None, durability=durability, halt=halt, read=self._reader(source),
                          run_id=run_id, outer={"run": outer_run, "call": call_id}, manifest_dir=self.manifest_dir)
            return self._state(outcome, runs_dir)
        # The call was sent again (after a crash): the run it started goes on where it stopped.
        with existing:
            if existing.ended:
                return self._ended(existing, existing.facts()[-1])
        outcome = resume(runs_dir, run_id, python_tools=self.python_tools, allow=self.allow, ask=None,
                         durability=durability, halt=halt)
        return self._state(outcome, runs_dir)

    def _resume(self, run_id: str, call: str, reply: str, halt: threading.Event):
        from flowrt.replay import resume

        runs_dir = self.host.runs_dir
        outcome = resume(runs_dir, run_id, call=call, reply_text=reply, python_tools=self.python_tools,
                         allow=self.allow, ask=None, durability=self.host.durability, halt=halt)
        return self._state(outcome, runs_dir)

    # -- endings as values ------------------------------------------------------------------------

    def _state(self, outcome, runs_dir: str):
        """A run's or resume's outcome as the runner's reply (None: halted, answer nothing)."""
        code = outcome.exit_code
        if code == 130:
            return None
        if code in (0, 4):
            return {"Ok": {"Completed": outcome.output.decode("utf-8")}}
        if code == 3 and outcome.pending:
            return {"Ok": {"Paused": {"run": outcome.run_id,
                                      "pending": _pending(runs_dir, outcome.run_id, outcome.pending)}}}
        if code == 1 and outcome.fault is not None:
            return {"Ok": {"Faulted": fault_text(outcome.fault)}}
        if code == 5:
            return {"Err": {"Unknown": outcome.message or "storage failure"}}
        diagnostics = [diagnostic_value(d) for d in outcome.diagnostics]
        if not diagnostics:
            diagnostics = [_message_diagnostic(outcome.message or f"the nested run ended with exit code {code}")]
        return {"Err": {"Failed": {"diagnostics": diagnostics}}}

    def _ended(self, store: RunLog, end: dict):
        outcome = store.value(end, "outcome")
        if "Completed" in outcome:
            from flowdata.canonical import dumps as canonical_json

            return {"Ok": {"Completed": canonical_json(outcome["Completed"]).decode("utf-8")}}
        return {"Ok": {"Faulted": fault_text(outcome.get("Faulted") or {})}}


def _pending(runs_dir: str, run_id: str, pending: list[str]) -> list[dict]:
    """Each open call of a paused run: its id, its declaration and its arguments as canonical JSON."""
    from flowdata.canonical import dumps as canonical_json

    with open_store(runs_dir).open(run_id, for_append=False) as store:
        calls = {f["call"]: f for f in store.facts() if f["kind"] == "Call"}
        out = []
        for call_id in pending:
            fact = calls.get(call_id)
            arguments = store.value(fact, "arguments") if fact is not None else {}
            out.append({"id": call_id, "tool": fact["tool"] if fact is not None else "",
                        "arguments": canonical_json(arguments).decode("utf-8")})
        return out


def fault_text(fault: dict) -> str:
    where = fault.get("location")
    place = f" at {where['file']}:{where['line']}:{where['column']}" if where else ""
    return f"{fault.get('kind')}: {fault.get('message')}{place}"


def diagnostic_value(diagnostic) -> dict:
    """A diagnostic as the runner's `Diagnostic` record (every location part an Option)."""
    data = diagnostic.to_json()
    location = data.get("location") or {}
    return {"code": data["code"], "severity": data["severity"], "message": data["message"],
            "location": {key: location.get(key) for key in ("file", "line", "column", "end_line", "end_column")},
            "notes": list(data.get("notes") or ()), "help": data.get("help")}


def _message_diagnostic(message: str) -> dict:
    return {"code": "nested-refused", "severity": "error", "message": message,
            "location": {key: None for key in ("file", "line", "column", "end_line", "end_column")},
            "notes": [], "help": None}
