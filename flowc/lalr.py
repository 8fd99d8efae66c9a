"""A fast LALR(1) driver and contextual lexer that run the tables lark computes for a grammar.

lark stays the one source of the syntax: `tables()` reads from a built `lark.Lark` its parse table,
its rules and, for every parser state, the terminals lark's contextual lexer tries there (in lark's
order, with the keyword "unless" rules). The result is plain data, cached with `marshal`, so the
common path (a program that parses) needs no lark at all. `Parser.run` then does what lark's
`ParserState.feed_token`, contextual lexer and the caller's postlexer do.

Each token is read by the lexer of the current parser state, exactly as lark's contextual lexer
does (so `>` closes type arguments where a comparison would be read elsewhere, and `x.0.1` is two
members, not a decimal), but through a table from the state and the first character to a small
regex of the terminals that can start there.

Anything it does not take, it refuses (`Refused`): an unexpected character or token. The caller
then parses with lark itself, which reports the error. Input nested too deep (brackets, or the
stack of states) is `TooDeep`, which the caller reports itself.
"""

from __future__ import annotations

import marshal
import os
import re
import sys
from collections import namedtuple

#: Bumped whenever the shape of the tables changes; part of the cache key.
FORMAT = 5

#: The lark releases whose insides `tables` is known to read, [first, last) (pyproject.toml pins
#: the same range): it walks lark's parse table, contextual lexer and "unless" callbacks, none of
#: which is lark's public API. Measured against lark's own parsers (docs/impl.md, "Speed
#: machinery"), that is worth it: lark takes 3.4 times the instructions.
SUPPORTED_LARK = ((1, 2), (1, 4))


class Unsupported(ImportError):
    """The interpreter or lark is not one whose private parts this module is known to read."""


try:
    # The parser of CPython's `re` (private, renamed from `sre_parse` in 3.11), to work out the
    # characters a terminal can start with. It is loaded by `re` itself, so importing it is free.
    from re import _constants as _C
    from re import _parser as _re_parser
except ImportError as missing:  # pragma: no cover - exercised by tests with a stand-in
    raise Unsupported(f"flowc's parser needs re._parser and re._constants, which "
                      f"{sys.implementation.name} {sys.version.split()[0]} does not have") from missing


def check_lark(version: str) -> None:
    """Refuse a lark release outside SUPPORTED_LARK, naming it, before its insides are read."""
    first, last = SUPPORTED_LARK
    try:
        found = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        found = ()
    if len(found) != 2 or not first <= found < last:
        raise Unsupported(f"flowc's parser reads the insides of lark {first[0]}.{first[1]} up to (not "
                          f"including) {last[0]}.{last[1]}; installed is lark {version or '(unknown)'}")


class Tok(namedtuple("Tok", "type value line column end_line end_column")):
    """A token, as the tree builder sees it. The position fields are named as in `syntax.Span`, so
    a token can stand where a span is read; as text, a token is its text (as lark's are)."""

    __slots__ = ()

    def __str__(self) -> str:
        return self.value


_new_tok = tuple.__new__

#: What the postlexer (`Parser`'s `postlex`) does with a token type. NEST is a token that nests
#: what follows it without a closing bracket (`-`, `return`, `else`, `->`, ...).
KEYWORD, OPEN, OPEN_AT_LINE_START, CLOSE, NEST = 1, 2, 3, 4, 5


class Refused(Exception):
    """The fast path does not take this input; parse it with lark."""


class TooDeep(Exception):
    """The input nests deeper than the parser's bounds; `token` is where it went too deep. Not a
    refusal: the caller reports it without asking lark (whose postlexer sees brackets only)."""

    def __init__(self, token: Tok, brackets: bool = False) -> None:
        super().__init__("nesting too deep")
        self.token = token
        self.brackets = brackets  # too many brackets open (else: too deep a stack of states)


# ---- reading lark's tables ---------------------------------------------------------------------


