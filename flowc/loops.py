"""The rounds of a self-recursive loop: walking a list by index, and starting the next round.

A self tail call is lowered to `while True` whose rounds end with `p1, p2 = (v1, v2); continue`.
Two rewrites of that tree live here, each applied to one function.

Walking a list by index (`walk_lists`).

A Flow function that consumes a list by tail recursion,

    flow total(xs: List<Int>, acc: Int) -> Int = match xs {
        [] => acc,
        [x, ..rest] => total(rest, acc + x),
    }

is lowered to a `while True` loop that reassigns its parameters. Left alone, every round makes
the rest of the list (an O(1) view, but still an object), measures it and indexes it through the
view. When the list parameter is only ever matched and handed back to the loop as one of its own
rests, it can be kept as a cursor instead: the underlying tuple, the index where the list starts
and the tuple's length. `[x, ..rest]` then reads `items[at]` and the recursive call becomes
`at + 1`. The program means the same; only the representation inside one function changes.

The rewrite works on the Python tree `lower.py` built for one function and gives up (returns the
tree unchanged) at the first use of the parameter it does not recognise, so it is never wrong for
lack of a case. A loop whose every round advances a cursor ends with the list; its evaluation step
is then counted once per call instead of once per round (the step bound exists for loops that may
not end).

Carrying a record as its fields (`carry_records`).

A loop whose state is a record,

    flow area(shapes: List<Shape>, p: Point, acc: Int) -> Int = match shapes {
        [] => acc + p.x + p.y,
        [Circle { radius }, ..rest] => area(rest, Point { x: p.x + 1, ..p }, acc + radius),
        ...
    }

builds a new record every round only for the next round to read its fields. When the record
parameter is only ever read field by field (`p[k]`) and handed to the next round either unchanged
or as a record literal of its type, the loop keeps one local per field instead ("scalar
replacement"): the literal's field values go straight into the locals, and nothing is built.
Any other use (passing the record on, returning it, comparing it, a checkpoint taking it) keeps
the record as it is. Record literals are marked by `lower.py` (`flow_record_fields`).

Iterating instead of indexing (`iterate_lists`): once the rounds are plain assignments, a cursor
that only ever moves to the next item becomes a Python `for` loop over the items.

Starting the next round (`sequential_rounds`). The sandbox compiles generated code with
RestrictedPython, which turns every tuple assignment into a call of its `_unpack_sequence_` guard
with a fresh dict: the costliest part of a tight loop's round. The parallel assignment is
therefore written as plain assignments, in an order that reads every old value before it is
replaced: reordered when no value can fail (so the order is unobservable), else computing the
values left to right as the Flow call does, through temporaries where needed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass
class _Uses:
    """Where one parameter appears in the loop, by kind of use."""

    lengths: list[tuple[ast.Call, ast.AST]] = field(default_factory=list)  # rt_len(p), its parent
    items: list[ast.Subscript] = field(default_factory=list)  # p[k]
    rests: dict[str, int] = field(default_factory=dict)  # rest name -> k, from rt_rest(p, k)
    rest_sites: list = field(default_factory=list)  # each rest's binding, with its parent and grandparent


def walk_lists(fn: ast.FunctionDef, used: set[str]) -> ast.FunctionDef:
    """Rewrite every list parameter of a self-recursive loop that can be walked by index.

    `fn.body` must be the loop as `lower.py` makes it: `[While(True, [rt_step(), ...])]`. `used`
    holds the function's local names; new names are added to it."""
    if len(fn.body) != 1 or not isinstance(fn.body[0], ast.While):
        return fn
    loop = fn.body[0]
    params = [a.arg for a in fn.args.args]
    rounds = _round_assigns(loop, params)
    if rounds is None:
        return fn
    setup: list[ast.stmt] = []
    advancing: dict[int, bool] = {id(a): False for a in rounds}
    for index, param in enumerate(params):
        uses = _uses_of(param, index, loop, rounds)
        if uses is None or not uses.rests:
            continue
        cursor = tuple(_fresh(f"{param}_{part}", used) for part in ("items", "at", "end"))
        setup.append(ast.Assign([ast.Tuple([ast.Name(n, ast.Store()) for n in cursor], ast.Store())],
                                ast.Call(ast.Name("rt_cursor", ast.Load()), [ast.Name(param, ast.Load())], [])))
        for assign in rounds:
            if _rewrite_round(assign, index, uses, cursor):
                advancing[id(assign)] = True
        _rewrite_uses(uses, cursor)
        _bind_head(loop, cursor, used)
    if not setup:
        return fn
    body = loop.body
    if rounds and all(advancing.values()) and _is_step(body[0]):
        setup.insert(0, body.pop(0))
        if not body:
            body.append(ast.Pass())
    fn.body = setup + [loop]
    return fn


