"""What a checked program says about a place in its source: for editors (`flow lsp`).

`Index(checked)` answers, for a file of the program and a 1-based line and column (code points,
as `Location`s count them):

- `at(file, line, column)`: the symbol written there (a local, a function, a type, a constructor,
  a record field or a module), its type as the user writes it, its doc comment and where it is
  declared (in the program's own modules or in std);
- `completions(file, line, column, line_text)`: the names that can be written there: after
  `name.`, a module's public members or a record's fields; else the locals in scope there, the
  module's and the prelude's functions, types and enum constructors, the modules
  imported, and the keywords.

It reads only what checking recorded (`Facts`, the resolved `Env`) and never reports anything.
Finding the node at a place walks down from the module through the nodes whose spans hold it,
so the cost is the depth of the tree there, not the size of the module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flowc import syntax as S
from flowc import types as T
from flowc.diagnostics import Location
from flowc.frontend import Checked
from flowc.program import PRELUDE, STD_DIR
from flowc.resolve import CtorInfo, FieldInfo, FnInfo, ModuleEnv, TypeInfo

KEYWORDS = ("use", "as", "pub", "type", "flow", "let", "guard", "else", "if", "match", "return", "true", "false")
#: A completion list longer than this is cut (and says so): a module of 20,000 constructors must
#: not make every keystroke send them all.
MAX_COMPLETIONS = 1000

#: Nodes that bind a name, and the nodes whose bindings are visible only inside them.
_BINDINGS = (S.Param, S.PBind, S.PField)
_SCOPES = (S.Block, S.Arm, S.Lambda, S.FnDecl)
_MEMBER_BEFORE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z0-9_]*)$")
_WORD_BEFORE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Symbol:
    kind: str  # local | function | type | constructor | field | module
    name: str
    detail: str  # its type or signature, as the user writes it
    doc: str | None
    definition: Location | None  # None for built-in types
    span: S.Span  # the reference under the cursor


@dataclass(frozen=True, slots=True)
class Completion:
    label: str
    kind: str  # local | function | type | constructor | field | module | keyword
    detail: str
    doc: str | None = None


@dataclass(frozen=True, slots=True)
class Completions:
    items: tuple[Completion, ...]
    complete: bool  # False when cut at MAX_COMPLETIONS


def source_path(display: str) -> str:
    """The file a module's display path names: std modules are files shipped with the compiler."""
    if display.startswith("std@"):
        version, _, rest = display.partition("/")
        return str(STD_DIR.parent / version.split("@", 1)[1] / rest)
    return display


