"""Verifying a PostgreSQL run's rows, with the run directory's own checks: the fact lines are
read by `reading._HistoryReader` and the host record lines by `host_records._parse_host`, as if
they were history.jsonl and host.jsonl. What rows add: the row keyed n must hold fact n, the
run's head must be its last fact (so a lost last fact is damage), host records are numbered
without gaps, and a row that does not parse is damage (a commit is whole: there is no torn tail)."""

from __future__ import annotations

from dataclasses import dataclass

from flowrt.store.canonical import loads_canonical
from flowrt.store.errors import StorageError
from flowrt.store.format import _HASH_RE
from flowrt.store.host_records import _Host, _parse_host, holes_and_limit
from flowrt.store.reading import _HistoryReader
from flowrt.store.refs import index_refs

FACTS = "flow_facts"
HOST = "flow_host"


@dataclass(slots=True)
class Verified:
    facts: list[dict]
    holes: dict[tuple[int, str], str]
    refs: dict[str, set[tuple[int, str]]]  # value hex -> {(fact n, field)}
    host_head: str | None
    recorded_limit: int | None
    archived_checkpoints: int
    times: dict[int, int]  # fact n -> Unix ms it was accepted, from the `times` host records


def verify_rows(run_id: str, run: tuple, rows: list, host_rows: list, present: set[str]) -> Verified:
    """Verify a run read in one snapshot: `run` is its (last_n, head, anchor) row, `rows` its
    (n, line) fact rows in order, `host_rows` its (i, line) host record rows, `present` the hex of
    its stored values. StorageError for any damage."""
    last_n, head, anchor_bytes = run
    anchor = parse_anchor(anchor_bytes)
    host = parse_host_rows(host_rows)
    reader = _HistoryReader(b"".join(bytes(line) + b"\n" for _, line in rows), run_id, anchor, host.durable)
    reader.read()
    if reader.error is not None:  # named by the table, not the file the reader was written for
        raise StorageError(reader.error.message, reader.error.fact_n, component=FACTS)
    facts = reader.facts
    if reader.torn is not None:
        raise StorageError("the fact's row is not a whole fact", len(facts) + 1, component=FACTS)
    if not facts:
        raise StorageError("the run has no Start (it never started)", component=FACTS)
    for fact, (n, _) in zip(facts, rows):
        if fact["n"] != n:
            raise StorageError(f"the row keyed {n} holds fact {fact['n']}", fact["n"], component=FACTS)
    if facts[-1]["n"] != last_n or facts[-1]["hash"] != head:
        raise StorageError(f"the run's head is fact {last_n} ({head}), but its facts end at fact "
                           f"{facts[-1]['n']} (facts were lost or changed)", facts[-1]["n"], component=FACTS)
    archived = int(anchor.get("checkpoints", 0)) if anchor is not None and len(facts) > 1 and facts[1]["n"] != 2 else 0
    holes, recorded_limit = holes_and_limit(host.records, facts, HOST)
    refs: dict[str, set[tuple[int, str]]] = {}
    for index in reader.referring:
        index_refs(refs, facts[index])
    for hex_, users in refs.items():
        live = [user for user in users if user not in holes]
        if live and hex_ not in present:
            raise StorageError("the value is missing and is not a recorded hole", min(live)[0],
                               component=f"flow_values/{hex_}")
    return Verified(facts, holes, refs, host.head, recorded_limit, archived, dict(host.times))


def parse_anchor(data: bytes | None) -> dict | None:
    """The archive anchor of `flow_runs.anchor`, checked as archive/anchor.json is."""
    if data is None:
        return None
    try:
        anchor = loads_canonical(bytes(data))
    except ValueError:
        raise StorageError("the archive anchor is not canonical JSON", component="flow_runs.anchor") from None
    if not isinstance(anchor, dict) or type(anchor.get("through")) is not int or anchor["through"] < 1 \
            or not isinstance(anchor.get("head"), str) or not _HASH_RE.match(anchor["head"]):
        raise StorageError("the archive anchor is not {through, head}", component="flow_runs.anchor")
    return anchor


def parse_host_rows(rows: list) -> _Host:
    """The host records of `rows` ((i, line) in order), verified as host.jsonl's lines are."""
    for expected, (i, _) in enumerate(rows, 1):
        if i != expected:
            raise StorageError(f"host record {expected} is missing", component=HOST)
    host = _parse_host(b"".join(bytes(line) + b"\n" for _, line in rows))
    if host.torn is not None:
        raise StorageError("a host record's row is not a whole record", component=HOST)
    return host
