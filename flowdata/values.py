"""The runtime representation of Flow values, shared by the sandboxed child and the host.

Every Flow data value has exactly one Python representation here:

| Flow            | Python                                                          |
|-----------------|-----------------------------------------------------------------|
| Int             | `int` (never `bool`)                                            |
| Decimal         | `FlowDecimal` (flowdata/flowdecimal.py), any 64-bit exponent    |
| Bool            | `bool`                                                          |
| Text            | `str` (Unicode scalar values: no lone surrogates)               |
| Bytes           | `bytes`                                                         |
| Unit            | `None`                                                          |
| Duration        | `Duration(nanos)`                                               |
| Instant         | `Instant(nanos)`: nanoseconds since 1970-01-01T00:00:00Z        |
| List<T>, tuples | `tuple`                                                         |
| Set<T>          | `FlowSet` (immutable, sorted by `order_key`)                    |
| Dict<K, V>      | `FlowDict` (immutable, sorted by `order_key` of the keys)       |
| records         | `(tag, *fields)`: a plain tuple, `tag` its `record_type`'s      |
| enums           | a `tuple` subclass made by `enum_type`: `(tag, *payload)`       |
| Option<T>       | the enum `OPTION` (`NONE`, `some(x)`)                           |
| host types      | `Token(identity, token)`                                        |
| json.Value      | the enum `JSON_VALUE`                                           |

Ordering. `order_key(v)` maps a value to a key whose Python ordering is Flow's `<` on Ord types
(numeric Int and Decimal, Text by code point, `false < true`, Bytes bytewise, Duration and Instant
by nanoseconds, lists and tuples item by item with a prefix first, `None` before every `Some`).
Values of the other data types (records, enums, sets, dicts, host tokens) are ordered by their
canonical JSON text (`value_json`), so sets and dicts of them still iterate in one fixed order.
Keys of two values of the same Flow type are always comparable; keys of different types need not
be (Flow never compares them). Equal keys mean equal values.

Determinism. Nothing here depends on hash seeds, `id()` or the iteration order of unordered
Python containers: a FlowSet built from the same elements in any order iterates in the same order.

Over 800 lines, on purpose: each kind of value's representation, text form and order key are
written together here, and must agree (the order of sets and dicts is derived from them).

This module is pure: no I/O, and only the standard library's datetime, base64, bisect, re and
functools (and flowdata.bigint, the Int's conversions to and from text, and flowdata.flowdecimal,
Flow's Decimal).
"""

from __future__ import annotations

import base64
import datetime
import re
from bisect import bisect_left

# Int <-> text of any size up to the Int limit (decoding refuses longer integers).
from flowdata.bigint import MAX_INT_DIGITS, IntOverLimit, int_text, text_int
# Flow's Decimal: exact, any signed 64-bit exponent (its own module; Python's decimal stops near 10^18).
from flowdata.flowdecimal import DECIMAL_PLAIN_LIMIT, DecimalOverLimit, FlowDecimal, decimal_text, parse_decimal

__all__ = [
    "Duration", "Instant", "Token", "FlowSet", "FlowDict", "MISSING",
    "record_type", "record_type_of", "record_text", "RecordType", "enum_type", "order_key", "value_json",
    "OPTION", "RESULT", "TOOL_PROBLEM", "JSON_VALUE", "NONE", "some", "ok", "err",
    "failed", "not_run", "unknown", "bad_reply", "is_option", "is_json_value",
    "OPTION_ID", "RESULT_ID", "TOOL_PROBLEM_ID", "JSON_VALUE_ID",
    "EMPTY_SET", "EMPTY_DICT", "NANOS_PER_SECOND", "INSTANT_MIN_NANOS", "INSTANT_MAX_NANOS",
    "MAX_INT_DIGITS", "IntOverLimit", "int_text", "text_int", "decimal_text", "parse_decimal",
    "FlowDecimal", "DecimalOverLimit",
    "duration_text", "parse_duration", "instant_text", "parse_instant", "bytes_text",
    "parse_bytes", "json_string", "has_surrogate",
]

NANOS_PER_SECOND = 1_000_000_000
_NANOS_PER_DAY = 86_400 * NANOS_PER_SECOND
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
#: The first and last representable Instants: 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999999Z.
INSTANT_MIN_NANOS = (datetime.date(1, 1, 1).toordinal() - _EPOCH_ORDINAL) * _NANOS_PER_DAY
INSTANT_MAX_NANOS = (datetime.date(9999, 12, 31).toordinal() - _EPOCH_ORDINAL + 1) * _NANOS_PER_DAY - 1

OPTION_ID = "std@v1/prelude.Option"
RESULT_ID = "std@v1/prelude.Result"
TOOL_PROBLEM_ID = "std@v1/prelude.ToolProblem"
JSON_VALUE_ID = "std@v1/json.Value"


# ---------------------------------------------------------------------------------------------
# Duration, Instant, Token


