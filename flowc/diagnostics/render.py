"""Turning diagnostics into text: the one place that writes carets, gutters, labels and colour.

Human form (Rust/Elm style), one block per diagnostic, a blank line between blocks, and a summary:

    error[type-mismatch]: expected Int, found Text
      --> support/main.flow:12:17
       |
    12 |     let x: Int = "a"
       |                  ^^^
       = note: ...
       = help: did you mean `notes`?

    error: 1 error emitted

How the snippet is drawn:
- Lines are the source split on "\\n" (a trailing "\\r" is dropped); the empty text after a final
  newline is not a line, so an empty file has no lines. A location whose file is not in `sources`
  or whose line is out of range keeps its `-->` line and loses only the snippet.
- Carets run from `column` to `end_column` (exclusive) on the first line; a span that continues on
  later lines is underlined to the end of its first line. There is always at least one caret
  (an empty span, or one just past the end of the line, gets one).
- The source line is printed as is. The caret line repeats each tab of the text before the span
  as a tab and every other character as blanks of its display width (2 for East Asian wide,
  0 for combining marks), so the terminal expands tabs identically in both lines and the carets
  stay under the span.
- A line longer than `WINDOW` code points is shown as a window of `WINDOW` code points around the
  span's start, with `…` where text was cut, so a 10 MB line renders in constant time and size.

Colour (`color=True`) adds raw ANSI SGR codes around the renderer's own marks only: the severity and
code label (bold red for errors, bold yellow for warnings), the `-->` arrow, gutter and `=` (bold
blue), the carets (the severity's colour) and the `note`/`help` labels (bold). Messages, notes,
help, source text and paths are never styled or escaped: escape bytes already in them pass through
unchanged in both modes. With `color=False` the renderer adds no ESC byte at all.

JSON form (`render_json`) is the `to_json()` data with sorted keys, never styled.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from flowc.diagnostics import Diagnostic, Location

__all__ = ["WINDOW", "render", "render_json", "summary_line", "use_color"]

WINDOW = 200  # code points of a long source line that are shown
_BEFORE = 80  # at most this many of them before the span's start
_ELLIPSIS = "…"

_RESET = "\x1b[0m"
_SGR = {
    "error": "\x1b[1;31m",
    "warning": "\x1b[1;33m",
    "gutter": "\x1b[1;34m",
    "label": "\x1b[1m",
}

_Paint = Callable[[str, str], str]


def _plain(style: str, text: str) -> str:
    return text


def _ansi(style: str, text: str) -> str:
    return f"{_SGR[style]}{text}{_RESET}" if text else text


# --- choosing colour -------------------------------------------------------------------------------


def use_color(mode: str, stream: Any) -> bool:
    """Whether human diagnostics written to `stream` get colour under `--color mode`.

    "always" and "never" decide alone. "auto" colours only when this very stream is a terminal,
    NO_COLOR is absent or empty, and TERM is not "dumb" (read from os.environ at call time). A stream
    without `isatty`, or whose `isatty` raises (e.g. closed), counts as not a terminal.
    """
    if mode == "always":
        return True
    if mode == "never":
        return False
    if mode != "auto":
        raise ValueError(f"color mode must be 'auto', 'always' or 'never', not {mode!r}")
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    if not callable(isatty):
        return False
    try:
        return bool(isatty())
    except Exception:
        return False


# --- human text ------------------------------------------------------------------------------------


def render(diagnostics: Sequence[Diagnostic], sources: Mapping[str, str], *, color: bool) -> str:
    """Human text for `diagnostics`, in the order given, ending with a summary line and a newline.

    `sources` maps a location's `file` (display form) to that file's text. No diagnostics: "".
    """
    if not diagnostics:
        return ""
    paint: _Paint = _ansi if color else _plain
    lines_of = _SourceLines(sources)
    blocks = [_render_one(d, lines_of, paint) for d in diagnostics]
    return "\n\n".join(blocks) + "\n\n" + _summary(diagnostics, paint) + "\n"


def summary_line(diagnostics: Sequence[Diagnostic]) -> str:
    """E.g. "error: 3 errors, 1 warning emitted", "warning: 2 warnings emitted" (no newline)."""
    return _summary(diagnostics, _plain)


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _summary(diagnostics: Sequence[Diagnostic], paint: _Paint) -> str:
    errors = sum(1 for d in diagnostics if d.severity == "error")
    warnings = sum(1 for d in diagnostics if d.severity == "warning")
    if errors and warnings:
        return f"{paint('error', 'error')}: {_count(errors, 'error')}, {_count(warnings, 'warning')} emitted"
    if errors:
        return f"{paint('error', 'error')}: {_count(errors, 'error')} emitted"
    if warnings:
        return f"{paint('warning', 'warning')}: {_count(warnings, 'warning')} emitted"
    return "no errors or warnings emitted"


class _SourceLines:
    """Lines of each source file, split once per render call."""

    def __init__(self, sources: Mapping[str, str]) -> None:
        self._sources = sources
        self._cache: dict[str, list[str] | None] = {}

    def get(self, file: str, line: int) -> str | None:
        if file not in self._cache:
            text = self._sources.get(file)
            if text is None:
                self._cache[file] = None
            else:
                lines = text.split("\n")
                if lines[-1] == "":  # after a final newline (or in an empty file) there is no line
                    lines.pop()
                self._cache[file] = lines
        lines = self._cache[file]
        if lines is None or not 1 <= line <= len(lines):
            return None
        text = lines[line - 1]
        return text[:-1] if text.endswith("\r") else text


def _render_one(d: Diagnostic, lines_of: _SourceLines, paint: _Paint) -> str:
    severity = d.severity
    out = [f"{paint(severity, f'{severity}[{d.code}]')}: {d.message}"]
    loc = d.location
    pad = " " * (len(str(loc.line)) if loc is not None else 1)
    if loc is not None:
        out.append(f"{pad}{paint('gutter', '-->')} {loc.file}:{loc.line}:{loc.column}")
        text = lines_of.get(loc.file, loc.line)
        if text is not None:
            shown, blanks, carets = _snippet(text, loc)
            out.append(paint("gutter", f"{pad} |"))
            out.append(paint("gutter", f"{loc.line} |") + (f" {shown}" if shown else ""))
            out.append(f"{paint('gutter', f'{pad} |')} {blanks}{paint(severity, carets)}")
    for note in d.notes:
        out.append(_labelled(pad, "note", note, paint))
    if d.help is not None:
        out.append(_labelled(pad, "help", d.help, paint))
    return "\n".join(out)


def _labelled(pad: str, label: str, text: str, paint: _Paint) -> str:
    head = f"{pad} = {label}: "
    body = text.replace("\n", "\n" + " " * len(head))  # later lines of a note line up under its text
    return f"{paint('gutter', f'{pad} =')} {paint('label', label)}: {body}"


def _snippet(text: str, loc: Location) -> tuple[str, str, str]:
    """(the line as shown, the blanks before the carets, the carets) for `loc` on `text`."""
    n = len(text)
    start = min(max(loc.column, 1), n + 1) - 1  # 0-based; n means just past the end of the line
    if loc.end_line > loc.line:
        end = n
    else:
        end = min(max(loc.end_column - 1, start + 1), n)
    lo, hi = 0, n
    if n > WINDOW:
        lo = max(0, start - _BEFORE)
        hi = min(n, lo + WINDOW)
        lo = max(0, min(lo, hi - WINDOW))
    shown = (_ELLIPSIS if lo > 0 else "") + text[lo:hi] + (_ELLIPSIS if hi < n else "")
    blanks = (" " * _width(_ELLIPSIS) if lo > 0 else "") + "".join(_blank(c) for c in text[lo:start])
    carets = "^" * max(1, sum(_width(c) for c in text[start : min(end, hi)]))
    return shown, blanks, carets


def _width(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    if unicodedata.east_asian_width(char) in ("W", "F"):
        return 2
    return 1


def _blank(char: str) -> str:
    return "\t" if char == "\t" else " " * _width(char)


# --- JSON ------------------------------------------------------------------------------------------


def render_json(diagnostics: Sequence[Diagnostic]) -> str:
    """A JSON array of `to_json()` objects, keys sorted, one line, ending with a newline."""
    import orjson  # here, not at the top: rendering text is the common case, and start-up counts

    data = [d.to_json() for d in diagnostics]
    return orjson.dumps(data, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE).decode("utf-8")
