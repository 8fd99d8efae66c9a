"""Forged histories for tests: one fact's value rewritten and the chain made whole again, as a
holder of the record who can rewrite both it and its head would do. The result reads as sound to
the store (every hash and `prev` recomputed, a value by reference written under its new content
hash, host records' heads moved along), so only replay can tell it from the real run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

from flowrt.store import canonical_bytes, fact_hash


def read_facts(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines() if line]


def value_of(run_dir: Path, fact: dict, field: str) -> Any:
    """A value field of a fact as stored: inline, or from values/ by its reference."""
    if field in fact:
        return fact[field]
    hex_ = fact[f"{field}_ref"].split(":", 1)[1]
    return json.loads((run_dir / "values" / hex_).read_bytes())


def forge(run_dir: Path, n: int, field: str, change: Callable[[Any], Any]) -> None:
    """Rewrite value field `field` of fact `n` to `change(old value)`, keeping its form (inline, or
    by reference), then recompute the hash of fact `n` and the `prev` and hash of every fact after
    it. Raises ValueError if the change leaves the value as it was (that would forge nothing)."""
    history = run_dir / "history.jsonl"
    facts = read_facts(run_dir)
    index = next(i for i, f in enumerate(facts) if f["n"] == n)
    fact = dict(facts[index])
    old = value_of(run_dir, fact, field)
    new = change(json.loads(json.dumps(old)))
    if canonical_bytes(new) == canonical_bytes(old):
        raise ValueError(f"the change leaves fact {n}'s {field} as it was")
    if field in fact:
        fact[field] = new
    else:
        encoded = canonical_bytes(new)
        hex_ = hashlib.sha256(encoded).hexdigest()
        (run_dir / "values" / hex_).write_bytes(encoded)
        fact[f"{field}_ref"] = "sha256:" + hex_
    facts[index] = fact
    renamed: dict[str, str] = {}
    for i in range(index, len(facts)):
        rechained = {k: v for k, v in facts[i].items() if k != "hash"}
        if i > index:
            rechained["prev"] = facts[i - 1]["hash"]
        rechained["hash"] = fact_hash(rechained)
        renamed[facts[i]["hash"]] = rechained["hash"]
        facts[i] = rechained
    history.write_bytes(b"".join(canonical_bytes(f) + b"\n" for f in facts))
    host = run_dir / "host.jsonl"
    if host.exists():
        # The host records name heads and are chained too (docs/trace.md section 7): move the
        # heads along and hash the chain again, as a holder of both files could.
        prev, lines = None, []
        for record in [json.loads(line) for line in host.read_text().rstrip("\0").splitlines() if line]:
            record.pop("hash", None)
            record["prev"] = prev
            if "head" in record:
                record["head"] = renamed.get(record["head"], record["head"])
            record["hash"] = prev = fact_hash(record)
            lines.append(canonical_bytes(record))
        host.write_bytes(b"\n".join(lines) + b"\n")


def alter_arguments(arguments: dict) -> dict:
    """Checkpoint arguments that differ from the recorded ones in one data argument, keeping its
    type: a number moved by one, text extended, a list given its last element again (the first
    such argument by name). A parked task's record (`{"call", ...}`) is left alone: that would
    change which call it waits on, not what the program computed."""
    changed = dict(arguments)
    for name in sorted(changed):
        value = changed[name]
        if isinstance(value, bool):
            changed[name] = not value
        elif isinstance(value, int):
            changed[name] = value + 1
        elif isinstance(value, str):
            changed[name] = value + " (forged)"
        elif isinstance(value, list) and value:
            changed[name] = value + [value[-1]]
        else:
            continue
        return changed
    raise ValueError(f"no data argument to alter in {sorted(arguments)}")
