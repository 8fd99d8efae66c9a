"""The hash chain, the same for every store: the hash of a fact, the checks that make a line a
valid next fact, building the next fact (values over the inline limit by reference), and
chaining host records (docs/trace.md sections 3, 4 and 7)."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from flowrt.store.canonical import _OPT, _OPT_LINE, canonical_bytes
from flowrt.store.format import (
    _HASH_RE,
    _RESERVED,
    _RESERVED_SET,
    _VALUE_REFS,
    DATA_VERSION,
    VALUE_FIELDS,
    _ending_of,
)


#: per kind, the field names a caller never gives: those the store sets, and `<field>_ref`,
#: which the store decides on
_NOT_GIVEN = {kind: _RESERVED_SET.union(ref for _, ref in refs) for kind, refs in _VALUE_REFS.items()}


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fact_hash(fact_without_hash: dict) -> str:
    """`"sha256:<hex>"` of the canonical JSON of a fact without its `hash` field."""
    if "hash" in fact_without_hash:
        raise ValueError("fact_hash takes the fact without its hash field")
    return "sha256:" + _sha256_hex(canonical_bytes(fact_without_hash))


def _check_fact(obj: Any, n: int, prev: str | None, ended: bool, run_id: str | None) -> str | None:
    """Why `obj` is not a valid fact number `n` after a fact whose hash is `prev`; None if it is."""
    if not isinstance(obj, dict):
        return "the line is not a JSON object"
    for key in _RESERVED:
        if key not in obj:
            return f"the fact has no `{key}`"
    if type(obj["n"]) is not int or obj["n"] != n:
        return f"`n` is {obj['n']!r}, expected {n}"
    kind = obj["kind"]
    if kind not in VALUE_FIELDS:
        return f"unknown kind {kind!r}"
    if (n == 1) != (kind == "Start"):
        return "Start must be fact 1 and only fact 1" if n != 1 else "the first fact is not a Start"
    if ended:
        return "a fact after End"
    if obj["prev"] != prev:
        return "`prev` does not match the previous fact's hash (broken chain)"
    claimed = obj["hash"]
    if not isinstance(claimed, str) or not _HASH_RE.match(claimed):
        return "`hash` is not sha256:<64 lowercase hex>"
    rest = dict(obj)
    del rest["hash"]
    if "sha256:" + _sha256_hex(canonical_bytes(rest)) != claimed:
        return "the fact's content does not match its hash"
    for field in VALUE_FIELDS[kind]:
        ref = obj.get(field + "_ref")
        if ref is not None:
            if field in obj:
                return f"both `{field}` and `{field}_ref`"
            if not isinstance(ref, str) or not _HASH_RE.match(ref):
                return f"`{field}_ref` is not sha256:<64 lowercase hex>"
        elif field + "_ref" in obj:
            return f"`{field}_ref` is null"
    if kind == "Start":
        if obj.get("data") != DATA_VERSION:
            return f"unknown data version {obj.get('data')!r} (this reader knows {DATA_VERSION})"
        if run_id is not None and obj.get("run") != run_id:
            return f"Start names run {obj.get('run')!r}, not {run_id!r}"
    if kind == "End" and "ending" in obj:
        ending = obj["ending"]
        if ending not in ("completed", "faulted"):
            return f"`ending` is {ending!r}"
        if "outcome" in obj and _ending_of(obj["outcome"]) != ending:
            return "`ending` disagrees with `outcome`"
    return None


def fact_position(facts: list[dict], n: int) -> int | None:
    """The index of fact `n` in a verified list (which may skip archived facts), or None."""
    if not facts or n < 1:
        return None
    if n == 1:
        return 0
    if len(facts) < 2:
        return None
    index = n - facts[1]["n"] + 1
    return index if 1 <= index < len(facts) and facts[index]["n"] == n else None


def build_fact(kind: str, fields: dict, n: int, prev: str | None, ended: bool,
               blobs: dict[str, bytes], inline_limit: int, *,
               allow_start: bool = False) -> tuple[dict, bytes]:
    """Fact number `n` of `kind` after the fact whose hash is `prev` (`ended`: that fact is
    an End), and its canonical line. A value whose canonical JSON is longer than
    `inline_limit` bytes is replaced by `<field>_ref` and its bytes added to `blobs` (by hex
    of their SHA-256), for the store to keep by hash. Raises ValueError or TypeError for a
    fact the store must not write, before any I/O."""
    if kind not in VALUE_FIELDS:
        raise ValueError(f"unknown fact kind {kind!r}")
    if kind == "Start" and not allow_start:
        raise ValueError("Start is written by RunStore.create")
    if ended:
        raise ValueError("the history already has its End")
    if not isinstance(fields, dict):
        raise TypeError("fields is a dict")
    if not _NOT_GIVEN[kind].isdisjoint(fields):  # (one test for both rules below: every fact comes here)
        if not _RESERVED_SET.isdisjoint(fields):
            raise ValueError(f"{sorted(_RESERVED_SET.intersection(fields))} are set by the store")
        for field, ref_name in _VALUE_REFS[kind]:
            if ref_name in fields:
                raise ValueError(f"pass `{field}` itself; the store decides whether to refer to it")
    fact: dict[str, Any] = dict(fields)  # non-text field names fail in canonical_bytes
    if kind == "End" and "outcome" in fields:
        ending = _ending_of(fields["outcome"])
        given = fact.get("ending")
        if given is not None and given != ending:
            raise ValueError(f"`ending` {given!r} disagrees with the outcome")
        if ending is not None:
            fact["ending"] = ending
    fact["n"] = n
    fact["kind"] = kind
    fact["prev"] = prev
    try:
        hash_input = orjson.dumps(fact, option=_OPT)
    except orjson.JSONEncodeError:
        hash_input = canonical_bytes(fact)
    if len(hash_input) > inline_limit:
        # Some value may be over the limit: measure each one (a value's JSON is part of the
        # fact's, so a fact within the limit has no value over it).
        moved = False
        for field, ref_name in _VALUE_REFS[kind]:
            if field not in fact:
                continue
            encoded = canonical_bytes(fact[field])
            if len(encoded) > inline_limit:
                hex_ = hashlib.sha256(encoded).hexdigest()
                blobs[hex_] = encoded
                del fact[field]
                fact[ref_name] = "sha256:" + hex_
                moved = True
        if moved:
            hash_input = canonical_bytes(fact)
    fact["hash"] = "sha256:" + hashlib.sha256(hash_input).hexdigest()
    try:
        return fact, orjson.dumps(fact, option=_OPT_LINE)
    except orjson.JSONEncodeError:
        return fact, canonical_bytes(fact) + b"\n"


def chain_record(record: dict, prev: str | None) -> tuple[bytes, str]:
    """The line of a host record chained to the record whose hash is `prev`, and its hash."""
    chained = dict(record, prev=prev)
    digest = "sha256:" + _sha256_hex(canonical_bytes(chained))
    chained["hash"] = digest
    return canonical_bytes(chained) + b"\n", digest
