"""The child's modules and the order it starts in: everything it can import is loaded before it
locks down (`sandbox.child`), because once the seccomp filter is on, the system calls an import
makes (stat, open, read) kill it. A lazy import inside a function is only safe when its module
is already loaded by then; this test keeps that true as the child's roles move between modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: what `sandbox.child` has imported when it calls `lock_down`: its own imports, the ones
#: `main()` makes before the load (and for `flow test`), and the ones `lock_down` makes itself
BEFORE_LOCKDOWN = """
import sys
import sandbox.child
from sandbox.intrinsics import INTRINSICS
from sandbox.loader import SandboxRefusal, load
from sandbox.testing import StepCounter, run_tests
from sandbox.lanes import serve_lanes
import json, math
print("\\n".join(sorted(sys.modules)))
"""


def imports_in(source: str) -> set[str]:
    """Every module an `import` anywhere in `source` (top level or inside a function) names."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != "__future__":
            found.add(node.module)
            # `from package import module` loads a submodule: it must be loaded too
            found.update(f"{node.module}.{alias.name}" for alias in node.names
                         if (ROOT / node.module.replace(".", "/") / f"{alias.name}.py").exists())
    return found


#: what the child template (sandbox/template.py) has imported when it forks a child
IN_THE_TEMPLATE = """
import sys
import sandbox.template
print("\\n".join(sorted(sys.modules)))
"""


def modules_after(script: str) -> set[str]:
    return set(subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                              text=True, check=True, timeout=60).stdout.split())


def test_every_import_of_the_child_is_loaded_before_it_locks_down():
    loaded = modules_after(BEFORE_LOCKDOWN)
    missing = {}
    # The template's own imports run in the template, which never locks down; what its
    # children have loaded by then is the next test's.
    for path in sorted(p for p in (ROOT / "sandbox").glob("*.py") if p.name != "template.py"):
        late = sorted(imports_in(path.read_text()) - loaded)
        if late:
            missing[path.name] = late
    assert missing == {}


def test_the_import_scan_sees_imports_inside_functions():
    source = "def f():\n    from sandbox import wire\n    import json\n    from flowrt.abi import x\n"
    assert imports_in(source) == {"sandbox", "sandbox.wire", "json", "flowrt.abi"}


def test_every_module_of_the_child_is_one_it_loads():
    """No module of `sandbox/` is left behind unimported (a role moved out and forgotten, or one
    that would only be imported lazily, after the lockdown)."""
    loaded = set(subprocess.run([sys.executable, "-c", BEFORE_LOCKDOWN], cwd=ROOT, capture_output=True,
                                text=True, check=True, timeout=60).stdout.split())
    modules = {f"sandbox.{p.stem}" for p in (ROOT / "sandbox").glob("*.py") if p.stem not in ("__init__", "template")}
    assert modules - loaded == set()


def test_a_forked_child_has_loaded_all_a_started_child_has():
    """A child forked from the template runs `sandbox.child.main()` with the template's modules:
    every module a started child has loaded before its lockdown, the template has loaded."""
    assert modules_after(BEFORE_LOCKDOWN) - modules_after(IN_THE_TEMPLATE) == set()
