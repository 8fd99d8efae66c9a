"""A refusal: what stops a run, a resume or a fork before anything is recorded (a bad input, a
missing or unapproved binding, an entry that cannot take input), as diagnostics at the real place
they concern, with the sources they quote."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flowc.diagnostics import Diagnostic, Location

if TYPE_CHECKING:
    from flowc.diagnostics.messages import Message


class Refused(Exception):
    def __init__(self, diagnostics: list[Diagnostic], sources: dict[str, str] | None = None) -> None:
        super().__init__("refused")
        self.diagnostics = diagnostics
        self.sources = sources or {}


#: How a refusal's location names the run's input (`--input`): it has no file of its own.
INPUT = "<input>"


def refuse(message: Message, location: Location | None, sources: dict[str, str] | None = None) -> Refused:
    """A refusal at `location`: the real place when there is one (a flow.toml entry, the entry's
    declaration, a JSON syntax error's position), else none rather than a made-up `1:1`."""
    return Refused([message.at(location)], sources)


def _line_of(file: str, line: int) -> Location:
    return Location(file, line, 1, line, 2)


def _text_or_empty(path: str) -> str:
    """A text file's contents for placing diagnostics in it; "" when it cannot be read as text."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return ""
