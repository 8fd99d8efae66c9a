"""Generated code is byte-stable: regenerating every golden program gives the committed text, and
every generated module passes the sandbox's verifier and restricted compile."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import golden  # noqa: E402

PROGRAMS = golden.programs()


def test_there_are_enough_golden_programs():
    assert len(PROGRAMS) >= 22


@pytest.mark.parametrize("name,root,files", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_golden_file_matches(name, root, files):
    path = ROOT / "tests" / "golden" / f"{name}.golden"
    assert path.exists(), f"missing {path}; run python scripts/golden.py"
    assert golden.render(root, files) == path.read_text(encoding="utf-8"), \
        f"generated code changed for {name}; run python scripts/golden.py and review the diff"


@pytest.mark.parametrize("name,root,files", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_generated_code_is_sandbox_clean(name, root, files):
    from flowc.emit import generate
    from flowc.frontend import check_program
    from sandbox.loader import compile_module

    def read(path: str) -> str:
        key = path[2:] if path.startswith("./") else path
        if key in files:
            return files[key]
        raise FileNotFoundError(path)

    generated = generate(check_program(root, read))
    for module in generated.modules:
        code, refusals = compile_module(module.filename, module.source)
        assert not refusals, f"{module.filename}: {refusals}"
