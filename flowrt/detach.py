"""`flow resume --detach`: admit a reply to a stored run and queue its continuation for any
worker (flowrt/worker.py), without driving it here.

The reply is checked as `flow resume` checks it (the call must be open, the reply an outcome),
admitted at the Tool's declared type for that call, read from the recorded program and the
Call's type arguments (a reply that does not fit becomes `Err(BadReply)`, as it would live),
and recorded as the run's Reply fact. Then a `queued` host decision at the new head names the
calls that stay pending (those left pending at the pause, but the one answered), and the run
is let go of: a worker drives it from there, the Reply served from the record like any other,
each other open call settled as after a crash. Without a reply, the run is queued as it stands
(a crashed or halted run a worker should resume).

Nothing is recorded when anything is refused (exit 2), and a storage failure (exit 5) leaves
the record as it was or with the Reply alone (a run then resumable either way)."""

from __future__ import annotations

from flowrt.admission import admitted_by
from flowrt.run import RunOutcome
from flowrt.store import StorageError, open_store


def queue_continuation(runs_dir: str, run_id: str, *, call: str | None = None,
                       reply_text: str | None = None, admit_bad_reply: bool = False) -> RunOutcome:
    """Admit `reply_text` for `call` (when given) and queue the run for a worker: exit 0 with
    `queued`, else the refusal (2) or storage failure (5). A reply that does not fit the call is
    refused before anything is recorded, as `flow resume` refuses it (flowrt/reply_check.py),
    unless `admit_bad_reply`."""
    from flowrt.refusal import Refused
    from flowrt.replay import (_Incomplete, _paused_calls, open_calls, prepared_from_history, refused_reply,
                               supplied_reply)
    from flowrt.tool_types import ToolTypes

    try:
        store = open_store(runs_dir).open(run_id, for_append=True)
    except StorageError as problem:
        return RunOutcome(5, run_id, message=f"storage failure: {problem}")
    except Exception as problem:
        return RunOutcome(2, run_id, message=str(problem))
    try:
        if store.ended:
            return RunOutcome(2, run_id, message=f"run {run_id} has ended: there is nothing to resume")
        outstanding = open_calls(store)
        supplied = supplied_reply(run_id, outstanding, call, reply_text)
        if isinstance(supplied, RunOutcome):
            return supplied
        if supplied is not None and not admit_bad_reply:
            refused = refused_reply(store, call, supplied[1])
            if refused is not None:
                return refused
        pending = _paused_calls(store)
        if supplied is not None:
            answered, outcome = supplied
            asked = store.open_calls()[answered]  # (an open call: `supplied_reply` checked it)
            try:
                prepared = prepared_from_history(store, bind_tools=False)
            except Refused as refused:
                return RunOutcome(2, run_id, diagnostics=refused.diagnostics, sources=refused.sources)
            except _Incomplete as incomplete:
                return RunOutcome(2, run_id, message=f"cannot admit the reply: {incomplete.reason}")
            try:
                typed = ToolTypes(prepared.tools).of(asked["tool"], asked.get("types"))
            except (ValueError, KeyError, TypeError) as problem:
                return RunOutcome(2, run_id, message=f"cannot read the type of {asked['tool']} ({answered}): {problem}")
            store.append("Reply", {"call": answered, "outcome": admitted_by(typed)(outcome)})
            pending.discard(answered)
        still_open = set(open_calls(store))
        store.host_record({"kind": "queued", "head": store.head, "pending": sorted(pending & still_open)})
        return RunOutcome(0, run_id, queued=True)
    except StorageError as problem:
        return RunOutcome(5, run_id, message=f"storage failure: {problem}")
    finally:
        store.close()
