"""Which runs of the PostgreSQL store want a host, and how a worker claims them (`claim_ready`).

`flow_runs.ready_at` says from when a run wants a host: `-infinity` (whenever nobody holds its
lease) for a run being driven, queued (`flow run --detach`, `flow resume --detach`), or halted
by a worker that stopped; a sleeping run's deadline (its `sleeping` decision's `until`); NULL
for a run that wants no host (ended, paused until someone replies, halted by a person). The
store keeps it in the statement that writes what decides it (`ready_after`): an append sets it
to `-infinity` (NULL at End), a host record at the run's head to what its kind says (others
leave it). A run is *claimable* when
`ready_at <= now()` and nobody holds its lease or the lease ran out: so a host that died has
its runs claimed once its lease expires, and a paused run is never claimed.

`ready_at` is what the worker asks the database; what a claimed run needs is decided again from
its verified record (`flowrt.worker.why_due`), and a run claimed for nothing has its column
corrected (`correct_readiness`), so the column can only cost a look, never a wrong drive. Every
comparison is on the database's clock (`clock_timestamp()`), one clock for every worker.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from flowrt.store import postgres_lease as leases
from flowrt.store.format import HOST_HALTS, STORE_RECORDS

#: the `ready_at` of a run that wants a host whenever nobody holds it
NOW = "-infinity"

#: what `ready_after` answers for a record that changes nothing (the store's own records)
KEEP = object()


_CLAIM = (
    "WITH due AS (SELECT run FROM flow_runs "
    "WHERE ready_at <= clock_timestamp() AND (owner IS NULL OR lease_until <= clock_timestamp()) "
    "AND (run, head) NOT IN (SELECT * FROM unnest(%(skip_runs)s::text[], %(skip_heads)s::text[])) "
    "ORDER BY ready_at, run LIMIT %(limit)s FOR UPDATE SKIP LOCKED) "
    "UPDATE flow_runs r SET epoch = r.epoch + 1, owner = %(owner)s, "
    "lease_until = clock_timestamp() + make_interval(secs => %(secs)s) "
    "FROM due WHERE r.run = due.run RETURNING r.run, r.epoch")

_NOW_NS = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000"

_NEXT_READY = ("SELECT extract(epoch FROM min(ready_at) - clock_timestamp())::float8 FROM flow_runs "
               "WHERE ready_at > clock_timestamp()")


def ready_after(record: dict):
    """The `ready_at` (text for `::timestamptz`, or None) a host record leaves, or KEEP."""
    kind = record.get("kind")
    if kind in STORE_RECORDS or "head" not in record:
        # Says nothing of where the run stands (the store's own marks; what a host notes about
        # itself: origin, bindings, the sandbox's layers, a timer's deadline), as for
        # `flowrt.run_state.host_decision`, which reads only records at the run's head.
        return KEEP
    if kind == "paused":
        return None
    if kind == "halted":
        return NOW if record.get("reason") in HOST_HALTS else None
    if kind == "sleeping":
        until = record.get("until")
        return until if isinstance(until, str) else NOW
    return NOW  # queued, or a host at work at this head (a settled or resent call): due if it dies


@dataclass(frozen=True, slots=True)
class Claim:
    run: str
    lease: leases.Lease


def claim_ready(store, *, limit: int, skip: list[tuple[str, str | None]] = ()) -> tuple[list[Claim], int]:
    """Take the lease of up to `limit` claimable runs (other workers' claims are skipped, never
    waited for: `FOR UPDATE SKIP LOCKED`), earliest-ready first, passing over the `(run, head)`
    pairs in `skip`. Returns the claims and the database's clock (ns since the epoch) right
    after, which is what their readiness is judged at. StorageError when the database fails."""
    from flowrt.store.postgres import _failed

    runs = [run for run, _ in skip]
    heads = [head or "" for _, head in skip]
    try:
        with store.connection() as conn:
            with conn.transaction():
                rows = conn.execute(_CLAIM, {"skip_runs": runs, "skip_heads": heads, "limit": limit,
                                             "owner": store.owner, "secs": store.lease_seconds}).fetchall()
            now = conn.execute(_NOW_NS).fetchone()[0]
    except psycopg.Error as problem:
        raise _failed(problem, "cannot claim runs") from problem
    claims = [Claim(run, leases.Lease(run, store.owner, epoch, store.lease_seconds)) for run, epoch in rows]
    return sorted(claims, key=lambda claim: claim.run), now


def give_back(store, claim: Claim) -> str | None:
    """Give a claimed run's lease back without opening it (it could not be opened: damage);
    returns the run's stored head, by which the worker passes it over until it moves. When the
    database cannot be reached, the lease runs out by itself (and None)."""
    try:
        with store.connection() as conn:
            leases.release(conn, claim.lease)
            row = conn.execute("SELECT head FROM flow_runs WHERE run = %s", (claim.run,)).fetchone()
    except Exception:
        return None
    return row[0] if row else None


def seconds_to_next_ready(store) -> float | None:
    """Seconds (on the database's clock) until the earliest run that will want a host without
    anyone writing (a sleeping run's deadline); None when there is none."""
    from flowrt.store.postgres import _failed

    try:
        with store.connection() as conn:
            row = conn.execute(_NEXT_READY).fetchone()
    except psycopg.Error as problem:
        raise _failed(problem, "cannot look for runs") from problem
    return None if row is None or row[0] is None else max(0.0, row[0])


def correct_readiness(log, ended: bool, decision: dict | None) -> None:
    """Set a claimed run's `ready_at` from its verified record (the run was claimed for
    nothing: its column said more than the record). Fenced by the claim's lease."""
    if ended:
        ready = None
    elif decision is None:
        ready = NOW
    else:
        ready = ready_after(decision)
        if ready is KEEP:
            ready = NOW
    log.set_ready(ready)
