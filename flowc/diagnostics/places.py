"""Where in a non-Flow text a diagnostic belongs: a flow.toml entry, a TOML syntax error, a JSON
input's syntax error.

tomllib gives values, not positions, so a flow.toml problem found in the data (a pin, a Tool's
entry) is placed by finding its key's line in the text: `[table]` headers are followed and a key is
matched whether written bare, quoted or dotted (`"std@v1/x" = {...}`, `[tools."mod"]`,
`tools.mod = {...}`). The search is only a pointer for a human: when it finds nothing the caller
falls back to the table's header, then to the file with no position (never a made-up `1:1`).
"""

from __future__ import annotations

import re

from flowc.diagnostics import Location

__all__ = ["json_error_location", "toml_error_location", "toml_key_location"]

_TOML_AT = re.compile(r"\(at line (\d+), column (\d+)\)")
_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _key_parts(text: str) -> tuple[list[str], int] | None:
    """A TOML (dotted) key at the start of `text`: its parts and how many characters it took."""
    parts: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] in "\"'":
            quote = text[i]
            j = i + 1
            buf = []
            while j < n and text[j] != quote:
                if quote == '"' and text[j] == "\\" and j + 1 < n:
                    buf.append(text[j + 1])  # escapes in keys are rare: keep the escaped character
                    j += 2
                    continue
                buf.append(text[j])
                j += 1
            if j >= n:
                return None
            parts.append("".join(buf))
            i = j + 1
        else:
            bare = _BARE.match(text, i)
            if bare is None:
                return None
            parts.append(bare.group(0))
            i = bare.end()
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] == ".":
            i += 1
            continue
        return parts, i


def _span(file: str, number: int, line: str) -> Location:
    start = len(line) - len(line.lstrip())
    end = len(line.rstrip())
    return Location(file, number, start + 1, number, max(end, start + 1) + 1)


def toml_key_location(file: str, text: str, table: str, key: str | None = None) -> Location | None:
    """The line that defines `table.key` (or, with no `key`, the `[table]` header) in TOML `text`;
    the `[table]` header when the key is not found; None when neither is there."""
    current: list[str] = []
    header: Location | None = None
    want = [table] if key is None else [table, key]
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("["):
            inner = stripped[2:] if stripped.startswith("[[") else stripped[1:]
            parsed = _key_parts(inner)
            if parsed is None:
                continue
            current = parsed[0]
            if current == [table] and header is None:
                header = _span(file, number, line)
            if key is not None and current == want:
                return _span(file, number, line)
            continue
        parsed = _key_parts(stripped)
        if parsed is None or not stripped[parsed[1]:].lstrip().startswith("="):
            continue
        full = current + parsed[0]
        if key is not None and full[:2] == want:
            return _span(file, number, line)
        if key is None and full[:1] == want and header is None:
            header = _span(file, number, line)
    return header


def toml_error_location(file: str, problem: Exception, text: str) -> Location | None:
    """Where tomllib says a TOML syntax error is: its "(at line L, column C)", or the end of the
    document for "(at end of document)"; None if the message says neither."""
    message = str(problem)
    found = _TOML_AT.search(message)
    if found:
        line, column = int(found.group(1)), int(found.group(2))
        return Location(file, line, column, line, column + 1)
    if "at end of document" in message:
        lines = text.split("\n")
        return Location(file, len(lines), len(lines[-1]) + 1, len(lines), len(lines[-1]) + 2)
    return None


def json_error_location(file: str, text: str) -> Location | None:
    """Where the standard JSON parser stops on `text`, if it is not JSON; else None."""
    import json

    try:
        json.loads(text)
    except json.JSONDecodeError as problem:
        return Location(file, problem.lineno, problem.colno, problem.lineno, problem.colno + 1)
    except (RecursionError, ValueError):
        return None
    return None
