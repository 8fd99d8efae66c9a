"""Parse one Flow module: text in, a `syntax.Module` and diagnostics out.

Over 800 lines, on purpose: the tree builder of every grammar rule, the fast LALR driver that
calls them and the nesting bounds it enforces are kept in one module because the driver binds
the builders by rule once (a measured third of parsing; docs/impl.md, Speed machinery); the
tables themselves are built in lalr.py.

The grammar is LALR(1) with lark's contextual lexer, and the tree is built while parsing, so no
intermediate lark tree is made and a deeply nested input costs no Python recursion here. Comments
are collected as they are lexed: `///` comments become the `doc` of the declaration, field or
constructor on the next line, and all comments are kept for the formatter.

There are two drivers of the one grammar and the one builder. The fast path (`flowc.lalr`) runs
lark's own tables (parse table, per-state lexers), cached as plain data, without importing lark;
it refuses anything unusual (a syntax error, a chained comparison), and reports nesting past the
bounds (`MAX_NESTING`, `MAX_STACK`) itself. lark itself (an inline transformer over the same
builder) then parses a refused piece, so every other diagnostic, message and recovery is lark's.
Both produce the same tree: tests/test_parse_fast.py compares them.

Error recovery works at the level of top-level items: when a module does not parse, it is cut at
every line that starts a declaration in column 1 and each piece is parsed alone, so each broken
declaration reports its own first error while the others still parse.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import re
import sys
import threading
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from operator import itemgetter
from pathlib import Path
from types import SimpleNamespace

from flowc import lalr
from flowc import syntax as S
from flowc.cachedir import cache_folder
from flowc.diagnostics import Diagnostic, Location
from flowc.diagnostics import M
from flowc.lalr import Tok
from flowc.records import maker, record

GRAMMAR_PATH = Path(__file__).with_name("grammar") / "flow.lark"

#: A maker for each syntax node class, by name (`make.Var(name, span)`): the tree builder makes a
#: node and a span at nearly every reduction, and a maker does it at about half the cost of calling
#: the class (see `records.maker`).
make = SimpleNamespace(**{name: maker(value) for name, value in vars(S).items()
                          if isinstance(value, type) and hasattr(value, "__dataclass_fields__")
                          and value.__module__ == S.__name__})

#: Brackets (`( [ { <`) may nest this deep; deeper input is refused with `nesting-too-deep`
#: before any later stage walks it (later stages recurse, and no Flow program needs more). The
#: bound is what generated Python can take: code generation nests Python brackets and blocks as
#: the Flow ones nest, and CPython refuses more than 200 nested brackets and 100 indentation
#: levels (docs/language.md, 3.5.1 "Limits").
MAX_NESTING = 64

#: Nesting without brackets (`- - x`, `return return x`, `flow() = flow() = x`, `else if` chains,
#: `flow() -> flow() -> T`) shows only in the parser's stack of states, which every kind of
#: nesting grows by one to five states a level: the stack may be this deep.
MAX_STACK = 4 * MAX_NESTING

#: The tokens that nest what follows them (lalr.NEST), by their text.
_NESTING_WORDS = frozenset({"-", "!", "return", "flow", "else", "->", "if", "match"})

#: Operators in one chain (`a + b + ... `), and postfixes (`x.a.b`, `f()()`, `r??`): the chain is
#: a tree as deep as it is long.
MAX_CHAIN = 1000


@record
class Parsed:
    """A parsed module. `module` holds every item that parsed, even when there are errors."""

    file: str
    source: str
    module: S.Module
    diagnostics: tuple[Diagnostic, ...]
    #: identifiers written in declarations that did not parse: a reference to one of them is not
    #: reported as undefined (it was lost to the syntax error, which is reported).
    lost: frozenset[str] = frozenset()

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)


def parse(source: str, file: str = "<input>") -> Parsed:
    """Parse the text of one module."""
    state = _State(file, source)
    _local.state = state
    with _no_gc():
        try:
            module = _parse_module(source, state)
        finally:
            _local.state = None
    return Parsed(file, source, module, tuple(state.diagnostics), frozenset(state.lost))


@contextmanager
def _no_gc():
    """Parsing makes a large tree of objects that outlive it (every later stage reads the tree)
    and next to no garbage. With the collector on, the young collections would scan the growing
    tree again and again, and the full ones everything the process holds; that cost about a third
    of the time of parsing a large module. So the collector is off while parsing, and the new tree
    is then moved straight to the oldest generation (`gc.freeze` and `unfreeze` move objects
    without scanning them) rather than being scanned twice on its way there. Objects someone else
    froze are left frozen: then the tree is not moved."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if collecting:
            gc.enable()


def parse_expression(source: str, file: str = "<input>") -> tuple[S.Expr | None, tuple[Diagnostic, ...]]:
    """Parse a single expression (used by tests and tools)."""
    state = _State(file, source)
    _local.state = state
    try:
        expr = _parse_chunk(source, "expr_s", state, 1)
    finally:
        _local.state = None
    return expr, tuple(state.diagnostics)


# ---- parser construction -----------------------------------------------------------------------


class _State:
    def __init__(self, file: str, source: str) -> None:
        self.file = file
        self.source = source
        self.lines: list[str] | None = None
        self.comments: list = []  # tokens: lalr.Tok, or lark's Token from the lark path
        self.diagnostics: list[Diagnostic] = []
        self.lost: set[str] = set()
        #: id(node) -> (node, length) for a postfix node (`x.a`, `f(x)`, `r?`) on another: how
        #: long its chain is. The node is held so that its id is not reused while parsing.
        self.chains: dict[int, tuple] = {}

    def line_text(self, line: int) -> str:
        if self.lines is None:
            self.lines = self.source.split("\n")
        return self.lines[line - 1] if 0 < line <= len(self.lines) else ""

    def location(self, line: int, column: int, end_line: int, end_column: int) -> Location:
        return Location(self.file, line, column, end_line, end_column)


_local = threading.local()


def _collect_comment(token):
    state: _State | None = getattr(_local, "state", None)
    if state is not None:
        state.comments.append(token)
    return token


class _Postlex:
    """Marks a `(` that starts a line, so that it begins a new expression instead of calling the
    previous line's, and refuses nesting deeper than MAX_NESTING."""

    always_accept = ()

    # flowc.lalr.Parser does the same for the fast path (see `_fast_parser`).
    def process(self, stream):
        from lark import Token

        prev_end_line = 0
        depth = 0
        keywords = _keyword_terminals()
        for token in stream:
            kind = token.type
            if kind == "NAME" and token.value in keywords:
                # The contextual lexer would read a keyword as a name where a name fits
                # (`let type = 1`); keywords are reserved everywhere.
                token = Token.new_borrow_pos(keywords[token.value], token.value, token)
                kind = token.type
            if kind == "_LPAR" and token.line > prev_end_line:
                token = Token.new_borrow_pos("_NL_LPAR", token.value, token)
            if kind in ("_LPAR", "LSQB", "LBRACE", "LESSTHAN"):
                depth += 1
                if depth > MAX_NESTING:
                    raise _TooDeep(token)
            elif kind in ("RPAR", "RSQB", "RBRACE", "MORETHAN"):
                depth -= 1
            prev_end_line = token.end_line
            yield token