def tables(parser) -> dict:
    """The tables of a built `lark.Lark` (LALR, contextual lexer), as plain data."""
    from lark.lexer import CallChain, UnlessCallback
    from lark.parsers.lalr_analysis import Shift

    frontend = parser.parser
    lexer = getattr(frontend.lexer, "lexer", frontend.lexer)  # under a PostLexConnector
    table = frontend.parser.parser.parse_table
    conf = parser.lexer_conf
    if conf.re_module is not re or conf.use_bytes:
        raise ValueError("the fast parser reads str with the re module only")

    rule_index = {rule: index for index, rule in enumerate(parser.rules)}
    count = len(table.states)
    if sorted(table.states) != list(range(count)):
        raise ValueError("parser states are not numbered 0..n-1")
    actions = []
    for state in range(count):
        row = {}
        for symbol, (action, argument) in table.states[state].items():
            row[symbol] = argument if action is Shift else ~rule_index[argument]
        actions.append(row)

    rules = []
    for rule in parser.rules:
        options = rule.options
        rules.append((
            rule.origin.name,
            tuple((s.name, s.is_term, bool(getattr(s, "filter_out", False))) for s in rule.expansion),
            rule.alias,
            bool(options.expand1),
            tuple(options.empty_indices or ()),
            options.template_source,
            bool(options.keep_all_tokens),
        ))

    def scanner_of(basic_lexer) -> tuple:
        """The terminals a lark BasicLexer alternates over, in its order (strings a pattern
        absorbs left out), and for each absorbing pattern, its strings."""
        names = tuple(t.name for t in basic_lexer.scanner.terminals)
        unless = {}
        for name, callback in basic_lexer.callback.items():
            if isinstance(callback, CallChain):
                callback = callback.callback1
            if isinstance(callback, UnlessCallback):
                absorbed: dict[str, str] = {}
                for terminal in callback.scanner.terminals:
                    if terminal.pattern.type != "str" or terminal.pattern.flags:
                        raise ValueError(f"{terminal.name}: only plain strings may be absorbed")
                    absorbed.setdefault(terminal.pattern.value, terminal.name)
                unless[name] = absorbed
        return names, unless

    # One scanner per distinct accepted set, shared by the states that have it.
    scanners: list = []
    scanner_ids: dict[int, int] = {}
    state_scanner = []
    for state in range(count):
        state_lexer = lexer.lexers[state]
        if id(state_lexer) not in scanner_ids:
            scanner_ids[id(state_lexer)] = len(scanners)
            scanners.append(scanner_of(state_lexer))
        state_scanner.append(scanner_ids[id(state_lexer)])

    newline_types = set()
    for state_lexer in lexer.lexers.values():
        newline_types |= state_lexer.newline_types
    patterns = {}
    for terminal in parser.terminals:
        regexp = terminal.pattern.to_regexp()
        patterns[terminal.name] = (regexp, _first_chars(regexp, conf.g_regex_flags))
    literals = {t.name: t.pattern.value for t in parser.terminals if t.pattern.type == "str"}

    # Characters that every lexer reads as the same ignored terminal (whitespace): they are
    # skipped without asking the state.
    root = scanner_of(lexer.root_lexer)
    skip = {}
    for name in conf.ignore:
        for char in patterns[name][1] or ():
            if all(_candidates(names, patterns, char) == [name] for names, _ in scanners + [root]):
                skip[char] = name

    data = {
        "format": FORMAT,
        "actions": actions,
        "rules": rules,
        "start_states": dict(table.start_states),
        "end_states": dict(table.end_states),
        "scanners": scanners,
        "state_scanner": state_scanner,
        "patterns": patterns,
        "literals": literals,
        "flags": conf.g_regex_flags,
        "ignore": tuple(conf.ignore),
        "newline_types": tuple(sorted(newline_types)),
        "skip": skip,
    }
    return _plain(data)


