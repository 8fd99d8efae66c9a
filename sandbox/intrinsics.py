"""The intrinsic functions of Flow's standard library (`@intrinsic` in `flowc/std/v1/*.flow`).

One Python function per intrinsic, named `i_<module>_<name>` (`i_list_map`, `i_text_join`,
`i_json_decode`); the compiler emits calls to these names and the child injects `INTRINSICS`
into every generated module. Arguments arrive in declaration order as runtime values
(`flowdata.values`); results are runtime values (Option as `values.some(x)` / `values.NONE`,
Result as `values.ok` / `values.err`).

Effect-polymorphic intrinsics (a parameter typed `flow(...) -> U !e`) come twice:

- `i_list_map(xs, f)` is a plain function: `f` is a plain function, called as `f(x)`.
- `i_list_map_t(xs, f)` is a generator: each call is `yield from rt_fcall(f, args)`, so `f` may
  be pure or make Tool calls; the result comes back with `return`.

Both versions call the function arguments in exactly the order the std docs give (list order,
key order for dicts), and stop where the docs say they stop (`find`, `any`, `all`).

The typed intrinsics `json.decode<T>` and `json.from_value<T>` get a `sandbox.runtime.TypeArg`
as an extra first argument. The task intrinsics (`spawn`, `wait`, `first`, `stop`) belong to the
scheduler and are not here (`SCHEDULER_INTRINSICS`).

Faults (`sandbox.runtime.Fault(kind, message)`), see also docs/intrinsics.md:

- `limit`: a result beyond the implementation's limits: an Int over `MAX_INT_DIGITS` decimal
  digits (`text.to_int`, `decimal.truncate/floor/ceil`, `duration.from_nanos`,
  `duration.parse`), a Decimal whose exponent is beyond the signed 64-bit range or with more than
  100,000 significant digits (`decimal.parse`, `decimal.round`), an Instant outside years 0001 to 9999 (`instant.from_unix_nanos`), a list or
  text over `MAX_BUILD_SIZE` items (`list.range`, `text.repeat`).
- `invalid-argument`: an argument the docs say faults that is none of the above
  (`list.chunks` with a size of zero or less).
- `internal`: a malformed type argument handed to `json.decode` / `json.from_value` (a compiler
  bug, never a program's fault).

Determinism: nothing here reads the clock, randomness, the locale or the environment, and
nothing depends on hash order (Python sets are used for membership only). Text functions work
on code points; `lower` / `upper` are Python's `str.lower` / `str.upper`, which implement the
Unicode default (full, locale-independent) case conversion of the Unicode version CPython ships.
"""

from __future__ import annotations

import re

from flowdata import codec
from flowdata import values as V
from flowdata.bigint import _pow10, over_limit
from flowdata.flowdecimal import ZERO, FlowDecimal, _ndigits
from sandbox.runtime import Fault, TypeArg, rt_fcall, to_json

__all__ = ["INTRINSICS", "SCHEDULER_INTRINSICS", "MAX_BUILD_SIZE", "WHITESPACE", "missing"]

#: The intrinsics the task scheduler implements (std@v1/task); `missing` does not report them.
SCHEDULER_INTRINSICS = frozenset({"i_task_spawn", "i_task_wait", "i_task_first", "i_task_stop"})

#: The largest list or text `list.range` and `text.repeat` build (items or code points). Larger
#: requests fault (`limit`) at once instead of exhausting memory.
MAX_BUILD_SIZE = 1 << 30