class _Nanos:
    """What Duration and Instant share: a whole number of nanoseconds, immutable and hashable,
    ordered against values of its own class only (a Duration and an Instant never compare)."""

    __slots__ = ("nanos",)

    def __init__(self, nanos: int):
        if type(nanos) is not int:
            raise TypeError(f"{type(self).__name__} needs an int of nanoseconds, not {type(nanos).__name__}")
        object.__setattr__(self, "nanos", nanos)

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other):
        if type(other) is type(self):
            return self.nanos == other.nanos
        return NotImplemented

    def __ne__(self, other):
        if type(other) is type(self):
            return self.nanos != other.nanos
        return NotImplemented

    def __lt__(self, other):
        if type(other) is type(self):
            return self.nanos < other.nanos
        return NotImplemented

    def __le__(self, other):
        if type(other) is type(self):
            return self.nanos <= other.nanos
        return NotImplemented

    def __gt__(self, other):
        if type(other) is type(self):
            return self.nanos > other.nanos
        return NotImplemented

    def __ge__(self, other):
        if type(other) is type(self):
            return self.nanos >= other.nanos
        return NotImplemented

    def __hash__(self):
        return hash((type(self).__name__, self.nanos))

    def __repr__(self):
        return f"{type(self).__name__}({self.nanos})"

    def __reduce__(self):
        return (type(self), (self.nanos,))


class Duration(_Nanos):
    """A signed length of time in whole nanoseconds. Immutable, hashable, totally ordered."""

    __slots__ = ()


class Instant(_Nanos):
    """A point in time: nanoseconds since 1970-01-01T00:00:00Z (UTC). Immutable, totally ordered.

    Flow's Instants lie in years 0001 to 9999 (`INSTANT_MIN_NANOS` .. `INSTANT_MAX_NANOS`); the
    class itself does not refuse others, so arithmetic can check and fault where it wants to.
    """

    __slots__ = ()

    def in_range(self) -> bool:
        """Whether this Instant lies in years 0001 to 9999."""
        return INSTANT_MIN_NANOS <= self.nanos <= INSTANT_MAX_NANOS


class Token:
    """A value of a host type (`@tool type Page`): the type's identity and an opaque token."""

    __slots__ = ("identity", "token")

    def __init__(self, identity: str, token: str):
        if type(identity) is not str or type(token) is not str:
            raise TypeError("Token needs a str identity and a str token")
        object.__setattr__(self, "identity", identity)
        object.__setattr__(self, "token", token)

    def __setattr__(self, name, value):
        raise AttributeError("Token is immutable")

    def __delattr__(self, name):
        raise AttributeError("Token is immutable")

    def __eq__(self, other):
        if type(other) is Token:
            return self.token == other.token and self.identity == other.identity
        return NotImplemented

    def __ne__(self, other):
        if type(other) is Token:
            return self.token != other.token or self.identity != other.identity
        return NotImplemented

    def __hash__(self):
        return hash(("Token", self.identity, self.token))

    def __repr__(self):
        return f"Token({self.identity!r}, {self.token!r})"

    def __reduce__(self):
        return (Token, (self.identity, self.token))


# ---------------------------------------------------------------------------------------------
# Records and enums


class _Missing:
    """The one value `FlowDict.get` returns for an absent key."""

    __slots__ = ()

    def __repr__(self):
        return "MISSING"

    def __bool__(self):
        return False

    def __reduce__(self):
        return "MISSING"



class ListView:
    """The rest of a list after its first items: `[x, ..rest]` binds `rest` in O(1).

    A Flow List is a tuple; matching `[x, ..rest]` over a long list would copy the tail at every
    step (quadratic in a tail-recursive loop). A view shares the original tuple. It behaves as the
    tuple it stands for: equal and hashed alike, indexable, sliceable (into another view),
    concatenable, ordered; `to_tuple()` copies it out where a real tuple is needed."""

    __slots__ = ("base", "start", "_hash")

    def __init__(self, base: tuple, start: int) -> None:
        self.base = base
        self.start = start
        self._hash = None

    def to_tuple(self) -> tuple:
        return self.base[self.start:]

    def __len__(self) -> int:
        return len(self.base) - self.start

    def __getitem__(self, index):
        if type(index) is int and index >= 0:
            return self.base[self.start + index]
        if type(index) is slice:
            if index.step is None and index.stop is None and (index.start or 0) >= 0:
                return rest_of(self, index.start or 0)
            return self.to_tuple()[index]
        if index < 0:
            index += len(self)
            if index < 0:
                raise IndexError("list index out of range")
        return self.base[self.start + index]

    def __iter__(self):
        base = self.base
        for i in range(self.start, len(base)):
            yield base[i]

    def __contains__(self, item) -> bool:
        return any(x == item for x in self)

    def __eq__(self, other) -> bool:
        if type(other) is ListView or type(other) is tuple:
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __ne__(self, other) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.to_tuple())
        return self._hash

    def __add__(self, other):
        if type(other) is ListView:
            other = other.to_tuple()
        if type(other) is tuple:
            return self.to_tuple() + other
        return NotImplemented

    def __radd__(self, other):
        if type(other) is tuple:
            return other + self.to_tuple()
        return NotImplemented

    def __lt__(self, other):
        return _as_tuple(self) < _as_tuple(other)

    def __le__(self, other):
        return _as_tuple(self) <= _as_tuple(other)

    def __gt__(self, other):
        return _as_tuple(self) > _as_tuple(other)

    def __ge__(self, other):
        return _as_tuple(self) >= _as_tuple(other)

    def __repr__(self) -> str:
        return repr(self.to_tuple())


