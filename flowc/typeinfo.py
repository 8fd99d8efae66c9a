"""Questions about types that need the declarations: is it data, Eq, Ord; can it hold a function.

Declared types are expanded with their type arguments; recursion through a type's own
declaration is cut (a recursive occurrence adds nothing new to the answer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flowc import types as T

if TYPE_CHECKING:
    from flowc.resolve import Env

ALWAYS, MAYBE, NEVER = "always", "maybe", "never"


def _payloads(env: "Env", t: T.TCon) -> list[list[T.Type]] | None:
    """For a declared type: each constructor's (or the record's) component types, substituted.
    None for a host type or an unknown one."""
    info = env.types.get(t.name)
    if info is None or info.kind == "host":
        return None
    mapping = {p.name: a for p, a in zip(info.params, t.args)}
    if info.kind == "record":
        return [[T.substitute(f.type, mapping) for f in info.fields]]
    return [[T.substitute(x, mapping) for x in c.payload_types()] for c in info.ctors]


def is_data(env: "Env", t: T.Type, *, assume_params: bool = False, _seen: frozenset = frozenset()) -> bool:
    if isinstance(t, (T.TError, T.TVar)):
        return True
    if isinstance(t, T.TFun):
        return False
    if isinstance(t, T.TParam):
        return assume_params or _param_has(env, t, ("Data", "Eq", "Ord"))
    if isinstance(t, T.TTuple):
        return all(is_data(env, i, assume_params=assume_params, _seen=_seen) for i in t.items)
    assert isinstance(t, T.TCon)
    if t.name == "Task":
        return False
    if t in _seen:
        return True
    seen = _seen | {t}
    if not all(is_data(env, a, assume_params=assume_params, _seen=seen) for a in t.args):
        return False
    payloads = _payloads(env, t)
    if payloads is None:
        return True
    return all(is_data(env, x, assume_params=assume_params, _seen=seen) for p in payloads for x in p)


def is_ord(env: "Env", t: T.Type) -> bool:
    if isinstance(t, (T.TError, T.TVar)):
        return True
    if isinstance(t, T.TParam):
        return _param_has(env, t, ("Ord",))
    if isinstance(t, T.TTuple):
        return all(is_ord(env, i) for i in t.items)
    if isinstance(t, T.TCon):
        if t.name in T.ORDERED_SCALARS:
            return True
        if t.name in ("List", T.OPTION):
            return all(is_ord(env, a) for a in t.args)
    return False


def satisfies(env: "Env", t: T.Type, requirement: str) -> bool:
    if requirement == "Ord":
        return is_ord(env, t)
    return is_data(env, t)  # Eq and Data: every data type has structural equality


def holds_function(env: "Env", t: T.Type, _seen: frozenset = frozenset()) -> str:
    """Whether a value of this type always, maybe or never holds a function (checkpoint places)."""
    if isinstance(t, T.TFun):
        return ALWAYS
    if isinstance(t, (T.TError, T.TVar)):
        return NEVER
    if isinstance(t, T.TParam):
        return NEVER if _param_has(env, t, ("Data", "Eq", "Ord")) else MAYBE
    if isinstance(t, T.TTuple):
        return _all_of([holds_function(env, i, _seen) for i in t.items])
    assert isinstance(t, T.TCon)
    if t.name == "Task":
        return MAYBE  # a task parked on its only Tool call can be recorded; any other cannot
    if t.name in ("List", "Set", T.OPTION):
        return NEVER if holds_function(env, t.args[0], _seen) == NEVER else MAYBE
    if t.name == "Dict":
        return NEVER if all(holds_function(env, a, _seen) == NEVER for a in t.args) else MAYBE
    if t in _seen:
        return NEVER
    payloads = _payloads(env, t)
    if payloads is None:
        return NEVER
    seen = _seen | {t}
    per_case = [_all_of([holds_function(env, x, seen) for x in p]) for p in payloads]
    if not per_case:
        return NEVER
    if all(c == ALWAYS for c in per_case):
        return ALWAYS
    return NEVER if all(c == NEVER for c in per_case) else MAYBE


def _all_of(parts: list[str]) -> str:
    """Components held together (a record, a tuple): one that always holds a function decides."""
    if ALWAYS in parts:
        return ALWAYS
    return MAYBE if MAYBE in parts else NEVER


def _param_has(env: "Env", t: T.TParam, requirements: tuple[str, ...]) -> bool:
    bounds = env_param_bounds(env, t)
    return any(b in bounds for b in requirements)


def env_param_bounds(env: "Env", t: T.TParam) -> tuple[str, ...]:
    """The requirements written on a type parameter, found through its owner's declaration."""
    owner = t.owner
    fn = env.fns.get(owner)
    params = None
    if fn is not None:
        params = fn.decl.type_params
    else:
        info = env.types.get(owner)
        if info is not None:
            params = info.params
        else:
            params = env.local_params.get(owner)
    for p in params or ():
        if p.name == t.name:
            return p.bounds
    return ()