# ---- finding the uses ------------------------------------------------------------------------


def _round_assigns(loop: ast.While, params: list[str]) -> list[ast.Assign] | None:
    """The assignments that start the next round (`p1, p2 = (...)` before `continue`), or None
    when some `continue` is not preceded by one (or the loop holds a nested function)."""
    return _before_continues(loop, lambda stmt: _is_round_assign(stmt, params))


def _before_continues(loop: ast.While, accept) -> list[ast.Assign] | None:
    """The statement before each `continue`, or None when one of them is not `accept`ed or the
    loop holds a nested function (which could see the loop's names)."""
    if any(isinstance(node, (ast.FunctionDef, ast.Lambda, ast.GeneratorExp, ast.ListComp))
           for node in ast.walk(loop)):
        return None
    found: list[ast.Assign] = []
    for stmts in _blocks(loop):
        for i, stmt in enumerate(stmts):
            if isinstance(stmt, ast.Continue):
                before = stmts[i - 1] if i > 0 else None
                if before is None or not accept(before):
                    return None
                found.append(before)
    return found


def _blocks(loop: ast.While):
    """Every statement list in the loop (bodies and else branches), the loop's own included."""
    for node in ast.walk(loop):
        for field_name in ("body", "orelse"):
            stmts = getattr(node, field_name, None)
            if isinstance(stmts, list):
                yield stmts


def _is_round_assign(stmt: ast.AST | None, params: list[str]) -> bool:
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return False
    target, value = stmt.targets[0], stmt.value
    return isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
        and len(target.elts) == len(value.elts) == len(params) \
        and all(isinstance(t, ast.Name) and t.id == p for t, p in zip(target.elts, params))


