"""editors/vscode/: the TextMate grammar is what scripts/gen_textmate.py writes from the Pygments
lexer, is valid JSON with the scopes expected, and colours the examples as the lexer does; the
extension manifest starts `flow lsp` and names files that exist."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pygments.token import Whitespace

from flowc.highlight import FlowLexer

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gen_textmate.py"
VSCODE = ROOT / "editors" / "vscode"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_textmate", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen = _generator()


def test_the_committed_grammar_is_what_the_script_writes():
    assert gen.check(), "editors/vscode/syntaxes/flow.tmLanguage.json is out of date: run `python scripts/gen_textmate.py`"
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def _patterns(node):
    """Every pattern of a grammar, nested ones included."""
    for pattern in node.get("patterns", ()):
        yield pattern
        yield from _patterns(pattern)


def test_the_grammar_is_valid_json_with_the_scopes_expected():
    grammar = json.loads(gen.OUT.read_text(encoding="utf-8"))
    assert grammar["scopeName"] == "source.flow" and grammar["fileTypes"] == ["flow"]
    scopes: set[str] = set()
    for entry in grammar["repository"].values():
        for pattern in _patterns(entry):
            for key in ("match", "begin", "end"):
                if key in pattern:
                    re.compile(pattern[key])  # the lexer's expressions are in the common subset
            if "name" in pattern:
                scopes.add(pattern["name"])
            for captures in ("captures", "beginCaptures", "endCaptures"):
                scopes.update(c["name"] for c in pattern.get(captures, {}).values())
            if "include" in pattern:
                assert pattern["include"].lstrip("#") in grammar["repository"]
    expected = {"comment.block.documentation.flow", "comment.line.double-slash.flow", "keyword.control.flow",
                "constant.language.boolean.flow", "storage.modifier.effect.flow", "storage.type.annotation.flow",
                "string.quoted.double.flow", "constant.character.escape.flow",
                "punctuation.section.interpolation.flow", "meta.interpolation.flow", "constant.numeric.duration.flow",
                "constant.numeric.decimal.flow", "constant.numeric.integer.flow", "entity.name.namespace.flow",
                "entity.name.type.flow", "variable.other.flow", "keyword.operator.flow", "punctuation.flow"}
    assert scopes == expected


# ---- colouring like the lexer: a small TextMate tokenizer over the grammar


def _expand(grammar: dict, patterns: list) -> list[dict]:
    out: list[dict] = []
    for pattern in patterns:
        if "include" in pattern:
            out.extend(_expand(grammar, grammar["repository"][pattern["include"].lstrip("#")]["patterns"]))
        else:
            out.append(pattern)
    return out


def textmate_scopes(grammar: dict, text: str) -> list[str | None]:
    """The innermost scope of each character, as a TextMate engine assigns it: at each position
    the earliest match wins, the region's end before its patterns, then the patterns in order."""
    scopes: list[str | None] = [None] * len(text)
    # (patterns, end expression, the region's scope, its end delimiter's scope)
    stack: list[tuple[list[dict], re.Pattern | None, str | None, str | None]] = [
        (_expand(grammar, grammar["patterns"]), None, None, None)]
    offset = 0
    for line in text.splitlines(keepends=True):
        pos = 0
        while pos < len(line):
            patterns, end, region, end_scope = stack[-1]
            best = None
            if end is not None and (m := end.search(line, pos)):
                best = (m, None)
            for pattern in patterns:
                m = re.compile(pattern.get("match") or pattern["begin"]).search(line, pos)
                if m and (best is None or m.start() < best[0].start()):
                    best = (m, pattern)
            stop = best[0].start() if best is not None else len(line)
            for i in range(pos, stop):
                scopes[offset + i] = region
            if best is None:
                break
            m, pattern = best
            if pattern is None:
                named = end_scope
                stack.pop()
            elif "match" in pattern:
                named = pattern.get("name", region)
            else:
                named = pattern["beginCaptures"]["0"]["name"]
                stack.append((_expand(grammar, pattern["patterns"]), re.compile(pattern["end"]), pattern["name"],
                              pattern["endCaptures"]["0"]["name"]))
            for i in range(m.start(), m.end()):
                scopes[offset + i] = named
            for group, capture in (pattern or {}).get("captures", {}).items():
                for i in range(m.start(int(group)), m.end(int(group))):
                    scopes[offset + i] = capture["name"]
            pos = max(m.end(), m.start() + 1)
        offset += len(line)
    return scopes


def pygments_scopes(text: str) -> list[str | None]:
    scopes: list[str | None] = [None] * len(text)
    for index, token, value in FlowLexer().get_tokens_unprocessed(text):
        if token in Whitespace:
            continue
        for i in range(index, index + len(value)):
            scopes[i] = gen.scope_of(token)
    return scopes


SAMPLES = sorted(p for p in (ROOT / "examples").glob("*/*.flow") if p.is_file()) \
    + [ROOT / "flowc" / "std" / "v1" / "text.flow"]


@pytest.mark.parametrize("path", SAMPLES, ids=[str(p.relative_to(ROOT)) for p in SAMPLES])
def test_the_grammar_colours_like_the_lexer(path: Path):
    grammar = json.loads(gen.OUT.read_text(encoding="utf-8"))
    text = path.read_text(encoding="utf-8")
    mine = textmate_scopes(grammar, text)
    theirs = pygments_scopes(text)
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if text[i].isspace():
            continue
        if a != b:
            line = text.count("\n", 0, i) + 1
            pytest.fail(f"{path.name}:{line}: {text[i]!r} is {a} in the grammar, {b} in the lexer")


# ---- the extension


def test_the_extension_manifest_starts_flow_lsp():
    manifest = json.loads((VSCODE / "package.json").read_text(encoding="utf-8"))
    assert (VSCODE / manifest["main"]).is_file()
    assert "vscode-languageclient" in manifest["dependencies"]
    [language] = manifest["contributes"]["languages"]
    assert language["id"] == "flow" and ".flow" in language["extensions"]
    assert (VSCODE / language["configuration"]).is_file()
    json.loads((VSCODE / language["configuration"]).read_text(encoding="utf-8"))
    [grammar] = manifest["contributes"]["grammars"]
    assert grammar["scopeName"] == "source.flow" and (VSCODE / grammar["path"]).resolve() == gen.OUT
    settings = manifest["contributes"]["configuration"]["properties"]
    assert settings["flow.server.command"]["default"] == ["flow", "lsp"]
    assert "onLanguage:flow" in manifest["activationEvents"]
    commands = {c["command"] for c in manifest["contributes"]["commands"]}
    from flowrt.lsp import CHECKPOINT_COMMAND

    assert CHECKPOINT_COMMAND in commands
    source = (VSCODE / manifest["main"]).read_text(encoding="utf-8")
    assert "vscode-languageclient/node" in source and CHECKPOINT_COMMAND in source


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_extension_code_is_valid_javascript():
    done = subprocess.run(["node", "--check", str(VSCODE / "extension.js")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
