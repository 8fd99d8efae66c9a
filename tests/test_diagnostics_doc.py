"""docs/diagnostics.md is generated from the registry and the code cases, and is up to date."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from flowc.diagnostics.codes import REGISTRY

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gen_diagnostics_doc.py"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_diagnostics_doc", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


gen = _generator()


def test_doc_is_up_to_date():
    assert gen.check(), "docs/diagnostics.md is out of date: run `python scripts/gen_diagnostics_doc.py`"


def test_generation_is_deterministic():
    assert gen.generate() == gen.generate()


def test_every_code_has_a_section_in_registry_order():
    text = gen.generate()
    headings = re.findall(r"^## ([a-z0-9-]+)$", text, re.MULTILINE)
    assert headings == list(REGISTRY)
    for name, code in REGISTRY.items():
        assert f"## {name}\n\n**{code.severity}**: {code.summary}\n" in text


def test_stages_follow_codes_py():
    stages = gen.stages()
    assert [name for stage in stages for name in stage.codes] == list(REGISTRY)
    assert all(stage.title != "Other" for stage in stages), "a code was registered outside a stage group"


def test_every_case_section_shows_its_code():
    text = gen.generate()
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    for section in sections:
        name = section.split("\n", 1)[0]
        if (gen.CASES / f"{name}.flow").is_file():
            assert "`flow check` says:" in section
        else:
            assert name in gen.NO_EXAMPLE, f"{name} has neither a case nor a reason it has none"


def test_strip_marks():
    assert gen.strip_marks('flow f() -> Int = "a"   // E: type-mismatch') == 'flow f() -> Int = "a"'
    assert gen.strip_marks("x   // W: unused-variable, other\ny // E@1: a") == "x\ny"
    assert gen.strip_marks("// a comment that is no mark") == "// a comment that is no mark"


def test_check_mode_reports_a_stale_file(tmp_path, monkeypatch):
    stale = tmp_path / "diagnostics.md"
    stale.write_text("# Diagnostics\n", encoding="utf-8")
    monkeypatch.setattr(gen, "DOC", stale)
    assert gen.check() is False
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0
    assert gen.check() is True
    assert gen.main(["--check"]) == 0
