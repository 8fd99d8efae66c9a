"""Archive and redaction in the PostgreSQL store: each one transaction, fenced by the appender's
lease, so neither leaves a half-done state to repair (the run directory's need crash-safe
steps). What moves and which fields may become holes are the run directory's rules
(`archive.redaction_fields`; the anchor is archive/anchor.json's canonical JSON)."""

from __future__ import annotations

import psycopg

from flowrt.store import postgres_lease as leases
from flowrt.store.archive import redaction_fields
from flowrt.store.canonical import canonical_bytes
from flowrt.store.postgres_shelf import ShelvedRows
from flowrt.store.shelf import FactShelf


def archive_facts(log) -> int:
    """`RunLog.archive` of a PostgresRunLog whose lock is held: the facts between Start and the
    latest checkpoint move to flow_archived_facts and the anchor is set, together."""
    from flowrt.store.postgres import _failed, _Lost

    facts = log._facts
    latest = log.latest_checkpoint()
    if latest is None or latest <= 1:
        return 0
    moved = facts[1:latest]
    checkpoints = log.archived_checkpoints + sum(1 for f in moved if f["kind"] == "Checkpoint")
    anchor = canonical_bytes({"checkpoints": checkpoints, "head": moved[-1]["hash"], "through": moved[-1]["n"]})
    args = dict(log._fence_args(), anchor=anchor, first=moved[0]["n"], last=moved[-1]["n"])
    conn = log._conn
    try:
        with conn.transaction():
            log._local_commit(conn)
            if conn.execute("UPDATE flow_runs SET anchor = %(anchor)s WHERE " + leases.FENCE, args).rowcount != 1:
                raise _Lost
            conn.execute("INSERT INTO flow_archived_facts (run, n, line) SELECT run, n, line FROM flow_facts "
                         "WHERE run = %(run)s AND n BETWEEN %(first)s AND %(last)s", args)
            conn.execute("DELETE FROM flow_facts WHERE run = %(run)s AND n BETWEEN %(first)s AND %(last)s", args)
    except _Lost:
        raise log._lease_lost(None) from None
    except psycopg.Error as problem:
        raise _failed(problem, "cannot archive") from problem
    log._facts = FactShelf([facts[0]] + facts[latest:], ShelvedRows(log.store, log.run_id))
    log._open_calls = None  # (its indexes were those of the facts before)
    log.archived_checkpoints = checkpoints
    return latest - 1


def redact_values(log, n: int, field: str | None) -> list[dict]:
    """`RunLog.redact` of a PostgresRunLog whose lock is held: per field, the hole record and
    (when no unredacted fact refers to the same content) the value's deletion, together."""
    fact = log.fact(n)
    written = []
    for f in redaction_fields(fact, field):
        if (n, f) in log._holes:
            continue
        ref = fact[f + "_ref"]
        record = {"kind": "hole", "fact": n, "field": f, "ref": ref}
        hex_ = ref[len("sha256:"):]
        unused = all(user in log._holes or user == (n, f) for user in log._refs.get(hex_, ()))
        also = ("DELETE FROM flow_values WHERE run = %s AND hex = %s", (log.run_id, hex_)) if unused else None
        log._write_host([record], also)
        log._holes[(n, f)] = ref
        if unused:
            log._known_values.discard(hex_)
        written.append(record)
    return written