class Index:
    """Questions about one checked program (see the module's doc)."""

    def __init__(self, checked: Checked) -> None:
        self.checked = checked
        self.env = checked.env
        self.facts = checked.facts
        self._binding_nodes: dict[int, int] | None = None

    # ---- the symbol at a place

    def at(self, file: str, line: int, column: int) -> Symbol | None:
        menv = self.module_env(file)
        if menv is None or self.facts is None:
            return None
        # The character at the place first; then what ends right before it (the caret just after
        # a name, where an editor asks for a definition or a completion).
        for inclusive in (False, True):
            chain = _nodes_at(menv.loaded.parsed.module, line, column, inclusive)
            for depth, node in enumerate(chain):
                parent = chain[depth + 1] if depth + 1 < len(chain) else None
                found = self._symbol(menv, node, parent, chain[depth + 1:], line, column)
                if found is not None:
                    return found
                if not isinstance(node, (S.CtorRef, S.TNamed)):
                    break  # only a name part of its parent (a record literal's type) defers to it
        return None

    def module_env(self, file: str) -> ModuleEnv | None:
        if self.env is None:
            return None
        for menv in self.env.modules.values():
            if menv.file == file:
                return menv
        return None

    def _symbol(self, menv: ModuleEnv, node, parent, outer: list, line: int, column: int) -> Symbol | None:
        facts = self.facts
        cls = node.__class__
        if cls is S.Var:
            ref = facts.refs.get(id(node))
            if ref is None:
                if node.name in menv.imports:
                    return self._module_symbol(menv, menv.imports[node.name], node.name, node.span)
                return None
            return self._ref_symbol(menv, ref, node.name, node.span)
        if cls is S.Member:
            ref = facts.refs.get(id(node))
            if ref is None:
                return None
            if ref[0] == "fn":
                return self._function_symbol(ref[1], node.span)
            record = facts.fields_read.get(id(node))
            if ref[0] == "field" and record is not None:
                return self._field_symbol(record, record.fields[ref[1]], node.span, facts.shown.get(id(node)))
            return None
        if cls in (S.CtorRef, S.RecordLit, S.PCtor):
            known = facts.ctors.get(id(node))
            if known is None:
                return None
            info, ctor = known
            if ctor is None:
                return self._type_symbol(info, node.span)
            return self._ctor_symbol(info, ctor, node.span)
        if cls is S.FieldInit or cls is S.PField:
            owner = facts.ctors.get(id(parent)) if parent is not None else None
            if owner is None:
                return None
            info, ctor = owner
            fields = ctor.fields if ctor is not None else info.fields
            for f in fields:
                if f.name == node.name:
                    return self._field_symbol(info, f, node.span, facts.shown.get(id(node)))
            return None
        if cls is S.TNamed:
            if node.qualifier is not None and _on_qualifier(node, line, column):
                identity = menv.imports.get(node.qualifier)
                return self._module_symbol(menv, identity, node.qualifier, node.span) if identity else None
            info = self._named_type(menv, node)
            if info is None:
                if node.name in T.SCALAR_TYPES or node.name in T.BUILTIN_GENERICS:
                    return Symbol("type", node.name, f"type {node.name} (built in)", None, None, node.span)
                return None
            return self._type_symbol(info, node.span)
        if cls is S.FnDecl:
            if not _holds(node.name_span, line, column):
                return None
            top = menv.fns.get(node.name)
            if top is not None and top.decl is node:
                return self._function_symbol(top, node.name_span)
            shown = facts.shown.get(id(node))
            if shown is None:
                return None
            return Symbol("function", node.name, _signature_text(node.name, node, shown), node.doc,
                          _location(menv.file, node.name_span), node.name_span)
        if cls is S.TypeDecl:
            info = menv.types.get(node.name)
            if info is None or not _holds(node.name_span, line, column):
                return None
            return self._type_symbol(info, node.name_span)
        if cls is S.CtorDecl:
            info = _enclosing_type(menv, outer)
            ctor = info.ctor(node.name) if info is not None else None
            return self._ctor_symbol(info, ctor, node.span) if ctor is not None else None
        if cls is S.FieldDecl:
            info = _enclosing_type(menv, outer)
            if info is None:
                return None
            holder = next((o for o in outer if isinstance(o, S.CtorDecl)), None)
            fields = info.fields
            if holder is not None:
                ctor = info.ctor(holder.name)
                fields = ctor.fields if ctor is not None else ()
            for f in fields:
                if f.name == node.name:
                    return self._field_symbol(info, f, node.span, None)
            return None
        if cls is S.Param or cls is S.PBind:
            shown = facts.shown.get(id(node))
            if shown is None:
                return None
            return Symbol("local", node.name, f"{node.name}: {T.show(shown)}", None,
                          _location(menv.file, node.span), node.span)
        if cls is S.Use:
            for imp in menv.loaded.imports:
                if imp.span == node.span:
                    return self._module_symbol(menv, imp.identity, imp.alias, node.span)
            return None
        return None

    def _ref_symbol(self, menv: ModuleEnv, ref: tuple, name: str, span: S.Span) -> Symbol | None:
        if ref[0] == "fn":
            return self._function_symbol(ref[1], span)
        if ref[0] != "local":
            return None
        local = ref[1]
        node_id = self._binding_node_of(local)
        shown = self.facts.shown.get(node_id) if node_id is not None else None
        where = _location(menv.file, local.span)  # a local is declared in the module that uses it
        if local.fn is not None:
            sig = shown if shown is not None else local.type
            return Symbol("function", name, _signature_text(name, local.fn.decl, sig), local.fn.decl.doc, where, span)
        text = T.show(shown if shown is not None else local.type)
        return Symbol("local", name, f"{name}: {text}", None, where, span)

    def _binding_node_of(self, local) -> int | None:
        if self._binding_nodes is None:
            self._binding_nodes = {id(v): k for k, v in self.facts.bindings.items()}
        return self._binding_nodes.get(id(local))

    def _function_symbol(self, fn: FnInfo, span: S.Span) -> Symbol:
        owner = self.env.modules.get(fn.module)
        where = _location(owner.file, fn.decl.name_span) if owner is not None else None
        qualified = fn.name if fn.module in (PRELUDE,) else f"{_short(fn.module)}.{fn.name}"
        text = _signature_text(qualified, fn.decl, fn.sig)
        if fn.tool:
            text = "@tool " + text
        return Symbol("function", fn.name, text, fn.decl.doc, where, span)

    def _type_symbol(self, info: TypeInfo, span: S.Span) -> Symbol:
        owner = self.env.modules.get(info.module)
        decl = info.decl
        where = _location(owner.file, decl.name_span) if owner is not None and decl is not None else None
        params = f"<{', '.join(p.name for p in info.params)}>" if info.params else ""
        if info.kind == "record":
            body = ", ".join(f"{f.name}: {T.show(f.type)}" for f in info.fields[:12])
            body = " { " + body + (", .." if len(info.fields) > 12 else "") + " }"
        elif info.kind == "enum":
            body = " { " + ", ".join(_ctor_text(c) for c in info.ctors[:12]) + (", .." if len(info.ctors) > 12 else "") + " }"
        else:
            body = ""
        prefix = "@tool type" if info.kind == "host" else "type"
        return Symbol("type", info.name, f"{prefix} {T.display_name(info.identity)}{params}{body}",
                      decl.doc if decl is not None else None, where, span)

    def _ctor_symbol(self, info: TypeInfo, ctor: CtorInfo, span: S.Span) -> Symbol:
        owner = self.env.modules.get(info.module)
        where = _location(owner.file, ctor.span) if owner is not None else None
        doc = None
        if info.decl is not None and ctor.index < len(info.decl.ctors):
            doc = info.decl.ctors[ctor.index].doc
        params = f"<{', '.join(p.name for p in info.params)}>" if info.params else ""
        return Symbol("constructor", ctor.name, f"{_ctor_text(ctor)} -> {T.display_name(info.identity)}{params}",
                      doc, where, span)

    def _field_symbol(self, info: TypeInfo, f: FieldInfo, span: S.Span, read: T.Type | None) -> Symbol:
        owner = self.env.modules.get(info.module)
        where = _location(owner.file, f.span) if owner is not None else None
        shown = T.show(read if read is not None else f.type)
        return Symbol("field", f.name, f"{T.display_name(info.identity)}.{f.name}: {shown}", f.doc, where, span)

    def _module_symbol(self, menv: ModuleEnv, identity: str | None, alias: str, span: S.Span) -> Symbol | None:
        target = self.env.modules.get(identity) if identity else None
        if target is None:
            return None
        written = next((item for item in menv.loaded.parsed.module.items if isinstance(item, S.Use)
                        and any(i.span == item.span and i.alias == alias for i in menv.loaded.imports)), None)
        text = f"use \"{written.path}\"" + (f" as {written.alias}" if written.alias else "") if written else \
            f"use \"{identity}\""
        doc = _module_doc(target.loaded.parsed.module)
        return Symbol("module", alias, f"{text} (module {identity})", doc, Location(target.file, 1, 1, 1, 1), span)

    def _named_type(self, menv: ModuleEnv, node: S.TNamed) -> TypeInfo | None:
        if node.qualifier is None:
            return menv.types.get(node.name) or self.env.prelude().types.get(node.name)
        identity = menv.imports.get(node.qualifier)
        target = self.env.modules.get(identity) if identity else None
        return target.types.get(node.name) if target is not None else None

    # ---- completion

    def completions(self, file: str, line: int, column: int, line_text: str) -> Completions:
        """What may be written at `line:column`, whose line reads `line_text` (the buffer's text
        now, which may be newer than what was checked)."""
        menv = self.module_env(file)
        if menv is None:
            return Completions(tuple(Completion(k, "keyword", "keyword") for k in KEYWORDS), True)
        before = line_text[:max(0, column - 1)]
        member = _MEMBER_BEFORE.search(before)
        if member is not None:
            head, typed = member.group(1), member.group(2)
            items = self._member_completions(menv, head, line, column)
            return _finish(items, typed)
        typed_match = _WORD_BEFORE.search(before)
        typed = typed_match.group(0) if typed_match else ""
        return _finish(self._name_completions(menv, line, column), typed)

    def _member_completions(self, menv: ModuleEnv, head: str, line: int, column: int) -> list[Completion]:
        local = self._local_named(menv, head, line, column)
        if local is None and head in menv.imports:
            target = self.env.modules.get(menv.imports[head])
            if target is None:
                return []
            return self._module_members(target, public_only=target.identity != menv.identity)
        if local is None or self.facts is None:
            return []
        shown = self.facts.shown.get(id(local))
        if shown is None:
            return []
        if isinstance(shown, T.TTuple):
            return [Completion(str(i), "field", T.show(t)) for i, t in enumerate(shown.items)]
        if isinstance(shown, T.TCon):
            info = self.env.types.get(shown.name)
            if info is not None and info.kind == "record":
                mapping = {p.name: a for p, a in zip(info.params, shown.args)}
                return [Completion(f.name, "field", T.show(T.substitute(f.type, mapping)), f.doc)
                        for f in info.fields if f.pub or info.module == menv.identity]
        return []

    def _module_members(self, target: ModuleEnv, public_only: bool) -> list[Completion]:
        out: list[Completion] = []
        for fn in target.fns.values():
            if fn.pub or not public_only:
                out.append(Completion(fn.name, "function", _signature_text(fn.name, fn.decl, fn.sig), fn.decl.doc))
        for info in target.types.values():
            if not info.pub and public_only:
                continue
            out.append(Completion(info.name, "type", f"type {T.display_name(info.identity)}",
                                  info.decl.doc if info.decl is not None else None))
            out.extend(_ctor_completions(info))
        return out

    def _name_completions(self, menv: ModuleEnv, line: int, column: int) -> list[Completion]:
        out: list[Completion] = []
        seen: set[str] = set()

        def add(item: Completion) -> None:
            if item.label not in seen:
                seen.add(item.label)
                out.append(item)

        for node in reversed(self._bindings_in_scope(menv, line, column)):  # the innermost of a name first
            shown = self.facts.shown.get(id(node))
            detail = T.show(shown) if shown is not None else ""
            add(Completion(node.name, "local", f"{node.name}: {detail}" if detail else node.name))
        for members in (self._module_members(menv, public_only=False),
                        self._module_members(self.env.prelude(), public_only=True)):
            for item in members:
                add(item)
        for alias, identity in sorted(menv.imports.items()):
            add(Completion(alias, "module", f"use \"{identity}\""))
        for name in (*T.SCALARS, *T.BUILTIN_GENERICS):
            add(Completion(name, "type", f"type {name} (built in)"))
        for keyword in KEYWORDS:
            add(Completion(keyword, "keyword", "keyword"))
        return out

    def _enclosing_item(self, menv: ModuleEnv, line: int):
        for item in menv.loaded.parsed.module.items:
            if item.span.line <= line <= item.span.end_line:
                return item
        return None

    def _bindings_in_scope(self, menv: ModuleEnv, line: int, column: int) -> list:
        """The bindings visible at `line:column`, in the order they are declared: the parameters
        of the functions and lambdas around it, the names of the match arms around it and of the
        `let`s and local functions before it in the blocks around it. The tree is the checked one,
        which may be older than the buffer (while a line is typed): its scopes are as it has them."""
        item = self._enclosing_item(menv, line)
        if item is None or self.facts is None:
            return []
        here = (line, column)
        visible = []
        # (node, the span its bindings are visible in, the place they are visible from: a `let`'s
        # names only after the `let`, others from where they are written)
        stack: list[tuple[object, S.Span, tuple[int, int] | None]] = [(item, item.span, None)]
        while stack:
            node, scope, after = stack.pop()
            cls = node.__class__
            if cls in _BINDINGS and id(node) in self.facts.shown or cls is S.FnDecl and node is not item:
                start = node.name_span if cls is S.FnDecl else node.span
                if (after or (start.line, start.column)) <= here and _holds(scope, line, column):
                    visible.append(node)
            if cls in _SCOPES:
                scope = node.span
            for name in node.__dataclass_fields__:  # type: ignore[attr-defined]
                if name in ("span", "name_span"):
                    continue
                value = getattr(node, name)
                from_here = (node.span.end_line, node.span.end_column) if cls is S.Let and name == "pattern" else after
                for child in value if isinstance(value, tuple) else (value,):
                    if hasattr(child, "__dataclass_fields__"):
                        stack.append((child, scope, from_here))
        visible.sort(key=lambda n: (n.span.line, n.span.column))
        return visible

    def _local_named(self, menv: ModuleEnv, name: str, line: int, column: int):
        named = [n for n in self._bindings_in_scope(menv, line, column) if n.name == name]
        return named[-1] if named else None


