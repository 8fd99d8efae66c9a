"""Archive and redaction, the two ways a record shrinks without breaking its chain.

Archive moves the facts between Start and the latest checkpoint aside and leaves an anchor (the
last archived fact's number and hash) that the chain continues from; redaction makes a value
stored by reference a hole, which its hash still stands for (docs/trace.md section 8). Which
fields a redaction may touch is the same for every store (`redaction_fields`); the file work is
the run directory's."""

from __future__ import annotations

import os

from flowrt.store.canonical import canonical_bytes
from flowrt.store.durable import _fsync_dir, _read_canonical_file, _strerror, _write_durably
from flowrt.store.errors import RedactRefused, StorageError
from flowrt.store.format import _HASH_RE, VALUE_FIELDS
from flowrt.store.layout import ANCHOR, ARCHIVE, HISTORY


def _read_anchor(run_path: str) -> dict | None:
    """Where archived facts end: `{"through": m, "head": hash of fact m}`, or None. History then
    holds Start, and the facts from m + 1 on (`flow archive`)."""
    anchor = _read_canonical_file(os.path.join(run_path, ANCHOR), ANCHOR, "the archive anchor")
    if anchor is None:
        return None
    if not isinstance(anchor, dict) or type(anchor.get("through")) is not int or anchor["through"] < 1 \
            or not isinstance(anchor.get("head"), str) or not _HASH_RE.match(anchor["head"]):
        raise StorageError("the archive anchor is not {through, head}", component=ANCHOR)
    return anchor



def write_archive(run_path: str, facts: list[dict], latest: int,
                  archived_checkpoints: int) -> tuple[list[dict], int, int]:
    """Archive `facts[1:latest]` (`latest`: the index of the latest Checkpoint, > 1): the lines
    to archive/facts-<first>-<last>.jsonl, the anchor, then history.jsonl replaced by Start and
    the facts from the checkpoint on, each durable before the next (a history that still holds
    the archived facts reads as before). Returns the facts kept, the new history's length, and
    the count of archived checkpoints."""
    moved = facts[1:latest]
    archive_dir = os.path.join(run_path, ARCHIVE)
    os.makedirs(archive_dir, mode=0o700, exist_ok=True)
    name = f"facts-{moved[0]['n']}-{moved[-1]['n']}.jsonl"
    try:
        _write_durably(os.path.join(archive_dir, name), b"".join(canonical_bytes(f) + b"\n" for f in moved))
        checkpoints = archived_checkpoints + sum(1 for f in moved if f["kind"] == "Checkpoint")
        anchor = {"checkpoints": checkpoints, "head": moved[-1]["hash"], "through": moved[-1]["n"]}
        _write_durably(os.path.join(run_path, ANCHOR), canonical_bytes(anchor) + b"\n")
        kept = [facts[0]] + facts[latest:]
        history = os.path.join(run_path, HISTORY)
        data = b"".join(canonical_bytes(f) + b"\n" for f in kept)
        _write_durably(history + ".new", data)
        os.replace(history + ".new", history)
        _fsync_dir(run_path)
    except OSError as problem:
        raise StorageError(f"cannot archive: {_strerror(problem)}", component=ARCHIVE) from problem
    return kept, len(data), checkpoints


def redaction_fields(fact: dict, field: str | None) -> list[str]:
    """The value fields of `fact` that a redaction of `field` (None: every value field) makes
    holes. Raises RedactRefused when one cannot become a hole: an inline value is part of its
    fact's hashed content, so removing it would break the chain."""
    n = fact["n"]
    kind_fields = VALUE_FIELDS[fact["kind"]]
    if field is None:
        fields = [f for f in kind_fields if f in fact or f + "_ref" in fact]
        if not fields:
            raise RedactRefused(f"fact {n} ({fact['kind']}) holds no value")
    else:
        if field not in kind_fields:
            raise RedactRefused(f"{field!r} is not a value field of {fact['kind']}")
        fields = [field]
    for f in fields:
        if f in fact:
            raise RedactRefused(
                f"fact {n}: {f} is stored inline (its JSON is at most the inline limit), so "
                "it is part of the fact's hash and cannot become a hole without breaking the "
                "chain; create runs with inline_limit=0 to make every value redactable")
        if f + "_ref" not in fact:
            raise RedactRefused(f"fact {n} has no {f}")
    return fields