_KEYWORDS: dict[str, str] = {}


def _keyword_terminals() -> dict[str, str]:
    if not _KEYWORDS:
        for t in _get_parser().terminals:
            if t.pattern.type == "str" and t.pattern.value.isidentifier():
                _KEYWORDS[t.pattern.value] = t.name
    return _KEYWORDS


class _Chained(Exception):
    """`a < b < c`: a syntax error raised from the tree builder, so the declaration is dropped
    like any other that does not parse."""

    def __init__(self, first: Tok, second: Tok) -> None:
        super().__init__("comparisons do not chain")
        self.first = first
        self.second = second


class _TooDeep(Exception):
    """Nesting past a bound; `kind` says which: None (brackets and type arguments), "postfix"
    or "operators" (a chain), "stack" (the fast parser's stack)."""

    def __init__(self, token, kind: str | None = None) -> None:
        super().__init__("nesting too deep")
        self.kind = kind
        self.token = token


_parser_lock = threading.Lock()
_parser = None


def _get_parser():
    """lark's parser of the grammar (imported and loaded on first use: the fast path needs it only
    to build its tables once, and to report syntax errors)."""
    global _parser
    with _parser_lock:
        if _parser is None:
            import lark

            _parser = lark.Lark(
                GRAMMAR_PATH.read_text(encoding="utf-8"),
                parser="lalr",
                lexer="contextual",
                start=["module", "expr_s"],
                maybe_placeholders=True,
                keep_all_tokens=True,
                transformer=_BUILD,
                postlex=_Postlex(),
                lexer_callbacks={"COMMENT": _collect_comment},
                cache=_cache_path(),
            )
        return _parser


def _cache_path() -> str | bool:
    """The built parser is cached beside the user's other caches (start-up matters for `flow check`)."""
    import hashlib

    import lark

    digest = hashlib.sha256(GRAMMAR_PATH.read_bytes() + lark.__version__.encode()).hexdigest()[:16]
    folder = _cache_folder()
    return os.path.join(folder, f"flow-parser-{digest}.lark-cache") if folder else False


def _cache_folder() -> str | None:
    """The user's flow cache folder, else the temporary folder when that one is writable."""
    folder = cache_folder()
    if folder is not None:
        return folder
    import tempfile

    folder = tempfile.gettempdir()
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


# ---- the fast path -----------------------------------------------------------------------------


_fast_lock = threading.Lock()
_fast: lalr.Parser | bool | None = None  # False: there is none

#: What `_parse_fast` returns when the fast path does not take the input.
_REFUSED = object()


def _parse_fast(text: str, start: str, state: _State, line: int, column: int):
    """The tree of `text` by the fast path, or _REFUSED with nothing recorded in `state`.

    Besides what the fast path refuses on purpose, any failure of it falls back to lark: a bug
    here must not cost a user more than time (tests/test_parse_fast.py checks that it takes every
    program that parses)."""
    parser = _fast if _fast is not None else _fast_parser()
    if not parser:
        return _REFUSED
    comments, diagnostics = len(state.comments), len(state.diagnostics)
    try:
        return parser.run(text, start, state.comments, line, column)
    except (lalr.TooDeep, _TooDeep) as too_deep:
        # Not a refusal: this is the chunk's verdict, as lark's would be. Lark keeps the comments
        # it lexed before the token it stopped at; so does this (the fast lexer may have read on).
        stop = too_deep.token
        state.comments[comments:] = [c for c in state.comments[comments:]
                                     if (c.line, c.column) < (stop.line, stop.column)]
        del state.diagnostics[diagnostics:]
        kind = getattr(too_deep, "kind", None)
        if isinstance(too_deep, lalr.TooDeep) and not too_deep.brackets:
            kind = "stack"
        state.diagnostics.append(_too_deep(state, too_deep.token, kind))
        return None
    except Exception:  # lalr.Refused, _Chained, RecursionError, ...
        del state.comments[comments:]
        del state.diagnostics[diagnostics:]
        return _REFUSED


def _fast_parser() -> lalr.Parser | bool:
    """The fast parser, from the tables of lark's parser of the grammar (lark builds them the
    first time; they are cached by the grammar, lark's version and the tables' format). False
    when it cannot be made for another reason (a bug): lark then parses everything, as it did
    before there was a fast path. A lark release outside `lalr.SUPPORTED_LARK` is refused."""
    global _fast
    with _fast_lock:
        if _fast is None:
            try:
                _fast = _make_fast_parser()
            except lalr.Unsupported:
                raise  # a lark it does not know: fail loudly (pyproject.toml pins lark)
            except Exception as problem:  # noqa: BLE001 - slower, not wrong
                import warnings

                warnings.warn(f"flowc: parsing without the fast parser ({problem!r})", RuntimeWarning)
                _fast = False
        return _fast


def _make_fast_parser() -> lalr.Parser:
    import hashlib

    version = _lark_version()
    lalr.check_lark(version)
    grammar = GRAMMAR_PATH.read_bytes()
    key = hashlib.sha256(b"\0".join([grammar, version.encode(), str(lalr.FORMAT).encode()]))
    key = key.hexdigest()[:16]
    folder = _cache_folder()
    path = os.path.join(folder, f"flow-lalr-{key}.marshal") if folder else None
    data = lalr.load(path, key) if path else None
    if data is None:
        data = lalr.tables(_get_parser())
        if path:
            lalr.save(path, key, data)
    # The postlexer, as `_Postlex` does it for lark.
    keywords = {value: name for name, value in data["literals"].items() if value.isidentifier()}
    postlex = {"NAME": lalr.KEYWORD, "_LPAR": lalr.OPEN_AT_LINE_START, "LSQB": lalr.OPEN,
               "LBRACE": lalr.OPEN, "LESSTHAN": lalr.OPEN, "RPAR": lalr.CLOSE, "RSQB": lalr.CLOSE,
               "RBRACE": lalr.CLOSE, "MORETHAN": lalr.CLOSE}
    postlex.update({name: lalr.NEST for name, value in data["literals"].items() if value in _NESTING_WORDS})
    return lalr.Parser(data, _reducers(data["rules"]), postlex=postlex, keywords=keywords,
                       line_start={"_LPAR": "_NL_LPAR"}, max_depth=MAX_NESTING, max_stack=MAX_STACK,
                       collect=frozenset({"COMMENT"}))


def _lark_version() -> str:
    """lark's version, read from its source without importing it (that takes longer than parsing
    a small file)."""
    from importlib.util import find_spec

    try:
        spec = find_spec("lark")
        source = Path(spec.origin).read_text(encoding="utf-8") if spec and spec.origin else ""
    except (ImportError, OSError, ValueError):
        return ""
    found = re.search(r"""^__version__\s*(?::[^=]*)?=\s*["']([^"']+)""", source, re.MULTILINE)
    return found.group(1) if found else ""


