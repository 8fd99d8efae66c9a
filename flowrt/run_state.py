"""What state a stored run is in, and what a user can do about each of its open calls.

The record alone cannot tell a live run from a dead one: a run whose host is waiting on a call
and one whose host was killed while the call was out end in the same facts. Three observations
tell them apart (docs/trace.md sections 7 and 9):

- the appender's hold (`RunLog.appender_active`): in a run directory, a host appending to a run
  holds an exclusive `flock` on `history.jsonl` until it closes the run, and the kernel drops it
  when the process dies, however it dies; in PostgreSQL, a lease that runs out unless renewed;
- the host's decision: a `paused`, `sleeping` or `halted` host record whose `head` is the last fact's hash,
  written by the host before it let go of the run;
- the facts: which calls are open.

So a run is `running` while another process holds the lock; else `paused` when the host paused
it with every open call pending; `sleeping` when it let go of the run waiting on timers (each
other open call pending; flowrt/timers.py); `queued` when it was queued for any worker to drive
(`flow run --detach`, `flow resume --detach`); `halted` when the host halted it; `crashed` when neither (the
host died, or a storage failure stopped it); `ended` at End; and `unknown` where these cannot be
had or disagree (the execution seed: where the recorded state cannot identify pending calls, the
view says they are unknown). Nothing here writes, and the lock is only probed (see `appender_holds`).
"""

from __future__ import annotations

from typing import Any

from flowrt.store import STORE_RECORDS, RunLog, StorageError
from flowrt.store.probe import appender_holds  # noqa: F401  (the directory's probe, named here before)

#: the states `run_state` reports
STATES = ("running", "paused", "sleeping", "queued", "halted", "crashed", "ended", "unknown")

CLOCK_TOOLS = ("std@v1/clock.sleep", "std@v1/clock.now")

#: the host records that say where a run a host let go of stands
DECISIONS = ("paused", "sleeping", "queued", "halted")

def run_state(store: RunLog, *, open_calls: dict[str, dict] | None = None) -> dict[str, Any]:
    """The state of a run read through `store` (opened read-only by this process):
    `{"state", "reason", "hostDecision", "pending", "open"}`. `pending` is the list of call ids
    pending by the host's record, or "unknown" when the record cannot say; `open` has one entry
    per open call: `{"call", "tool", "status", "next"}`, `status` being `pending` (left pending at
    a pause: it waits for its reply), `timer` (a sleep of a sleeping run, due at its deadline),
    `clock` (the host's own clock call out when the host stopped: resume sends it again), `out` (sent by a host that is still running), `unknown-outcome`
    (out when the host stopped: it may or may not have taken effect) or `unknown`, and `next` the
    commands that fit it. `open_calls`: the open calls (`RunLog.open_calls`) when the caller has
    gone through the facts already (`flow history`)."""
    run_id = store.run_id
    tools = {c: f.get("tool") for c, f in (store.open_calls() if open_calls is None else open_calls).items()}
    calls = list(tools) if not store.ended else []
    head, torn = store.head, store.torn_tail is not None

    def view(state: str, reason: str, status: str, pending: Any, decision: dict | None = None,
             statuses: dict[str, str] | None = None) -> dict:
        def status_of(c: str) -> str:
            return statuses.get(c, status) if statuses else status

        return {"state": state, "reason": reason, "hostDecision": decision, "pending": pending,
                "open": [{"call": c, "tool": tools.get(c), "status": status_of(c),
                          "next": _next(run_id, c, status_of(c))} for c in calls]}

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
    decision = host_decision(records, head)
    # The host's own clock calls are the host's to send again (flowrt/timers.py), never Unknown.
    clock = {c: "clock" for c in calls if tools.get(c) in CLOCK_TOOLS}
    if decision is None:
        return view("crashed", "no process holds the run and the host recorded no pause or halt at its last fact"
                    + (" (it stopped in the middle of writing a fact)" if torn else ""), "unknown-outcome", [],
                    statuses=clock)
    if decision["kind"] == "queued":
        # `flow run --detach` / `flow resume --detach`: any worker drives it from here; its
        # pending calls stay pending, and any other open call is settled as after a crash.
        pending = decision.get("pending") if isinstance(decision.get("pending"), list) else []
        return view("queued", "queued for a worker (flow worker) to drive", "unknown-outcome",
                    [c for c in calls if c in pending], decision,
                    {**clock, **{c: "pending" for c in calls if c in pending}})
    if decision["kind"] == "halted":
        return view("halted", f"the host halted the run ({decision.get('reason', 'no reason given')})",
                    "unknown-outcome", [], decision, clock)
    pending = decision.get("pending")
    if decision["kind"] == "sleeping":
        timers = {t.get("call") for t in decision.get("timers", []) if isinstance(t, dict)} \
            if isinstance(decision.get("timers"), list) else set()
        if not isinstance(pending, list) or not timers or not set(calls) <= set(pending) | timers:
            return view("unknown", "the host recorded a sleep that does not name every open call as a timer "
                        "or pending", "unknown", "unknown", decision)
        return view("sleeping", f"sleeping until {decision.get('until')}: waiting only on timers"
                    + (" and pending calls" if pending else "") + "; a worker (flow worker) or flow resume "
                    "wakes it", "pending", [c for c in calls if c in pending], decision,
                    {c: "timer" for c in calls if c in timers})
    if not isinstance(pending, list) or not set(calls) <= set(pending):
        return view("unknown", "the host recorded a pause that does not name every open call as pending",
                    "unknown", "unknown", decision)
    return view("paused", "the host paused the run: every open call is pending", "pending",
                [c for c in calls if c in pending], decision)


def host_decision(records: list[dict], head: str | None) -> dict | None:
    """The host's decision at `head`: the last host record at that head, when it is a `paused`,
    `sleeping` or `halted` record; else None (no decision, or a later host that re-sent or
    settled a call at this head stopped without one, so the earlier decision no longer says where
    the run is). The store's own records say how the bytes stand, never where the run is: a
    `durable` mark at the same head follows every pause, and is passed over."""
    for record in reversed(records):
        if record.get("head") != head or record.get("kind") in STORE_RECORDS:
            continue
        return record if record.get("kind") in DECISIONS else None
    return None


def _next(run_id: str, call: str, status: str) -> list[str]:
    if status == "clock":
        return [f"flow resume {run_id}", "flow worker (recovers crashed runs)"]
    if status == "timer":
        return ["flow worker (wakes it at its deadline)", f"flow resume {run_id}"]
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
    "clock": "the host's clock: resume sends it again (a sleep for what remains until its deadline)",
    "timer": "timer: a sleep; a worker or `flow resume` sends it again for what remains of it",
    "out": "out: the running host waits for its reply",
    "unknown-outcome": "out when the host stopped: whether it took effect is unknown "
                       "(resume answers it Unknown; --resend sends it again)",
    "unknown": "unknown: the record cannot say whether it is pending or out",
}
