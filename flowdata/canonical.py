"""Canonical JSON, written in one place: UTF-8, object keys sorted by code point, no whitespace
(orjson's layout with `OPT_SORT_KEYS`). The hash chain (`flowrt.store`), the channel's frames
(`flowdata.framing`), the ABI's canonical text (`flowdata.codec`) and the sandbox's `json.*`
intrinsics all write through `dumps`, so one piece of data has one text wherever it is written:
the chain's hashes and replay's comparisons depend on that.

Writing. orjson first (fast). What it refuses is written by `exact_dumps`, which gives the bytes
orjson would have given (each string and float is written by orjson itself):
- integers beyond 64 bits, up to the Int limit (`flowdata.bigint`: the standard library's `json`
  would stop at CPython's 4,300-digit guard);
- nesting deeper than orjson's 255 levels, up to the interpreter's recursion limit (deeper:
  `NotJSON("nested too deeply")`);
- `Decimal` (the numbers of a json.Value that are not integers), as a JSON number in
  `values.decimal_text` form; not in `strict` mode.
`strict` (the channel) takes JSON data and nothing else: no subclasses of str or int, no
dataclasses or datetimes (which orjson would otherwise convert), no Decimal. A float that is not
finite is refused by the exact writer (orjson's fast path writes it as null).

Reading. `loads_exact` reads JSON text exactly (integers of any size up to the Int limit, NaN and
Infinity refused); `loads_canonical` also requires the text to be canonical (the store's reader:
a fact or record that is not is damage). The ABI's reader of untrusted JSON, which keeps decimals
exact and refuses duplicate keys, is `flowdata.codec.parse_json`.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import orjson

from flowdata.bigint import MAX_INT_DIGITS, IntOverLimit, int_text, text_int
from flowdata.flowdecimal import FlowDecimal, decimal_text, parse_decimal

__all__ = ["SORTED", "STRICT", "IntText", "NotJSON", "NotJSONText", "NotCanonical", "dumps", "exact_dumps",
           "loads_exact", "loads_canonical"]

SORTED = orjson.OPT_SORT_KEYS
#: orjson's options for `strict`: what is not plain JSON data fails instead of being converted.
STRICT = (SORTED | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
          | orjson.OPT_PASSTHROUGH_SUBCLASS)


class IntText:
    """An integer literal over the Int limit as the reader found it, kept unconverted (no cost) so
    that decoding can say where it is, or take it as a json.Value number; written back as the
    number it is."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class NotJSON(TypeError, ValueError):
    """The data cannot be written as canonical JSON. A TypeError (what orjson and `json` raise for
    data that is not JSON) and a ValueError (what the ABI's EncodeError is)."""


class NotJSONText(ValueError):
    """Bytes that do not parse as JSON at all."""


class NotCanonical(ValueError):
    """Bytes that parse as JSON but are not its canonical text."""


def dumps(obj: Any, *, strict: bool = False) -> bytes:
    """The canonical JSON text of `obj` (dicts with str keys, lists, tuples, str, int of any size
    up to the Int limit, bool, None, finite float, and finite Decimal unless `strict`)."""
    try:
        return orjson.dumps(obj, option=STRICT if strict else SORTED)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return exact_dumps(obj, strict=strict)


def exact_dumps(obj: Any, *, strict: bool = False) -> bytes:
    """`dumps` without orjson's fast path: for what orjson refused (see the module's doc). An
    integer over the Int limit raises `bigint.IntOverLimit`."""
    out: list[bytes] = []
    try:
        _write(obj, out, strict)
    except RecursionError:
        raise NotJSON("nested too deeply") from None
    return b"".join(out)


def _write(o: Any, out: list[bytes], strict: bool) -> None:
    kind = type(o)
    if kind is str:
        try:
            out.append(orjson.dumps(o))
        except TypeError:
            raise NotJSON("a string holds a lone surrogate (not Unicode text)") from None
    elif kind is dict:
        for key in o:
            if type(key) is not str and (strict or not isinstance(key, str)):
                raise NotJSON(f"an object key is not a string: {key!r}")
        out.append(b"{")
        for index, key in enumerate(sorted(o)):
            if index:
                out.append(b",")
            _write(str(key), out, strict)
            out.append(b":")
            _write(o[key], out, strict)
        out.append(b"}")
    elif kind is list or kind is tuple:
        out.append(b"[")
        for index, item in enumerate(o):
            if index:
                out.append(b",")
            _write(item, out, strict)
        out.append(b"]")
    elif kind is bool:
        out.append(b"true" if o else b"false")
    elif kind is int:
        out.append(int_text(o).encode("ascii"))
    elif o is None:
        out.append(b"null")
    elif kind is float:
        if o != o or o in (float("inf"), float("-inf")):
            raise NotJSON(f"a number that is not finite: {o}")
        out.append(orjson.dumps(o))
    elif strict:
        raise NotJSON(f"a {kind.__name__} value is not JSON data")
    elif kind is FlowDecimal:
        out.append(decimal_text(o).encode("ascii"))
    elif kind is IntText:
        # A Decimal's text when it is one; else the integer's own digits, which decoding then
        # reports as over the Int limit where an Int is expected.
        try:
            out.append(decimal_text(parse_decimal(o.text)).encode("ascii"))
        except ValueError:
            out.append(o.text.encode("ascii"))
    elif isinstance(o, Decimal):
        if not o.is_finite():
            raise NotJSON(f"not a finite number: {o}")
        out.append(decimal_text(FlowDecimal(o)).encode("ascii"))
    elif isinstance(o, str):
        _write(str(o), out, strict)
    elif isinstance(o, int):
        _write(int(o), out, strict)
    else:
        raise NotJSON(f"not JSON data: {kind.__name__}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_exact(data: bytes | str) -> Any:
    """The JSON data in `data`, integers exact up to the Int limit (orjson reads those beyond 64
    bits as floats). Raises ValueError (IntOverLimit for a longer integer) or RecursionError."""
    if not isinstance(data, str):
        data = bytes(data).decode("utf-8")
    return json.loads(data, parse_constant=_reject_constant, parse_int=text_int)


def loads_canonical(data: bytes) -> Any:
    """Parse bytes that must be canonical JSON. Raises ValueError (`NotJSONText` when they do not
    parse at all, `NotCanonical` when they parse but are not in canonical form)."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        obj = NotJSONText
    if obj is not NotJSONText:
        try:
            if orjson.dumps(obj, option=SORTED) == data:
                return obj
        except orjson.JSONEncodeError:
            pass
    # Slow path: orjson reads integers beyond 64 bits as floats, so read again exactly.
    try:
        exact = loads_exact(data)
    except IntOverLimit:
        raise NotCanonical(f"an integer over the limit of {MAX_INT_DIGITS} digits") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise NotJSONText("not JSON") from None
    try:
        again = dumps(exact)
    except (TypeError, RecursionError):
        raise NotCanonical("not canonical JSON") from None
    if again != data:
        raise NotCanonical("not canonical JSON")
    return exact