# ---- driving the parser and recovering ---------------------------------------------------------


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ITEM_START = re.compile(r"^(?:use\b|pub\b|type\b|flow\b|@|///)", re.MULTILINE)


def _parse_module(source: str, state: _State) -> S.Module:
    before = len(state.diagnostics)
    module = _parse_chunk(source, "module", state, 1)
    if module is not None:
        return _with_comments(module, state)
    # Recover: parse each top-level declaration alone, keeping what parses.
    del state.diagnostics[before:]
    state.comments.clear()
    starts = _chunk_starts(source)
    items: list[S.Item] = []
    for index, start in enumerate(starts):
        end = starts[index + 1] if index + 1 < len(starts) else len(source)
        chunk = source[start:end]
        if not chunk.strip():
            continue
        first_line = source.count("\n", 0, start) + 1
        part = _parse_chunk(chunk, "module", state, first_line)
        if part is not None:
            items.extend(part.items)
        else:
            state.lost.update(_IDENTIFIER.findall(chunk))
    if len(state.diagnostics) == before:
        # Cutting at column-1 keywords can split an item whose body starts a line with one; the
        # whole-module error is then the honest report.
        _parse_chunk(source, "module", state, 1)
        state.lost.update(_IDENTIFIER.findall(source))
        items = []
    span = make.Span(1, 1, source.count("\n") + 1, 1)
    return _with_comments(make.Module(tuple(items), (), span), state)


def _chunk_starts(source: str) -> list[int]:
    starts = [0]
    previous_doc = False
    for match in _ITEM_START.finditer(source):
        is_doc = match.group(0) == "///"
        if match.start() != 0 and not previous_doc:
            starts.append(match.start())
        # A doc comment belongs to the declaration after it: do not cut between them.
        previous_doc = is_doc and _line_end_is_comment(source, match.start())
    return starts


def _line_end_is_comment(source: str, start: int) -> bool:
    return source.startswith("///", start)


def _with_comments(module: S.Module, state: _State) -> S.Module:
    comments = tuple(make.Comment(t.value, _token_span(t)) for t in state.comments)
    return make.Module(module.items, comments, module.span)


def _too_deep(state: _State, token, kind: str | None = None) -> Diagnostic:
    if kind == "stack":
        said = M.nesting_too_deep_stack()
    elif kind is not None:
        said = M.nesting_too_deep_chain(limit=MAX_CHAIN, of=kind)
    else:
        said = M.nesting_too_deep_brackets_limit(limit=MAX_NESTING)
    return said.at(_token_location(state, token))


def _parse_chunk(text: str, start: str, state: _State, first_line: int):
    tree = _parse_fast(text, start, state, first_line, 1)
    if tree is not _REFUSED:
        return tree
    from lark.exceptions import UnexpectedInput, VisitError

    padded = "\n" * (first_line - 1) + text if first_line > 1 else text
    try:
        return _get_parser().parse(padded, start=start)
    except _TooDeep as too_deep:
        state.diagnostics.append(_too_deep(state, too_deep.token, getattr(too_deep, "kind", None)))
    except VisitError as visit:
        if isinstance(visit.orig_exc, _TooDeep):
            state.diagnostics.append(_too_deep(state, visit.orig_exc.token, visit.orig_exc.kind))
        else:
            raise
    except UnexpectedInput as problem:
        state.diagnostics.append(_syntax_diagnostic(problem, state, padded))
    except _Chained as chained:
        state.diagnostics.append(M.syntax_error_chained_comparison(first=chained.first.value,
                                                                   second=chained.second.value).at(_token_location(state, chained.second)))
    except RecursionError:
        state.diagnostics.append(M.nesting_too_deep_expression().at(state.location(first_line, 1, first_line, 2)))
    return None


# ---- syntax error messages ---------------------------------------------------------------------

_TOKEN_NAMES = {
    "NAME": "a name", "UPPER": "a type or constructor name", "QUPPER": "a qualified name",
    "INT": "an integer", "DECIMAL": "a decimal", "DURATION": "a duration", "TEXT": "text",
    "LPAR": "`(`", "_LPAR": "`(`", "_NL_LPAR": "`(`", "RPAR": "`)`", "LSQB": "`[`", "RSQB": "`]`",
    "LBRACE": "`{`", "RBRACE": "`}`", "COMMA": "`,`", "COLON": "`:`", "DOT": "`.`", "EQUAL": "`=`",
    "MORETHAN": "`>`", "LESSTHAN": "`<`", "__ANON_0": "`->`", "$END": "the end of the file",
    "CMP": "a comparison", "PLUS": "`+`", "MINUS": "`-`", "STAR": "`*`", "SLASH": "`/`",
    "PERCENT": "`%`", "CONCAT": "`++`", "OROR": "`||`", "ANDAND": "`&&`", "BANG": "`!`",
    "DOTDOT": "`..`", "QMARK": "`?`", "AT": "`@`", "VBAR": "`|`", "WILD": "`_`",
}


def _describe_terminal(name: str) -> str:
    if name in _TOKEN_NAMES:
        return _TOKEN_NAMES[name]
    terminal = _terminal_patterns().get(name)
    if terminal is not None:
        return f"`{terminal}`"
    return name.lower()


_patterns_cache: dict[str, str] = {}


def _terminal_patterns() -> dict[str, str]:
    if not _patterns_cache:
        for t in _get_parser().terminals:
            if t.pattern.type == "str":
                _patterns_cache[t.name] = t.pattern.value
    return _patterns_cache


def _syntax_diagnostic(problem, state: _State, text: str) -> Diagnostic:
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

    if isinstance(problem, UnexpectedCharacters):
        line, column = problem.line, problem.column
        char = text[problem.pos_in_stream] if problem.pos_in_stream < len(text) else ""
        loc = state.location(line, column, line, column + 1)
        if char == '"':
            return M.text_unterminated().at(loc)
        shown = char if char.isprintable() else f"U+{ord(char):04X}"
        return M.syntax_error_character(shown=shown).at(loc)
    if isinstance(problem, UnexpectedEOF):
        line = text.count("\n") + 1
        column = len(text) - (text.rfind("\n") + 1) + 1
        expected = sorted({_describe_terminal(t) for t in problem.expected})
        return M.syntax_error_end_of_file(expected=expected).at(state.location(line, column, line, column + 1))
    assert isinstance(problem, UnexpectedToken)
    token = problem.token
    expected = sorted({_describe_terminal(t) for t in problem.expected if not t.startswith("_NL")})
    if token.type == "$END":
        line = text.count("\n") + 1
        column = len(text) - (text.rfind("\n") + 1) + 1
        return M.syntax_error_end_of_file(expected=expected).at(state.location(line, column, line, column + 1))
    return M.syntax_error_token(token=str(token.value), token_type=token.type, expected=expected).at(
        _token_location(state, token))