# ---- helpers -----------------------------------------------------------------------------------


def _nodes_at(module: S.Module, line: int, column: int, inclusive: bool) -> list:
    """The nodes whose spans hold `line:column` (`inclusive`: or end right before it), innermost
    first (ties: the deeper node first)."""
    found: list = []

    def into(node) -> bool:
        span = getattr(node, "span", None)
        return span is not None and _holds(span, line, column, inclusive=True)

    for node in S.walk(module.items, into=into):
        span = getattr(node, "span", None)
        if span is not None and _holds(span, line, column, inclusive) and not isinstance(node, S.Comment):
            found.append(node)
    # The walk yields a parent before its children: reversed, a stable sort by size puts the
    # deeper of two nodes of one size (a shorthand field and its binding) first.
    found.reverse()
    found.sort(key=_size)
    return found


def _size(node) -> tuple[int, int]:
    span = node.span
    return (span.end_line - span.line, span.end_column - span.column if span.end_line == span.line else span.end_column)


def _holds(span: S.Span, line: int, column: int, inclusive: bool = True) -> bool:
    after_start = (line, column) >= (span.line, span.column)
    before_end = (line, column) <= (span.end_line, span.end_column) if inclusive else \
        (line, column) < (span.end_line, span.end_column)
    return after_start and before_end


