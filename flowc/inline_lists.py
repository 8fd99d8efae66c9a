"""`list.map`, `filter`, `fold`, `any`, `all` and `find` over a lambda written out, as a loop in
the caller.

    list.map(shapes, flow(s: Shape) = match s { ... })

is, left to the intrinsic, a nested `def` and a Python call per item (`i_list_map`). When the
function is a pure lambda written right there, its body is lowered in place instead, into the
loop every list walk compiles to:

    shapes_items, shapes_at, shapes_end = rt_cursor(shapes)
    map_out = []
    map_out_append = map_out.append
    p_x = p[0]
    p_y = p[1]
    for s in rt_items_from(shapes_items, shapes_at):
        rt_step()
        if s[0] == 'Circle':
            radius = s[1]
            t1 = Point((p_x + radius, p_y))
        ...
        map_out_append(t1)
    return rt_list(map_out)

The meaning stays: the list is evaluated before the loop, as before the call; items are visited
in order, each once; an evaluation step is counted per item, as the lambda's call counted it; a
fault inside the body carries the body's own Flow span. The lambda's parameter and every name its
body binds are fresh names of the enclosing function (lower.py binds every local under its own
name), and the names the lambda captured are the enclosing function's own, read where they were
captured. `filter` keeps the item when the body is true; `fold` carries its accumulator in the
lambda's first parameter; `any`, `all` and `find` leave the loop (`break`) at the first item that
decides, as the intrinsic returned there, so the items after it are neither visited nor counted.
The fields the body reads of a value bound outside the loop (`p.x` of a captured record) are read
once, before it (`_hoist_field_reads`).

Only a body that ends where it is lowered qualifies: a Flow `return`, a `?` or a `guard` leaves
its function, which in place would be the enclosing one, so such a lambda keeps the call (as do a
lambda that may call Tools, a function value, and a named function). The check is made on the Flow
tree, and again on the Python tree the body lowered to (no `return`, `yield`, `break` or
`continue` outside a nested function); a body that fails the second check is lowered as before,
with the lowerer's state restored as if the attempt had not been made.
"""

from __future__ import annotations

import ast
import copy

from flowc import syntax as S
from flowc import types as T
from flowc.pyast import at as _at, call as _call, load as _load, store as _store

#: The intrinsics written out, and the number of the lambda's parameters each takes.
INLINED = {"std@v1/list.map": 1, "std@v1/list.filter": 1, "std@v1/list.fold": 2,
           "std@v1/list.any": 1, "std@v1/list.all": 1, "std@v1/list.find": 1}

#: The searches: what each gives before it stops early (None: the runtime's None), and on what
#: body value it stops and gives what (`item`: Some(the item)).
_SEARCHES = {"std@v1/list.any": (False, True, True), "std@v1/list.all": (True, False, False),
             "std@v1/list.find": (None, True, "item")}

#: Flow constructs that leave the function they are in (lowered to a Python `return`).
_LEAVING = (S.Return, S.Try, S.Guard)


def inline_list_call(low, identity: str, e: S.Call) -> tuple[list[ast.stmt], ast.expr] | None:
    """The loop for the call `e` of the intrinsic `identity`, or None to call the intrinsic."""
    arity = INLINED.get(identity)
    if arity is None:
        return None
    f = e.args[-1]
    if not isinstance(f, S.Lambda) or len(f.params) != arity or not _ends_in_place(f.body):
        return None
    if low.effect_is_tool(low.facts.lambdas.get(id(f), T.PURE)):
        return None
    saved = _State(low)
    built = _loop(low, identity, e, f)
    if built is None:
        saved.restore(low)
    return built


