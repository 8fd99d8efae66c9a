"""Load generated modules into the sandbox: verify, restricted compile, exec, namespaces.

`load(modules, injected)` takes `(key, filename, source)` triples and returns `key -> namespace`.
It works in two passes so that no code runs unless every module is accepted:

1. for every module: `sandbox.verify` (static whitelist), then RestrictedPython's restricted
   compile (its transformer inserts the guard calls, and refuses on its own account anything
   verify should have refused: a second, independent net). Refusals from all modules are
   collected and raised together as one `SandboxRefusal`.
2. create one empty `types.SimpleNamespace` per module, then exec each module in a fresh globals
   dict holding: `__builtins__` (a fresh copy of the empty `policy.SAFE_BUILTINS`), the guards,
   the caller's injected globals, and `m_<key>` for every module (so modules can refer to each
   other, including cyclically, at call time). After a module's top level has run, the names it
   defined (not starting with `_`) are copied into its namespace.

Generated code counts an evaluation step with `rt_step()` at the head of every function and
loop round; only `flow test` bounds steps. For a run (`count_steps=False`) those statements are
left out of the verified tree as RestrictedPython's transform passes them (`_WithoutSteps`): a
call that does nothing costs more than the rest of a small function (fib: ~75% of its time).
The source, and so the generated code's identity and goldens, stay the same.

A module's top level should only define functions and constants: it runs in list order, so
calling into a module that has not been executed yet finds its namespace still empty.
Exceptions raised while a top level runs propagate unchanged.
"""

from __future__ import annotations

import ast
import gc
import operator
import re
import types
from collections.abc import Mapping

from RestrictedPython import compile_restricted_exec
from RestrictedPython.transformer import RestrictingNodeTransformer

from sandbox.guards import GUARDS
from flowdata.policy import MODULE_PREFIX, POLICY, SAFE_BUILTINS, Policy
from sandbox.verify import Refusal, SandboxRefusal, parse_and_verify

__all__ = ["SandboxRefusal", "compile_module", "load"]

RESTRICTED_HINT = (
    "RestrictedPython refused what sandbox.verify accepted: flowdata/policy.py allows something "
    "it should not; report this as a sandbox bug (the module itself was also altered or "
    "miscompiled)"
)
_RP_LINE = re.compile(r"^Line (\d+): (.*)$", re.S)


class _PlainItemReads(RestrictingNodeTransformer):
    """RestrictedPython's transformer, except that reading an item stays `a[i]` instead of
    becoming `_getitem_(a, i)`: our `_getitem_` guard is `operator.getitem`, which does exactly
    what `a[i]` does, so the call only cost time (a global lookup and a call on every field read,
    list index and match test: a third of a tight loop). Writing and deleting items are still
    guarded. Used only while the guard is `operator.getitem` (see `_TRANSFORMER`)."""

    def visit_Subscript(self, node: ast.Subscript):
        if isinstance(node.ctx, ast.Load):
            return self.node_contents_visit(node)
        return super().visit_Subscript(node)


#: A `_getitem_` that checked something would have to be called: then RestrictedPython's own.
_TRANSFORMER = _PlainItemReads if GUARDS["_getitem_"] is operator.getitem else RestrictingNodeTransformer


class _WithoutSteps(_TRANSFORMER):  # type: ignore[misc, valid-type]
    """The transformer for a run (`count_steps=False`): it also turns every `rt_step()`
    statement into `pass` as it goes (a body never ends up empty), where a walk of its own over
    the tree cost as much as a seventh of a module's load. (A verified tree: what it leaves out
    adds nothing.)"""

    def visit_Expr(self, node: ast.Expr):
        if _is_step(node):
            return ast.copy_location(ast.Pass(), node)
        return super().visit_Expr(node)


def compile_module(
    filename: str, source: str, policy: Policy = POLICY, *, count_steps: bool = True
) -> tuple[types.CodeType | None, list[Refusal]]:
    """Verify and restricted-compile one module: (code, []) or (None, refusals)."""
    tree, refusals = parse_and_verify(source, filename, policy)
    if refusals or tree is None:
        return None, refusals
    # RestrictedPython transforms the tree in place; verify_tree() has finished with it.
    result = compile_restricted_exec(tree, filename, policy=_TRANSFORMER if count_steps else _WithoutSteps)
    if result.errors:
        return None, [_restricted_refusal(filename, error) for error in result.errors]
    return result.code, []


