"""Small builders of Python AST nodes, shared by lowering (flowc/lower.py) and the lists it
lowers in place (flowc/inline_lists.py)."""

from __future__ import annotations

import ast

from flowc import syntax as S


def at(node: ast.stmt, span: S.Span) -> ast.stmt:
    """`node`, marked with the Flow span it was lowered from (emit maps its lines back)."""
    node.flow_span = span  # type: ignore[attr-defined]
    return node


def load(name: str) -> ast.Name:
    return ast.Name(name, ast.Load())


def store(name: str) -> ast.Name:
    return ast.Name(name, ast.Store())


def call(name: str, args: list[ast.expr]) -> ast.Call:
    return ast.Call(load(name), args, [])
