"""Compile a Flow program and load its generated modules in this process, as the sandbox child
loads them (verified, RestrictedPython-compiled, the runtime's names injected), for tests and
benchmarks that call generated functions directly."""

from __future__ import annotations

from dataclasses import dataclass

from flowc.emit import generate
from flowc.frontend import check_program
from sandbox import runtime as R
from sandbox.intrinsics import INTRINSICS
from sandbox.loader import load


@dataclass(frozen=True)
class Compiled:
    modules: list  # (key, filename, source) for `sandbox.loader.load`
    root_key: str  # the root module's key among them
    source: str  # the root module's generated source

    def injected(self) -> dict:
        """The globals the child injects (a fresh dict the caller may change)."""
        names = dict(R.names())
        names.update(INTRINSICS)
        return names

    def load(self, *, count_steps: bool = True, injected: dict | None = None):
        """The root module's namespace, loaded anew."""
        spaces = load(self.modules, self.injected() if injected is None else injected, count_steps=count_steps)
        return spaces[self.root_key]


def compile_program(files: dict[str, str], root: str) -> Compiled:
    """Check and generate the program whose files are `files` (path -> text), rooted at `root`;
    raises AssertionError with the diagnostics when it does not check."""
    def read(path: str) -> str:
        if path in files:
            return files[path]
        raise FileNotFoundError(path)

    checked = check_program(root, read)
    assert not [d for d in checked.diagnostics if d.severity == "error"], checked.diagnostics
    generated = generate(checked)
    root_module = next(m for m in generated.modules if m.flow_file == root)
    return Compiled([(m.key[2:], m.filename, m.source) for m in generated.modules], root_module.key[2:],
                    root_module.source)