def _token_location(state: _State, token) -> Location:
    return state.location(token.line, token.column, token.end_line or token.line,
                          token.end_column or token.column + 1)


def _token_span(token) -> S.Span:
    return make.Span(token.line, token.column, token.end_line, token.end_column)


# ---- building the tree -------------------------------------------------------------------------
#
# The parser calls a builder method at each reduction, so no lark tree is built. Every token is
# kept (`keep_all_tokens`) so that a node's span runs from its first token to its last, brackets
# and keywords included; `_build` computes the span and drops punctuation before the method sees
# the children. lark calls it through `_wrap` (its inline transformer); the fast path through the
# reducers of `_reducers`, which do the same with what is known of each rule in advance.

#: Token kinds that carry meaning; every other token is punctuation or a keyword.
_MEANINGFUL = frozenset({
    "NAME", "UPPER", "QUPPER", "INT", "DECIMAL", "DURATION", "TEXT", "PUB", "TRUE", "FALSE", "WILD",
    "OROR", "ANDAND", "CMP", "CONCAT", "PLUS", "MINUS", "STAR", "SLASH", "PERCENT", "BANG", "DOTDOT",
})


def _start_of(item):
    if type(item) is Tok:
        return (item.line, item.column)
    span = getattr(item, "span", None)
    return (span.line, span.column) if span is not None and span is not S.NO_SPAN else None


def _end_of(item):
    if type(item) is Tok:
        return (item.end_line, item.end_column)
    span = getattr(item, "span", None)
    return (span.end_line, span.end_column) if span is not None and span is not S.NO_SPAN else None


def _build(method, children: list):
    start = end = None
    for child in children:
        start = _start_of(child)
        if start is not None:
            break
    for child in reversed(children):
        end = _end_of(child)
        if end is not None:
            break
    span = make.Span(start[0], start[1], end[0], end[1]) if start and end else S.NO_SPAN
    kept = [c for c in children if type(c) is not Tok or c.type in _MEANINGFUL]
    return method(span, kept)


def _wrap(method):
    """The callback lark calls. Its tokens (a `str` subclass; nothing else here is a str) become
    `Tok`s, so the builder sees the fast path's tokens either way."""

    def callback(children):
        return _build(method, [Tok(c.type, c.value, c.line, c.column, c.end_line, c.end_column)
                               if isinstance(c, str) else c for c in children])

    return callback


def _reducers(rules: list, builder=None) -> list:
    """For the fast path, one reducer per rule (see `lalr.Parser`), doing what lark's tree builder
    does around the same builder methods: splice the children of inlined `_rules`, put None where an
    optional `[...]` is missing, pass a `?rule`'s single child up, then what `_build` does.

    What `_build` finds by looking at the children is mostly known from the rule: which child
    starts and which ends the span, which children are punctuation. A reducer does only what is
    left to look at (an optional child that may be empty, the tokens inside a spliced list).
    `builder` (tests) stands in for the builder: its attributes are the methods, by rule alias."""
    if builder is None:
        builder = _Builder()
        builder.__dict__["lambda"] = builder.lambda_
    by_origin: dict[str, list] = {}
    for rule in rules:
        by_origin.setdefault(rule[0], []).append(rule)

    def kept(symbol) -> bool:
        name, is_term, filter_out = symbol
        return not (is_term and filter_out)

    # An inlined rule that is always one kept token (`_lp`, `_binop`) passes the token itself up:
    # spliced into its parent it is that token.
    one_token = {origin for origin, group in by_origin.items()
                 if origin.startswith("_") and all(len(r[1]) == 1 and r[1][0][1] and not r[4]
                                                   and (r[6] or kept(r[1][0])) for r in group)}
    spliced = {origin for origin in by_origin if origin.startswith("_") and origin not in one_token}
    nullable: set[str] = set()
    while True:
        grown = {r[0] for r in rules if r[0] not in nullable
                 and all(not is_term and name in nullable for name, is_term, _ in r[1])}
        if not grown:
            break
        nullable |= grown

    def token_kinds(name: str, is_term: bool) -> set[str] | None:
        """The kinds of token at a position, or None when it holds a node (or a spliced list)."""
        if is_term:
            return {name}
        if name in one_token:
            return {r[1][0][0] for r in by_origin[name]}
        return None

    # The kinds of token a spliced list may hold.
    inner_kinds: dict[str, set[str]] = {origin: set() for origin in spliced}
    while True:
        changed = False
        for origin in spliced:
            for rule in by_origin[origin]:
                for name, is_term, _ in rule[1]:
                    kinds = inner_kinds.get(name, set()) if name in spliced else token_kinds(name, is_term) or set()
                    if not kinds <= inner_kinds[origin]:
                        inner_kinds[origin] |= kinds
                        changed = True
        if not changed:
            break

    # What is sure to be at each end of a spliced list: "token", "node" (with a span), or None.
    edges: dict[tuple[str, int], str | None] = {}

    def edge(origin: str, side: int, seen: frozenset = frozenset()) -> str | None:
        if (origin, side) in edges:
            return edges[origin, side]
        found = set()
        for rule in by_origin[origin]:
            symbols = [symbol for symbol in rule[1] if rule[6] or kept(symbol)]
            if not symbols or rule[4]:
                found.add(None)
                continue
            name, is_term, _ = symbols[side]
            if name == origin:
                continue  # `__items: __items "," item` ends as the shorter list does
            if token_kinds(name, is_term) is not None:
                found.add("token")
            elif name in spliced:
                found.add(edge(name, side, seen | {origin}) if name not in seen | {origin} else None)
            else:
                found.add(None if name in nullable else "node")
        edges[origin, side] = found.pop() if len(found) == 1 else None
        return edges[origin, side]

    reducers: list = []
    for origin, expansion, alias, expand1, empty_indices, template_source, keep_all in rules:
        size = len(expansion)
        if empty_indices:
            marks = "".join(str(int(b)) for b in empty_indices)
            nones = [len(ones) for ones in marks.split("0")]
        else:
            nones = [0] * (size + 1)
        include = []
        pending = 0
        for index, symbol in enumerate(expansion):
            pending += nones[index]
            if keep_all or kept(symbol):
                include.append((index, symbol[0] in spliced, pending))
                pending = 0
        trailing = pending + nones[size]
        plain = trailing == 0 and include == [(index, False, 0) for index in range(size)]

        if origin in one_token:
            reducers.append(None)
            continue
        if origin in spliced:
            if expand1:
                raise ValueError(f"inlined rule {origin} is also a ?rule")
            reducers.append(_splicer(include, trailing, plain))
            continue
        single = expand1 and not alias
        if single and size == 1 and plain:
            reducers.append(None)
            continue
        name = alias or template_source or origin
        method = getattr(builder, name, None)
        if method is None:
            raise ValueError(f"no builder method for rule {origin} ({name})")
        if single:
            reducers.append(_generic_reducer(method, include, trailing, single))
            continue
        if not include and not trailing:
            reducers.append(_empty_reducer(method))
            continue

        # Where the span starts: the first child that is sure to have a position, after any that
        # may be empty (each then looked at); a spliced list counts by its first element (its last,
        # for the end) when that is sure. Otherwise, or after a placeholder, look at all children.
        def ends(order, side: int) -> tuple | None:
            candidates = []
            for index, splice, _ in order:
                symbol, is_term, _ = expansion[index]
                if splice:
                    sure = edge(symbol, side)
                    if sure is None:
                        return None
                    candidates.append((index, sure == "token", side))
                    return tuple(candidates)
                is_token = token_kinds(symbol, is_term) is not None
                candidates.append((index, is_token, None))
                if is_token or symbol not in nullable:
                    return tuple(candidates)
            return None

        firsts = ends(include, 0)
        lasts = ends(list(reversed(include)), -1)
        if firsts is None or lasts is None or trailing or include[0][2]:
            reducers.append(_generic_reducer(method, include, trailing, single))
            continue
        # What the method sees: (index, what) with what one of "keep", "drop", "splice" (the list
        # as it is), "filter" (the list less its punctuation), or an int (that many Nones first).
        steps = []
        for index, splice, nones_before in include:
            if nones_before:
                steps.append((index, nones_before))
            symbol, is_term, _ = expansion[index]
            if splice:
                steps.append((index, "filter" if inner_kinds[symbol] - _MEANINGFUL else "splice"))
                continue
            kinds = token_kinds(symbol, is_term)
            if kinds is None or kinds <= _MEANINGFUL:
                steps.append((index, "keep"))
            elif kinds & _MEANINGFUL:
                steps = None  # punctuation or not depending on the token
                break
            else:
                steps.append((index, "drop"))
        if steps is None:
            reducers.append(_generic_reducer(method, include, trailing, single))
            continue
        reducers.append(_planned_reducer(method, firsts, lasts, steps, size))
    return reducers