def _as_tuple(v):
    return v.to_tuple() if type(v) is ListView else v


#: Below this many remaining items a rest is copied; a view is not worth its indirection.
VIEW_THRESHOLD = 32


def rest_of(xs, n: int):
    """`xs[n:]` for a Flow list, in O(1) for a long one."""
    if type(xs) is ListView:
        base, start = xs.base, xs.start + n
    else:
        base, start = xs, n
    if len(base) - start <= VIEW_THRESHOLD:
        return base[start:]
    return ListView(base, start)

MISSING = _Missing()

_RECORD_TYPES: dict = {}
_ENUM_CLASSES: dict = {}


def _class_name(identity: str) -> str:
    name = identity.rsplit(".", 1)[-1]
    return name if name.isidentifier() else "FlowValue"


class RecordType:
    """The record type `flow_identity` with fields `flow_fields`.

    A record is the plain tuple `(tag, *field values)`, fields in declaration order, where `tag`
    is this type's `tag`: a bare `object()`, which no Flow value ever is, so `record_type_of(v)`
    tells a record from a list or a tuple. Why a plain tuple: it is built by a tuple display, the
    cheapest value CPython makes, and its fields are read by the exact tuple's fast path (a tuple
    subclass took ~3x as long to build). Why a bare object as the tag: it is not tracked by the
    cyclic collector, so a record of atoms is untracked at its first collection as any tuple of
    atoms is (a tag of a Python class kept every record tracked, ~40 ns more per record in a
    loop that builds them). Build one as `R((1, 2))` or `R.of(1, 2)`; generated code writes
    `(Point, 1, 2)` with `Point` the tag (`sandbox.runtime.rt_record_tag`). Equality is the
    tuple's (the tag by identity: one per identity and fields in a process); a record's hash,
    as the tag's, follows its address, and nothing orders by it (sets and dicts order by
    `order_key`).
    """

    __slots__ = ("flow_identity", "flow_fields", "flow_index", "__name__", "tag")
    flow_kind = "record"

    def __init__(self, identity: str, fields: tuple):
        self.flow_identity = identity
        self.flow_fields = fields
        #: field name -> its position in the record's tuple (after the tag)
        self.flow_index = {f: i + 1 for i, f in enumerate(fields)}
        self.__name__ = _class_name(identity)
        self.tag = object()

    def __call__(self, values) -> tuple:
        """The record with these field values, in declaration order."""
        return (self.tag, *values)

    def of(self, *values) -> tuple:
        """Build a record from its field values in declaration order."""
        return (self.tag, *values)

    def __repr__(self) -> str:
        return f"<record type {self.flow_identity}>"


#: a record's tag -> its RecordType
_RECORD_TYPES_BY_TAG: dict = {}


def record_type_of(v) -> RecordType | None:
    """The record type of `v` when `v` is a record, else None."""
    if type(v) is tuple and v and type(v[0]) is object:
        return _RECORD_TYPES_BY_TAG.get(v[0])
    return None


def record_text(v) -> str:
    """`Point(x=1, y=2)`: a record's text for messages (a record's repr is its tuple's)."""
    kind = record_type_of(v)
    inner = ", ".join(f"{n}={x!r}" for n, x in zip(kind.flow_fields, v[1:]))
    return f"{kind.__name__}({inner})"


def record_type(identity: str, fields: tuple) -> RecordType:
    """The record type `identity` with `fields` (names, in declaration order): see `RecordType`.
    The same identity and fields always give the same type (every instantiation of a generic
    record shares it)."""
    fields = tuple(fields)
    key = (identity, fields)
    kind = _RECORD_TYPES.get(key)
    if kind is None:
        kind = _RECORD_TYPES[key] = RecordType(identity, fields)
        _RECORD_TYPES_BY_TAG[kind.tag] = kind
    return kind


def _enum_repr(self):
    tag = self[0]
    form, names, _ = self.flow_ctors[tag]
    if form == "bare":
        return tag
    if form == "named":
        inner = ", ".join(f"{n}={v!r}" for n, v in zip(names, self[1:]))
    else:
        inner = ", ".join(repr(v) for v in self[1:])
    return f"{tag}({inner})"


def _enum_make(cls, tag, *payload):
    """The value `tag(*payload)` of this enum (named payloads positionally, in declaration order)."""
    try:
        form, names, _ = cls.flow_ctors[tag]
    except KeyError:
        raise ValueError(f"{cls.flow_identity} has no constructor {tag!r}") from None
    if form == "bare":
        if payload:
            raise ValueError(f"{cls.flow_identity}.{tag} takes no payload")
        return cls.flow_bare[tag]
    if form == "positional" and not payload:
        raise ValueError(f"{cls.flow_identity}.{tag} needs a payload")
    if form == "named" and len(payload) != len(names):
        raise ValueError(f"{cls.flow_identity}.{tag} has {len(names)} fields, not {len(payload)}")
    return tuple.__new__(cls, (tag,) + payload)


