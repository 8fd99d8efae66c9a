"""The front end as one call: form the program, resolve and check it (its identity on demand).

`check_program(root, read)` is what `flow check` and every later stage start from. It never
raises on bad input: every problem is a diagnostic. The checker recurses over the tree, so it runs
on a thread with a large stack; input nested beyond what that allows is refused by the parser's
nesting bound before it gets here.
"""

from __future__ import annotations

import gc
import hashlib
import sys
import threading
from dataclasses import FrozenInstanceError

from flowc import syntax as S
from flowc.check import Facts, Place, check
from flowc.diagnostics import Diagnostic, Location, sort_key
from flowc.diagnostics import M
from flowc.disk import DISK, DiskChecks
from flowc.program import STD_VERSION, Program, Reader, load
from flowc.resolve import Env, resolve


class Checked:
    """What checking a program found. Frozen, like the records it holds.

    `identity` ("sha256:<hex>") is computed when first asked for: hashing every module's tree is a
    fifth of checking a large program, and `flow check` without `--json` never shows it."""

    __slots__ = ("program", "env", "diagnostics", "places", "facts", "_identity")

    program: Program
    env: Env | None
    diagnostics: tuple[Diagnostic, ...]
    places: tuple[Place, ...]
    facts: Facts | None  # what code generation needs (None when checking stopped early)

    def __init__(self, program: Program, env: Env | None, diagnostics: tuple[Diagnostic, ...],
                 places: tuple[Place, ...], identity: str | None = None, facts: Facts | None = None) -> None:
        for name, value in (("program", program), ("env", env), ("diagnostics", diagnostics), ("places", places),
                            ("facts", facts), ("_identity", identity)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __repr__(self) -> str:
        return (f"Checked(program={self.program!r}, env={self.env!r}, diagnostics={self.diagnostics!r}, "
                f"places={self.places!r}, identity={self.identity!r}, facts={self.facts!r})")

    @property
    def identity(self) -> str:
        if self._identity is None:
            object.__setattr__(self, "_identity", program_identity(self.program))
        return self._identity

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)

    def sources(self) -> dict[str, str]:
        return {m.file: m.source for m in self.program.modules}


def check_program(root_file: str, read: Reader, parse_cache: dict | None = None, *,
                  std_read: Reader | None = None, disk: DiskChecks | None = DISK) -> Checked:
    """Check the program rooted at `root_file`. `std_read` reads std modules from elsewhere than
    the package (replay and resume read them from the history's recorded sources). `disk=None`
    when `read` reads no real files (see `flowc.program.load`)."""
    # A large program's trees, types and facts are hundreds of thousands of objects, and no
    # reference cycles: resolving and checking leave no cyclic garbage at all. The cyclic collector
    # still walks all of them at each full collection, which cost up to a third of a large check,
    # so it is paused while checking; the little cyclic garbage parsing leaves is collected after.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return with_big_stack(_check, root_file, read, parse_cache, std_read, disk)
    finally:
        if paused:
            gc.enable()


def _check(root_file: str, read: Reader, parse_cache: dict | None, std_read: Reader | None,
           disk: DiskChecks | None) -> Checked:
    if std_read is None:
        program = load(root_file, read, parse_cache=parse_cache, disk=disk)
    else:
        program = load(root_file, read, parse_cache=parse_cache, std_read=std_read, disk=disk)
    diagnostics: list[Diagnostic] = list(program.diagnostics)
    for module in program.modules:
        diagnostics.extend(module.parsed.diagnostics)
    env = resolve(program)
    facts = None
    try:
        checked = check(env)
        places = tuple(checked.places)
        facts = checked.facts
    except RecursionError:
        env.diagnostics.append(M.nesting_too_deep_program().at(Location(root_file, 1, 1, 1, 2)))
        places = ()
    diagnostics.extend(env.diagnostics)
    unique = sorted(set(diagnostics), key=sort_key)
    return Checked(program, env, tuple(unique), places, None, facts)


def program_identity(program: Program) -> str:
    """SHA-256 over every module's parsed tree (no comments or layout), the pins and the std version."""
    digest = hashlib.sha256()
    digest.update(f"flow-program/1 std@{STD_VERSION}\n".encode())
    for pin in program.pins:
        digest.update(f"pin {pin.repo} {pin.commit or ''}\n".encode())
    for module in program.modules:
        digest.update(f"module {module.identity}\n".encode())
        digest.update(S.dump(module.parsed.module).encode())
        digest.update(b"\n")
    return "sha256:" + digest.hexdigest()


_STACK_BYTES = 512 * 1024 * 1024
#: The stack size for new threads and the recursion limit are the process's, not a thread's: two
#: checks at once (the MCP server answers requests concurrently) would restore each other's
#: limits mid-check. Checks take turns; they share one interpreter lock anyway.
_one_check_at_a_time = threading.Lock()


def with_big_stack(function, *args):
    """`function(*args)` on a thread with a large stack and recursion limit: the stages after
    parsing (checking, code generation) recurse over the tree, as deep as the parser's nesting
    bound lets it be."""
    result: list = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            result.append(function(*args))
        except BaseException as problem:  # re-raised on the caller's thread
            failure.append(problem)

    if threading.current_thread().name == "flowc":  # already on one (a check inside a generation)
        work()
    else:
        with _one_check_at_a_time:
            _run_locked(work)
    if failure:
        raise failure[0]
    return result[0]


def _run_locked(work) -> None:
    old_limit = sys.getrecursionlimit()
    old_size = threading.stack_size()
    try:
        threading.stack_size(_STACK_BYTES)
        sys.setrecursionlimit(max(old_limit, 60_000))
        thread = threading.Thread(target=work, name="flowc")
        thread.start()
        thread.join()
    finally:
        threading.stack_size(old_size)
        sys.setrecursionlimit(old_limit)