def _splicer(include: list, trailing: int, plain: bool):
    """The children of an inlined rule, as a list its parent splices (lark's ChildFilterLALR)."""
    if plain:
        return lambda children: children
    if trailing == 0 and include[0] == (0, True, 0) and all(not s and not n for _, s, n in include[1:]):
        # left recursion, as `__items: __items "," item`: grow the left list in place
        if len(include) == 2:
            def grow_one(children):
                spliced = children[0]
                spliced.append(children[1])
                return spliced

            return grow_one

        def grow(children):
            spliced = children[0]
            spliced += children[1:]
            return spliced

        return grow
    return lambda children: _filtered(children, include, trailing)


def _filtered(children: list, include: list, trailing: int) -> list:
    result: list = []
    for index, splice, nones in include:
        if nones:
            result += [None] * nones
        if splice:
            if result:
                result += children[index]
            else:
                result = children[index]
        else:
            result.append(children[index])
    if trailing:
        result += [None] * trailing
    return result


def _generic_reducer(method, include: list, trailing: int, single: bool):
    def reduce(children):
        children = _filtered(children, include, trailing)
        if single and len(children) == 1:
            return children[0]
        return _build(method, children)

    return reduce


def _empty_reducer(method):
    """A rule of no children: no span (what `_build` gives an empty list)."""
    return lambda children: method(S.NO_SPAN, [])


def _planned_reducer(method, firsts: tuple, lasts: tuple, steps: list, size: int):
    """A reducer for a rule whose span ends and punctuation are known (see `_reducers`)."""
    Span = make.Span
    NO_SPAN = S.NO_SPAN
    pick = _picker(steps, size)

    if len(firsts) == 1 and len(lasts) == 1 and firsts[0][2] is None and lasts[0][2] is None:
        (first_index, first_token, _), = firsts
        (last_index, last_token, _), = lasts
        if pick is None:
            def reduce(children):
                first = children[first_index] if first_token else children[first_index].span
                last = children[last_index] if last_token else children[last_index].span
                return method(Span(first.line, first.column, last.end_line, last.end_column), children)
        else:
            def reduce(children):
                first = children[first_index] if first_token else children[first_index].span
                last = children[last_index] if last_token else children[last_index].span
                return method(Span(first.line, first.column, last.end_line, last.end_column), pick(children))
        return reduce

    def end_of(children, candidates):
        for index, is_token, side in candidates:
            found = children[index] if side is None else children[index][side]
            if is_token:
                return found
            found = found.span
            if found is not NO_SPAN:
                return found
        return found

    pick = pick or (lambda children: children)

    def reduce(children):
        first = end_of(children, firsts)
        last = end_of(children, lasts)
        return method(Span(first.line, first.column, last.end_line, last.end_column), pick(children))

    return reduce


def _picker(steps: list, size: int):
    """From a rule's children, what its builder method sees (as `_reducers` plans it: each step
    is (index, what)); None when that is the children as they are. Worked out once per rule: a
    reduction only runs the result (the methods take any sequence, so a tuple may stand for a
    list)."""
    whats = [what for _, what in steps]
    if all(what == "keep" for what in whats) and len(steps) == size:
        return None
    if all(what in ("keep", "drop") for what in whats):
        kept = [index for index, what in steps if what == "keep"]
        if not kept:
            return lambda children: ()
        if len(kept) == 1:
            only, = kept
            return lambda children: (children[only],)
        return itemgetter(*kept)
    spliced = [index for index, what in steps if what == "splice"]
    if len(spliced) == 1 and all(what in ("keep", "drop", "splice") for what in whats):
        # keeps around one list (`block: "{" stmt* "}"`, `call`): the list with them around it
        index = spliced[0]
        before = [i for i, what in steps if what == "keep" and i < index]
        after = [i for i, what in steps if what == "keep" and i > index]
        if not before and not after:
            return itemgetter(index)
        if before == [0] and not after and index == 1:
            return lambda children: [children[0], *children[1]]
    return lambda children: _picked(children, steps)


def _picked(children: list, steps: list) -> list:
    result: list = []
    for index, what in steps:
        if what == "keep":
            result.append(children[index])
        elif what == "splice":
            result += children[index]
        elif what == "filter":
            result += [c for c in children[index] if type(c) is not Tok or c.type in _MEANINGFUL]
        elif what != "drop":
            result += [None] * what
    return result


def _state() -> _State:
    return _local.state


_POSTFIX = (S.Member, S.Call, S.Try)


def _chained(node, inner, where) -> None:
    """`node` is a postfix on the postfix `inner`: a chain like `x.a.b` or `f()()` is a tree as
    deep as it is long, and is held to MAX_CHAIN as an operator chain is."""
    chains = _state().chains
    known = chains.get(id(inner))
    length = known[1] + 1 if known is not None else 2
    if length > MAX_CHAIN:
        raise _TooDeep(where, "postfix")
    chains[id(node)] = (node, length)