def _plain(value):
    """`value` with lark's str subclasses (names are often Tokens) made plain, as marshal wants."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _first_chars(regexp: str, flags: int) -> str | None:
    """The characters a match of `regexp` can start with, or None when that is not worked out
    (any character). An over-approximation: a character left out can never start a match."""
    C = _C

    def sequence(items) -> tuple[set[str] | None, bool]:
        chars: set[str] = set()
        for op, argument in items:
            first, nullable = item(op, argument)
            if first is None:
                return None, False
            chars |= first
            if not nullable:
                return chars, False
        return chars, True

    def item(op, argument) -> tuple[set[str] | None, bool]:
        if op is C.LITERAL:
            return {chr(argument)}, False
        if op is C.IN:
            chars = set()
            for kind, value in argument:
                if kind is C.LITERAL:
                    chars.add(chr(value))
                elif kind is C.RANGE:
                    chars.update(chr(code) for code in range(value[0], value[1] + 1))
                else:  # NEGATE, CATEGORY
                    return None, False
            return chars, False
        if op is C.BRANCH:
            chars, nullable = set(), False
            for alternative in argument[1]:
                first, empty = sequence(alternative)
                if first is None:
                    return None, False
                chars |= first
                nullable = nullable or empty
            return chars, nullable
        if op is C.SUBPATTERN:
            _group, add_flags, _del_flags, inner = argument
            if add_flags & re.IGNORECASE:
                return None, False
            return sequence(inner)
        if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            low, _high, inner = argument
            first, nullable = sequence(inner)
            return first, nullable or low == 0
        if op is C.ATOMIC_GROUP:
            return sequence(argument)
        if op in (C.ASSERT, C.ASSERT_NOT, C.AT):
            return set(), True  # zero width: what follows decides (ignoring it only adds characters)
        return None, False

    if flags & re.IGNORECASE:
        return None
    first, nullable = sequence(_re_parser.parse(regexp, flags))
    if first is None or nullable:
        return None
    return "".join(sorted(first))


def _candidates(names, patterns: dict, char: str) -> list[str]:
    """The terminals of `names` (in order) that can start with `char`."""
    result = []
    for name in names:
        first = patterns[name][1]
        if first is None or char in first:
            result.append(name)
    return result


# ---- the cache ---------------------------------------------------------------------------------


def load(path: str, key: str) -> dict | None:
    """Tables cached under `key`, or None when there are none (or they are unreadable)."""
    try:
        with open(path, "rb") as handle:
            data = marshal.loads(handle.read())  # marshal.load(handle) reads in many small calls
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
        return None
    return data


def save(path: str, key: str, data: dict) -> None:
    """Write atomically: another process may be reading or writing the same file."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temporary, "wb") as handle:
            marshal.dump(dict(data, key=key), handle)
        os.replace(temporary, path)
    except (OSError, ValueError):
        try:
            os.unlink(temporary)
        except OSError:
            pass


# ---- the parser --------------------------------------------------------------------------------

#: What an entry of a state lexer says about the tokens it reads (see `Parser._entry`).
_PLAIN, _CAREFUL, _BRACKET, _SKIP = 0, 1, 2, 3

_never = re.compile("(?!)").match


