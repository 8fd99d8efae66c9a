"""A type term with a generic function's parameters put in at run time (flowc/runtypes.py says
which functions take their type arguments).

The compiler writes the term of a type such as `List<T>` or `Box<T>` once, with `{"Param": "T"}`
in it and the declarations it names keyed as `flowc.typeterms` keys them (`main.Box<T>`). At run
time the function's concrete arguments replace the parameters, and each declaration that
mentioned them is keyed and described again at the concrete arguments, exactly as the compiler
would have written the concrete type (`main.Box<main.Plan>`): a call made through a generic
wrapper records the same type as the same call written out.
"""

from __future__ import annotations

from typing import Any


def instantiate(term: Any, defs: dict, mapping: dict) -> tuple[Any, dict]:
    """`term` and its `defs` with each `{"Param": name}` in `mapping` (name -> (term, defs))
    replaced; the defs returned are exactly those the new term reaches, sorted by key."""
    pool: dict[str, Any] = {}
    for _, arg_defs in mapping.values():
        pool.update(arg_defs)
    renamed: dict[str, str] = {}
    generic: dict[str, bool] = {}

    def has_param(t: Any) -> bool:
        """Does `t` mention a parameter, itself or through the arguments of a type it names?"""
        if isinstance(t, dict):
            if len(t) == 1 and "Param" in t:
                return True
            if len(t) == 1 and "Named" in t:
                key = t["Named"]
                if key not in generic:
                    generic[key] = False  # a recursive declaration: decided by its other arguments
                    declaration = defs.get(key)
                    generic[key] = declaration is not None and has_param(declaration.get("args", ()))
                return generic[key]
            return any(has_param(v) for v in t.values())
        if isinstance(t, (list, tuple)):
            return any(has_param(v) for v in t)
        return False

    def sub(t: Any) -> Any:
        if isinstance(t, dict):
            if len(t) == 1 and "Param" in t:
                found = mapping.get(t["Param"])
                return t if found is None else found[0]
            if len(t) == 1 and "Named" in t:
                return {"Named": rename(t["Named"])}
            return {k: sub(v) for k, v in t.items()}
        if isinstance(t, (list, tuple)):
            return [sub(v) for v in t]
        return t

    def rename(key: str) -> str:
        done = renamed.get(key)
        if done is not None:
            return done
        declaration = defs.get(key)
        if declaration is None or not has_param(declaration.get("args", ())):
            renamed[key] = key
            if declaration is not None and key not in pool:
                pool[key] = declaration
                pool[key] = {k: sub(v) for k, v in declaration.items()}
            return key
        args = [sub(a) for a in declaration["args"]]
        new = f"{declaration['identity']}<{','.join(term_key(a) for a in args)}>"
        renamed[key] = new
        if new not in pool:
            pool[new] = {}  # a recursive declaration refers to itself
            pool[new] = {k: (args if k == "args" else sub(v)) for k, v in declaration.items()}
        return new

    out = sub(term)
    return out, _reached(out, pool)


def term_key(t: Any) -> str:
    """The key `flowc.typeterms` gives the type a term stands for."""
    if isinstance(t, str):
        # `Unit` is keyed as the checker's `Unit` type is (the empty tuple `()` has the same term).
        return "std@v1/json.Value" if t == "json.Value" else t
    (kind, inner), = t.items()
    if kind == "Named":
        return inner
    if kind == "Param":
        return inner
    if kind == "Tuple":
        return "(" + ",".join(term_key(a) for a in inner) + ")"
    if kind == "Dict":
        return "Dict<" + ",".join(term_key(a) for a in inner) + ">"
    return f"{kind}<{term_key(inner)}>"


def _reached(term: Any, pool: dict) -> dict:
    reached: dict[str, Any] = {}
    stack = [term]
    while stack:
        t = stack.pop()
        if isinstance(t, dict):
            if len(t) == 1 and "Named" in t and isinstance(t["Named"], str):
                key = t["Named"]
                if key not in reached and key in pool:
                    reached[key] = pool[key]
                    stack.append(pool[key])
                continue
            stack.extend(t.values())
        elif isinstance(t, (list, tuple)):
            stack.extend(t)
    return dict(sorted(reached.items()))