def _doc_before(line: int) -> str | None:
    """The `///` lines directly above `line` (each alone on its line), joined."""
    state = _state()
    if state is None:
        return None
    docs: list[str] = []
    current = line - 1
    while current >= 1:
        text = state.line_text(current).strip()
        if not text.startswith("///"):
            break
        body = text[3:]
        docs.append(body[1:] if body.startswith(" ") else body)
        current -= 1
    if not docs:
        return None
    return "\n".join(reversed(docs))


def _member_doc(span: S.Span) -> str | None:
    """A field's or constructor's doc comment: only when the member starts its own line (a
    member on its type's line shares no doc with the type)."""
    state = _state()
    if state is None or state.line_text(span.line)[:span.column - 1].strip():
        return None
    return _doc_before(span.line)


def _tokens(children, kind: str) -> list[Tok]:
    return [c for c in children if type(c) is Tok and c.type == kind]


def _split_qualified(token: Tok) -> tuple[str | None, str]:
    text = token.value
    if token.type == "QUPPER":
        qualifier, name = text.split(".", 1)
        return qualifier, name
    return None, text


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "$": "$", "0": "\0"}
_DURATION_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000,
                   "h": 3_600_000_000_000, "d": 86_400_000_000_000}
_DURATION_RE = re.compile(r"([0-9_.]+)(ns|us|ms|s|m|h|d)$")

#: Binding power of each binary operator; comparisons do not chain.
_PRECEDENCE = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3,
               "+": 4, "-": 4, "++": 4, "*": 5, "/": 5, "%": 5}


