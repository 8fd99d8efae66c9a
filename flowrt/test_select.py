"""`flow test -k EXPRESSION`: which tests run, chosen by name as pytest's `-k` chooses.

An expression is words joined by `and`, `or`, `not` and parentheses; a word matches a test whose
name contains it, ignoring case (pytest's rule, so one expression selects the same tests under
`flow test -k` and under the pytest plugin). A word is any run of characters other than space and
parentheses, so `history`, `examples/support` and `retries_an` are all words.
"""

from __future__ import annotations

from collections.abc import Callable

KEYWORDS = {"and", "or", "not"}


class SelectionError(ValueError):
    """An expression that does not parse; the message says where."""


def compile_selection(expression: str) -> Callable[[str], bool]:
    """A predicate on test names. An empty (or all-space) expression selects every test."""
    tokens = _tokens(expression)
    if not tokens:
        return lambda name: True
    parser = _Parser(tokens, expression)
    predicate = parser.expression()
    if parser.position < len(tokens):
        raise SelectionError(f"-k {expression!r}: unexpected {tokens[parser.position][0]!r} "
                             f"at column {tokens[parser.position][1] + 1}")
    return predicate


def _tokens(expression: str) -> list[tuple[str, int]]:
    tokens: list[tuple[str, int]] = []
    i = 0
    while i < len(expression):
        c = expression[i]
        if c.isspace():
            i += 1
        elif c in "()":
            tokens.append((c, i))
            i += 1
        else:
            start = i
            while i < len(expression) and not expression[i].isspace() and expression[i] not in "()":
                i += 1
            tokens.append((expression[start:i], start))
    return tokens


class _Parser:
    """expression := term ("or" term)*; term := factor ("and" factor)*;
    factor := "not" factor | "(" expression ")" | word."""

    def __init__(self, tokens: list[tuple[str, int]], text: str) -> None:
        self.tokens = tokens
        self.text = text
        self.position = 0

    def peek(self) -> str | None:
        return self.tokens[self.position][0] if self.position < len(self.tokens) else None

    def take(self) -> str:
        if self.position >= len(self.tokens):
            raise SelectionError(f"-k {self.text!r}: the expression ends too soon")
        token = self.tokens[self.position][0]
        self.position += 1
        return token

    def expression(self) -> Callable[[str], bool]:
        parts = [self.term()]
        while self.peek() == "or":
            self.take()
            parts.append(self.term())
        return parts[0] if len(parts) == 1 else (lambda name: any(p(name) for p in parts))

    def term(self) -> Callable[[str], bool]:
        parts = [self.factor()]
        while self.peek() == "and":
            self.take()
            parts.append(self.factor())
        return parts[0] if len(parts) == 1 else (lambda name: all(p(name) for p in parts))

    def factor(self) -> Callable[[str], bool]:
        at = self.position
        token = self.take()
        if token == "not":
            inner = self.factor()
            return lambda name: not inner(name)
        if token == "(":
            inner = self.expression()
            if self.peek() != ")":
                raise SelectionError(f"-k {self.text!r}: the parenthesis at column "
                                     f"{self.tokens[at][1] + 1} is not closed")
            self.take()
            return inner
        if token in KEYWORDS or token == ")":
            raise SelectionError(f"-k {self.text!r}: expected a name at column {self.tokens[at][1] + 1}, "
                                 f"found {token!r}")
        word = token.lower()
        return lambda name: word in name.lower()
