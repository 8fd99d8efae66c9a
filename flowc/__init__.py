"""Flow's compiler: text in, diagnostics and Python out; it never runs anything.

A host uses `flowc.compile(root_file, read)` (flowc/compiled.py), which returns the generated
modules and a manifest of everything needed to run them; `flowc.check_program` is the front end alone
(diagnostics and checkpoint places, as `flow check` reports them). Both are imported on first
use, so importing a small part of the package (its diagnostics, say) does not load the compiler.
"""

from __future__ import annotations

__all__ = ["compile", "check_program", "Compiled", "Function", "Param"]


def __getattr__(name: str):
    if name in ("compile", "Compiled", "Function", "Param", "ModuleSource"):
        from flowc import compiled

        return getattr(compiled, name)
    if name == "check_program":  # (`flowc.check` is the checker's module)
        from flowc.frontend import check_program

        return check_program
    raise AttributeError(f"module 'flowc' has no attribute {name!r}")