def _loop(low, identity: str, e: S.Call, f: S.Lambda) -> tuple[list[ast.stmt], ast.expr] | None:
    stmts, values = low.args(e.args[:-1])
    span = e.span
    base = values[0].id if isinstance(values[0], ast.Name) else "xs"
    if low.reserved(f"{base}_"):  # a list named `i` or `k`: not `i_items`
        base = "xs"
    items, at, end = (low.fresh(f"{base}_{part}") for part in ("items", "at", "end"))
    stmts.append(_at(ast.Assign([ast.Tuple([_store(items), _store(at), _store(end)], ast.Store())],
                                _call("rt_cursor", [values[0]])), span))
    params = [low.bind(low.facts.bindings[id(p)], p.name) for p in f.params]
    item = params[-1]
    result = low.temp()
    computed = low.assign(result, f.body)
    value_of_item: ast.expr = _load(result)
    if len(computed) == 1 and isinstance(computed[0], ast.Assign) and _is_name(computed[0].targets[0], result):
        value_of_item, computed = computed[0].value, []  # one expression: used where it is needed
    at_body = f.body.span  # where a fault computing the value is located, as in the lambda
    body: list[ast.stmt] = [_at(ast.Expr(_call("rt_step", [])), f.span)] + computed
    if not all(_stays_in_place(stmt) for stmt in body + [ast.Expr(value_of_item)]):
        return None
    if identity == "std@v1/list.fold":
        acc = params[0]
        stmts.append(_at(ast.Assign([_store(acc)], values[1]), span))
        body.append(_at(ast.Assign([_store(acc)], value_of_item), at_body))
        value: ast.expr = _load(acc)
    elif identity in _SEARCHES:
        before, stop_on, gives = _SEARCHES[identity]
        found = low.fresh(identity.rsplit(".", 1)[1] + "_out")
        stmts.append(_at(ast.Assign([_store(found)], _load("rt_None") if before is None
                                    else ast.Constant(before)), span))
        test = value_of_item if stop_on else _negated(value_of_item)
        given = _call("rt_Some", [_load(item)]) if gives == "item" else ast.Constant(gives)
        body.append(_at(ast.If(test, [ast.Assign([_store(found)], given), ast.Break()], []), at_body))
        value = _load(found)
    else:
        out = low.fresh("filter_out" if identity == "std@v1/list.filter" else "map_out")
        append = low.fresh(f"{out}_append")
        stmts.append(_at(ast.Assign([_store(out)], ast.List([], ast.Load())), span))
        stmts.append(_at(ast.Assign([_store(append)], ast.Attribute(_load(out), "append", ast.Load())), span))
        if identity == "std@v1/list.filter":
            body.append(_at(ast.If(value_of_item, [ast.Expr(_call(append, [_load(item)]))], []), at_body))
        else:
            body.append(_at(ast.Expr(_call(append, [value_of_item])), at_body))
        value = _call("rt_list", [_load(out)])
    stmts.extend(_at(stmt, span) for stmt in _hoist_field_reads(low, body, item))
    stmts.append(_at(ast.For(_store(item), _call("rt_items_from", [_load(items), _load(at)]), body, []), span))
    return stmts, value


def _hoist_field_reads(low, body: list[ast.stmt], item: str) -> list[ast.Assign]:
    """Read once, before the loop, the fields the body reads of a value bound outside it (a
    captured record: `p.x` in every round). A field read cannot fault and a record never changes,
    so reading it early is unobservable; an item of a tuple subclass is read by CPython's generic
    path, so each read saved is worth having. The reads, rewritten in `body`, become locals."""
    stored = {item}
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                stored.add(node.id)
            elif isinstance(node, ast.FunctionDef):
                stored.add(node.name)
            elif isinstance(node, ast.NamedExpr):
                stored.add(node.target.id)  # type: ignore[union-attr]
    hoisted: dict[tuple[str, int], str] = {}
    reads: list[ast.Assign] = []

    class Hoist(ast.NodeTransformer):
        def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
            node.args = self.visit(node.args)  # its defaults are read in the loop; its body is its own
            return node

        def visit_Subscript(self, node: ast.Subscript) -> ast.expr:
            field = getattr(node, "flow_field", None)
            value, index = node.value, node.slice
            if field is None or not isinstance(value, ast.Name) or value.id in stored \
                    or not isinstance(index, ast.Constant):
                return self.generic_visit(node)
            key = (value.id, index.value)
            if key not in hoisted:
                hoisted[key] = low.fresh(f"{value.id}_{field}")
                reads.append(ast.Assign([_store(hoisted[key])], ast.Subscript(_load(value.id), ast.Constant(index.value),
                                                                            ast.Load())))
            return _load(hoisted[key])

    body[:] = [Hoist().visit(stmt) for stmt in body]
    return reads


def _ends_in_place(body: S.Expr) -> bool:
    """Does nothing in the lambda's body (outside functions nested in it) leave the lambda?"""
    def into(node: object) -> bool:
        return not isinstance(node, (S.Lambda, S.FnDecl))

    return not any(isinstance(node, _LEAVING) for node in S.walk(body, into))


def _stays_in_place(stmt: ast.stmt) -> bool:
    """No statement of a lowered body, outside a nested function, returns, yields or jumps (a
    `for` is a list call written out inside it, which does none of these)."""
    stack: list[ast.AST] = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom, ast.Break, ast.Continue, ast.While)):
            return False
        if isinstance(node, ast.FunctionDef):
            stack.extend(node.args.defaults)  # evaluated in place; the body is its own
        else:
            stack.extend(ast.iter_child_nodes(node))
    return True


class _State:
    """What lowering a body changes in the lowerer, to put back when the loop is given up."""

    def __init__(self, low) -> None:
        ctx = low.fn
        self.used = set(ctx.used)
        self.names = dict(ctx.names)
        self.temps = ctx.temps
        self.loops = ctx.loops
        self.constants = dict(low.constants)
        self.constant_defs = len(low.constant_defs)
        self.tool_descs = copy.copy(low.tool_descs)

    def restore(self, low) -> None:
        ctx = low.fn
        ctx.used, ctx.names, ctx.temps, ctx.loops = self.used, self.names, self.temps, self.loops
        low.constants = self.constants
        del low.constant_defs[self.constant_defs:]
        low.tool_descs = self.tool_descs


def _negated(test: ast.expr) -> ast.expr:
    """`not test`, without writing `not not x` for a test that is already a negation (a Bool's
    truth is itself)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    return ast.UnaryOp(ast.Not(), test)


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name
