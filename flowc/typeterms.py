"""Types as data: the type terms `flow tools` prints, their `$defs`, and Tool fingerprints.

A term is a built-in type by name ("Int", ..., "json.Value"); {"List": t}, {"Set": t},
{"Option": t}, {"Dict": [k, v]}, {"Tuple": [t, ...]}; {"Param": "T"}; or {"Named": key} for a
declared type, described once per list of type arguments in `defs[key]` (the execution seed's
`flow tools` section). Keys are the type's identity, followed by its arguments' keys in angle
brackets when it has any, so they are stable and readable: `planner.Step`,
`std@v1/prelude.Result<Text,planner.PlanError>`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from flowc import types as T
from flowc.resolve import Env, FnInfo

DATA_VERSION = "flow-data/1"


def term_and_defs(env: Env, t: T.Type) -> tuple[Any, dict[str, Any]]:
    defs: dict[str, Any] = {}
    term = _term(env, t, defs)
    return term, dict(sorted(defs.items()))


def term(env: Env, t: T.Type, defs: dict[str, Any]) -> Any:
    return _term(env, t, defs)


def _term(env: Env, t: T.Type, defs: dict[str, Any]) -> Any:
    if isinstance(t, T.TParam):
        return {"Param": t.name}
    if isinstance(t, T.TTuple):
        return {"Tuple": [_term(env, i, defs) for i in t.items]} if t.items else "Unit"
    if isinstance(t, (T.TFun, T.TVar, T.TError)):
        raise ValueError(f"not a data type: {T.show(t)}")
    assert isinstance(t, T.TCon)
    if t.name in T.SCALARS:
        return t.name
    if t.name == T.JSON_VALUE:
        return "json.Value"
    if t.name in ("List", "Set"):
        return {t.name: _term(env, t.args[0], defs)}
    if t.name == T.OPTION:
        return {"Option": _term(env, t.args[0], defs)}
    if t.name == "Dict":
        return {"Dict": [_term(env, a, defs) for a in t.args]}
    if t.name == "Task":
        raise ValueError("a task is not data")
    key = _key(t)
    if key not in defs:
        defs[key] = {}  # placeholder: recursive types refer to themselves
        defs[key] = _declaration(env, t, defs)
    return {"Named": key}


def _key(t: T.Type) -> str:
    if isinstance(t, T.TCon):
        name = t.name
        if name == T.OPTION:
            name = "Option"
        if t.args:
            return f"{name}<{','.join(_key(a) for a in t.args)}>"
        return name
    if isinstance(t, T.TTuple):
        return "(" + ",".join(_key(a) for a in t.items) + ")"
    if isinstance(t, T.TParam):
        return t.name
    return "?"


def _declaration(env: Env, t: T.TCon, defs: dict[str, Any]) -> dict[str, Any]:
    info = env.types[t.name]
    mapping = {p.name: a for p, a in zip(info.params, t.args)}
    doc = info.decl.doc if info.decl is not None else None
    out: dict[str, Any] = {"name": info.name, "identity": info.identity,
                           "args": [_term(env, a, defs) for a in t.args], "doc": doc}
    if info.kind == "record":
        out["kind"] = {"record": {"fields": [_field(env, f, mapping, defs) for f in info.fields]}}
    elif info.kind == "enum":
        ctors = []
        for c in info.ctors:
            doc_c = _ctor_doc(info, c.name)
            if c.form == "bare":
                payload = None
            elif c.form == "positional":
                payload = {"positional": [_term(env, T.substitute(a, mapping), defs) for a in c.args]}
            else:
                payload = {"named": [_field(env, f, mapping, defs) for f in c.fields]}
            ctors.append({"name": c.name, "doc": doc_c, "payload": payload})
        out["kind"] = {"enum": {"ctors": ctors}}
    else:
        out["kind"] = {"host": {}}
    return out


def _field(env: Env, f, mapping, defs) -> dict[str, Any]:
    return {"name": f.name, "type": _term(env, T.substitute(f.type, mapping), defs), "doc": f.doc}


def _ctor_doc(info, name: str) -> str | None:
    if info.decl is None:
        return None
    for c in info.decl.ctors:
        if c.name == name:
            return c.doc
    return None


def signature_text(fn: FnInfo) -> str:
    """The declaration's signature as Flow text, as `describe` lists it."""
    decl = fn.decl
    params = ", ".join(f"{p.name}: {T.show(t)}" for p, t in zip(decl.params, fn.sig.params))
    tparams = ""
    if decl.type_params:
        tparams = "<" + ", ".join(p.name + (": " + " + ".join(p.bounds) if p.bounds else "")
                                  for p in decl.type_params) + ">"
    return f"{fn.name}{tparams}({params}) -> {T.show(fn.sig.ret)}"


def tool_description(env: Env, fn: FnInfo) -> dict[str, Any]:
    """What `flow tools` lists for a Tool declaration (and `describe` answers): identity,
    fingerprint, signature, parameter and result terms."""
    defs: dict[str, Any] = {}
    params = [{"name": p.name, "type": _term(env, t, defs)} for p, t in zip(fn.decl.params, fn.sig.params)]
    ret = fn.sig.ret
    if isinstance(ret, T.TCon) and ret.name == T.RESULT:
        ok, err = _term(env, ret.args[0], defs), _term(env, ret.args[1], defs)
    else:
        ok, err = _term(env, ret, defs), None
    signature = signature_text(fn)
    material = orjson.dumps({"signature": signature, "params": params, "ok": ok, "err": err,
                             "types": dict(sorted(defs.items()))}, option=orjson.OPT_SORT_KEYS)
    fingerprint = "sha256:" + hashlib.sha256(material).hexdigest()
    return {"tool": fn.identity, "fingerprint": fingerprint, "signature": signature,
            "generic": bool(fn.decl.type_params), "params": params, "ok": ok, "err": err,
            "types": dict(sorted(defs.items()))}