class _Builder:
    """Builds syntax nodes; the grammar's aliases name these methods one to one."""

    # -- module and declarations

    def module(self, span, items):
        return make.Module(tuple(items), (), span)

    def use_decl(self, span, children):
        text, alias = children[0], (children[1].value if len(children) > 1 else None)
        return make.Use(_decode_plain_text(text), alias, span)

    def attrs(self, span, children):
        return _Group(tuple(children), span)

    def attr_plain(self, span, children):
        return make.Attr(children[0].value, None, span)

    def attr_target(self, span, children):
        names = _tokens(children, "NAME")
        return make.Attr(names[0].value, tuple(c.value for c in names[1:]), span)

    def type_decl(self, span, children):
        attrs = children[0].items
        pub = bool(_tokens(children, "PUB"))
        name_token = _tokens(children, "UPPER")[0]
        params: tuple = ()
        kind, fields, ctors = "host", (), ()
        for child in children[1:]:
            if isinstance(child, _Group):
                params = child.items
            elif isinstance(child, _Body):
                kind, fields, ctors = child.kind, child.fields, child.ctors
        return make.TypeDecl(name_token.value, params, kind, fields, ctors, pub, attrs,
                          _doc_before(span.line), span, _token_span(name_token))

    def type_params(self, span, children):
        return _Group(tuple(children), span)

    def type_param(self, span, children):
        names = _tokens(children, "UPPER")
        return make.TypeParam(names[0].value, tuple(c.value for c in names[1:]), span)

    def empty_body(self, span, children):
        return _Body("record", (), (), span)

    def record_body(self, span, children):
        return _Body("record", tuple(children), (), span)

    def enum_body(self, span, children):
        return _Body("enum", (), tuple(children), span)

    def field_decl(self, span, children):
        pub = bool(_tokens(children, "PUB"))
        name = _tokens(children, "NAME")[0]
        return make.FieldDecl(name.value, children[-1], pub, _member_doc(span), span)

    def named_field(self, span, children):
        return make.FieldDecl(children[0].value, children[1], True, _member_doc(span), span)

    def ctor_bare(self, span, children):
        return make.CtorDecl(children[0].value, "bare", (), (), _member_doc(span), span)

    def ctor_positional(self, span, children):
        return make.CtorDecl(children[0].value, "positional", tuple(children[1:]), (), _member_doc(span), span)

    def ctor_named(self, span, children):
        return make.CtorDecl(children[0].value, "named", (), tuple(children[1:]), _member_doc(span), span)

    def fn_decl(self, span, children):
        attrs = children[0].items
        pub = bool(_tokens(children, "PUB"))
        head: _FnHead = next(c for c in children if isinstance(c, _FnHead))
        last = children[-1]
        body = None if last is head or last is None or type(last) is Tok else last
        return make.FnDecl(head.name, head.type_params, head.params, head.ret, head.effect, body, pub, attrs,
                        _doc_before(span.line), span, head.name_span)

    def fn_head(self, span, children):
        name = children[0]
        rest = [c for c in children[1:] if c is not None]
        type_params: tuple = ()
        if rest and isinstance(rest[0], _Group):
            type_params = rest[0].items
            rest = rest[1:]
        effect = None
        if rest and isinstance(rest[-1], _Effect):
            effect = rest[-1].name
            rest = rest[:-1]
        return _FnHead(name.value, type_params, tuple(rest[:-1]), rest[-1], effect, _token_span(name), span)

    def param(self, span, children):
        return make.Param(children[0].value, children[1], span)

    def effect(self, span, children):
        return _Effect(_tokens(children, "NAME")[0].value, span)

    # -- types

    def t_named(self, span, children):
        args = children[1].items if len(children) > 1 and children[1] is not None else ()
        return make.TNamed(children[0].value, None, args, span)

    def t_qualified(self, span, children):
        qualifier, name = _split_qualified(children[0])
        args = children[1].items if len(children) > 1 and children[1] is not None else ()
        return make.TNamed(name, qualifier, args, span)

    def type_args(self, span, children):
        return _Group(tuple(children), span)

    def t_fn(self, span, children):
        children = [c for c in children if c is not None]
        effect = None
        if children and isinstance(children[-1], _Effect):
            effect = children[-1].name
            children = children[:-1]
        return make.TFn(tuple(children[:-1]), children[-1], effect, span)

    def t_unit(self, span, children):
        return make.TTuple((), span)

    def t_paren(self, span, children):
        return _widened(children[0], span)

    def t_tuple(self, span, children):
        return make.TTuple(tuple(children), span)

    # -- statements

    def block(self, span, children):
        return make.Block(tuple(children), span)

    def let_stmt(self, span, children):
        type_ = children[1] if len(children) == 3 else None
        return make.Let(children[0], type_, children[-1], span)

    def guard_stmt(self, span, children):
        return make.Guard(children[0], children[1], span)

    def local_fn(self, span, children):
        head, body = children
        return make.FnDecl(head.name, head.type_params, head.params, head.ret, head.effect, body, False, (),
                        _doc_before(span.line), span, head.name_span)

    def expr_stmt(self, span, children):
        return make.ExprStmt(children[0], span)

    # -- expressions

    def return_expr(self, span, children):
        return make.Return(children[0], span)

    def binchain(self, span, children):
        if len(children) > 2 * MAX_CHAIN + 1:
            raise _TooDeep(children[2 * MAX_CHAIN + 1], "operators")
        return _precedence(children)

    def unop(self, span, children):
        op, operand = children
        return make.Unary(op.value, operand, span)

    def member(self, span, children):
        node = make.Member(children[0], children[1].value, span)
        if type(children[0]) in _POSTFIX:
            _chained(node, children[0], children[1])
        return node

    def call(self, span, children):
        node = make.Call(children[0], tuple(c for c in children[1:] if c is not None), span)
        if type(children[0]) in _POSTFIX:
            _chained(node, children[0], span)
        return node

    def try_expr(self, span, children):
        node = make.Try(children[0], span)
        if type(children[0]) in _POSTFIX:
            _chained(node, children[0], span)
        return node

    def int_lit(self, span, children):
        return make.Lit("int", children[0].value.replace("_", ""), span)

    def decimal_lit(self, span, children):
        return make.Lit("decimal", children[0].value.replace("_", ""), span)

    def duration_lit(self, span, children):
        return _duration(children[0], span)

    def text_lit(self, span, children):
        return _text(children[0], span)

    def bool_lit(self, span, children):
        return make.Lit("bool", children[0].value, span)

    def var(self, span, children):
        return make.Var(children[0].value, span)

    def ctor_ref(self, span, children):
        qualifier, name = _split_qualified(children[0])
        return make.CtorRef(name, qualifier, span)

    def unit_lit(self, span, children):
        return make.Lit("unit", "", span)

    def paren(self, span, children):
        return _widened(children[0], span)

    def tuple_lit(self, span, children):
        return make.TupleLit(tuple(children), span)

    def list_lit(self, span, children):
        return make.ListLit(tuple(c for c in children if c is not None), span)

    def if_expr(self, span, children):
        else_ = children[2] if len(children) > 2 else None
        return make.If(children[0], children[1], else_, span)

    def match_expr(self, span, children):
        return make.Match(children[0], tuple(c for c in children[1:] if c is not None), span)

    def arm(self, span, children):
        if len(children) == 3:
            return make.Arm(children[0], children[1], children[2], span)
        return make.Arm(children[0], None, children[1], span)

    def lambda_param(self, span, children):
        return make.Param(children[0].value, children[1] if len(children) > 1 else None, span)

    def record_lit(self, span, children):
        token = children[0]
        qualifier, name = _split_qualified(token)
        ctor = make.CtorRef(name, qualifier, _token_span(token))
        items = children[1]
        fields, base = (items.items if items is not None else ((), None))
        return make.RecordLit(ctor, fields, base, span)

    def record_items(self, span, children):
        fields = tuple(c for c in children if isinstance(c, S.FieldInit))
        base = None
        for index, child in enumerate(children):
            if type(child) is Tok and child.type == "DOTDOT":
                base = children[index + 1]
        return _Group((fields, base), span)

    def field_init(self, span, children):
        return make.FieldInit(children[0].value, children[1], span)

    def field_short(self, span, children):
        return make.FieldInit(children[0].value, None, span)

    # -- patterns

    def p_or(self, span, children):
        return make.POr(tuple(children), span)

    def p_wild(self, span, children):
        return make.PWild(span)

    def p_bind(self, span, children):
        return make.PBind(children[0].value, span)

    def p_int(self, span, children):
        text = "".join(c.value for c in children).replace("_", "")
        return make.PLit(make.Lit("int", text, span), span)

    def p_decimal(self, span, children):
        text = "".join(c.value for c in children).replace("_", "")
        return make.PLit(make.Lit("decimal", text, span), span)

    def p_duration(self, span, children):
        return make.PLit(_duration(children[0], span), span)

    def p_text(self, span, children):
        lit = _text(children[0], span)
        if isinstance(lit, S.Interp):
            _state().diagnostics.append(M.syntax_error_pattern_interpolation().at(_location_of(span)))
            lit = make.Lit("text", "", span)
        return make.PLit(lit, span)

    def p_bool(self, span, children):
        return make.PLit(make.Lit("bool", children[0].value, span), span)

    def p_unit(self, span, children):
        return make.PLit(make.Lit("unit", "", span), span)

    def p_paren(self, span, children):
        return _widened(children[0], span)

    def p_ctor_bare(self, span, children):
        qualifier, name = _split_qualified(children[0])
        return make.PCtor(name, qualifier, "bare", (), (), False, span)

    def p_ctor_positional(self, span, children):
        qualifier, name = _split_qualified(children[0])
        return make.PCtor(name, qualifier, "positional", tuple(children[1:]), (), False, span)

    def p_ctor_named(self, span, children):
        qualifier, name = _split_qualified(children[0])
        fields, rest = children[1].items if children[1] is not None else ((), False)
        return make.PCtor(name, qualifier, "named", (), fields, rest, span)

    def p_fields(self, span, children):
        fields = tuple(c for c in children if isinstance(c, S.PField))
        rest = any(type(c) is Tok and c.type == "DOTDOT" for c in children)
        return _Group((fields, rest), span)

    def p_field(self, span, children):
        return make.PField(children[0].value, children[1], span)

    def p_field_short(self, span, children):
        return make.PField(children[0].value, None, span)

    def p_tuple(self, span, children):
        return make.PTuple(tuple(children), span)

    def p_list(self, span, children):
        items, rest = children[0].items if children and children[0] is not None else ((), None)
        return make.PList(items, rest, span)

    def p_items(self, span, children):
        items = tuple(c for c in children if not isinstance(c, _Rest))
        rests = [c for c in children if isinstance(c, _Rest)]
        return _Group((items, rests[0].name if rests else None), span)

    def p_rest(self, span, children):
        names = _tokens(children, "NAME")
        return _Rest(names[0].value if names else "", span)

    def lambda_(self, span, children):
        params = []
        ret = None
        effect = None
        for child in children[:-1]:
            if isinstance(child, S.Param):
                params.append(child)
            elif isinstance(child, _Effect):
                effect = child.name
            elif child is not None:
                ret = child
        return make.Lambda(tuple(params), ret, effect, children[-1], span)


def _widened(node, span):
    """A parenthesized node, its span over its parentheses: the text it stands for (a declaration
    ending in `-> (Int // c` then `)` ends at the `)`)."""
    return dataclasses.replace(node, span=span) if span is not S.NO_SPAN else node


def _precedence(chain: list) -> S.Expr:
    """Fold `operand (op operand)*` into a tree by precedence climbing. Every operator is
    left-associative; a comparison may not be an operand of another comparison."""
    if len(chain) == 3:  # one operator: nothing to weigh
        left, op, right = chain
        return make.Binary(op.value, left, right, make.Span(left.span.line, left.span.column,
                                                      right.span.end_line, right.span.end_column))
    operands = chain[0::2]
    operators = chain[1::2]
    powers = {_PRECEDENCE[op.value] for op in operators}
    if len(powers) == 1 and 3 not in powers:
        # One level of operators, not comparisons (`a * b * c`, `a + b - c`): they fold left, as
        # climbing would fold them.
        left = operands[0]
        for op, right in zip(operators, operands[1:]):
            left = make.Binary(op.value, left, right, make.Span(left.span.line, left.span.column,
                                                          right.span.end_line, right.span.end_column))
        return left
    position = 0

    def climb(min_power: int) -> S.Expr:
        nonlocal position
        left = operands[position]
        while position < len(operators):
            op = operators[position]
            power = _PRECEDENCE[op.value]
            if power < min_power:
                break
            position += 1
            right = climb(power + 1)
            left = make.Binary(op.value, left, right, make.Span(left.span.line, left.span.column,
                                                          right.span.end_line, right.span.end_column))
            if power == 3 and position < len(operators) and _PRECEDENCE[operators[position].value] == 3:
                raise _Chained(op, operators[position])
        return left

    return climb(1)


