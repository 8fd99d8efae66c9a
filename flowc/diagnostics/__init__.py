"""Diagnostics as data.

A `Diagnostic` is a frozen record: a registered kebab-case `code` (see `codes.py`), a severity,
a message, an optional `Location` and optional notes and help. Stages never write a message: they
call a function of the message registry with the facts, `M.<message>(...)` (`messages.py`, loaded
on first use through `M`), and place the result with `.at(location)`; that goes through `error()` /
`warning()`, which refuse an unregistered code (a compiler bug, so it raises). Stages collect
diagnostics and carry on. `render.py` is the one place that turns diagnostics into human text
(`render`) or JSON (`render_json`); `suggest.py` holds the one "did you mean" helper; `places.py`
finds where in a flow.toml or a JSON input a problem is.

Locations use 1-based lines and 1-based columns counted in code points; `end_column` is exclusive,
so a one-character span has `end_column == column + 1`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from flowc.records import record

__all__ = [
    "M",
    "REGISTRY",
    "Code",
    "Diagnostic",
    "Location",
    "UnknownCodeError",
    "error",
    "sort_key",
    "warning",
]


def __getattr__(name: str) -> Any:
    # The registry (`REGISTRY`, `Code`, ...) is loaded when first asked for: a check that finds
    # nothing to report never needs it.
    if name in ("REGISTRY", "SEVERITIES", "Code", "UnknownCodeError", "lookup"):
        from importlib import import_module

        return getattr(import_module("flowc.diagnostics.codes"), name)
    raise AttributeError(f"module 'flowc.diagnostics' has no attribute {name!r}")


class _Messages:
    """`M.<message>(...)`: the message registry (`messages.py`), imported when a stage first reports
    something, so that checking a program without problems never loads it (start-up counts)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        from flowc.diagnostics import messages

        return getattr(messages, name)


M: Any = _Messages()


@record
class Location:
    file: str  # path as given by the user (display form)
    line: int  # 1-based
    column: int  # 1-based, in code points
    end_line: int
    end_column: int  # exclusive (1-based): a one-character span has end_column == column + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Location:
        return cls(
            file=data["file"],
            line=data["line"],
            column=data["column"],
            end_line=data["end_line"],
            end_column=data["end_column"],
        )


@record
class Diagnostic:
    code: str  # kebab-case, registered in codes.py
    severity: str  # "error" | "warning"
    message: str
    location: Location | None
    notes: tuple[str, ...] = ()
    help: str | None = None

    def __post_init__(self) -> None:
        from flowc.diagnostics.codes import SEVERITIES

        if self.severity not in SEVERITIES:
            raise ValueError(f"diagnostic severity {self.severity!r} is not one of {SEVERITIES}")
        if not isinstance(self.notes, tuple):  # accept any iterable, store a tuple (hashable, frozen)
            object.__setattr__(self, "notes", tuple(self.notes))

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "location": None if self.location is None else self.location.to_json(),
            "notes": list(self.notes),
            "help": self.help,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Diagnostic:
        location = data.get("location")
        return cls(
            code=data["code"],
            severity=data["severity"],
            message=data["message"],
            location=None if location is None else Location.from_json(location),
            notes=tuple(data.get("notes", ())),
            help=data.get("help"),
        )


def _make(
    code: str,
    severity: str | None,
    message: str,
    location: Location | None,
    notes: Iterable[str],
    help: str | None,
) -> Diagnostic:
    from flowc.diagnostics.codes import lookup

    registered = lookup(code)  # raises UnknownCodeError for an unregistered code
    return Diagnostic(
        code=code,
        severity=registered.severity if severity is None else severity,
        message=message,
        location=location,
        notes=tuple(notes),
        help=help,
    )


def error(
    code: str,
    message: str,
    location: Location | None,
    *,
    notes: Iterable[str] = (),
    help: str | None = None,
) -> Diagnostic:
    """A diagnostic for a registered `code`, with the code's registered (default) severity."""
    return _make(code, None, message, location, notes, help)


def warning(
    code: str,
    message: str,
    location: Location | None,
    *,
    notes: Iterable[str] = (),
    help: str | None = None,
) -> Diagnostic:
    """A diagnostic for a registered `code`, with severity "warning" whatever the code's default."""
    return _make(code, "warning", message, location, notes, help)


def sort_key(d: Diagnostic) -> tuple[Any, ...]:
    """Deterministic order: by file, line, column, code (then message); no location first."""
    loc = d.location
    if loc is None:
        return (0, "", 0, 0, d.code, d.message)
    return (1, loc.file, loc.line, loc.column, d.code, d.message)