def enum_type(identity: str, ctors: tuple) -> type:
    """The class of the enum type `identity`.

    `ctors` lists `(name, form, field_names)` in declaration order, `form` being "bare",
    "positional" or "named" (`field_names` is empty except for named payloads). A value is a
    `tuple` subclass instance `(tag, *payload)`. Class attributes: `flow_identity`, `flow_ctors`
    (tag to `(form, field_names, index)`), `flow_tags` (in declaration order), `flow_bare` (tag to
    the one value of each bare constructor) and `flow_kind == "enum"`; `make(tag, *payload)` builds
    a value. The same identity and constructors always give the same class.
    """
    spec = tuple((str(n), str(f), tuple(fs)) for n, f, fs in ctors)
    for n, f, fs in spec:
        if f not in ("bare", "positional", "named"):
            raise ValueError(f"constructor {n!r}: unknown form {f!r}")
    key = (identity, spec)
    cls = _ENUM_CLASSES.get(key)
    if cls is None:
        name = _class_name(identity)
        cls = type(name, (tuple,), {
            "__slots__": (),
            "__module__": __name__,
            "__qualname__": name,
            "__doc__": f"The enum type {identity}.",
            "flow_kind": "enum",
            "flow_identity": identity,
            "flow_ctors": {n: (f, fs, i) for i, (n, f, fs) in enumerate(spec)},
            "flow_tags": tuple(n for n, _, _ in spec),
            "make": classmethod(_enum_make),
            "__repr__": _enum_repr,
        })
        cls.flow_bare = {n: tuple.__new__(cls, (n,)) for n, f, _ in spec if f == "bare"}
        _ENUM_CLASSES[key] = cls
    return cls


OPTION = enum_type(OPTION_ID, (("Some", "positional", ()), ("None", "bare", ())))
RESULT = enum_type(RESULT_ID, (("Ok", "positional", ()), ("Err", "positional", ())))
TOOL_PROBLEM = enum_type(TOOL_PROBLEM_ID, (
    ("Failed", "positional", ()), ("NotRun", "positional", ()),
    ("Unknown", "positional", ()), ("BadReply", "positional", ()),
))
JSON_VALUE = enum_type(JSON_VALUE_ID, (
    ("Null", "bare", ()), ("Bool", "positional", ()), ("Number", "positional", ()),
    ("String", "positional", ()), ("Array", "positional", ()), ("Object", "positional", ()),
))

NONE = OPTION.flow_bare["None"]
_new_tuple = tuple.__new__


def some(x):
    """`Some(x)`."""
    return _new_tuple(OPTION, ("Some", x))


def ok(x):
    """`Ok(x)`."""
    return _new_tuple(RESULT, ("Ok", x))


def err(e):
    """`Err(e)`."""
    return _new_tuple(RESULT, ("Err", e))


def failed(e):
    """`ToolProblem.Failed(e)`."""
    return _new_tuple(TOOL_PROBLEM, ("Failed", e))


def not_run(text: str):
    """`ToolProblem.NotRun(text)`."""
    return _new_tuple(TOOL_PROBLEM, ("NotRun", text))


def unknown(text: str):
    """`ToolProblem.Unknown(text)`."""
    return _new_tuple(TOOL_PROBLEM, ("Unknown", text))


def bad_reply(text: str):
    """`ToolProblem.BadReply(text)`."""
    return _new_tuple(TOOL_PROBLEM, ("BadReply", text))


def is_option(v) -> bool:
    """Whether `v` is an Option value (of any class made for std@v1/prelude.Option)."""
    return getattr(type(v), "flow_identity", None) == OPTION_ID and getattr(type(v), "flow_kind", None) == "enum"


def is_json_value(v) -> bool:
    """Whether `v` is a json.Value."""
    return getattr(type(v), "flow_identity", None) == JSON_VALUE_ID and getattr(type(v), "flow_kind", None) == "enum"


# ---------------------------------------------------------------------------------------------
# Canonical texts of the scalar types (shared with the ABI, so both sides write the same bytes)

def duration_text(d: Duration) -> str:
    """ISO 8601 `PT<seconds>S`: `PT0.25S`, `PT3600S`, `-PT5S`, `PT0S` (fraction only when
    non-zero, up to 9 digits, no trailing zeros)."""
    n = d.nanos
    neg = "-" if n < 0 else ""
    s, f = divmod(-n if n < 0 else n, NANOS_PER_SECOND)
    frac = "." + f"{f:09d}".rstrip("0") if f else ""
    return f"{neg}PT{int_text(s)}{frac}S"


def _ascii_digits(s: str) -> bool:
    return s.isascii() and s.isdigit()