def _on_qualifier(node: S.TNamed, line: int, column: int) -> bool:
    return line == node.span.line and column <= node.span.column + len(node.qualifier or "")


def _enclosing_type(menv: ModuleEnv, outer: list) -> TypeInfo | None:
    decl = next((o for o in outer if isinstance(o, S.TypeDecl)), None)
    return menv.types.get(decl.name) if decl is not None else None


def _location(file: str, span: S.Span) -> Location:
    return Location(file, span.line, span.column, span.end_line, span.end_column)


def _short(identity: str) -> str:
    return identity.rsplit("/", 1)[-1]


def _effect_mark(effect) -> str:
    if effect == T.TOOL:
        return " !tool"
    if isinstance(effect, T.EffParam):
        return f" !{effect.name}"
    return ""


def _signature_text(name: str, decl: S.FnDecl, sig: T.Type) -> str:
    if not isinstance(sig, T.TFun):
        return f"{name}: {T.show(sig)}"
    tparams = ""
    if decl.type_params:
        tparams = "<" + ", ".join(p.name + (": " + " + ".join(p.bounds) if p.bounds else "")
                                  for p in decl.type_params) + ">"
    params = ", ".join(f"{p.name}: {T.show(t)}" for p, t in zip(decl.params, sig.params))
    return f"flow {name}{tparams}({params}) -> {T.show(sig.ret)}{_effect_mark(sig.effect)}"


