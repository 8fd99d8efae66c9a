"""What state a stored run is in, and what a user can do about each of its open calls.

The record alone cannot tell a live run from a dead one: a run whose host is waiting on a call
and one whose host was killed while the call was out end in the same facts. Three observations
tell them apart (docs/trace.md sections 7 and 9):

- the appender's hold (`RunLog.appender_active`): in a run directory, a host appending to a run
  holds an exclusive `flock` on `history.jsonl` until it closes the run, and the kernel drops it
  when the process dies, however it dies; in PostgreSQL, a lease that runs out unless renewed;
- the host's decision: a `paused` or `halted` host record whose `head` is the last fact's hash,
  written by the host before it let go of the run;
- the facts: which calls are open.

So a run is `running` while another process holds the lock; else `paused` when the host paused
it with every open call pending; `halted` when the host halted it; `crashed` when neither (the
host died, or a storage failure stopped it); `ended` at End; and `unknown` where these cannot be
had or disagree (the execution seed: where the recorded state cannot identify pending calls, the
view says they are unknown). Nothing here writes, and the lock is only probed (see `appender_holds`).
"""

from __future__ import annotations

from typing import Any

from flowrt.store import STORE_RECORDS, RunLog, StorageError
from flowrt.store.probe import appender_holds  # noqa: F401  (the directory's probe, named here before)

#: the states `run_state` reports
STATES = ("running", "paused", "halted", "crashed", "ended", "unknown")

def run_state(store: RunLog) -> dict[str, Any]:
    """The state of a run read through `store` (opened read-only by this process):
    `{"state", "reason", "hostDecision", "pending", "open"}`. `pending` is the list of call ids
    pending by the host's record, or "unknown" when the record cannot say; `open` has one entry
    per open call: `{"call", "tool", "status", "next"}`, `status` being `pending` (left pending at
    a pause: it waits for its reply), `out` (sent by a host that is still running), `unknown-outcome`
    (out when the host stopped: it may or may not have taken effect) or `unknown`, and `next` the
    commands that fit it."""
    from flowrt.replay import open_calls

    run_id = store.run_id
    facts = store.facts()
    tools = {f["call"]: f["tool"] for f in facts if f["kind"] == "Call"}
    calls = open_calls(store) if not store.ended else []
    head, torn = store.head, store.torn_tail is not None

    def view(state: str, reason: str, status: str, pending: Any, decision: dict | None = None) -> dict:
        return {"state": state, "reason": reason, "hostDecision": decision, "pending": pending,
                "open": [{"call": c, "tool": tools.get(c), "status": status, "next": _next(run_id, c, status)}
                         for c in calls]}

    if store.ended:
        return view("ended", "the history ends in End", "unknown", [])
    # Facts first, then the lock, then the host records: a host that lets go of the run between
    # the read and the probe has written its decision by then, and the records read after the
    # probe have it; the tail check catches facts appended since the read.
    held = store.appender_active()
    if held:
        return view("running", "another process holds the run (its appender's lock or lease)", "out", "unknown")
    if held is None:
        return view("unknown", "whether a process holds the run cannot be found out", "unknown", "unknown")
    if store.stored_head() != (head, torn):
        return view("unknown", "the history changed while it was read: look again", "unknown", "unknown")
    try:
        records = store.host_records()
    except StorageError as problem:
        return view("unknown", f"the host records cannot be read: {problem}", "unknown", "unknown")
    decision = None
    for record in reversed(records):
        if record.get("head") != head or record.get("kind") in STORE_RECORDS:
            # (the store's own records say how the bytes stand, never where the run is: a
            # `durable` mark at the same head follows every pause)
            continue
        if record.get("kind") in ("paused", "halted"):
            decision = record
        # A later host that re-sent or settled a call at this head and left no decision of its
        # own stopped without one: the earlier decision no longer says where the run is.
        break
    if decision is None:
        return view("crashed", "no process holds the run and the host recorded no pause or halt at its last fact"
                    + (" (it stopped in the middle of writing a fact)" if torn else ""), "unknown-outcome", [])
    if decision["kind"] == "halted":
        return view("halted", f"the host halted the run ({decision.get('reason', 'no reason given')})",
                    "unknown-outcome", [], decision)
    pending = decision.get("pending")
    if not isinstance(pending, list) or not set(calls) <= set(pending):
        return view("unknown", "the host recorded a pause that does not name every open call as pending",
                    "unknown", "unknown", decision)
    return view("paused", "the host paused the run: every open call is pending", "pending",
                [c for c in calls if c in pending], decision)


def _next(run_id: str, call: str, status: str) -> list[str]:
    if status == "pending":
        return [f"flow resume {run_id} --call {call} --reply JSON"]
    if status == "unknown-outcome":
        return [f"flow resume {run_id}", f"flow resume {run_id} --resend {call}"]
    if status == "out":
        return []  # the live host is waiting for it
    return [f"flow history {run_id}"]


#: what each call status means, as the human view says it
STATUS_TEXT = {
    "pending": "pending: it waits for its reply",
    "out": "out: the running host waits for its reply",
    "unknown-outcome": "out when the host stopped: whether it took effect is unknown "
                       "(resume answers it Unknown; --resend sends it again)",
    "unknown": "unknown: the record cannot say whether it is pending or out",
}