def parse_duration(text: str) -> Duration:
    """The Duration an ISO 8601 duration text writes, or ValueError.

    Accepted: an optional sign, `P`, optional days `nD`, then optionally `T` with hours `nH`,
    minutes `nM` and seconds `n[.fffffffff]S` (each optional, in this order, at least one), e.g.
    `PT0.25S`, `-PT5S`, `PT1H30M`, `P1DT12H`. A day is 24 hours. Years, months and weeks are not
    accepted (their length is not fixed), nor more than 9 fractional digits.
    """
    bad = ValueError(f"not an ISO 8601 duration like \"PT1.5S\": {text!r}")
    s = text
    neg = False
    if s[:1] in ("-", "+"):
        neg = s[0] == "-"
        s = s[1:]
    if s[:1] != "P":
        raise bad
    s = s[1:]
    date_part, t, time_part = s.partition("T")
    if not date_part and not t:
        raise bad
    if t and not time_part:
        raise bad
    total = 0
    if date_part:
        if date_part[-1] != "D" or not _ascii_digits(date_part[:-1]):
            raise bad
        total += text_int(date_part[:-1]) * _NANOS_PER_DAY
    rest = time_part
    for unit, scale in (("H", 3600 * NANOS_PER_SECOND), ("M", 60 * NANOS_PER_SECOND)):
        i = rest.find(unit)
        if i >= 0:
            num = rest[:i]
            if not _ascii_digits(num):
                raise bad
            total += text_int(num) * scale
            rest = rest[i + 1:]
    if rest:
        if rest[-1] != "S":
            raise bad
        num = rest[:-1]
        whole, point, frac = num.partition(".")
        if not _ascii_digits(whole) or (point and not (_ascii_digits(frac) and len(frac) <= 9)):
            raise bad
        total += text_int(whole) * NANOS_PER_SECOND
        if frac:
            total += int(frac.ljust(9, "0"))
    return Duration(-total if neg else total)


def instant_text(i: Instant) -> str:
    """RFC 3339 in UTC: `2026-01-01T00:00:00Z`, `2026-01-01T00:00:00.5Z` (fraction only when
    non-zero, up to 9 digits, no trailing zeros). ValueError outside years 0001 to 9999."""
    n = i.nanos
    if not INSTANT_MIN_NANOS <= n <= INSTANT_MAX_NANOS:
        raise ValueError(f"Instant out of range (years 0001 to 9999): {n} ns")
    secs, f = divmod(n, NANOS_PER_SECOND)
    days, sod = divmod(secs, 86_400)
    date = datetime.date.fromordinal(_EPOCH_ORDINAL + days)
    hh, rem = divmod(sod, 3600)
    mm, ss = divmod(rem, 60)
    frac = "." + f"{f:09d}".rstrip("0") if f else ""
    return f"{date.year:04d}-{date.month:02d}-{date.day:02d}T{hh:02d}:{mm:02d}:{ss:02d}{frac}Z"


def parse_instant(text: str) -> Instant:
    """The Instant an RFC 3339 date-time writes, or ValueError.

    `YYYY-MM-DDTHH:MM:SS[.fffffffff](Z|+HH:MM|-HH:MM)`; `t` and `z` may be lower-case. An offset
    is converted to UTC. Leap seconds (`:60`), more than 9 fractional digits, and instants outside
    years 0001 to 9999 (after conversion to UTC) are refused.
    """
    bad = ValueError(f"not an RFC 3339 date-time like \"2026-01-01T00:00:00Z\": {text!r}")
    s = text
    if len(s) < 20 or not s.isascii():
        raise bad
    if s[4] != "-" or s[7] != "-" or s[10] not in "Tt" or s[13] != ":" or s[16] != ":":
        raise bad
    parts = (s[0:4], s[5:7], s[8:10], s[11:13], s[14:16], s[17:19])
    if not all(p.isdigit() for p in parts):
        raise bad
    year, month, day, hh, mm, ss = map(int, parts)
    rest = s[19:]
    frac_nanos = 0
    if rest[:1] == ".":
        j = 1
        while j < len(rest) and rest[j].isdigit():
            j += 1
        frac = rest[1:j]
        if not frac or len(frac) > 9:
            raise bad
        frac_nanos = int(frac.ljust(9, "0"))
        rest = rest[j:]
    if rest in ("Z", "z"):
        offset = 0
    elif len(rest) == 6 and rest[0] in "+-" and rest[3] == ":" and rest[1:3].isdigit() and rest[4:6].isdigit():
        oh, om = int(rest[1:3]), int(rest[4:6])
        if oh > 23 or om > 59:
            raise bad
        offset = (oh * 60 + om) * 60 * (1 if rest[0] == "+" else -1)
    else:
        raise bad
    if hh > 23 or mm > 59 or ss > 59:
        raise bad
    try:
        ordinal = datetime.date(year, month, day).toordinal()
    except ValueError:
        raise bad from None
    secs = (ordinal - _EPOCH_ORDINAL) * 86_400 + hh * 3600 + mm * 60 + ss - offset
    nanos = secs * NANOS_PER_SECOND + frac_nanos
    if not INSTANT_MIN_NANOS <= nanos <= INSTANT_MAX_NANOS:
        raise ValueError(f"instant out of range (years 0001 to 9999 in UTC): {text!r}")
    return Instant(nanos)


