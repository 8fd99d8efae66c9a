"""The runtime names generated code may use (`rt_*`), inside the sandbox.

Everything here is trusted code: it runs in the child next to the generated modules and is handed
to them as globals by the loader. Effects are requests `yield`ed to the scheduler (`scheduler.py`):
generated code never talks to the host itself.
"""

from __future__ import annotations

import base64
from itertools import islice as _islice

from flowdata import canonical
from flowdata import values as V
from flowdata.flowdecimal import FlowDecimal
from sandbox.typeargs import instantiate

# Decimal `+ - *` are FlowDecimal's own operators (exact); `/` and `%` are below. A result beyond
# the limits raises V.DecimalOverLimit, which the child turns into a `limit` fault.


class Fault(Exception):
    """A Flow fault: never caught by Flow code, it ends the run as Faulted."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def rt_fault(kind: str, message: str):
    raise Fault(kind, message)


# ---- tail calls --------------------------------------------------------------------------------


class Tail:
    """A tail call handed back to the caller: the callee and its arguments."""

    __slots__ = ("fn", "args")

    def __init__(self, fn, args: tuple) -> None:
        self.fn = fn
        self.args = args


#: An evaluation step. A run does not bound steps, so here it is the cheapest call there is (a C
#: builtin returning 0); `flow test` injects a counting one (sandbox/testing.py).
rt_step = int


def rt_bounce(result):
    """Run pure tail calls until a value comes back (constant stack)."""
    while type(result) is Tail:
        result = result.fn(*result.args)
    return result


def rt_bouncing(fn):
    """A top-level pure function as a value: callers get values, never Tail."""
    def call(*args):
        return rt_bounce(fn(*args))
    return call


ENTER = ("enter",)


def rt_run(generator):
    """Drive a Tool-capable call to its value, bouncing tail calls (a generator). The call owns
    the tasks spawned while it runs: when it returns, the scheduler stops those still running,
    except the ones it hands back."""
    yield ENTER
    result = yield from generator
    result = yield from _settle(result)
    return (yield ("leave", result))


def _settle(result):
    """Follow tail calls, running the generators they start, to a value."""
    while type(result) is Tail:
        result = result.fn(*result.args)
        if _is_generator(result):
            result = yield from result
    return result


def _is_generator(value) -> bool:
    return type(value).__name__ == "generator"


def rt_fcall(fn, args: tuple):
    """Call a function value whose type may make Tool calls: it may be pure or a generator."""
    result = fn(*args)
    if not _is_generator(result) and type(result) is not Tail:
        return result  # a pure function: it spawns nothing
    yield ENTER
    if _is_generator(result):
        result = yield from result
    result = yield from _settle(result)
    return (yield ("leave", result))


def rt_finish(generator):
    """Run a generator that is known not to make Tool calls here (an effect variable bound to
    pure at this call) to its value."""
    try:
        while True:
            next(generator)
            raise Fault("internal", "a call typed pure asked for an effect")
    except StopIteration as done:
        return rt_bounce(done.value)


# ---- values ------------------------------------------------------------------------------------

def rt_record_tag(identity: str, fields: tuple) -> object:
    """The tag generated code builds records with, `(tag, *fields)` (flowdata.values.RecordType)."""
    return V.record_type(identity, fields).tag


rt_enum_type = V.enum_type
rt_Some = V.some
rt_None = V.NONE
rt_Ok = V.ok
rt_Err = V.err
rt_Failed = V.failed
rt_NotRun = V.not_run
rt_Unknown = V.unknown
rt_BadReply = V.bad_reply
rt_len = len
rt_rest = V.rest_of


def rt_cursor(xs) -> tuple[tuple, int, int]:
    """A list as (items, start, end), for a loop that walks it by index (flowc/listloop.py)."""
    if type(xs) is V.ListView:
        base = xs.base
        return base, xs.start, len(base)
    return xs, 0, len(xs)


def rt_items_from(items: tuple, at: int):
    """The items of a list from index `at` on, for a loop that iterates them (flowc/loops.py)."""
    return items if at == 0 else _islice(items, at, None)


#: A Flow list from the Python list a `list.map` or `list.filter` written out as a loop filled
#: (flowc/inline_lists.py); the list never escapes the loop's function.
rt_list = tuple


def rt_ctor(cls, tag: str):
    """A constructor: the value itself for a bare one, else a function building the value."""
    form, names, _ = cls.flow_ctors[tag]
    if form == "bare":
        return cls.flow_bare[tag]
    new = tuple.__new__

    def make(*payload):
        return new(cls, (tag,) + payload)

    make.__name__ = tag
    return make


def rt_token(identity: str, token: str) -> V.Token:
    """A host value made by a fake: `Page("tab-1")`."""
    return V.Token(identity, token)


def rt_dec(text: str) -> FlowDecimal:
    return V.parse_decimal(text)


def rt_duration(nanos: str) -> V.Duration:
    return V.Duration(int(nanos))


def rt_bigint(text: str) -> int:
    return V.text_int(text)


def rt_idiv(a: int, b: int) -> int:
    """Int division truncating toward zero (Python's `//` floors)."""
    if b == 0:
        raise Fault("division-by-zero", "division by zero")
    q = a // b
    if q < 0 and q * b != a:
        q += 1
    return q


def rt_imod(a: int, b: int) -> int:
    """Int remainder with the dividend's sign (Python's `%` takes the divisor's)."""
    if b == 0:
        raise Fault("division-by-zero", "remainder of a division by zero")
    r = a % b
    if r and (a < 0) != (b < 0):
        r -= b
    return r


def rt_ddiv(a: FlowDecimal, b: FlowDecimal) -> FlowDecimal:
    try:  # the divisor's zero check is divide's own (one check per division, not two)
        return a.divide(b)
    except ZeroDivisionError:
        raise Fault("division-by-zero", "division by zero") from None


def rt_dmod(a: FlowDecimal, b: FlowDecimal) -> FlowDecimal:
    try:
        return a.remainder(b)
    except ZeroDivisionError:
        raise Fault("division-by-zero", "remainder of a division by zero") from None


def rt_show(value) -> str:
    """A value as interpolated text: Text as it is; anything else as its canonical JSON text,
    a JSON string without its quotes."""
    if type(value) is str:
        return value
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is int:
        return V.int_text(value)
    plain = to_json(value)
    if isinstance(plain, str):
        return plain
    return canonical.dumps(plain).decode("utf-8")


def to_json(value, option_nested: bool = False):
    """The encoding of a value from the value alone (values carry their record and enum
    descriptions; List and tuple encode alike)."""
    if value is None:
        return None
    kind = type(value)
    if kind is bool or kind is str or kind is int:
        return value
    if kind is FlowDecimal:
        return V.decimal_text(value)
    if kind is bytes:
        return base64.b64encode(value).decode("ascii")
    if kind is V.Duration:
        return V.duration_text(value)
    if kind is V.Instant:
        return V.instant_text(value)
    if kind is V.Token:
        return value.token
    if kind is V.FlowSet:
        items = [to_json(x) for x in value]
        return sorted(items, key=canonical.dumps)
    if kind is V.FlowDict:
        if all(type(k) is str for k in value.keys()):
            return {k: to_json(v) for k, v in value.items()}
        pairs = [[to_json(k), to_json(v)] for k, v in value.items()]
        return sorted(pairs, key=lambda p: canonical.dumps(p[0]))
    record = V.record_type_of(value)
    if record is not None:
        return {name: to_json(v) for name, v in zip(record.flow_fields, value[1:])}
    if getattr(kind, "flow_kind", None) == "enum":
        tag = value[0]
        if kind.flow_identity == V.OPTION_ID:
            if tag == "None":
                return "None" if option_nested else None
            inner = value[1]
            encoded = to_json(inner, option_nested=True)
            return {"Some": encoded} if option_nested else encoded
        if kind.flow_identity == V.JSON_VALUE_ID:
            return _json_value(value)
        form, names, _ = kind.flow_ctors[tag]
        if form == "bare":
            return tag
        if form == "named":
            return {tag: {n: to_json(v) for n, v in zip(names, value[1:])}}
        payload = value[1:]
        if len(payload) == 1:
            return {tag: to_json(payload[0])}
        return {tag: [to_json(v) for v in payload]}
    if kind is tuple or kind is V.ListView:
        return [to_json(v) for v in value]
    raise Fault("internal", f"cannot encode a {kind.__name__}")


def _json_value(value):
    tag = value[0]
    if tag == "Null":
        return None
    if tag == "Array":
        return [_json_value(v) for v in value[1]]
    if tag == "Object":
        return {k: _json_value(v) for k, v in value[1].items()}
    if tag == "Number":
        return value[1]
    return value[1]


# ---- Tools -------------------------------------------------------------------------------------


class ToolDesc:
    __slots__ = ("identity", "params")

    def __init__(self, identity: str, params: tuple) -> None:
        self.identity = identity
        self.params = params


def rt_tool(identity: str, params: tuple) -> ToolDesc:
    return ToolDesc(identity, params)


class TypeArg:
    """A concrete type argument at run time: its term and `$defs`."""

    __slots__ = ("term", "defs")

    def __init__(self, term, defs) -> None:
        self.term = term
        self.defs = defs


def rt_type(term, defs) -> TypeArg:
    return TypeArg(term, defs)


def rt_type_in(term, defs, names: tuple, targs: tuple) -> TypeArg:
    """A type that mentions the enclosing function's type parameters (`names`), at the concrete
    arguments it was called with (`targs`, flowc/runtypes.py)."""
    if len(term) == 1 and "Param" in term:
        for name, arg in zip(names, targs):
            if name == term["Param"]:
                return arg
    mapping = {name: (arg.term, arg.defs) for name, arg in zip(names, targs)}
    return TypeArg(*instantiate(term, defs, mapping))


def rt_typed(f, targs: tuple):
    """A function that takes its type arguments at run time, named as a value: they are bound."""
    def typed(*args):
        return f(*args, targs)
    typed.__name__ = getattr(f, "__name__", "typed")
    return typed


def rt_call(desc: ToolDesc, args: tuple, type_args: tuple = ()):
    """A Tool call: the scheduler records it, the host answers, the reply comes back decoded."""
    reply = yield ("call", desc, args, type_args)
    return reply


def rt_tool_fn(desc: ToolDesc, type_args: tuple = ()):
    """A Tool declaration used as a function value (a generic one at the value's type arguments)."""
    def call(*args):
        return (yield from rt_call(desc, args, type_args))
    call.__name__ = desc.identity
    return call


# ---- std@v1/task: requests to the scheduler ------------------------------------------------------


def i_task_spawn(f):
    return (yield ("spawn", f))


def i_task_spawn_parked(f, ctor):
    """A spawn whose work is one Tool call, optionally wrapped in `ctor` (identity, name, the
    constructor): such a task can be parked in a checkpoint."""
    return (yield ("spawn", f, ctor))


def i_task_wait(t):
    return (yield ("wait", t))


def i_task_first(ts):
    return (yield ("first", tuple(ts)))


def i_task_stop(t):
    return (yield ("stop", t))


TASK_INTRINSICS = {"i_task_spawn": i_task_spawn, "i_task_wait": i_task_wait, "i_task_first": i_task_first,
                   "i_task_stop": i_task_stop, "i_task_spawn_parked": i_task_spawn_parked}


def names() -> dict[str, object]:
    """Every `rt_*` name generated code may use."""
    return {name: value for name, value in globals().items() if name.startswith("rt_")} | {"rt_Tail": Tail}
