"""Stored-run discovery in the PostgreSQL store: the run directory's rows (docs/trace.md
section 12), judged by the same code (`discovery.judge_row`) from the same bytes, within the
same read bounds (a component is a run's fact lines, or its host record lines, each with its
newline, as the run directory's files would hold them)."""

from __future__ import annotations

import psycopg

from flowrt.store.discovery import COMPONENT_LIMIT, PAGE_LIMIT, PROBE, _problem, _row, judge_row
from flowrt.store.errors import StorageError

_CANDIDATES = (
    "SELECT r.run, r.anchor, "
    "(SELECT coalesce(sum(octet_length(line) + 1), 0) FROM flow_facts f WHERE f.run = r.run), "
    "(SELECT coalesce(sum(octet_length(line) + 1), 0) FROM flow_host h WHERE h.run = r.run) "
    "FROM flow_runs r WHERE %s::text IS NULL OR r.run > %s ORDER BY r.run LIMIT %s")


def scan_database(store, *, limit: int = 50, after: str | None = None) -> dict:
    """A page of runs by id after `after`: `{"runs", "nextAfter", "problems"}`, changing nothing.
    Reads facts and host records only (never a value or a source). StorageError when the
    database cannot be read."""
    from flowrt.store.postgres import _failed
    from flowrt.store.postgres_verify import parse_anchor, parse_host_rows

    if type(limit) is not int or not 1 <= limit <= 200:
        raise ValueError("limit is an integer from 1 to 200")
    if after is not None and (not isinstance(after, str) or not after or "/" in after or "\0" in after):
        raise ValueError("after is a run id")
    result: dict = {"runs": [], "nextAfter": None, "problems": []}
    budget = PAGE_LIMIT
    try:
        with store.connection() as conn:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                candidates = conn.execute(_CANDIDATES, (after, after, limit + 1)).fetchall()
                for run, anchor_bytes, history_size, host_size in candidates[:limit]:
                    need = min(history_size, COMPONENT_LIMIT + PROBE) + min(host_size, COMPONENT_LIMIT + PROBE)
                    if need > budget and result["runs"]:
                        break
                    row = _row(run)
                    row["historyPresent"] = True
                    if history_size > COMPONENT_LIMIT or need > budget:
                        budget -= min(history_size, COMPONENT_LIMIT + PROBE, budget)
                        row["record"], row["truncated"] = "inspection-limited", None
                        row["problem"] = _problem("history.jsonl", "inspection-limited",
                                                  "larger than the 4 MiB component read bound")
                        result["runs"].append(row)
                        continue
                    budget -= need
                    lines = [bytes(line) for (line,) in conn.execute(
                        "SELECT line FROM flow_facts WHERE run = %s ORDER BY n", (run,))]
                    data = b"".join(line + b"\n" for line in lines)
                    try:
                        anchor = parse_anchor(anchor_bytes)
                    except StorageError:
                        anchor = None
                    host = host_error = host_limited = None
                    if host_size > COMPONENT_LIMIT:
                        host_limited = "larger than the 4 MiB component read bound"
                    else:
                        try:
                            host = parse_host_rows(conn.execute(
                                "SELECT i, line FROM flow_host WHERE run = %s ORDER BY i", (run,)).fetchall())
                        except StorageError as problem:
                            host_error = problem
                    result["runs"].append(judge_row(row, run, data, anchor, host, host_error, host_limited))
    except psycopg.Error as problem:
        raise _failed(problem, "cannot list the runs") from problem
    if result["runs"] and (len(candidates) > limit or len(result["runs"]) < min(limit, len(candidates))):
        result["nextAfter"] = result["runs"][-1]["run"]
    return result