def _uses_of(param: str, index: int, loop: ast.While, rounds: list[ast.Assign]) -> _Uses | None:
    """Every use of `param` classified, or None when one is not a recognised list use."""
    uses = _Uses()
    round_targets = {id(a.targets[0].elts[index]) for a in rounds}
    round_values = {id(a.value.elts[index]) for a in rounds}
    seen_items: set[int] = set()
    # `(rest := rt_rest(p, k)) is rest`: a binding inside an arm's condition (lower._walrus).
    echoes: dict[int, ast.Compare] = {}
    for node, _, _ in _positions(loop):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.NamedExpr) and len(node.ops) == 1 \
                and isinstance(node.ops[0], ast.Is) and isinstance(node.comparators[0], ast.Name) \
                and node.comparators[0].id == node.left.target.id:
            echoes[id(node.left)] = node
    echo_names = {id(c.comparators[0]) for c in echoes.values()}
    for node, parent, grandparent in _positions(loop):
        if not isinstance(node, ast.Name) or node.id != param:
            continue
        if parent is not None and isinstance(parent, ast.Tuple):
            if id(node) in round_targets:
                continue
            if id(node) in round_values:  # `p` handed unchanged to the next round
                continue
        if _is_call(parent, "rt_len", 1):
            uses.lengths.append((parent, grandparent))
        elif isinstance(parent, ast.Subscript) and parent.value is node and _small_int(parent.slice) is not None:
            if id(parent) not in seen_items:  # lowering shares access nodes between patterns
                seen_items.add(id(parent))
                uses.items.append(parent)
        elif _is_call(parent, "rt_rest", 2) and parent.args[0] is node and _small_int(parent.args[1]) is not None:
            site = grandparent
            if isinstance(site, ast.Assign) and len(site.targets) == 1 and isinstance(site.targets[0], ast.Name):
                name = site.targets[0].id
            elif isinstance(site, ast.NamedExpr) and id(site) in echoes:
                name = site.target.id
                site = echoes[id(site)]
            else:
                return None
            if name in uses.rests:
                return None  # bound in two places (alternatives): not worth the bookkeeping
            uses.rests[name] = _small_int(parent.args[1])
            uses.rest_sites.append(site)
        else:
            return None
    # A rest may only go back into the loop, in this parameter's place.
    stores: dict[str, int] = {}
    for node, parent, _ in _positions(loop):
        if isinstance(node, ast.Name) and node.id in uses.rests:
            if isinstance(node.ctx, ast.Store):
                stores[node.id] = stores.get(node.id, 0) + 1
            elif id(node) not in round_values and id(node) not in echo_names:
                return None
    if any(count != 1 for count in stores.values()):
        return None
    # Where each binding of a rest sits, so that it can be taken out.
    sites = {id(site) for site in uses.rest_sites}
    uses.rest_sites = [(node, parent, grandparent) for node, parent, grandparent in _positions(loop)
                       if id(node) in sites]
    if len(uses.rest_sites) != len(sites):
        return None
    return uses


def _positions(root: ast.AST):
    """Every (node, parent, grandparent) in the tree, once per place: lowering shares some nodes
    between places, so a node's parent is not a property of the node."""
    stack: list[tuple[ast.AST, ast.AST | None, ast.AST | None]] = [(root, None, None)]
    while stack:
        node, parent, grandparent = stack.pop()
        yield node, parent, grandparent
        for child in ast.iter_child_nodes(node):
            stack.append((child, node, parent))


def _is_call(node: ast.AST | None, name: str, arity: int) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name \
        and len(node.args) == arity and not node.keywords


