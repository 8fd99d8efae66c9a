"""Canonical JSON: the one encoding of facts, values and host records (docs/trace.md section 2).

Kept as it was in flowrt/store.py: the ground-floor package flowdata/ takes it over (issue 14),
and then this module becomes an import of it."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from sandbox.bigint import MAX_INT_DIGITS, IntOverLimit, int_text, text_int

_OPT = orjson.OPT_SORT_KEYS
_OPT_LINE = orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE


def canonical_bytes(obj: Any) -> bytes:
    """Canonical JSON: UTF-8, keys sorted, no insignificant whitespace (orjson's layout).

    Integers outside 64 bits and nesting deeper than orjson allows are written by a slower
    encoder that produces the same bytes orjson would."""
    try:
        return orjson.dumps(obj, option=_OPT)
    except orjson.JSONEncodeError:
        parts: list[str] = []
        _slow_encode(obj, parts)
        try:
            return "".join(parts).encode("utf-8")
        except UnicodeEncodeError as problem:
            raise TypeError(f"text is not valid UTF-8: {problem}") from None


def _slow_encode(obj: Any, out: list[str]) -> None:
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, int):
        out.append(int_text(int(obj)))
    elif isinstance(obj, float):
        if not math.isfinite(obj):
            raise TypeError("a non-finite number is not JSON")
        out.append(orjson.dumps(obj).decode())
    elif isinstance(obj, str):
        out.append(json.dumps(obj, ensure_ascii=False))
    elif isinstance(obj, (list, tuple)):
        out.append("[")
        for index, item in enumerate(obj):
            if index:
                out.append(",")
            _slow_encode(item, out)
        out.append("]")
    elif isinstance(obj, dict):
        for key in obj:
            if not isinstance(key, str):
                raise TypeError("Dict key must be str")
        out.append("{")
        for index, key in enumerate(sorted(obj)):
            if index:
                out.append(",")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _slow_encode(obj[key], out)
        out.append("}")
    else:
        raise TypeError(f"Type is not JSON serializable: {type(obj).__name__}")


class _NotJSON(ValueError):
    pass


class _NotCanonical(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_canonical(data: bytes) -> Any:
    """Parse bytes that must be canonical JSON. Raises ValueError (`_NotJSON` when they do not
    parse at all, `_NotCanonical` when they parse but are not in canonical form)."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        obj = _NotJSON
    if obj is not _NotJSON:
        try:
            if orjson.dumps(obj, option=_OPT) == data:
                return obj
        except orjson.JSONEncodeError:
            pass
    # Slow path: orjson reads integers beyond 64 bits as floats, so re-read exactly (and without
    # CPython's 4,300-digit guard; no value the store writes holds an Int over the limit).
    try:
        exact = json.loads(data.decode("utf-8"), parse_constant=_reject_constant, parse_int=text_int)
    except IntOverLimit:
        raise _NotCanonical(f"an integer over the limit of {MAX_INT_DIGITS} digits") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _NotJSON("not JSON") from None
    try:
        again = canonical_bytes(exact)
    except (TypeError, RecursionError):
        raise _NotCanonical("not canonical JSON") from None
    if again != data:
        raise _NotCanonical("not canonical JSON")
    return exact