#: Unicode's White_Space property (PropList.txt), what `text.trim*` removes. Python's
#: `str.isspace` differs (it also counts U+001C..U+001F), so the set is spelled out.
WHITESPACE = (
    "\u0009\u000a\u000b\u000c\u000d\u0020\u0085\u00a0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)

_NONE = V.NONE
_some = V.some
_ok = V.ok
_err = V.err
_order_key = V.order_key

def _check_int(n: int, what: str) -> int:
    """`n`, or a `limit` fault when it has more than MAX_INT_DIGITS decimal digits."""
    if over_limit(n):
        raise Fault("limit", f"{what}: an Int over the limit of {V.MAX_INT_DIGITS} decimal digits")
    return n


def _check_size(n: int, what: str) -> None:
    if n > MAX_BUILD_SIZE:
        raise Fault("limit", f"{what}: {n} items is over the limit of {MAX_BUILD_SIZE}")


# =============================================================================================
# std@v1/list


def i_list_length(xs):
    return len(xs)


def i_list_get(xs, i):
    if 0 <= i < len(xs):
        return _some(xs[i])
    return _NONE


def i_list_range(start, end):
    if end <= start:
        return ()
    _check_size(end - start, "list.range")
    return tuple(range(start, end))


def i_list_map(xs, f):
    return tuple([f(x) for x in xs])


def i_list_map_t(xs, f):
    out = []
    for x in xs:
        out.append((yield from rt_fcall(f, (x,))))
    return tuple(out)


def i_list_filter(xs, keep):
    return tuple([x for x in xs if keep(x)])


def i_list_filter_t(xs, keep):
    out = []
    for x in xs:
        if (yield from rt_fcall(keep, (x,))):
            out.append(x)
    return tuple(out)


def i_list_fold(xs, init, f):
    acc = init
    for x in xs:
        acc = f(acc, x)
    return acc


def i_list_fold_t(xs, init, f):
    acc = init
    for x in xs:
        acc = yield from rt_fcall(f, (acc, x))
    return acc


def i_list_concat(xss):
    out = []
    for xs in xss:
        out.extend(xs)
    return tuple(out)


def i_list_sort(xs):
    return tuple(sorted(xs, key=_order_key))


def _sorted_by_keys(xs, keys):
    order = sorted(range(len(xs)), key=lambda i: keys[i])  # stable: equal keys keep list order
    return tuple([xs[i] for i in order])


def i_list_sort_by(xs, key):
    keys = [_order_key(key(x)) for x in xs]
    return _sorted_by_keys(xs, keys)


def i_list_sort_by_t(xs, key):
    keys = []
    for x in xs:
        keys.append(_order_key((yield from rt_fcall(key, (x,)))))
    return _sorted_by_keys(xs, keys)


def i_list_reverse(xs):
    return xs[::-1]


def i_list_find(xs, p):
    for x in xs:
        if p(x):
            return _some(x)
    return _NONE


def i_list_find_t(xs, p):
    for x in xs:
        if (yield from rt_fcall(p, (x,))):
            return _some(x)
    return _NONE


def i_list_any(xs, p):
    for x in xs:
        if p(x):
            return True
    return False


def i_list_any_t(xs, p):
    for x in xs:
        if (yield from rt_fcall(p, (x,))):
            return True
    return False


def i_list_all(xs, p):
    for x in xs:
        if not p(x):
            return False
    return True


def i_list_all_t(xs, p):
    for x in xs:
        if not (yield from rt_fcall(p, (x,))):
            return False
    return True


def i_list_partition(xs, p):
    yes, no = [], []
    for x in xs:
        (yes if p(x) else no).append(x)
    return (tuple(yes), tuple(no))


def i_list_partition_t(xs, p):
    yes, no = [], []
    for x in xs:
        if (yield from rt_fcall(p, (x,))):
            yes.append(x)
        else:
            no.append(x)
    return (tuple(yes), tuple(no))


def i_list_contains(xs, x):
    return x in xs


def i_list_take(xs, n):
    if n <= 0:
        return ()
    return xs[:n]


def i_list_drop(xs, n):
    if n <= 0:
        return xs
    return xs[n:]


def i_list_chunks(xs, size):
    if size <= 0:
        raise Fault("invalid-argument", f"list.chunks: the size must be at least 1, not {V.int_text(size)}")
    return tuple([xs[i:i + size] for i in range(0, len(xs), size)])


def i_list_zip(xs, ys):
    return tuple(zip(xs, ys))


def i_list_unique(xs):
    seen = set()
    out = []
    for x in xs:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return tuple(out)


# =============================================================================================
# std@v1/text

_INT_TEXT = re.compile(r"-?[0-9]+")


def i_text_length(t):
    return len(t)


def i_text_join(xs, sep):
    return sep.join(xs)


def i_text_split(t, sep):
    if sep == "":
        return tuple(t)
    return tuple(t.split(sep))


def i_text_lines(t):
    if t == "":
        return ()
    parts = t.split("\n")
    last = parts.pop()
    out = [p[:-1] if p.endswith("\r") else p for p in parts]
    if last != "":
        out.append(last)
    return tuple(out)


def i_text_chars(t):
    return tuple(t)


def i_text_trim(t):
    return t.strip(WHITESPACE)


def i_text_trim_start(t):
    return t.lstrip(WHITESPACE)


def i_text_trim_end(t):
    return t.rstrip(WHITESPACE)


def i_text_lower(t):
    return t.lower()


def i_text_upper(t):
    return t.upper()


def i_text_contains(t, needle):
    return needle in t


def i_text_starts_with(t, prefix):
    return t.startswith(prefix)


def i_text_ends_with(t, suffix):
    return t.endswith(suffix)


def i_text_index_of(t, needle):
    i = t.find(needle)
    return _NONE if i < 0 else _some(i)


def i_text_replace(t, old, new):
    if old == "":
        return t
    return t.replace(old, new)


def i_text_slice(t, start, end):
    n = len(t)
    s = 0 if start < 0 else (n if start > n else start)
    e = 0 if end < 0 else (n if end > n else end)
    if e <= s:
        return ""
    return t[s:e]


def i_text_repeat(t, n):
    if n <= 0 or t == "":
        return ""
    _check_size(len(t) * n, "text.repeat")
    return t * n


def i_text_from_int(n):
    return V.int_text(n)


def i_text_to_int(t):
    if not _INT_TEXT.fullmatch(t):
        return _NONE
    digits = t.lstrip("-").lstrip("0")
    if len(digits) > V.MAX_INT_DIGITS:
        raise Fault("limit", f"text.to_int: an Int over the limit of {V.MAX_INT_DIGITS} decimal digits")
    return _some(V.text_int(t))


def i_text_to_bytes(t):
    return t.encode("utf-8")


def i_text_from_bytes(b):
    try:
        return _some(b.decode("utf-8"))
    except UnicodeDecodeError:
        return _NONE


# =============================================================================================
# std@v1/dict


def i_dict_empty():
    return V.EMPTY_DICT


def i_dict_from_list(pairs):
    return V.FlowDict(pairs)


def i_dict_get(d, key):
    v = d.get(key)
    if v is V.MISSING:
        return _NONE
    return _some(v)


def i_dict_insert(d, key, value):
    return d.set(key, value)


def i_dict_remove(d, key):
    return d.remove(key)


def i_dict_contains(d, key):
    return key in d


def i_dict_size(d):
    return len(d)


def i_dict_keys(d):
    return d.keys()


def i_dict_values(d):
    return d.values()


def i_dict_entries(d):
    return d.items()


def i_dict_map_values(d, f):
    vs = tuple([f(v) for v in d.values()])
    return V.FlowDict._make(d._keys, d.keys(), vs)


def i_dict_map_values_t(d, f):
    vs = []
    for v in d.values():
        vs.append((yield from rt_fcall(f, (v,))))
    return V.FlowDict._make(d._keys, d.keys(), tuple(vs))


def i_dict_merge(a, b):
    if not b:
        return a
    if not a:
        return b
    return V.FlowDict(a.items() + b.items())


# =============================================================================================
# std@v1/set


def i_set_empty():
    return V.EMPTY_SET


def i_set_from_list(xs):
    return V.FlowSet(xs)


def i_set_to_list(s):
    return s.to_tuple()


def i_set_contains(s, x):
    return x in s


def i_set_insert(s, x):
    return s.with_(x)


def i_set_remove(s, x):
    return s.without(x)


def i_set_size(s):
    return len(s)


def i_set_union(a, b):
    return a.union(b)


def i_set_intersection(a, b):
    return a.intersection(b)


def i_set_difference(a, b):
    return a.difference(b)


# =============================================================================================
# std@v1/decimal

# What `decimal.parse` accepts: stricter than the ABI's text (no `+`, no `1.` or `.5`).
_DECIMAL_TEXT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def i_decimal_from_int(n):
    return FlowDecimal(n)


def i_decimal_to_text(d):
    return V.decimal_text(d)


def i_decimal_parse(t):
    if not t.isascii() or _DECIMAL_TEXT.fullmatch(t) is None:
        return _NONE
    try:
        return _some(V.parse_decimal(t))
    except ValueError as e:  # a well-formed number beyond the limits: the program's own value
        raise Fault("limit", f"decimal.parse: {e}") from None


def i_decimal_round(d, places):
    c, e = d.coef, d.exp
    p = -places  # round to a multiple of 10**p
    if not c or e >= p:
        return d  # already has no more than `places` fractional digits
    drop = p - e
    if drop > _ndigits(abs(c)):
        return ZERO  # |d| < 10**(p-1), less than half of 10**p
    unit = _pow10(drop)
    q, rest = divmod(abs(c), unit)
    if 2 * rest > unit or (2 * rest == unit and q % 2 == 1):
        q += 1
    try:
        return FlowDecimal.of(-q if c < 0 else q, p)
    except V.DecimalOverLimit:
        raise Fault("limit", "decimal.round: the result's exponent is beyond the signed 64-bit range") from None


def _to_int(d, mode, what):
    if d.coef and d.adjusted() >= V.MAX_INT_DIGITS:
        raise Fault("limit", f"{what}: an Int over the limit of {V.MAX_INT_DIGITS} decimal digits")
    return _check_int(d.to_integral(mode), what)


def i_decimal_truncate(d):
    return _to_int(d, "down", "decimal.truncate")


def i_decimal_floor(d):
    return _to_int(d, "floor", "decimal.floor")


def i_decimal_ceil(d):
    return _to_int(d, "ceiling", "decimal.ceil")


# =============================================================================================
# std@v1/duration


def i_duration_from_nanos(n):
    return V.Duration(_check_int(n, "duration.from_nanos"))


def i_duration_to_nanos(d):
    return d.nanos


def i_duration_to_text(d):
    return V.duration_text(d)


def i_duration_parse(t):
    try:
        d = V.parse_duration(t)
    except ValueError:
        return _NONE
    _check_int(d.nanos, "duration.parse")
    return _some(d)


# =============================================================================================
# std@v1/instant


def i_instant_from_unix_nanos(n):
    if not V.INSTANT_MIN_NANOS <= n <= V.INSTANT_MAX_NANOS:
        raise Fault("limit", f"instant.from_unix_nanos: {V.int_text(n)[:40]} ns from the Unix epoch is outside "
                             "the years 0001 to 9999")
    return V.Instant(n)


def i_instant_to_unix_nanos(i):
    return i.nanos


def i_instant_to_text(i):
    try:
        return V.instant_text(i)
    except ValueError as e:
        raise Fault("limit", f"instant.to_text: {e}") from None


def i_instant_parse(t):
    try:
        return _some(V.parse_instant(t))
    except ValueError:
        return _NONE


# =============================================================================================
# std@v1/json


def _internal(what, e):
    return Fault("internal", f"{what}: malformed type argument: {e}")


def i_json_encode(value, *typed):
    """`encode(value)`. Value-directed (`values.value_json`); if the compiler passes the type
    argument first (`i_json_encode(type_arg, value)`), type-directed (`codec.canonical`), which
    also writes an empty `Dict` whose keys are not Text as `[]` as the ABI does."""
    if typed and type(value) is TypeArg:
        ta, value = value, typed[0]
        try:
            return codec.canonical(value, ta.term, ta.defs).decode("utf-8")
        except (codec.TermError, codec.EncodeError) as e:
            raise _internal("json.encode", e) from None
    return V.value_json(value)


def i_json_decode(type_arg, text):
    try:
        return _ok(codec.decode_text(text, type_arg.term, type_arg.defs))
    except codec.DecodeError as e:
        return _err(str(e))
    except codec.TermError as e:
        raise _internal("json.decode", e) from None


def i_json_to_value(value, *typed):
    """`to_value(value)`: the json.Value tree `encode` writes. Like `i_json_encode`, takes an
    optional leading type argument."""
    if typed and type(value) is TypeArg:
        ta, value = value, typed[0]
        try:
            data = codec.encode(value, ta.term, ta.defs)
        except (codec.TermError, codec.EncodeError) as e:
            raise _internal("json.to_value", e) from None
    else:
        data = to_json(value)
    return codec.decode(data, "json.Value")


def i_json_from_value(type_arg, value):
    try:
        data = codec.encode(value, "json.Value")
    except codec.EncodeError as e:  # pragma: no cover - a json.Value built by Flow code is well formed
        raise Fault("internal", f"json.from_value: not a json.Value: {e}") from None
    try:
        return _ok(codec.decode(data, type_arg.term, type_arg.defs))
    except codec.DecodeError as e:
        return _err(str(e))
    except codec.TermError as e:
        raise _internal("json.from_value", e) from None


def i_json_parse(text):
    try:
        return _ok(codec.decode(codec.parse_json(text), "json.Value"))
    except codec.DecodeError as e:
        return _err(str(e))


def i_json_render(value):
    return V.value_json(value)


# =============================================================================================
# The table


INTRINSICS: dict[str, object] = {
    name: fn for name, fn in sorted(globals().items()) if name.startswith("i_") and callable(fn)
}


def missing(declared: list[str]) -> list[str]:
    """The names in `declared` (`i_<module>_<name>`, and `..._t` for effect-polymorphic ones)
    that have no implementation here, in the order given; the scheduler's task intrinsics
    (`SCHEDULER_INTRINSICS`) are not reported."""
    return [n for n in declared if n not in INTRINSICS and n not in SCHEDULER_INTRINSICS]