def _is_step(stmt: ast.AST) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
        and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "rt_step" \
        and not stmt.value.args and not stmt.value.keywords


def _restricted_refusal(filename: str, error: str) -> Refusal:
    match = _RP_LINE.match(error)
    line, message = (int(match.group(1)), match.group(2)) if match else (0, error)
    return Refusal(filename, line, 0, f"(RestrictedPython) {message}", RESTRICTED_HINT)


def load(
    modules: list[tuple[str, str, str]],
    injected: Mapping[str, object],
    policy: Policy = POLICY,
    *,
    count_steps: bool = True,
) -> dict[str, types.SimpleNamespace]:
    """Verify, compile and run generated modules; return each module's namespace by key.

    `injected` holds the runtime's globals; every key must start with one of
    `policy.injected_prefixes` and may not collide with a loaded module's `m_<key>`.
    `policy` exists for tests that switch one static check off to show the next layer holding.
    """
    keys = [key for key, _, _ in modules]
    _check_keys(keys)
    _check_injected(injected, keys, policy)

    codes: list[tuple[str, str, types.CodeType]] = []
    refusals: list[Refusal] = []
    for key, filename, source in modules:
        code, found = compile_module(filename, source, policy, count_steps=count_steps)
        refusals.extend(found)
        if code is not None:
            codes.append((key, filename, code))
    if refusals:
        raise SandboxRefusal(refusals)

    namespaces = {key: types.SimpleNamespace() for key in keys}
    module_globals = {MODULE_PREFIX + key: namespaces[key] for key in keys}
    for key, filename, code in codes:
        env: dict[str, object] = {"__builtins__": dict(SAFE_BUILTINS), "__name__": f"flowgen.{key}"}
        env.update(GUARDS)
        env.update(injected)
        env.update(module_globals)
        before = set(env)
        exec(code, env)
        namespace = namespaces[key]
        for name, value in env.items():
            if name not in before and not name.startswith("_"):
                setattr(namespace, name, value)
    return namespaces


def _check_keys(keys: list[str]) -> None:
    seen: set[str] = set()
    for key in keys:
        if not key.isidentifier() or key.startswith("_"):
            raise ValueError(
                f"module key {key!r} cannot name a global `{MODULE_PREFIX}{key}`: use a Python "
                "identifier that does not start with `_`"
            )
        if key in seen:
            raise ValueError(f"module key {key!r} is given twice: each module is loaded once")
        seen.add(key)


def _check_injected(injected: Mapping[str, object], keys: list[str], policy: Policy) -> None:
    for name in injected:
        if not isinstance(name, str) or not name.startswith(policy.injected_prefixes):
            raise ValueError(
                f"injected global {name!r} lacks an injected prefix "
                f"({', '.join(policy.injected_prefixes)}); generated code could not name it "
                "(and `_` names are reserved for the guards)"
            )
        if name.startswith(MODULE_PREFIX) and name[len(MODULE_PREFIX):] in keys:
            raise ValueError(
                f"injected global {name!r} collides with the namespace of loaded module "
                f"{name[len(MODULE_PREFIX):]!r}: pass it either as a module or as a global"
            )



def settle_heap() -> None:
    """Move what exists now (the loaded program, the runtime, the decoded input) out of the
    cyclic collector's reach for the rest of the run. Flow values are immutable tuples and
    records, and a tuple subclass is never untracked, so without this every collection walks the
    whole input again: a list.map building 100,000 records over a 100,000-item input ran 2-3x
    slower (docs/impl.md, "The collector"). Called once, right before the entry runs; garbage
    made later is collected as usual. (No `gc.collect()` first: it cost ~25 ms in a fresh child,
    more than a small run takes; what garbage the start-up left is little and is kept.)"""
    gc.freeze()