def _ctor_text(ctor: CtorInfo) -> str:
    if ctor.form == "positional":
        return f"{ctor.name}({', '.join(T.show(a) for a in ctor.args)})"
    if ctor.form == "named":
        return f"{ctor.name} {{ {', '.join(f'{f.name}: {T.show(f.type)}' for f in ctor.fields)} }}"
    return ctor.name


def _ctor_completions(info: TypeInfo) -> list[Completion]:
    if info.kind != "enum":
        return []
    owner = T.display_name(info.identity)
    out = []
    for index, ctor in enumerate(info.ctors):
        doc = info.decl.ctors[index].doc if info.decl is not None and index < len(info.decl.ctors) else None
        out.append(Completion(ctor.name, "constructor", f"{_ctor_text(ctor)} -> {owner}", doc))
    return out


def _module_doc(module: S.Module) -> str | None:
    """A module's doc: the `///` lines it opens with, before its first blank line."""
    lines: list[str] = []
    expected = 1
    for comment in module.comments:
        if comment.span.line != expected or not comment.text.startswith("///"):
            break
        lines.append(comment.text[3:].strip())
        expected += 1
    return "\n".join(lines) or None


def _finish(items: list[Completion], typed: str) -> Completions:
    lowered = typed.lower()
    chosen = [c for c in items if c.label.lower().startswith(lowered)] if typed else items
    if len(chosen) > MAX_COMPLETIONS:
        return Completions(tuple(chosen[:MAX_COMPLETIONS]), False)
    return Completions(tuple(chosen), True)
