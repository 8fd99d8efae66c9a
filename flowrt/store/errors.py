"""The store's errors and reports, shared by every implementation of the interface."""

from __future__ import annotations

from dataclasses import dataclass


class StorageError(Exception):
    """The store could not read or write the record faithfully: damage, or a failed write.

    `fact_n` is the number of the fact concerned (the first damaged one when reading, the one
    that could not be written when appending), or None when no single fact is concerned;
    `component` names the file (`history.jsonl`, `host.jsonl`, `values/<hex>`, ...)."""

    def __init__(self, message: str, fact_n: int | None = None, *, component: str | None = None):
        self.message = message
        self.fact_n = fact_n
        self.component = component
        where = []
        if component:
            where.append(component)
        if fact_n is not None:
            where.append(f"fact {fact_n}")
        super().__init__(f"{': '.join(where)}: {message}" if where else message)


class Hole(Exception):
    """The value of `field` in fact `fact_n` is a hole: only its `hash` is kept."""

    def __init__(self, fact_n: int, field: str, hash: str):
        self.fact_n = fact_n
        self.field = field
        self.hash = hash
        super().__init__(f"fact {fact_n}: {field} is a hole ({hash})")


class RunNotFound(LookupError):
    """No run directory with that id under the root."""


class RunExists(Exception):
    """`RunStore.create` was given an id whose directory already exists."""


class RunBusy(Exception):
    """Another open store holds the run for appending (an advisory lock on history.jsonl)."""


class RedactRefused(ValueError):
    """Redaction was asked for a value that cannot become a hole (stored inline, or absent)."""


@dataclass(frozen=True, slots=True)
class TornTail:
    """An unfinished last line: `length` bytes starting at byte `offset` of history.jsonl."""

    offset: int
    length: int