def _small_int(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value < 1 << 16:
        return node.value
    return None


def _is_step(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and _is_call(stmt.value, "rt_step", 0)


def _fresh(base: str, used: set[str]) -> str:
    name, n = base, 1
    while name in used:
        n += 1
        name = f"{base}{n}"
    used.add(name)
    return name


# ---- rewriting -------------------------------------------------------------------------------


def _rewrite_round(assign: ast.Assign, index: int, uses: _Uses, cursor: tuple[str, str, str]) -> bool:
    """`p, ... = (rest, ...)` becomes `p_at, ... = (p_at + k, ...)`; True when it advances."""
    _, at, _ = cursor
    assign.targets[0].elts[index] = ast.Name(at, ast.Store())
    value = assign.value.elts[index]
    assert isinstance(value, ast.Name)
    step = uses.rests.get(value.id, 0)
    assign.value.elts[index] = _plus(ast.Name(at, ast.Load()), step)
    return step > 0


def _rewrite_uses(uses: _Uses, cursor: tuple[str, str, str]) -> None:
    items, at, end = cursor
    for call, parent in uses.lengths:
        if isinstance(parent, ast.Compare) and parent.left is call and len(parent.ops) == 1 \
                and _small_int(parent.comparators[0]) is not None:
            n = _small_int(parent.comparators[0])
            if isinstance(parent.ops[0], ast.Eq):
                # len == n  ->  at + n == end
                parent.left, parent.comparators = _plus(ast.Name(at, ast.Load()), n), [ast.Name(end, ast.Load())]
                continue
            if isinstance(parent.ops[0], ast.GtE):
                # len >= n  ->  at + n <= end  (n == 1: at < end)
                parent.left = ast.Name(at, ast.Load()) if n == 1 else _plus(ast.Name(at, ast.Load()), n)
                parent.ops = [ast.Lt() if n == 1 else ast.LtE()]
                parent.comparators = [ast.Name(end, ast.Load())]
                continue
        _replace(parent, call, ast.BinOp(ast.Name(end, ast.Load()), ast.Sub(), ast.Name(at, ast.Load())))
    for sub in uses.items:
        sub.value = ast.Name(items, ast.Load())
        sub.slice = _plus(ast.Name(at, ast.Load()), _small_int(sub.slice))
    for site, parent, grandparent in uses.rest_sites:
        if isinstance(site, ast.Assign):
            _remove_statement(parent, site)
        elif isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
            parent.values.remove(site)
            if len(parent.values) == 1:
                _replace(grandparent, parent, parent.values[0])
        else:
            _replace(parent, site, ast.Constant(True))  # the echo alone: always true


def _bind_head(loop: ast.While, cursor: tuple[str, str, str], used: set[str]) -> None:
    """`[] => a, [x, ..] => b, [C(..), ..] => c` tests the list's end once and then reads its first
    item in every later arm. When the loop begins with `if at == end: ... else: ...`, the else
    branch knows an item is there: it reads it once into a name, and drops its `at < end` tests."""
    items, at, end = cursor
    first = next((s for s in loop.body if not _is_step(s)), None)
    if not (isinstance(first, ast.If) and first.orelse and _is_compare(first.test, at, ast.Eq, end)):
        return
    branch = ast.If(ast.Constant(True), first.orelse, [])  # a root to walk the branch from
    lead = branch.body[0]
    if isinstance(lead, ast.Assign) and len(lead.targets) == 1 and isinstance(lead.targets[0], ast.Name) \
            and _is_item(lead.value, items, at) and _stores(branch, lead.targets[0].id) == 1:
        head, read = lead.targets[0].id, []  # the arm already names the item: `[x, ..rest]`
        branch.body = branch.body[1:]
    else:
        head = _fresh(f"{items.removesuffix('_items')}_first", used)
        read = []
    read.append(ast.Assign([ast.Name(head, ast.Store())],
                           ast.Subscript(ast.Name(items, ast.Load()), ast.Name(at, ast.Load()), ast.Load())))
    for node, parent, _ in list(_positions(branch)):
        if _is_item(node, items, at):
            _replace(parent, node, ast.Name(head, ast.Load()))
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            kept = [v for v in node.values if not _is_compare(v, at, ast.Lt, end)]
            if len(kept) != len(node.values):
                node.values = kept or [ast.Constant(True)]
                if len(node.values) == 1:
                    _replace(parent, node, node.values[0])
    first.orelse = read + (branch.body or [ast.Pass()])


def _is_item(node: ast.AST, items: str, at: str) -> bool:
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == items \
        and isinstance(node.slice, ast.Name) and node.slice.id == at


def _stores(root: ast.AST, name: str) -> int:
    return sum(1 for n in ast.walk(root) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store))


def _is_compare(node: ast.AST, left: str, op: type, right: str) -> bool:
    return isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], op) \
        and isinstance(node.left, ast.Name) and node.left.id == left \
        and isinstance(node.comparators[0], ast.Name) and node.comparators[0].id == right


def _plus(name: ast.expr, n: int) -> ast.expr:
    return name if n == 0 else ast.BinOp(name, ast.Add(), ast.Constant(n))


def _replace(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for name, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, name, new)
            return
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new
                    return
    raise AssertionError("node not found under its parent")


def _remove_statement(parent: ast.AST, stmt: ast.stmt) -> None:
    for name in ("body", "orelse"):
        stmts = getattr(parent, name, None)
        if isinstance(stmts, list) and any(s is stmt for s in stmts):
            stmts[:] = [s for s in stmts if s is not stmt] or [ast.Pass()]
            return
    raise AssertionError("statement not found under its parent")