def bytes_text(b: bytes) -> str:
    """Standard base64 with padding."""
    return base64.b64encode(b).decode("ascii")


def parse_bytes(text: str) -> bytes:
    """The bytes a standard base64 text (with padding) writes, or ValueError."""
    if len(text) % 4 or not text.isascii():
        raise ValueError("not base64 (standard alphabet, with padding)")
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise ValueError("not base64 (standard alphabet, with padding)") from None


_JSON_ESCAPES = {i: f"\\u{i:04x}" for i in range(0x20)}
_JSON_ESCAPES.update({0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n",
                      0x0C: "\\f", 0x0D: "\\r"})


def json_string(s: str) -> str:
    """`s` as a JSON string literal, escaped exactly as the canonical writer escapes it (`"`, `\\`,
    and control characters below U+0020; everything else written as itself)."""
    return '"' + s.translate(_JSON_ESCAPES) + '"'


def has_surrogate(s: str) -> bool:
    """Whether `s` holds a lone surrogate (so it is not Text: Text is Unicode scalar values)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# ---------------------------------------------------------------------------------------------
# The value-directed canonical JSON text, and order keys


def value_json(v) -> str:
    """The canonical JSON text of `v`, derived from the value alone.

    It equals the ABI's type-directed canonical encoding (flowrt.codec.canonical) for every value,
    with one exception the value cannot decide: an empty Dict is written `{}` here, while the ABI
    writes `[]` for an empty Dict whose keys are not Text. Used to order values of the types that
    are not Ord.
    """
    out: list = []
    _vj(v, out)
    return "".join(out)


def _vj(v, out):
    t = type(v)
    if t is str:
        out.append(json_string(v))
    elif t is bool:
        out.append("true" if v else "false")
    elif t is int:
        out.append(int_text(v))
    elif v is None:
        out.append("null")
    elif t is FlowDecimal:
        out.append('"' + decimal_text(v) + '"')
    elif t is tuple and (record := record_type_of(v)) is not None:
        out.append("{" + ",".join(json_string(n) + ":" + value_json(x)
                                  for n, x in sorted(zip(record.flow_fields, v[1:]), key=_first)) + "}")
    elif t is tuple or t is ListView:
        out.append("[")
        first = True
        for x in v:
            if not first:
                out.append(",")
            first = False
            _vj(x, out)
        out.append("]")
    elif t is bytes:
        out.append('"' + bytes_text(v) + '"')
    elif t is Duration:
        out.append('"' + duration_text(v) + '"')
    elif t is Instant:
        out.append('"' + instant_text(v) + '"')
    elif t is Token:
        out.append(json_string(v.token))
    elif t is FlowSet:
        out.append("[" + ",".join(sorted(value_json(x) for x in v._items)) + "]")
    elif t is FlowDict:
        if v._ks and all(type(k) is str for k in v._ks):
            out.append("{" + ",".join(json_string(k) + ":" + value_json(x)
                                      for k, x in zip(v._ks, v._vs)) + "}")
        elif not v._ks:
            out.append("{}")
        else:
            pairs = sorted((value_json(k), value_json(x)) for k, x in zip(v._ks, v._vs))
            out.append("[" + ",".join(f"[{k},{x}]" for k, x in pairs) + "]")
    else:
        if getattr(t, "flow_kind", None) == "enum":
            _vj_enum(v, t, out)
        else:
            raise TypeError(f"not a Flow data value: {type(v).__name__}")


def _first(pair):
    return pair[0]


def _vj_option(v, out, tagged):
    if v[0] == "None":
        out.append('"None"' if tagged else "null")
        return
    x = v[1]
    if tagged:
        out.append('{"Some":')
        _vj(x, out)
        out.append("}")
    elif is_option(x):
        _vj_option(x, out, True)
    elif x is None or is_json_value(x):
        out.append('{"Some":')
        _vj(x, out)
        out.append("}")
    else:
        _vj(x, out)


def _vj_json(v, out):
    tag = v[0]
    if tag == "Null":
        out.append("null")
    elif tag == "Bool":
        out.append("true" if v[1] else "false")
    elif tag == "Number":
        out.append(decimal_text(v[1]))
    elif tag == "String":
        out.append(json_string(v[1]))
    elif tag == "Array":
        out.append("[")
        first = True
        for x in v[1]:
            if not first:
                out.append(",")
            first = False
            _vj_json(x, out)
        out.append("]")
    else:
        d = v[1]
        out.append("{")
        first = True
        for k, x in zip(d._ks, d._vs):
            if not first:
                out.append(",")
            first = False
            out.append(json_string(k) + ":")
            _vj_json(x, out)
        out.append("}")


def _vj_enum(v, t, out):
    ident = t.flow_identity
    if ident == OPTION_ID:
        _vj_option(v, out, False)
        return
    if ident == JSON_VALUE_ID:
        _vj_json(v, out)
        return
    tag = v[0]
    form, names, _ = t.flow_ctors[tag]
    if form == "bare":
        out.append(json_string(tag))
        return
    out.append("{" + json_string(tag) + ":")
    if form == "named":
        out.append("{" + ",".join(json_string(n) + ":" + value_json(x)
                                  for n, x in sorted(zip(names, v[1:]), key=_first)) + "}")
    elif len(v) == 2:
        _vj(v[1], out)
    else:
        out.append("[" + ",".join(value_json(x) for x in v[1:]) + "]")
    out.append("}")


def order_key(v):
    """A key for `v` whose Python ordering is Flow's order on values of `v`'s type.

    Ord types: Int and Decimal numerically, Text by code point, `false < true`, Bytes bytewise,
    Duration and Instant by nanoseconds, Unit (one value), lists and tuples item by item (a prefix
    first), Option with `None` before every `Some` and `Some` by payload. Other data values
    (records, enums, sets, dicts) by their canonical JSON text (`value_json`); host tokens by
    token. Keys of values of one Flow type are always comparable with each other; equal keys
    mean equal values.
    """
    t = type(v)
    if t is str or t is int or t is FlowDecimal or t is bool or t is bytes:
        return v
    if t is tuple or t is ListView:
        if t is tuple and v and type(v[0]) is object:  # a record: record_type_of's test, inline in a sort key
            return value_json(v)
        return tuple(map(order_key, v))
    if t is Duration or t is Instant:
        return v.nanos
    if v is None:
        return 0
    if t is Token:
        return v.token
    if getattr(t, "flow_identity", None) == OPTION_ID:
        return () if v[0] == "None" else (order_key(v[1]),)
    if t is FlowSet or t is FlowDict or getattr(t, "flow_kind", None) == "enum":
        return value_json(v)
    raise TypeError(f"not a Flow data value: {type(v).__name__}")


# ---------------------------------------------------------------------------------------------
# Sets and dicts


class FlowSet:
    """An immutable set of Flow values, iterated in `order_key` order.

    Build with `FlowSet.from_iterable(xs)` (or `FlowSet(xs)`); elements are unique by Flow
    equality (for equal elements, the first one given is kept).
    """

    __slots__ = ("_keys", "_items")

    def __init__(self, iterable=()):
        keys, items = _sorted_unique(iterable, keep_last=False)
        self._keys = keys
        self._items = items

    @classmethod
    def from_iterable(cls, iterable) -> "FlowSet":
        """The set of the values in `iterable`."""
        return cls(iterable)

    @classmethod
    def _make(cls, keys: tuple, items: tuple) -> "FlowSet":
        """Trusted: `keys` are the order keys of `items`, sorted and unique."""
        s = object.__new__(cls)
        s._keys = keys
        s._items = items
        return s

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __bool__(self):
        return bool(self._items)

    def _find(self, x):
        try:
            k = order_key(x)
            i = bisect_left(self._keys, k)
            found = i < len(self._keys) and self._keys[i] == k
        except TypeError:
            return -1, None, False
        return i, k, found

    def __contains__(self, x):
        return self._find(x)[2]

    def to_tuple(self) -> tuple:
        """The elements in order, as a Flow list."""
        return self._items

    def with_(self, x) -> "FlowSet":
        """This set with `x` added."""
        i, k, found = self._find(x)
        if found:
            return self
        if k is None:
            k = order_key(x)  # raise the TypeError for a non-value
        return FlowSet._make(self._keys[:i] + (k,) + self._keys[i:],
                             self._items[:i] + (x,) + self._items[i:])

    def without(self, x) -> "FlowSet":
        """This set with `x` removed."""
        i, _, found = self._find(x)
        if not found:
            return self
        return FlowSet._make(self._keys[:i] + self._keys[i + 1:], self._items[:i] + self._items[i + 1:])

    def union(self, other: "FlowSet") -> "FlowSet":
        """The elements of either set (equal elements: this set's)."""
        if not other._items:
            return self
        if not self._items:
            return other
        pairs = list(zip(self._keys, self._items))
        pairs.extend(zip(other._keys, other._items))
        pairs.sort(key=_first)
        keys, items = _dedupe(pairs, keep_last=False)
        return FlowSet._make(keys, items)

    def intersection(self, other: "FlowSet") -> "FlowSet":
        """The elements of this set that are also in `other`."""
        ok_, oi = other._keys, len(other._keys)
        keys, items = [], []
        for k, x in zip(self._keys, self._items):
            i = bisect_left(ok_, k)
            if i < oi and ok_[i] == k:
                keys.append(k)
                items.append(x)
        return FlowSet._make(tuple(keys), tuple(items))

    def difference(self, other: "FlowSet") -> "FlowSet":
        """The elements of this set that are not in `other`."""
        ok_, oi = other._keys, len(other._keys)
        keys, items = [], []
        for k, x in zip(self._keys, self._items):
            i = bisect_left(ok_, k)
            if not (i < oi and ok_[i] == k):
                keys.append(k)
                items.append(x)
        return FlowSet._make(tuple(keys), tuple(items))

    def issubset(self, other: "FlowSet") -> bool:
        """Whether every element of this set is in `other`."""
        return len(self.difference(other)) == 0

    def __eq__(self, other):
        if type(other) is FlowSet:
            return self._items == other._items
        return NotImplemented

    def __ne__(self, other):
        if type(other) is FlowSet:
            return self._items != other._items
        return NotImplemented

    def __hash__(self):
        return hash(("FlowSet", self._items))

    def __repr__(self):
        return f"FlowSet([{', '.join(map(repr, self._items))}])"

    def __reduce__(self):
        return (FlowSet, (self._items,))


class FlowDict:
    """An immutable map of Flow values, iterated in `order_key` order of its keys.

    Build with `FlowDict.from_pairs(pairs)` (later pairs win) or `FlowDict(pairs)`.
    `get(k)` returns `MISSING` for an absent key.
    """

    __slots__ = ("_keys", "_ks", "_vs")

    def __init__(self, pairs=()):
        pairs = list(pairs)
        keys, ks = _sorted_unique([k for k, _ in pairs], keep_last=True, payload=pairs)
        self._keys = keys
        self._ks = tuple(k for k, _ in ks)
        self._vs = tuple(v for _, v in ks)

    @classmethod
    def from_pairs(cls, pairs) -> "FlowDict":
        """The dict of `(key, value)` pairs; for equal keys the later pair wins."""
        return cls(pairs)

    @classmethod
    def _make(cls, keys: tuple, ks: tuple, vs: tuple) -> "FlowDict":
        """Trusted: `keys` are the order keys of `ks`, sorted and unique; `vs` their values."""
        d = object.__new__(cls)
        d._keys = keys
        d._ks = ks
        d._vs = vs
        return d

    def _find(self, k):
        try:
            key = order_key(k)
            i = bisect_left(self._keys, key)
            found = i < len(self._keys) and self._keys[i] == key
        except TypeError:
            return -1, None, False
        return i, key, found

    def get(self, k, default=MISSING):
        """The value for `k`, or `default` (MISSING) when there is none."""
        i, _, found = self._find(k)
        return self._vs[i] if found else default

    def __contains__(self, k):
        return self._find(k)[2]

    def set(self, k, v) -> "FlowDict":
        """This dict with `k` mapped to `v` (replacing any value it had)."""
        i, key, found = self._find(k)
        if key is None:
            key = order_key(k)  # raise the TypeError for a non-value
        if found:
            return FlowDict._make(self._keys, self._ks[:i] + (k,) + self._ks[i + 1:],
                                  self._vs[:i] + (v,) + self._vs[i + 1:])
        return FlowDict._make(self._keys[:i] + (key,) + self._keys[i:],
                              self._ks[:i] + (k,) + self._ks[i:], self._vs[:i] + (v,) + self._vs[i:])

    def remove(self, k) -> "FlowDict":
        """This dict without `k`."""
        i, _, found = self._find(k)
        if not found:
            return self
        return FlowDict._make(self._keys[:i] + self._keys[i + 1:], self._ks[:i] + self._ks[i + 1:],
                              self._vs[:i] + self._vs[i + 1:])

    def keys(self) -> tuple:
        """The keys, in order."""
        return self._ks

    def values(self) -> tuple:
        """The values, in key order."""
        return self._vs

    def items(self) -> tuple:
        """The `(key, value)` pairs, in key order (a Flow list of tuples)."""
        return tuple(zip(self._ks, self._vs))

    def __iter__(self):
        return iter(self._ks)

    def __len__(self):
        return len(self._ks)

    def __bool__(self):
        return bool(self._ks)

    def __eq__(self, other):
        if type(other) is FlowDict:
            return self._ks == other._ks and self._vs == other._vs
        return NotImplemented

    def __ne__(self, other):
        if type(other) is FlowDict:
            return not (self._ks == other._ks and self._vs == other._vs)
        return NotImplemented

    def __hash__(self):
        return hash(("FlowDict", self._ks, self._vs))

    def __repr__(self):
        return f"FlowDict([{', '.join(f'({k!r}, {v!r})' for k, v in zip(self._ks, self._vs))}])"

    def __reduce__(self):
        return (FlowDict, (tuple(zip(self._ks, self._vs)),))


def _dedupe(pairs, keep_last):
    """Keys and items of (key, item) pairs sorted by key, one per run of equal keys."""
    keys, items = [], []
    for k, x in pairs:
        if keys and keys[-1] == k:
            if keep_last:
                items[-1] = x
            continue
        keys.append(k)
        items.append(x)
    return tuple(keys), tuple(items)


def _sorted_unique(values, keep_last, payload=None):
    """Sort `values` by order key (stably) and drop equal ones: the first of each run, or the
    last with `keep_last`. Returns (keys, items), items being `payload[i]` when given."""
    values = list(values)
    items = values if payload is None else payload
    pairs = [(order_key(v), x) for v, x in zip(values, items)]
    pairs.sort(key=_first)
    return _dedupe(pairs, keep_last)


EMPTY_SET = FlowSet()
EMPTY_DICT = FlowDict()
