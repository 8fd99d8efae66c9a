"""The PostgreSQL store's write statements (flowrt/store/postgres.py uses them): each is one
statement, fenced by the run's lease (`postgres_lease.FENCE`), so a host whose lease was lost
writes nothing; the commit's durability is set inside the statement, so it costs no round trip."""

from __future__ import annotations

from flowrt.store import postgres_lease as leases
from flowrt.store.postgres_wire import BOOL, BYTEA, BYTEA_ARRAY, INT8, TEXT, TEXT_ARRAY, PreparedStatement

# Parameters in binary (`%b`: a fact's line goes as its bytes, not escaped), the facts' numbers
# counted by the server from the one before (no array of them) and no value arrays when there
# are no values (NULL): dumping the parameters was the client's largest cost per call.
APPEND = (
    "WITH ok AS (UPDATE flow_runs SET last_n = %(last)b, head = %(head)b, "
    "ready_at = CASE WHEN %(ended)b THEN NULL ELSE '-infinity'::timestamptz END WHERE " + leases.FENCE
    + " AND last_n = %(prev_n)b AND set_config('synchronous_commit', %(commit)b, true) IS NOT NULL RETURNING run), "
    "v AS (INSERT INTO flow_values (run, hex, data) SELECT ok.run, b.hex, b.data FROM ok, "
    "unnest(%(hexes)b::text[], %(blobs)b::bytea[]) AS b(hex, data) ON CONFLICT DO NOTHING), "
    "t AS (INSERT INTO flow_host (run, i, line) SELECT ok.run, %(times_i)b, %(times_line)b::bytea FROM ok "
    "WHERE %(times_line)b::bytea IS NOT NULL) "
    "INSERT INTO flow_facts (run, n, line) SELECT ok.run, %(prev_n)b + f.i, f.line FROM ok, "
    "unnest(%(lines)b::bytea[]) WITH ORDINALITY AS f(line, i)")

#: APPEND as the store sends it, over libpq directly (postgres_wire: the hot path)
APPEND_STATEMENT = PreparedStatement("flow_append", APPEND, dict(
    run=TEXT, epoch=INT8, last=INT8, head=TEXT, ended=BOOL, prev_n=INT8, commit=TEXT, hexes=TEXT_ARRAY,
    blobs=BYTEA_ARRAY, lines=BYTEA_ARRAY, times_i=INT8, times_line=BYTEA))

# The record and the run's readiness for workers (postgres_queue.ready_after) in one statement.
HOST_RECORD = (
    "WITH ok AS (UPDATE flow_runs SET ready_at = CASE WHEN %(keep)s THEN ready_at "
    "ELSE %(ready)s::timestamptz END WHERE " + leases.FENCE + " RETURNING run) "
    "INSERT INTO flow_host (run, i, line) SELECT ok.run, %(i)s, %(line)s FROM ok")


# The same, alone in its transaction: the commit's durability set in the statement (as APPEND).
HOST_RECORD_ALONE = HOST_RECORD.replace(
    " RETURNING run)", " AND set_config('synchronous_commit', %(commit)s, true) IS NOT NULL RETURNING run)")
