"""Generate editors/vscode/syntaxes/flow.tmLanguage.json from the Pygments lexer's tokens.

    python scripts/gen_textmate.py           # rewrite the grammar
    python scripts/gen_textmate.py --check   # exit 1 if the committed grammar is out of date

One lexer (`flowc/highlight.py`) says what Flow's tokens are; the editor's grammar is derived
from it, so the two cannot drift apart. Each Pygments state becomes a repository entry of
patterns. A rule that enters a state (`"` enters `text`) becomes a begin/end region: its regular
expression begins it, the rule of the entered state that leaves it (`#pop`) ends it, and the
state's other rules are the region's patterns. A rule whose token is `bygroups(...)` becomes a
match with one capture scope per group. Whitespace rules are left out (TextMate needs none).
The output depends only on the lexer, so it is deterministic.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pygments import token as P  # noqa: E402
from pygments.lexer import include  # noqa: E402

from flowc.highlight import FlowLexer  # noqa: E402

OUT = ROOT / "editors" / "vscode" / "syntaxes" / "flow.tmLanguage.json"
SCOPE = "source.flow"

#: TextMate scope names by Pygments token, most specific first (a token takes the scope of its
#: nearest listed ancestor).
SCOPES = {
    P.String.Doc: "comment.block.documentation.flow",
    P.Comment.Single: "comment.line.double-slash.flow",
    P.Comment: "comment.flow",
    P.Name.Decorator: "storage.type.annotation.flow",
    P.Keyword.Constant: "constant.language.boolean.flow",
    P.Keyword.Pseudo: "storage.modifier.effect.flow",
    P.Keyword: "keyword.control.flow",
    P.String.Escape: "constant.character.escape.flow",
    P.String.Interpol: "punctuation.section.interpolation.flow",
    P.String.Double: "string.quoted.double.flow",
    P.String: "string.flow",
    P.Number.Other: "constant.numeric.duration.flow",
    P.Number.Float: "constant.numeric.decimal.flow",
    P.Number.Integer: "constant.numeric.integer.flow",
    P.Number: "constant.numeric.flow",
    P.Name.Namespace: "entity.name.namespace.flow",
    P.Name.Class: "entity.name.type.flow",
    P.Name: "variable.other.flow",
    P.Operator: "keyword.operator.flow",
    P.Punctuation: "punctuation.flow",
}
#: The scope of a region's whole text, by the state it is (its delimiters keep their own scopes).
REGION_SCOPES = {"text": "string.quoted.double.flow", "interpolation": "meta.interpolation.flow"}


def scope_of(token) -> str:
    current = token
    while current is not None:
        if current in SCOPES:
            return SCOPES[current]
        current = current.parent
    raise ValueError(f"no TextMate scope for the Pygments token {token}")


def _regex(rule_regex) -> str:
    return rule_regex.get() if hasattr(rule_regex, "get") else rule_regex


def _group_tokens(callback) -> tuple:
    """The tokens of a `bygroups(...)` callback, one per group."""
    groups = inspect.getclosurevars(callback).nonlocals.get("args")
    if groups is None:
        raise ValueError("a rule's action is a callback other than bygroups: it has no TextMate form")
    return groups


def _match(regex: str, action) -> dict:
    if callable(action) and not hasattr(action, "parent"):
        captures = {str(i): {"name": scope_of(t)} for i, t in enumerate(_group_tokens(action), start=1)}
        return {"match": regex, "captures": captures}
    return {"match": regex, "name": scope_of(action)}


def _state_patterns(tokens: dict, state: str) -> list[dict]:
    patterns: list[dict] = []
    for rule in tokens[state]:
        if isinstance(rule, include):
            patterns.append({"include": f"#{rule}"})
            continue
        regex, action, *rest = rule
        regex = _regex(regex)
        target = rest[0] if rest else None
        if isinstance(target, tuple):
            target = target[0] if len(target) == 1 else None
        if action is P.Whitespace or action is P.Text.Whitespace:
            continue
        if target == "#pop":
            continue  # the end of this state's region, written by the rule that enters it
        if target is not None:
            patterns.append(_region(tokens, regex, action, target))
        else:
            patterns.append(_match(regex, action))
    return patterns


def _region(tokens: dict, begin: str, action, state: str) -> dict:
    leaving = [r for r in tokens[state] if not isinstance(r, include) and len(r) > 2 and r[2] == "#pop"]
    if len(leaving) != 1:
        raise ValueError(f"the state {state!r} must have exactly one rule that leaves it")
    end_regex, end_action = _regex(leaving[0][0]), leaving[0][1]
    return {
        "name": REGION_SCOPES.get(state, scope_of(action)),
        "begin": begin,
        "beginCaptures": {"0": {"name": scope_of(action)}},
        "end": end_regex,
        "endCaptures": {"0": {"name": scope_of(end_action)}},
        "patterns": [{"include": f"#{state}"}],
    }


def grammar() -> dict:
    tokens = FlowLexer.tokens
    repository = {state: {"patterns": _state_patterns(tokens, state)} for state in sorted(tokens)}
    return {
        "$schema": "https://raw.githubusercontent.com/martinring/tmlanguage/master/tmlanguage.json",
        "name": FlowLexer.name,
        "scopeName": SCOPE,
        "fileTypes": [pattern.removeprefix("*.") for pattern in FlowLexer.filenames],
        "comment": "Generated by scripts/gen_textmate.py from flowc/highlight.py; do not edit.",
        "patterns": [{"include": "#root"}],
        "repository": repository,
    }


def render() -> str:
    return json.dumps(grammar(), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def check() -> bool:
    return OUT.is_file() and OUT.read_text(encoding="utf-8") == render()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed grammar is out of date")
    args = parser.parse_args()
    if args.check:
        if check():
            return 0
        print(f"{OUT.relative_to(ROOT)} is out of date: run `python scripts/gen_textmate.py`", file=sys.stderr)
        return 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
