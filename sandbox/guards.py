"""The hooks RestrictedPython's rewritten code calls, one per construct.

RestrictedPython turns `a.b` into `_getattr_(a, "b")`, `a[i]` into `_getitem_(a, i)`, tuple
targets into `_unpack_sequence_(value, spec, _getiter_)`, `n += 1` into
`n = _inplacevar_("+=", n, 1)`, and stores into `_write_(a).b = c`. The loader injects exactly
the functions in `GUARDS` (their names are `flowdata.policy.GUARD_NAMES`).

Because `sandbox.verify` has already refused every `_` name, every forbidden attribute, every
store into an attribute or item, and every dynamic attribute access (there is no `getattr`),
most hooks can be cheap. Each choice, and its measured cost, is in docs/sandbox.md:

- `_getattr_` stays a Python function that re-checks the attribute name against the policy
  (defence in depth: it is the one hook a policy mistake could turn into an escape).
- `_getitem_` is `operator.getitem`: items of JSON-like values (lists, dicts, text, bytes,
  tuples) reach nothing that attributes do not.
- `_getiter_` is `iter`.
- `_unpack_sequence_` and `_iter_unpack_sequence_` hand the value to CPython's own unpacking
  (RestrictedPython's versions only exist to call `_getiter_` on nested targets, and ours is
  `iter`, which CPython's unpacking calls anyway).
- `_inplacevar_` applies the operator from a fixed table of the allowed ones.
- `_write_` refuses: generated code never stores into attributes or items.

Every refusal raises `SandboxDenied`, naming the thing and saying what to do.
"""

from __future__ import annotations

import operator
from types import MappingProxyType

from flowdata.policy import FORBIDDEN_ATTRIBUTES

ALTERED = (
    "generated code never does this; the compiler or the generated file was altered: rebuild "
    "the module with `flowc build`"
)


class SandboxDenied(Exception):
    """A guard refused an operation at run time."""


def guarded_getattr(obj: object, name: str) -> object:
    """`obj.name`, unless `name` starts with `_` or is a forbidden attribute."""
    if name[:1] == "_" or name in FORBIDDEN_ATTRIBUTES:
        raise SandboxDenied(
            f"sandbox denied reading attribute `{name}` of a {type(obj).__name__} value: "
            f"it reaches Python's internals; {ALTERED}"
        )
    return getattr(obj, name)


guarded_getitem = operator.getitem

guarded_getiter = iter


def guarded_unpack_sequence(it: object, spec: object, getiter: object) -> object:
    """`a, b = it`: CPython unpacks `it` itself (calling `iter`, as `_getiter_` would)."""
    return it


def guarded_iter_unpack_sequence(it: object, spec: object, getiter: object) -> object:
    """`for a, b in it`: iterate `it`; CPython unpacks each element."""
    return iter(it)


INPLACE_OPERATORS = MappingProxyType({
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
})


def guarded_inplacevar(op: str, target: object, value: object) -> object:
    """`target op value` for the augmented operators the policy allows."""
    apply = INPLACE_OPERATORS.get(op)
    if apply is None:
        raise SandboxDenied(
            f"sandbox denied the augmented assignment `{op}`: only "
            f"{', '.join(INPLACE_OPERATORS)} are allowed; {ALTERED}"
        )
    return apply(target, value)


def guarded_write(obj: object) -> object:
    """`obj.x = v`, `obj[i] = v`: always refused."""
    raise SandboxDenied(
        f"sandbox denied writing into a {type(obj).__name__} value (attribute or item "
        f"assignment); values are rebuilt, never changed in place; {ALTERED}"
    )


GUARDS: MappingProxyType = MappingProxyType({
    "_getattr_": guarded_getattr,
    "_getitem_": guarded_getitem,
    "_getiter_": guarded_getiter,
    "_unpack_sequence_": guarded_unpack_sequence,
    "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
    "_inplacevar_": guarded_inplacevar,
    "_write_": guarded_write,
})
