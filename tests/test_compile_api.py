"""`flowc.compile`: the compiler's one entry for a host returns the generated modules and a
manifest a host runs from without the compiler's trees."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import flowc
from flowc.files import read_text

ROOT = Path(__file__).resolve().parents[1]
SUPPORT = str(ROOT / "examples" / "support" / "main.flow")


@pytest.fixture(scope="module")
def support():
    return flowc.compile(SUPPORT, read_text)


def test_a_program_that_checks_has_identity_code_and_a_manifest(support):
    assert support.ok and support.identity.startswith("sha256:")
    assert support.root == "main" or support.entry("main") is not None
    assert support.generated is not None and support.generated.program == support.identity
    assert {m.key for m in support.generated.modules} >= {f.key.split(".")[0] for f in support.functions.values()
                                                          if f.module == support.root}
    assert support.sources()[SUPPORT] == Path(SUPPORT).read_text()


def test_the_entry_lists_its_parameters_as_type_terms_and_the_tools_it_reaches(support):
    main = support.entry("main")
    assert main is not None and main.pub and main.data_only
    assert [p.name for p in main.params] and all(p.type is not None for p in main.params)
    reached = support.reachable_tools(main.identity)
    assert reached and list(reached) == sorted(reached)
    for identity, description in reached.items():
        assert description["tool"] == identity and description["fingerprint"].startswith("sha256:")
    # Every Tool it reaches is declared, and a Tool reaches nothing beyond itself.
    assert set(reached) <= set(support.tools)
    some_tool = next(iter(reached))
    assert list(support.reachable_tools(some_tool)) == [some_tool]


def test_checkpoint_functions_are_keyed_as_the_child_finds_them(support):
    functions = support.checkpoint_functions()
    assert functions
    for key, fn in functions.items():
        assert key == fn.key and not fn.generic and not fn.test and fn.fake_of is None
        assert all(p.type is not None or p.task for p in fn.params)


def test_the_manifest_is_frozen(support):
    main = support.entry("main")
    with pytest.raises(dataclasses.FrozenInstanceError):
        main.name = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        support.identity = "x"  # type: ignore[misc]


def test_generate_false_skips_code_generation_only(support):
    manifest_only = flowc.compile(SUPPORT, read_text, generate=False)
    assert manifest_only.generated is None
    assert manifest_only.functions == support.functions and manifest_only.tools == support.tools


def test_a_program_with_errors_is_diagnostics_and_sources(tmp_path):
    source = tmp_path / "bad.flow"
    source.write_text("pub flow main() -> Int = missing\n")
    compiled = flowc.compile(str(source), read_text)
    assert not compiled.ok and compiled.identity is None and compiled.generated is None
    assert compiled.functions == {} and compiled.tools == {}
    assert any(d.severity == "error" for d in compiled.diagnostics)
    assert compiled.sources()[str(source)].startswith("pub flow main")


def test_tests_and_fakes_are_listed(tmp_path):
    source = tmp_path / "t.flow"
    source.write_text(
        "@tool pub flow ask(q: Text) -> Text\n\n"
        "@fake(ask) flow fake_ask(q: Text) -> Text = \"yes\"\n\n"
        "@test flow asks() -> Result<Unit, Text> = {\n    let a = ask(\"x\")\n"
        "    guard a == \"yes\" else { return Err(a) }\n    Ok(())\n}\n")
    compiled = flowc.compile(str(source), read_text)
    assert compiled.ok, compiled.diagnostics
    [test] = compiled.tests()
    assert test.name == "asks" and test.line == 5
    assert set(compiled.fakes()) == {f"{compiled.root}.ask"}
    assert list(compiled.reachable_tools(test.identity)) == [f"{compiled.root}.ask"]
