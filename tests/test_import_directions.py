"""The packages depend one way (docs/impl.md, "Packages"): flowdata imports none of the others,
flowc and sandbox import only flowdata (and not each other), flowrt imports flowc and flowdata
and none of sandbox's modules (it starts the child as a process). The contracts are import-linter's,
in pyproject.toml; this runs them, and checks on a copy of the tree that each arrow is enforced."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("flowdata", "flowc", "sandbox", "flowrt")
LINT = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")


def lint(tree: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([LINT, "--no-cache", "--no-logo", str(tree / "pyproject.toml")], cwd=tree,
                          env=environment, capture_output=True, text=True, timeout=300)


pytestmark = pytest.mark.skipif(LINT is None, reason="import-linter is not installed (the `test` extra)")


def test_the_import_directions_hold():
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "broken" in done.stdout and " 0 broken" in done.stdout


@pytest.mark.parametrize("module, imported", [
    ("flowdata/values.py", "flowrt.store"),       # the ground floor imports nothing above it
    ("flowdata/codec.py", "sandbox.runtime"),
    ("sandbox/runtime.py", "flowrt.bindings"),    # the child imports nothing of the host
    ("sandbox/loader.py", "flowc.lower"),         # nor of the compiler
    ("flowc/lower.py", "sandbox.policy"),         # the compiler imports nothing of the sandbox
    ("flowc/cli.py", "flowrt.commands"),          # nor of the host
    ("flowrt/replay.py", "sandbox.child"),        # the host starts the child, imports none of it
])
def test_each_arrow_is_enforced(tmp_path, module, imported):
    tree = tmp_path / "tree"
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    target = tree / module
    target.write_text(target.read_text() + f"\nimport {imported}  # the violation under test\n")
    done = lint(tree)
    assert done.returncode != 0, done.stdout
    assert "BROKEN" in done.stdout and module.removesuffix(".py").replace("/", ".") in done.stdout, done.stdout
