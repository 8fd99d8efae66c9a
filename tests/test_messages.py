"""The message registry: every diagnostic the compiler reports is worded in
flowc/diagnostics/messages.py, under a registered code, and no stage builds its own prose."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from flowc.diagnostics import messages as M
from flowc.diagnostics.codes import REGISTRY

FLOWC = Path(M.__file__).resolve().parents[1]

#: Codes worded outside the registry: a nested run's refusal is data that std@v1/runner hands
#: to the Flow program (flowrt/nested.py), built from the diagnostics it wraps.
HOST_CODES = {"nested-refused"}


def test_every_message_names_a_registered_code():
    for code in M.MESSAGES:
        assert code in REGISTRY, code


def test_every_compiler_code_has_a_message():
    missing = sorted(set(REGISTRY) - set(M.MESSAGES) - HOST_CODES)
    assert not missing, f"codes without a message function: {missing}"


def test_message_functions_take_facts_by_keyword_only():
    for functions in M.MESSAGES.values():
        for make in functions:
            params = inspect.signature(make.__wrapped__).parameters.values()
            assert all(p.kind is p.KEYWORD_ONLY for p in params), make.__name__


def test_a_message_carries_its_code_and_is_placed_with_its_severity():
    from flowc.diagnostics import Location

    where = Location("main.flow", 3, 5, 3, 9)
    said = M.type_mismatch(expected="Int", found="Text")
    assert (said.code, said.text) == ("type-mismatch", "expected `Int`, found `Text`")
    assert said.at(where).severity == "error"
    assert said.at(where).location == where
    unused = M.unused_variable(name="x")
    assert unused.at(where).severity == "warning"
    assert M.match_unreachable_arm().warn_at(None).severity == "warning"


def _calls_with_literal_codes(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
        if isinstance(fn, ast.Name) and name in ("error", "warning"):
            yield node.lineno, name  # flowc.diagnostics.error/warning: only Message.at may call them
        elif name in ("report", "_report", "refuse") or name == "warn" and isinstance(fn, ast.Attribute) \
                and isinstance(fn.value, ast.Name) and fn.value.id == "self":
            # the message argument must come from the registry (a call of M.<message>), never be text
            index = 1 if name == "_report" else 0
            message = node.args[index] if len(node.args) > index else None
            if isinstance(message, (ast.Constant, ast.JoinedStr, ast.BinOp, ast.IfExp)):
                yield node.lineno, ast.unparse(message)[:40]


@pytest.mark.parametrize("path", sorted(p for p in FLOWC.rglob("*.py") if "diagnostics" not in p.parts)
                         + [FLOWC.parent / "flowrt" / "run.py"], ids=lambda p: str(p.relative_to(FLOWC.parent)))
def test_no_compiler_stage_words_its_own_diagnostic(path):
    found = list(_calls_with_literal_codes(path))
    assert not found, f"{path.name}: diagnostics built inline (use flowc/diagnostics/messages.py): {found}"


def test_checking_a_program_without_problems_never_loads_the_registry(tmp_path):
    """Messages cost start-up only when there is something to say."""
    import subprocess
    import sys

    (tmp_path / "ok.flow").write_text("pub flow main() -> Int = 1\n")
    probe = ("import sys\nfrom flowc.frontend import check_program\n"
             f"c = check_program({str(tmp_path / 'ok.flow')!r}, lambda p: open(p).read())\n"
             "assert c.ok, c.diagnostics\n"
             "print('flowc.diagnostics.messages' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