def iterate_lists(owner: list[ast.stmt]) -> None:
    """Walk a cursor with Python's own iteration when every round takes exactly the next item.

    After `walk_lists` and `sequential_rounds`, a loop such as `total` above reads

        xs_items, xs_at, xs_end = rt_cursor(xs)
        while True:
            if xs_at == xs_end:
                return acc
            else:
                x = xs_items[xs_at]
                xs_at = xs_at + 1
                acc = acc + x
                continue

    When the cursor is used for nothing else (the end test, the head's read, and `at = at + 1`
    right in every round that continues), the index is bookkeeping Python does faster itself:
    `for x in rt_items_from(xs_items, xs_at): ...` followed by the end's branch. Every path of a
    round must end in `return`, `continue` or `raise` (as lowered rounds do), or the rewrite is
    not made. Rewrites `owner` (a function body ending in the loop) in place."""
    loop = owner[-1] if owner else None
    if not isinstance(loop, ast.While):
        return
    setups = [s for s in owner[:-1] if _is_cursor_setup(s)]
    if len(setups) != 1:
        return
    items, at, end = (n.id for n in setups[0].targets[0].elts)
    steps = [s for s in loop.body if _is_step(s)]
    others = [s for s in loop.body if not _is_step(s)]
    if len(others) != 1:
        return
    first = others[0]
    if not (isinstance(first, ast.If) and first.orelse and _is_compare(first.test, at, ast.Eq, end)):
        return
    head = first.orelse[0]
    if not (isinstance(head, ast.Assign) and len(head.targets) == 1 and isinstance(head.targets[0], ast.Name)
            and _is_item(head.value, items, at)):
        return
    allowed = {id(first.test.left), id(first.test.comparators[0]), id(head.value.value), id(head.value.slice)}
    advances: list[tuple[list, ast.stmt]] = []
    for stmts in _blocks(loop):
        for stmt in stmts:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == at for t in stmt.targets):
                if not (_is_advance(stmt, at) and isinstance(stmts[-1], ast.Continue)):
                    return
                advances.append((stmts, stmt))
                allowed.update((id(stmt.targets[0]), id(stmt.value.left)))
    continues = sum(isinstance(n, ast.Continue) for n in ast.walk(loop))
    if not advances or len(advances) != continues:
        return
    if any(isinstance(n, ast.Name) and n.id in (items, at, end) and id(n) not in allowed for n in ast.walk(loop)):
        return
    if any(isinstance(n, ast.Continue) for s in first.body for n in ast.walk(s)) or not _ends(first.orelse[1:]):
        return
    for stmts, stmt in advances:
        stmts[:] = [s for s in stmts if s is not stmt]
    _drop_trailing_continues(first.orelse)
    each = ast.For(ast.Name(head.targets[0].id, ast.Store()),
                   ast.Call(ast.Name("rt_items_from", ast.Load()), [ast.Name(items, ast.Load()), ast.Name(at, ast.Load())], []),
                   steps + first.orelse[1:], [])
    owner[-1:] = [each, *first.body]


def _drop_trailing_continues(stmts: list[ast.stmt]) -> None:
    """A `continue` that ends the body of a `for` says nothing: drop it (and in the branches of
    an `if` that ends it), for readability."""
    if stmts and isinstance(stmts[-1], ast.Continue):
        stmts.pop()
        if not stmts:
            stmts.append(ast.Pass())
    elif stmts and isinstance(stmts[-1], ast.If):
        last = stmts[-1]
        _drop_trailing_continues(last.body)
        _drop_trailing_continues(last.orelse)
        if len(last.orelse) == 1 and isinstance(last.orelse[0], ast.Pass):
            last.orelse = []


def _is_cursor_setup(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple) \
        and len(stmt.targets[0].elts) == 3 and all(isinstance(n, ast.Name) for n in stmt.targets[0].elts) \
        and _is_call(stmt.value, "rt_cursor", 1)


