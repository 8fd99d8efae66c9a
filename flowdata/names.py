"""The names generated code may use and may not use: the part of the sandbox policy
(`flowdata.policy`) that the compiler needs as well, to choose Python names that the sandbox's
verifier accepts (`flowc.lower`) without loading the rest of the policy.
"""

from __future__ import annotations

__all__ = ["INJECTED_PREFIXES", "MODULE_PREFIX", "FORBIDDEN_NAMES"]

# The prefixes of the globals the loader injects. Generated code reads names that it does not
# define only through these: runtime helpers, intrinsics, and the other modules of the program.
INJECTED_PREFIXES: tuple[str, ...] = ("rt_", "i_", "m_")

# The prefix of the per-module namespace globals (`m_<key>`), a subset of INJECTED_PREFIXES.
MODULE_PREFIX = "m_"

# Names generated code never uses. The builtins are absent in the sandbox anyway
# (SAFE_BUILTINS is empty); listing them makes verify() name the attempt instead of the run
# failing later with a NameError. Names starting with `_` are refused by rule, not by list.
FORBIDDEN_NAMES: frozenset[str] = frozenset({
    # code execution and compilation
    "eval", "exec", "compile", "__import__", "breakpoint", "help", "input",
    # reflection and identity (process-dependent or escape-prone)
    "getattr", "setattr", "delattr", "hasattr", "type", "globals", "locals", "vars", "dir",
    "id", "hash", "object", "super", "classmethod", "staticmethod", "property", "memoryview",
    "isinstance", "issubclass", "callable",
    # I/O and the interpreter
    "open", "print", "printed", "builtins", "__builtins__", "exit", "quit", "copyright",
    "credits", "license",
    # string formatting that walks attributes
    "format",
})
