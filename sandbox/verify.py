"""Static verification of generated modules, before RestrictedPython sees them.

`verify(source, filename)` parses the module and walks every node once, against the frozen
`flowdata.policy.POLICY`. It returns a list of `Refusal` facts (empty when the module is
acceptable); it never raises for bad input and never runs anything.

The walk checks, in this order for each node:

1. the node kind is in `policy.allowed_nodes` (default deny: a kind nobody listed is refused);
2. per-kind rules: no decorators, no annotations, attributes and items are read but never
   written, `*` only in assignment targets, no `**`, constants of the listed types only, `+=`
   and friends only on plain names;
3. names (read, bound, defined or parameters): not starting with `_`, not in
   `policy.forbidden_names`, not binding an injected prefix (`rt_`, `i_`, `m_`), and, when read
   but bound nowhere in the module, carrying an injected prefix;
4. attributes: not starting with `_`, not in `policy.forbidden_attributes` (which includes
   `format` and `format_map`: `"{0.__class__}".format(x)` walks attributes at run time).

Flow's compiler emits only what the policy allows, so a refusal means the compiler or the file
was altered; every hint says so and what to do. Scoping is deliberately coarse for rule 3: a
name bound anywhere in the module counts as bound everywhere; CPython's own NameError covers
the rest at run time, since the sandbox has no builtins.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from flowdata.policy import POLICY, Policy

# Messages (kept here as constants; the walk only picks one and fills it in).
ALTERED = (
    "if you see this, the compiler or the generated file was altered: rebuild the module with "
    "`flowc build`, and report a compiler bug if the refusal persists"
)
NEVER = "generated code never {does}; " + ALTERED

NODE_HINTS: dict[str, str] = {
    "Import": "imports; other modules are reached through the injected `m_<module>` globals",
    "ImportFrom": "imports; other modules are reached through the injected `m_<module>` globals",
    "ClassDef": "defines classes; records and enums are plain data built by `rt_` helpers",
    "Try": "catches exceptions; faults travel to the scheduler untouched",
    "TryStar": "catches exceptions; faults travel to the scheduler untouched",
    "Raise": "raises directly; faults are raised by `rt_` helpers",
    "Assert": "uses assert; `require` is compiled to an `rt_` call",
    "With": "uses `with`",
    "AsyncWith": "uses `async with`",
    "Lambda": "uses lambda; local functions are emitted as nested `def`",
    "Delete": "deletes names, items or attributes",
    "Global": "declares globals; module state is never rebound",
    "Nonlocal": "declares nonlocals; closures only read their free names",
    "JoinedStr": "uses f-strings; text is built with `rt_` helpers",
    "FormattedValue": "uses f-strings; text is built with `rt_` helpers",
    "For": "uses `for` (other than over `rt_items_from(...)`); loops are `while True:` with `break`",
    "AsyncFor": "uses `async for`",
    "ListComp": "uses comprehensions; loops are `while True:` with `break`",
    "SetComp": "uses comprehensions; loops are `while True:` with `break`",
    "DictComp": "uses comprehensions; loops are `while True:` with `break`",
    "GeneratorExp": "uses generator expressions; loops are `while True:` with `break`",
    "Set": "writes set literals (their order depends on the hash seed); sets are `rt_` values",
    "AsyncFunctionDef": "defines async functions; effects are yielded to the scheduler",
    "Await": "awaits; effects are yielded to the scheduler",
    "Match": "uses `match`; patterns are compiled to `if`/`elif` chains",
    "AnnAssign": "annotates assignments",
    "Pow": "uses `**`",
}

# Node kinds that only occur inside another kind (an import's alias, a try's handler): when the
# enclosing node is already refused, refusing these too would only repeat the same finding.
SUBORDINATE_KINDS = frozenset({
    "alias", "withitem", "ExceptHandler", "comprehension", "match_case", "Del", "TypeIgnore",
    "FormattedValue",
    "MatchValue", "MatchSingleton", "MatchSequence", "MatchMapping", "MatchClass", "MatchStar",
    "MatchAs", "MatchOr",
})

SNIPPET_WIDTH = 60


@dataclass(frozen=True, slots=True)
class Refusal:
    """One thing the sandbox refuses: where it is, what it is, and what to do about it."""

    filename: str
    line: int
    column: int
    what: str
    hint: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}:{self.column}: refused {self.what}\n  hint: {self.hint}"


class SandboxRefusal(Exception):
    """Generated code was refused before it ran; `refusals` lists every finding."""

    def __init__(self, refusals: list[Refusal] | tuple[Refusal, ...]):
        self.refusals: tuple[Refusal, ...] = tuple(refusals)
        count = len(self.refusals)
        head = f"sandbox refused {count} thing{'s' if count != 1 else ''} in generated code"
        super().__init__("\n".join([head, *(str(r) for r in self.refusals)]))


def verify(source: str, filename: str, policy: Policy = POLICY) -> list[Refusal]:
    """Refusals for `source` (empty when it may be loaded). Parses; never executes."""
    tree, refusals = parse_and_verify(source, filename, policy)
    return refusals


def parse_and_verify(
    source: str, filename: str, policy: Policy = POLICY
) -> tuple[ast.Module | None, list[Refusal]]:
    """Parse and verify; the tree is returned so the loader need not parse twice."""
    try:
        tree = ast.parse(source, filename, "exec")
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 0
        column = getattr(exc, "offset", None) or 0
        message = getattr(exc, "msg", None) or str(exc)
        hint = "the generated file does not parse; " + ALTERED
        return None, [Refusal(filename, line, column, f"syntax error: {message}", hint)]
    return tree, verify_tree(tree, filename, policy)


def verify_tree(tree: ast.Module, filename: str, policy: Policy = POLICY) -> list[Refusal]:
    """Refusals for an already parsed module (the tree is not modified)."""
    walker = _Walker(filename, policy)
    walker.visit(tree, None, (1, 0), inside_refused=False)
    walker.check_free_reads()
    unique = sorted(set(walker.refusals), key=lambda r: (r.line, r.column, r.what))
    return unique


def _snippet(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # an unparsable fragment still gets a refusal, just without a snippet
        return type(node).__name__
    first = text.splitlines()[0] if text else ""
    if len(first) > SNIPPET_WIDTH or "\n" in text:
        first = first[:SNIPPET_WIDTH].rstrip() + " ..."
    return first


class _Walker:
    """One walk over the whole tree. A read of a name is allowed when the module binds the name
    anywhere (a def, a parameter, an assignment target), which the walk knows only at its end:
    such reads are noted (`free_reads`) and judged then (`check_free_reads`), so the tree is
    walked once rather than once for its bound names and again for the rest."""

    def __init__(self, filename: str, policy: Policy):
        self.filename = filename
        self.policy = policy
        #: every name the module binds anywhere
        self.bound: set[str] = set()
        #: (name, position, what) of each read of a name neither injected nor refused otherwise
        self.free_reads: list[tuple[str, tuple[int, int], str]] = []
        self.refusals: list[Refusal] = []

    # -- recording ---------------------------------------------------------------------------

    def refuse(self, pos: tuple[int, int], what: str, does: str) -> None:
        self.refusals.append(Refusal(self.filename, pos[0], pos[1], what, NEVER.format(does=does)))

    # -- the walk ----------------------------------------------------------------------------

    def visit(self, node: ast.AST, parent: ast.AST | None, pos: tuple[int, int],
              inside_refused: bool) -> None:
        if hasattr(node, "lineno"):
            pos = (node.lineno, node.col_offset)
        kind = type(node).__name__
        refused = kind not in self.policy.allowed_nodes
        if refused and not (inside_refused and kind in SUBORDINATE_KINDS):
            self.refuse_kind(node, parent, kind, pos)
        check = _CHECKS.get(kind)
        if check is not None:
            check(self, node, pos)
        inside = inside_refused or refused
        # ast.iter_child_nodes written out: a generator per node cost a fifth of the walk.
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, ast.AST):
                self.visit(value, node, pos, inside)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit(item, node, pos, inside)

    def refuse_kind(self, node: ast.AST, parent: ast.AST | None, kind: str,
                    pos: tuple[int, int]) -> None:
        does = NODE_HINTS.get(kind, f"contains `{kind}` nodes")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            what = f"import `{_snippet(node)}`"
        elif isinstance(node, (ast.stmt, ast.expr)):
            what = f"{kind} `{_snippet(node)}`"
        elif parent is not None:
            what = f"`{kind}` in `{_snippet(parent)}`"
        else:
            what = f"`{kind}`"
        self.refuse(pos, what, does)

    # -- names -------------------------------------------------------------------------------

    def check_name(self, name: str, pos: tuple[int, int], binds: bool, what: str) -> None:
        policy = self.policy
        if name.startswith("_"):
            self.refuse(
                pos, f"{what} `{name}`",
                "uses names starting with `_` (they reach Python's internals and the guards)",
            )
        elif name in policy.forbidden_names:
            self.refuse(
                pos, f"{what} `{name}`",
                f"uses `{name}` (the sandbox has no builtins; Flow reaches the outside only "
                "through Tools)",
            )
        elif binds and name.startswith(policy.injected_prefixes):
            self.refuse(
                pos, f"{what} `{name}`",
                "binds names with the injected prefixes "
                f"{', '.join(policy.injected_prefixes)} (they would shadow the loader's globals)",
            )
        elif binds:
            self.bound.add(name)
        elif policy.free_names_must_be_injected and not name.startswith(policy.injected_prefixes):
            self.free_reads.append((name, pos, what))

    def check_free_reads(self) -> None:
        """After the walk: refuse each noted read of a name the module binds nowhere."""
        bound = self.bound
        for name, pos, what in self.free_reads:
            if name not in bound:
                self.refuse(
                    pos, f"{what} `{name}`",
                    "reads a global it does not define unless the loader injects it "
                    f"(prefixes {', '.join(self.policy.injected_prefixes)}); `{name}` is neither",
                )

    def check_Name(self, node: ast.Name, pos: tuple[int, int]) -> None:
        self.check_name(node.id, pos, binds=not isinstance(node.ctx, ast.Load), what="name")

    def check_arg(self, node: ast.arg, pos: tuple[int, int]) -> None:
        self.check_name(node.arg, pos, binds=True, what="parameter")
        if node.annotation is not None:
            self.refuse(pos, f"annotation `{_snippet(node.annotation)}`", "writes annotations")

    def check_FunctionDef(self, node: ast.FunctionDef, pos: tuple[int, int]) -> None:
        self.check_name(node.name, pos, binds=True, what="function name")
        for decorator in node.decorator_list:
            self.refuse(
                (decorator.lineno, decorator.col_offset),
                f"decorator `@{_snippet(decorator)}`", "uses decorators",
            )
        if node.returns is not None:
            self.refuse(pos, f"annotation `-> {_snippet(node.returns)}`", "writes annotations")

    check_AsyncFunctionDef = check_FunctionDef

    def check_For(self, node: ast.For, pos: tuple[int, int]) -> None:
        # The one `for` generated code has (flowc/loops.py, iterate_lists): over a list's items,
        # into one plain name.
        it = node.iter
        if not (isinstance(node.target, ast.Name) and not node.orelse and isinstance(it, ast.Call)
                and isinstance(it.func, ast.Name) and it.func.id == "rt_items_from" and len(it.args) == 2
                and not it.keywords and all(isinstance(a, ast.Name) for a in it.args)):
            self.refuse(pos, f"For `{_snippet(node)}`", NODE_HINTS["For"])

    def check_ClassDef(self, node: ast.ClassDef, pos: tuple[int, int]) -> None:
        self.check_name(node.name, pos, binds=True, what="class name")

    def check_keyword(self, node: ast.keyword, pos: tuple[int, int]) -> None:
        if node.arg is None:
            self.refuse(pos, f"`**{_snippet(node.value)}` in a call", "unpacks `**` into calls")
        elif node.arg.startswith("_"):
            self.refuse(
                pos, f"keyword argument `{node.arg}`",
                "uses names starting with `_` (they reach Python's internals and the guards)",
            )

    # -- attributes and items ----------------------------------------------------------------

    def check_Attribute(self, node: ast.Attribute, pos: tuple[int, int]) -> None:
        attr = node.attr
        if attr.startswith("_"):
            self.refuse(
                pos, f"attribute `{attr}` in `{_snippet(node)}`",
                "reads attributes starting with `_` (they reach classes, frames and globals)",
            )
        elif attr in self.policy.forbidden_attributes and attr in ("format", "format_map"):
            self.refuse(
                pos, f"attribute `{attr}` in `{_snippet(node)}`",
                f"calls str.{attr} (a format string such as \"{{0.__class__}}\" walks "
                "attributes at run time); text is built with `rt_` helpers",
            )
        elif attr in self.policy.forbidden_attributes:
            self.refuse(
                pos, f"attribute `{attr}` in `{_snippet(node)}`",
                f"reads `{attr}` (it reaches frames, code or the class hierarchy)",
            )
        if not isinstance(node.ctx, ast.Load):
            self.refuse(pos, f"assignment to attribute `{_snippet(node)}`", "writes attributes")

    def check_Subscript(self, node: ast.Subscript, pos: tuple[int, int]) -> None:
        if not isinstance(node.ctx, ast.Load):
            self.refuse(pos, f"assignment to item `{_snippet(node)}`", "writes items in place")

    def check_Starred(self, node: ast.Starred, pos: tuple[int, int]) -> None:
        if not isinstance(node.ctx, ast.Store):
            self.refuse(
                pos, f"`*` unpacking `{_snippet(node)}` outside an assignment target",
                "unpacks `*` into calls or literals",
            )

    def check_Dict(self, node: ast.Dict, pos: tuple[int, int]) -> None:
        for key, value in zip(node.keys, node.values):
            if key is None:
                self.refuse(pos, f"`**{_snippet(value)}` in a dict literal", "unpacks `**` into dicts")

    def check_AugAssign(self, node: ast.AugAssign, pos: tuple[int, int]) -> None:
        if not isinstance(node.target, ast.Name):
            self.refuse(
                pos, f"augmented assignment `{_snippet(node)}`",
                "updates attributes or items in place",
            )

    def check_Constant(self, node: ast.Constant, pos: tuple[int, int]) -> None:
        type_name = type(node.value).__name__
        if type_name not in self.policy.allowed_constant_types:
            self.refuse(
                pos, f"constant `{_snippet(node)}` of type {type_name}",
                f"writes {type_name} literals (allowed: "
                f"{', '.join(sorted(self.policy.allowed_constant_types))})",
            )


#: node kind -> its check (`check_<kind>`), looked up once per node
_CHECKS = {name[len("check_"):]: method for name, method in vars(_Walker).items()
           if name.startswith("check_") and name not in ("check_name", "check_free_reads")}