def _is_advance(stmt: ast.Assign, at: str) -> bool:
    """`at = at + 1`."""
    value = stmt.value
    return len(stmt.targets) == 1 and isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) \
        and isinstance(value.left, ast.Name) and value.left.id == at \
        and isinstance(value.right, ast.Constant) and value.right.value == 1 and type(value.right.value) is int


def _ends(stmts: list[ast.stmt]) -> bool:
    """Whether every path through `stmts` ends in return, continue or raise."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, (ast.Return, ast.Continue, ast.Raise)):
        return True
    if isinstance(last, ast.If):
        return _ends(last.body) and _ends(last.orelse)
    return False


def carry_records(fn: ast.FunctionDef, used: set[str]) -> ast.FunctionDef:
    """Keep each record parameter of the loop in `fn` as one local per field, where that can be
    done (see the module docstring). `fn.body` ends with the loop; new names are added to `used`."""
    loop = fn.body[-1] if fn.body else None
    if not isinstance(loop, ast.While):
        return fn
    rounds = _parallel_rounds(loop)
    if not rounds:
        return fn
    params = {a.arg for a in fn.args.args}
    setup: list[ast.stmt] = []
    # Right to left: expanding one position shifts those after it.
    for index in range(len(rounds[0].targets[0].elts) - 1, -1, -1):
        name = rounds[0].targets[0].elts[index].id
        if name not in params:
            continue
        fields = _record_fields(name, index, loop, rounds)
        if fields is None:
            continue
        locals_ = [_fresh(f"{name}_{f}", used) for f in fields]
        for node, parent, _ in list(_positions(loop)):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == name:
                # p[k] is field k - 1: a record's fields follow its tag
                _replace(parent, node, ast.Name(locals_[_small_int(node.slice) - 1], ast.Load()))
        for assign in rounds:
            value = assign.value.elts[index]
            if isinstance(value, ast.Name):
                news = [ast.Name(local, ast.Load()) for local in locals_]
            else:
                news = list(value.elts[1:])  # the literal (tag, *fields), without its tag
            assign.targets[0].elts[index:index + 1] = [ast.Name(local, ast.Store()) for local in locals_]
            assign.value.elts[index:index + 1] = news
        setup[:0] = [ast.Assign([ast.Name(local, ast.Store())],
                                ast.Subscript(ast.Name(name, ast.Load()), ast.Constant(k), ast.Load()))
                     for k, local in enumerate(locals_, start=1)]
    fn.body[-1:-1] = setup
    return fn


def _parallel_rounds(loop: ast.While) -> list[ast.Assign] | None:
    """The assignments before each `continue`, when every one is a parallel assignment to the
    same names (and the loop holds no nested function that could see a parameter)."""
    found = _before_continues(loop, _is_parallel_assign)
    if found:
        names = [t.id for t in found[0].targets[0].elts]
        if any([t.id for t in a.targets[0].elts] != names for a in found):
            return None
    return found


def _record_fields(name: str, index: int, loop: ast.While, rounds: list[ast.Assign]) -> tuple | None:
    """The record's field names when parameter `name` can be carried as its fields: every round
    hands it on unchanged or as a record literal (all of one type), and every other use reads a
    field. None otherwise, or when no round builds a record (nothing to save)."""
    fields = None
    tag = None  # the literals' tag expression, dumped: all of one record type
    handed = set()
    for assign in rounds:
        value = assign.value.elts[index]
        if isinstance(value, ast.Name) and value.id == name:
            handed.add(id(value))
            continue
        marked = getattr(value, "flow_record_fields", None)
        if marked is None or fields not in (None, marked) or (tag is not None and ast.dump(value.elts[0]) != tag):
            return None
        fields, tag = marked, ast.dump(value.elts[0])
    if fields is None:
        return None
    targets = {id(a.targets[0].elts[index]) for a in rounds}
    for node, parent, _ in _positions(loop):
        if not isinstance(node, ast.Name) or node.id != name or id(node) in targets or id(node) in handed:
            continue
        if not (isinstance(parent, ast.Subscript) and parent.value is node and isinstance(parent.ctx, ast.Load)):
            return None
        k = _small_int(parent.slice)
        if k is None or not 1 <= k <= len(fields):  # a field, after the tag at 0
            return None
    return fields


def sequential_rounds(loop_owner: list[ast.stmt], used: set[str]) -> None:
    """Rewrite, in place, each `p1, p2 = (v1, v2)` that starts a round of the loop in `loop_owner`
    (a function body ending in `while True`) as single assignments."""
    loop = loop_owner[-1] if loop_owner else None
    if not isinstance(loop, ast.While):
        return
    for stmts in list(_blocks(loop)):
        for i in range(len(stmts) - 2, -1, -1):
            if isinstance(stmts[i + 1], ast.Continue) and _is_parallel_assign(stmts[i]):
                stmts[i:i + 1] = _sequential(stmts[i], used)


def _is_parallel_assign(stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return False
    target, value = stmt.targets[0], stmt.value
    return isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
        and len(target.elts) == len(value.elts) and all(isinstance(t, ast.Name) for t in target.elts)


def _sequential(assign: ast.Assign, used: set[str]) -> list[ast.stmt]:
    pairs = [(t.id, v) for t, v in zip(assign.targets[0].elts, assign.value.elts)
             if not (isinstance(v, ast.Name) and v.id == t.id)]  # a value handed back unchanged
    ordered = _reordered(pairs) if all(_cannot_fail(v) for _, v in pairs) else None
    if ordered is not None:
        out = [ast.Assign([ast.Name(t, ast.Store())], v) for t, v in ordered]
    else:
        out = _in_order(pairs, used)
    for stmt in out:
        ast.copy_location(stmt, assign)
    return out or [ast.copy_location(ast.Pass(), assign)]


def _reordered(pairs: list[tuple[str, ast.expr]]) -> list[tuple[str, ast.expr]] | None:
    """The assignments in an order where none replaces a value a later one still reads, or None
    when they read each other in a cycle (`a, b = (b, a)`). Only for values that cannot fail, so
    that which of them is computed first cannot be observed."""
    pending = list(pairs)
    out: list[tuple[str, ast.expr]] = []
    while pending:
        for i, (target, value) in enumerate(pending):
            if not any(target in _reads(other) for j, (_, other) in enumerate(pending) if j != i):
                out.append(pending.pop(i))
                break
        else:
            return None
    return out


def _in_order(pairs: list[tuple[str, ast.expr]], used: set[str]) -> list[ast.stmt]:
    """Assignments that compute the values left to right, as the Flow call does: values up to the
    last one that reads a target assigned before it go through temporaries first."""
    targets = [t for t, _ in pairs]
    last_conflict = -1
    for k, (_, value) in enumerate(pairs):
        if _reads(value) & set(targets[:k]):
            last_conflict = k
    early: list[ast.stmt] = []
    late: list[ast.stmt] = []
    for k, (target, value) in enumerate(pairs):
        if k <= last_conflict and not isinstance(value, ast.Constant):
            temp = _fresh(f"{target}_next", used)
            early.append(ast.Assign([ast.Name(temp, ast.Store())], value))
            value = ast.Name(temp, ast.Load())
        late.append(ast.Assign([ast.Name(target, ast.Store())], value))
    return early + late


#: Operators that cannot fault on the values the checker lets reach them (Int is unbounded; `/`
#: and `%` are `rt_` calls, which are not in this list).
_SAFE_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.USub, ast.Not, ast.And, ast.Or, ast.Eq, ast.NotEq,
                   ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _cannot_fail(value: ast.expr) -> bool:
    for node in ast.walk(value):
        if isinstance(node, (ast.Name, ast.Constant, ast.Load, ast.BinOp, ast.UnaryOp, ast.BoolOp,
                             ast.Compare, ast.Tuple)):
            continue
        if isinstance(node, _SAFE_OPERATORS):
            continue
        return False
    return True


def _reads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