class _BuildTable:
    """The object lark calls: one wrapped callback per grammar alias."""


_BUILD = _BuildTable()
for _name, _method in list(vars(_Builder).items()):
    if not _name.startswith("__") and callable(_method):
        setattr(_BUILD, "lambda" if _name == "lambda_" else _name, _wrap(_method.__get__(_Builder())))


@record
class _Group:
    items: tuple
    span: S.Span


@record
class _Body:
    kind: str
    fields: tuple
    ctors: tuple
    span: S.Span


@record
class _FnHead:
    name: str
    type_params: tuple
    params: tuple
    ret: object
    effect: str | None
    name_span: S.Span
    span: S.Span


@record
class _Effect:
    name: str
    span: S.Span


@record
class _Rest:
    name: str
    span: S.Span


def _location_of(span: S.Span) -> Location:
    return _state().location(span.line, span.column, span.end_line, span.end_column)


def _duration(token: Tok, span: S.Span) -> S.Lit:
    match = _DURATION_RE.match(token.value)
    assert match is not None
    number, unit = match.group(1).replace("_", ""), match.group(2)
    try:
        nanos = Decimal(number) * _DURATION_UNITS[unit]
    except InvalidOperation:  # pragma: no cover - the token's pattern admits only numbers
        nanos = Decimal(0)
    if nanos != nanos.to_integral_value():
        _state().diagnostics.append(M.literal_invalid_duration(value=token.value).at(_location_of(span)))
        nanos = Decimal(0)
    return make.Lit("duration", str(int(nanos)), span)


def _decode_plain_text(token: Tok) -> str:
    lit = _text(token, _token_span(token))
    if isinstance(lit, S.Interp):
        _state().diagnostics.append(M.syntax_error_path_interpolation().at(_location_of(_token_span(token))))
        return ""
    return lit.value


_TEXT_SPECIAL = re.compile(r"\\|\$\{")


def _text(token: Tok, span: S.Span) -> S.Lit | S.Interp:
    """Decode a text literal: escapes, and `${expr}` parts parsed as expressions in place.

    Plain runs are copied whole; only escapes and interpolations are looked at one by one."""
    raw = token.value
    if "\\" not in raw and "${" not in raw:
        return make.Lit("text", raw[1:-1], span)
    body = raw[1:-1]
    parts: list[str | S.Expr] = []
    buffer: list[str] = []
    start_line, start_column = token.line, token.column + 1  # position of body[0]

    def position(index: int) -> tuple[int, int]:
        newlines = body.count("\n", 0, index)
        if not newlines:
            return start_line, start_column + index
        return start_line + newlines, index - body.rfind("\n", 0, index)

    index = 0
    length = len(body)
    while index < length:
        special = _TEXT_SPECIAL.search(body, index)
        if special is None:
            buffer.append(body[index:])
            break
        buffer.append(body[index:special.start()])
        index = special.start()
        if body[index] == "\\":
            nxt = body[index + 1] if index + 1 < length else ""
            if nxt in _ESCAPES:
                buffer.append(_ESCAPES[nxt])
                index += 2
                continue
            if nxt == "u" and index + 2 < length and body[index + 2] == "{":
                close = body.find("}", index + 3)
                digits = body[index + 3:close] if close != -1 else ""
                if close != -1 and 1 <= len(digits) <= 6 and all(c in "0123456789abcdefABCDEF" for c in digits) \
                        and int(digits, 16) <= 0x10FFFF and not 0xD800 <= int(digits, 16) <= 0xDFFF:
                    buffer.append(chr(int(digits, 16)))
                    index = close + 1
                    continue
            line, column = position(index)
            _state().diagnostics.append(M.escape_invalid(nxt=nxt).at(_state().location(line, column, line,
                                                         column + 2)))
            index += 2
            continue
        close = _interpolation_end(body, index + 2)
        if buffer:
            parts.append("".join(buffer))
            buffer = []
        line, column = position(index + 2)
        parts.append(_parse_interpolation(body[index + 2:close], line, column))
        index = close + 1
    if buffer or not parts:
        text = "".join(buffer)
        if text or not parts:
            parts.append(text)
    if len(parts) == 1 and isinstance(parts[0], str):
        return make.Lit("text", parts[0], span)
    return make.Interp(tuple(parts), span)


def _interpolation_end(body: str, start: int) -> int:
    """The index of the `}` closing an interpolation; strings inside it are skipped whole."""
    index = start
    while index < len(body):
        char = body[index]
        if char == '"':
            index += 1
            while index < len(body) and body[index] != '"':
                index += 2 if body[index] == "\\" else 1
        elif char == "}":
            return index
        index += 1
    return len(body)  # pragma: no cover - the token's pattern guarantees a closing brace


def _parse_interpolation(inner: str, line: int, column: int) -> S.Expr:
    state = _state()
    if not inner.strip():
        state.diagnostics.append(M.syntax_error_empty_interpolation().at(state.location(line, column - 2, line,
                                                                    column + 1)))
        return make.Lit("text", "", make.Span(line, column, line, column))
    tree = _parse_fast(inner, "expr_s", state, line, column)
    if tree is None:  # too deep, and said so
        return make.Lit("text", "", make.Span(line, column, line, column))
    if tree is not _REFUSED:
        return tree
    from lark.exceptions import UnexpectedInput

    padded = "\n" * (line - 1) + " " * (column - 1) + inner
    try:
        return _get_parser().parse(padded, start="expr_s")
    except UnexpectedInput as problem:
        state.diagnostics.append(_syntax_diagnostic(problem, state, padded))
    except _TooDeep as too_deep:
        state.diagnostics.append(_too_deep(state, too_deep.token, getattr(too_deep, "kind", None)))
    return make.Lit("text", "", make.Span(line, column, line, column))


def main(argv: list[str] | None = None) -> int:
    """`python -m flowc.parse FILE...`: parse files and print OK or their diagnostics."""
    from flowc.diagnostics.render import render

    status = 0
    for path in (argv if argv is not None else sys.argv[1:]):
        source = Path(path).read_text(encoding="utf-8")
        parsed = parse(source, path)
        if parsed.diagnostics:
            status = 2
            print(render(parsed.diagnostics, {path: source}, color=False))
        else:
            print(f"{path}: OK ({len(parsed.module.items)} items)")
    return status


if __name__ == "__main__":
    sys.exit(main())