class Parser:
    """Runs the tables: lark's contextual lexer, a postlexer, and the LALR loop, calling
    `reducers[rule](children)` at each reduction.

    The postlexer is described by `postlex`, from a token type to what it does: KEYWORD (the text
    may be a keyword: `keywords` maps it to the keyword's type), OPEN and CLOSE (brackets: deeper
    than `max_depth` is TooDeep), OPEN_AT_LINE_START (a bracket that becomes `line_start[type]`
    when it is the first token on its line), NEST (a token that nests what follows it).

    Nesting of every kind shows in the parser's stack of states: one that grows past `max_stack`
    at an OPEN or NEST token is TooDeep too. Only those tokens look at it, so the common token
    costs nothing more.

    A reducer of None means the rule passes its single child up unchanged (a `?rule` with one
    child, or an inlined `_rule` of one token): only the state changes.
    """

    def __init__(self, data: dict, reducers: list, *, postlex: dict[str, int], keywords: dict[str, str],
                 line_start: dict[str, str], max_depth: int, max_stack: int, collect: frozenset[str]):
        self._actions = data["actions"]
        self._start_states = data["start_states"]
        self._end_states = data["end_states"]
        self._reducers = reducers
        self._sizes = [len(rule[1]) for rule in data["rules"]]
        self._origins = [rule[0] for rule in data["rules"]]
        # What a reduction needs of its rule, in one tuple: one lookup per reduction, not three.
        self._rule_steps = list(zip(reducers, self._sizes, self._origins))
        for reducer, size in zip(reducers, self._sizes):
            if reducer is None and size != 1:
                raise ValueError("only a rule of one symbol can pass its child up")
        self._patterns = data["patterns"]
        self._flags = data["flags"]
        self._ignore = frozenset(data["ignore"])
        self._newline_types = frozenset(data["newline_types"])
        self._scanners = data["scanners"]
        self._state_scanner = data["state_scanner"]
        self._skip = {char: name for char, name in data["skip"].items() if name not in collect}
        # Whitespace after a token is read with it, up to a newline (a newline moves the line).
        self._trailing_chars = frozenset(self._skip) - {"\n"}
        self._trailing = "[" + "".join(re.escape(c) for c in sorted(self._trailing_chars)) + "]*" \
            if self._trailing_chars else ""
        # One dict per scanner, from a first character to what its lexer does there; states with
        # the same scanner share it. Filled on first use (`_entry`).
        by_scanner = [{} for _ in self._scanners]
        self._lexers = [by_scanner[index] for index in self._state_scanner]
        self._compiled: dict[tuple, object] = {}
        # For each rule that only passes its child up: below state -> next token kind -> state.
        self._gotos: list[dict[int, dict[str, int]]] = [{} for _ in reducers]
        self._postlex = postlex
        self._keywords = keywords
        self._line_start = line_start
        self._max_depth = max_depth
        self._max_stack = max_stack
        self._collect = collect

    def _entry(self, state: int, char: str) -> tuple:
        """What the lexer of `state` does at a `char`: lark's alternation for that state, keeping
        the terminals that can start with `char` (one that cannot does not match, so the first
        match of the smaller alternation is the first match of lark's).

        An entry is (`match`, terminal, absorbed strings, what). With a terminal, the token is
        that one character (the match reads the whitespace after it). Otherwise the match is of
        the alternation, and names the terminal by its group. A token's match goes on over the
        whitespace after it, up to a newline (a newline moves the line). Absorbed strings change
        the terminal after the match: lark's "unless" strings of the state, and keywords (the
        postlexer's KEYWORD). `what` is _SKIP for whitespace every state ignores (its match is
        the whitespace alone), _CAREFUL when a token may be ignored or span lines, _BRACKET when
        the postlexer counts it, else _PLAIN."""
        names, unless = self._scanners[self._state_scanner[state]]
        candidates = tuple(_candidates(names, self._patterns, char))
        if char in self._skip:
            entry: tuple = (self._compile((self._skip[char],), ""), None, None, _SKIP)
        else:
            absorbing = {}
            for name in candidates:
                strings = {}
                if self._postlex.get(name) == KEYWORD:
                    strings.update(self._keywords)
                strings.update(unless.get(name, {}))
                if strings:
                    absorbing[name] = strings
            if any(name in self._ignore or name in self._newline_types for name in candidates):
                what = _CAREFUL
            elif any(self._postlex.get(name) in (OPEN, CLOSE, OPEN_AT_LINE_START, NEST) for name in candidates):
                what = _BRACKET
            else:
                what = _PLAIN
            if not candidates:
                entry = (_never, None, None, _PLAIN)  # nothing starts here
            elif len(candidates) == 1 and self._patterns[candidates[0]][0] == re.escape(char) \
                    and not absorbing and what != _CAREFUL:
                entry = (self._compile((), self._trailing), candidates[0], None, what)
            else:
                trailing = self._trailing if what != _CAREFUL else ""
                entry = (self._compile(candidates, trailing), None, absorbing or None, what)
        self._lexers[state][char] = entry
        return entry

    def _compile(self, names: tuple[str, ...], trailing: str):
        """The `match` of lark's alternation over `names`, then `trailing` (or `trailing` alone)."""
        match = self._compiled.get((names, trailing))
        if match is None:
            pattern = "|".join(f"(?P<{name}>{self._patterns[name][0]})" for name in names)
            if trailing:
                pattern = f"(?:{pattern}){trailing}" if names else trailing
            match = self._compiled[names, trailing] = re.compile(pattern, self._flags).match
        return match

    def run(self, text: str, start: str, comments: list, line: int = 1, column: int = 1):
        """Parse `text` from the start symbol `start`; `text` begins at `line`:`column`. Comment
        tokens (of the `collect` types) are appended to `comments` as they are read."""
        actions = self._actions
        lexers = self._lexers
        gotos = self._gotos
        rule_steps = self._rule_steps
        ignore = self._ignore
        newline_types = self._newline_types
        postlex = self._postlex
        line_start_kind = self._line_start
        max_depth = self._max_depth
        max_stack = self._max_stack
        collect = self._collect
        trailing = self._trailing_chars
        new = _new_tok
        PLAIN, SKIP, CAREFUL = _PLAIN, _SKIP, _CAREFUL  # (locals are read quicker than globals)

        state = self._start_states[start]
        states = [state]
        values: list = []
        pos = 0
        base = -column  # the offset before the line's first column: a column is pos - base
        prev_end_line = 0
        depth = 0
        while True:
            # -- the next token, read by the lexer of the current state
            while True:
                try:
                    char = text[pos]
                except IndexError:
                    return self._finish(states, values, self._end_states[start])
                try:
                    entry = lexers[state][char]
                except KeyError:
                    entry = self._entry(state, char)
                match, kind, absorbing, what = entry
                if kind is None:
                    found = match(text, pos)
                    if found is None:
                        raise Refused
                    end = found.end()
                    if what == SKIP:
                        newlines = text.count("\n", pos, end)
                        if newlines:
                            line += newlines
                            base = text.rindex("\n", pos, end)
                        pos = end
                        continue
                    kind = found.lastgroup
                    value = found[kind]
                    if absorbing is not None and kind in absorbing:
                        absorbed = absorbing[kind].get(value)
                        if absorbed is not None:
                            kind = absorbed
                            # A keyword (`return`, `flow`, `if`, `else`...) may nest what follows.
                            if len(states) > max_stack:
                                raise TooDeep(new(Tok, (kind, value, line, pos - base, line,
                                                        pos - base + len(value))))
                else:
                    value = char
                    end = pos + 1
                    if text[end:end + 1] in trailing:
                        end = match(text, end).end()
                column = pos - base
                if what == PLAIN:
                    token = new(Tok, (kind, value, line, column, line, column + len(value)))
                else:
                    first_line = line
                    if what == CAREFUL:  # the token may span lines, or be ignored
                        if kind in newline_types:
                            newlines = value.count("\n")
                            if newlines:
                                line += newlines
                                base = pos + value.rindex("\n")
                        if kind in ignore:
                            if kind in collect:
                                comments.append(new(Tok, (kind, value, first_line, column, line,
                                                          pos + len(value) - base)))
                            pos = end
                            continue
                    action = postlex.get(kind)
                    token = new(Tok, (kind, value, first_line, column, line, pos + len(value) - base))
                    if action == CLOSE:
                        depth -= 1
                    elif action is not None and action != KEYWORD:  # (keywords are absorbed)
                        if len(states) > max_stack:
                            raise TooDeep(token)
                        if action != NEST:
                            depth += 1
                            if depth > max_depth:
                                raise TooDeep(token, brackets=True)
                            if action == OPEN_AT_LINE_START and first_line > prev_end_line:
                                kind = line_start_kind[kind]
                                token = new(Tok, (kind, value, first_line, column, line, token[5]))
                prev_end_line = line
                pos = end
                break

            # -- reduce as the token says, then shift it
            while True:
                try:
                    action = actions[state][kind]
                except KeyError:
                    raise Refused from None
                if action >= 0:
                    break
                reducer, count, origin = rule_steps[~action]
                if reducer is None:
                    try:
                        state = gotos[~action][states[-2]][kind]
                    except KeyError:
                        state = self._goto(~action, states[-2], kind)
                    states[-1] = state
                    continue
                if count == 1:  # the most common: replace the top in place
                    values[-1] = reducer([values[-1]])
                    state = states[-1] = actions[states[-2]][origin]
                    continue
                if count:
                    children = values[-count:]
                    del values[-count:]
                    del states[-count:]
                else:
                    children = []
                values.append(reducer(children))
                state = actions[states[-1]][origin]
                states.append(state)
            state = action
            states.append(state)
            values.append(token)

    def _goto(self, rule: int, below: int, kind: str) -> int:
        """The state after `rule` (one that passes its child up) is reduced on `below`, with
        `kind` next, once every such rule that follows has been reduced too (they change the
        state, nothing else)."""
        actions, reducers, origins = self._actions, self._reducers, self._origins
        state = actions[below][origins[rule]]
        while True:
            then = actions[state].get(kind)
            if then is None or then >= 0 or reducers[~then] is not None:
                break
            state = actions[below][origins[~then]]
        self._gotos[rule].setdefault(below, {})[kind] = state
        return state

    def _finish(self, states: list, values: list, end_state: int):
        """At the end of the text: reduce until the start symbol is complete."""
        actions, reducers, sizes, origins = self._actions, self._reducers, self._sizes, self._origins
        state = states[-1]
        while True:
            action = actions[state].get("$END")
            if action is None or action >= 0:
                raise Refused
            rule = ~action
            reducer = reducers[rule]
            if reducer is None:  # one step at a time: the start symbol may be reached on the way
                state = states[-1] = actions[states[-2]][origins[rule]]
            else:
                count = sizes[rule]
                children = values[-count:] if count else []
                del values[len(values) - count:]
                del states[len(states) - count:]
                values.append(reducer(children))
                state = actions[states[-1]][origins[rule]]
                states.append(state)
            if state == end_state:
                return values[-1]
