"""Which generic functions take their type arguments at run time.

A generic function is compiled once, for every instantiation. Most never look at their type
parameters once checked, and are compiled as before. A function whose body makes a value's type
into data does: it calls a generic Tool, or a typed intrinsic (`json.decode` and its kin), at a
type that mentions its own parameters, or it calls (or names) such a function at such a type.
Those functions take one more, hidden, argument: the tuple of their concrete type arguments
(`sandbox.runtime.TypeArg`, in the order of the declaration's type parameters), which every call
site knows, since the checker knows each call's instantiation. The body puts them into the type
terms it emits (`sandbox.typeargs.instantiate`).

The set is a least fixed point over the whole program (one function may need its types only
because a function it calls does), computed once per checked program.
"""

from __future__ import annotations

from flowc import syntax as S
from flowc import types as T
from flowc.resolve import Env, FnInfo

#: Intrinsics that need their type arguments at run time (they decode into a type).
TYPED_INTRINSICS = {"std@v1/json.decode", "std@v1/json.from_value", "std@v1/json.encode",
                    "std@v1/json.to_value"}

_last: tuple[object, frozenset[str]] | None = None


def runtime_typed(env: Env, facts) -> frozenset[str]:
    """Identities of the functions that take their type arguments at run time."""
    global _last
    if _last is not None and _last[0] is facts:
        return _last[1]
    candidates = [fn for fn in env.fns.values()
                  if fn.decl.type_params and not fn.tool and not fn.intrinsic and fn.decl.body is not None]
    sites = {fn.identity: _sites(fn, facts) for fn in candidates}
    typed: set[str] = set()
    changed = True
    while changed:
        changed = False
        for fn in candidates:
            if fn.identity in typed:
                continue
            if any(_needs(target, types, fn.identity, typed) for target, types in sites[fn.identity]):
                typed.add(fn.identity)
                changed = True
    result = frozenset(typed)
    _last = (facts, result)
    return result


def mentions(t: T.Type, owner: str) -> bool:
    """Does `t` mention a type parameter of the function `owner`?"""
    if isinstance(t, T.TParam):
        return t.owner == owner
    if isinstance(t, T.TCon):
        return any(mentions(a, owner) for a in t.args)
    if isinstance(t, T.TTuple):
        return any(mentions(a, owner) for a in t.items)
    if isinstance(t, T.TFun):
        return any(mentions(a, owner) for a in t.params) or mentions(t.ret, owner)
    return False


def _needs(target: FnInfo, types: tuple, owner: str, typed: set[str]) -> bool:
    if not any(mentions(t, owner) for t in types):
        return False
    if target.tool:
        return bool(target.decl.type_params)
    if target.intrinsic:
        return target.identity in TYPED_INTRINSICS
    return target.identity in typed


def _sites(fn: FnInfo, facts) -> list[tuple[FnInfo, tuple]]:
    """Each reference of the body (lambdas and local functions included) to a top-level function
    at type arguments: calls, and functions named as values."""
    out: list[tuple[FnInfo, tuple]] = []
    for node in S.walk(fn.decl.body):
        if isinstance(node, S.Call):
            fact = facts.calls.get(id(node))
            if fact is not None and fact.kind == "direct" and isinstance(fact.target, FnInfo) and fact.type_args:
                out.append((fact.target, fact.type_args))
        elif isinstance(node, (S.Var, S.Member)):
            ref = facts.refs.get(id(node))
            if ref is not None and ref[0] == "fn" and ref[1].decl.type_params:
                types = facts.types.get(id(node))
                if isinstance(types, T.TTuple):
                    out.append((ref[1], types.items))
    return out
