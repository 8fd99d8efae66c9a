"""The sandbox policy: frozen data, no mechanism.

Everything the sandbox allows or limits is written down here, as constants, so that a reviewer
reads the whole policy in one place and the mechanism (`verify`, `guards`, `loader`, the host's
`flowrt.sandbox_launch`) only ever looks values up. The host, the child and the compiler all read it,
so it lives in `flowdata`, the package none of them owns. Nothing here runs code; changing what generated code
may contain is a one-line edit in this file, reviewed on its own.

The policy is default-deny in three places:

- **AST node kinds** (`POLICY.allowed_nodes`): `sandbox.verify` refuses any node whose class
  name is not listed, so a construct added by a future Python version is refused until someone
  reviews it here.
- **Names**: a name (read, bound, defined, or a parameter) may not start with `_` and may not be
  one of `POLICY.forbidden_names`; a name read but never bound in the module must carry one of
  the injected prefixes (`rt_`, `i_`, `m_`), and those prefixes may not be bound by the module.
  The lists themselves are in `flowdata.names`, which the compiler reads too (it renames a Flow
  function called `open`), without the rest of the policy.
- **Attributes**: no attribute starting with `_`, none of `POLICY.forbidden_attributes`; checked
  statically by `verify` and again at run time by the `_getattr_` guard.

`LIMITS` are the operating-system limits the host puts on the child process (see
`flowrt.sandbox_launch`); each field documents why it has the value it has.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from flowdata.names import FORBIDDEN_NAMES, INJECTED_PREFIXES, MODULE_PREFIX

__all__ = ["INJECTED_PREFIXES", "MODULE_PREFIX", "FORBIDDEN_NAMES", "SAFE_BUILTINS", "GUARD_NAMES",
           "Policy", "POLICY", "ALLOWED_NODES", "ALLOWED_CONSTANT_TYPES", "FORBIDDEN_ATTRIBUTES",
           "Limits", "LIMITS", "STDERR_TAIL_BYTES", "CHILD_PYTHON_FLAGS", "CHILD_PACKAGES",
           "CHILD_SOURCE_PACKAGES", "CHILD_ENV", "ALLOWED_SYSCALLS", "CHILD_UID"]

# Builtins visible to generated code: none. RestrictedPython's output needs no builtins (slices
# compile to BUILD_SLICE, `True`/`False`/`None` are constants); everything else the emitter
# needs arrives as an `rt_`/`i_` global. An empty mapping means `open`, `eval`, `__import__`,
# `type`, ... do not exist in the sandbox at all, whatever verify() lets through.
SAFE_BUILTINS: MappingProxyType = MappingProxyType({})

# The hooks RestrictedPython's rewritten code calls, and which syntax produces each. The loader
# injects exactly these (from `sandbox.guards.GUARDS`); a test checks that a module using every
# allowed construct references no other `_` name.
GUARD_NAMES: frozenset[str] = frozenset({
    "_getattr_",              # a.b            -> _getattr_(a, "b")
    "_getitem_",              # a[i], a[i:j]   -> _getitem_(a, i)
    "_getiter_",              # passed to the unpack guards
    "_unpack_sequence_",      # a, b = e       -> a, b = _unpack_sequence_(e, spec, _getiter_)
    "_iter_unpack_sequence_", # for a, b in e  (refused by verify today; guarded anyway)
    "_inplacevar_",           # n += 1         -> n = _inplacevar_("+=", n, 1)
    "_write_",                # a.b = c, a[i] = c (refused by verify; the guard refuses too)
})


@dataclass(frozen=True, slots=True)
class Policy:
    """What generated code may contain. See the module docstring for how each field is used."""

    allowed_nodes: frozenset[str]
    allowed_constant_types: frozenset[str]
    forbidden_names: frozenset[str]
    forbidden_attributes: frozenset[str]
    injected_prefixes: tuple[str, ...]
    # A name read but bound nowhere in the module must start with an injected prefix.
    free_names_must_be_injected: bool = True


# Every AST class generated code is made of (Python 3.11 `ast` class names). Anything else is
# refused: imports, classes, try/with, lambda, del, global/nonlocal, comprehensions, for loops
# (but the one shape a list loop compiles to: `for x in rt_items_from(items, at):`, no else),
# f-strings, set literals, `**`, bit operations, async, match, raise, assert.
ALLOWED_NODES: frozenset[str] = frozenset({
    # structure
    "Module", "FunctionDef", "arguments", "arg",
    # statements
    "Return", "Assign", "AugAssign", "Expr", "If", "While", "For", "Break", "Continue", "Pass",
    # generators (effects are yielded to the scheduler)
    "Yield", "YieldFrom",
    # expressions (`:=` binds a pattern's names inside an arm guard's condition)
    "BoolOp", "BinOp", "UnaryOp", "Compare", "Call", "keyword", "IfExp", "NamedExpr",
    "Attribute", "Subscript", "Slice", "Starred", "Name", "Constant",
    "List", "Tuple", "Dict",
    # contexts (not Del)
    "Load", "Store",
    # operators
    "And", "Or",
    "Add", "Sub", "Mult", "Div", "FloorDiv", "Mod",
    "Not", "USub", "UAdd",
    "Eq", "NotEq", "Lt", "LtE", "Gt", "GtE", "Is", "IsNot", "In", "NotIn",
})

# `type(value).__name__` of the literals generated code writes. No float, complex or Ellipsis:
# Flow's Decimal travels as text and Flow has no floats.
ALLOWED_CONSTANT_TYPES: frozenset[str] = frozenset({"int", "str", "bool", "NoneType", "bytes"})

# Attributes that reach frames, code, globals or the class hierarchy, or that format strings by
# walking attributes (`"{0.__class__}".format(x)`). Includes every attribute RestrictedPython
# itself refuses (its INSPECT_ATTRIBUTES; a test checks the inclusion). Names starting with `_`
# are refused by rule.
FORBIDDEN_ATTRIBUTES: frozenset[str] = frozenset({
    # generators
    "gi_frame", "gi_code", "gi_yieldfrom",
    # coroutines and async generators
    "cr_frame", "cr_code", "cr_await", "cr_origin", "ag_frame", "ag_code", "ag_await",
    # frames
    "f_back", "f_builtins", "f_code", "f_generator", "f_globals", "f_locals", "f_trace",
    # tracebacks
    "tb_frame", "tb_next",
    # code objects
    "co_code",
    # the class hierarchy
    "mro",
    # formatting that evaluates attribute paths
    "format", "format_map",
    # Python 2 spellings, kept so an old recipe is named, not half-run
    "func_globals", "func_code", "func_closure", "im_func", "im_self", "im_class",
})

POLICY = Policy(
    allowed_nodes=ALLOWED_NODES,
    allowed_constant_types=ALLOWED_CONSTANT_TYPES,
    forbidden_names=FORBIDDEN_NAMES,
    forbidden_attributes=FORBIDDEN_ATTRIBUTES,
    injected_prefixes=INJECTED_PREFIXES,
)


@dataclass(frozen=True, slots=True)
class Limits:
    """Operating-system limits for the sandbox child, applied with setrlimit before exec.

    A field set to None leaves the inherited limit alone. Soft and hard limits are set equal,
    except CPU, whose hard limit is `cpu_seconds + cpu_grace_seconds` so the child first gets
    SIGXCPU and then, if it somehow survives, SIGKILL.
    """

    # RLIMIT_AS: virtual address space. CPython needs ~30 MiB to start; 2 GiB leaves room for
    # large values while a runaway allocation ends in MemoryError within a second or two.
    address_space_bytes: int | None = 2 * 1024**3
    # RLIMIT_CPU: CPU seconds for the whole child life. Generated code does little work itself
    # (Tools run on the host); 300 s only stops a spinning loop that nobody is timing out.
    cpu_seconds: int | None = 300
    cpu_grace_seconds: int = 5
    # RLIMIT_FSIZE: the child writes no files. 0 makes any write to a file fail (CPython ignores
    # SIGXFSZ, so the write raises OSError EFBIG); pipes are not files and are unaffected.
    file_size_bytes: int | None = 0
    # RLIMIT_NOFILE: the three stdio pipes plus what CPython opens briefly while importing.
    open_files: int | None = 32
    # RLIMIT_NPROC: 0 means the child can start no process or thread. The kernel counts all
    # processes of the real user, so for an unprivileged user 0 blocks every fork; root (as in
    # CI containers) is exempt, and then the host's process-group kill is the backstop.
    processes: int | None = 0
    # RLIMIT_CORE: no core dumps (they would be files, and could hold values).
    core_bytes: int | None = 0
    # Not an rlimit: the longest the host waits for the child's next message before it kills it
    # (the run is then halted, resumable). The CPU limit does not see a child that is starved,
    # stopped or blocked; this does. Generous, because a Tool call does not count (the host is
    # not waiting on the child then), only stretches of the child's own computing. None: none.
    # FLOW_SANDBOX_WALL_SECONDS overrides it (flowrt/sandbox_launch.py).
    wall_seconds: float | None = 600.0


LIMITS = Limits()

# The host keeps at most this many bytes of the child's stderr (the tail), for its records.
STDERR_TAIL_BYTES = 64 * 1024

# The interpreter flags of the child: `-I` (isolated mode) is `-E -P -s`, and `-E` would also
# ignore PYTHONHASHSEED, so the seed could not be fixed. The host passes a complete environment
# of its own (nothing inherited), which makes `-E` unnecessary; `-B` keeps the child from
# writing `.pyc` files (it may write no files at all).
#
# `-S`: the child does not import `site` at all. `site` was a third of the child's start-up: it
# reads every `.pth` file of the site-packages directories and runs the code in them (editable
# install finders, certificate hooks, ...) and imports `sitecustomize`; the child needs none of
# it, and with `-S` nothing of the installation's set-up runs in the sandbox. (`-s`, no user
# site, stays: it is implied by `-S` but kept so the flags still say it.) Without `site` the
# child's `sys.path` is the standard library plus `PYTHONPATH`, so the host puts there the
# directories that hold the packages named in CHILD_PACKAGES, where its own interpreter found
# them (a virtualenv's or the system's site-packages, or a development checkout), and never the
# user site directory, which the child did not see before either (see `flowrt.sandbox_launch`).
CHILD_PYTHON_FLAGS: tuple[str, ...] = ("-B", "-S", "-s", "-P")

# The packages outside the standard library that the child imports: the directory holding each
# (as the host's interpreter finds it) is put on the child's PYTHONPATH, after the checkout's.
# (greenlet: a child serving several runs waits for each in a greenlet, sandbox/lanes.py.)
CHILD_PACKAGES: tuple[str, ...] = ("orjson", "RestrictedPython", "greenlet")
# The packages of this checkout the child imports (all their modules, whose bytecode the host
# writes for it): the child itself and the value contract, never the host's `flowrt`.
CHILD_SOURCE_PACKAGES: tuple[str, ...] = ("sandbox", "flowdata")

# The child's environment, entire: a fixed hash seed so that nothing hash-ordered differs
# between runs. (`PYTHONPATH`, pointing at this checkout and then at the directories of
# CHILD_PACKAGES, is added by the host so the child runs the same code as the host.)
CHILD_ENV: MappingProxyType = MappingProxyType({"PYTHONHASHSEED": "0"})

# The system calls the child may still make once it is locked down (sandbox/lockdown.py; the
# host builds the filter from this list, flowrt/syscall_filter.py). Any other call kills the
# child (SIGSYS): by then it has imported and compiled everything, so it only computes, manages
# its memory and talks on its pipe. Found with strace over the run, replay and test suites (see
# docs/sandbox.md §5); every name here is one the child was seen making after lockdown, or the
# counterpart it needs to finish cleanly.
ALLOWED_SYSCALLS: tuple[str, ...] = (
    # the pipe to the host, and stderr
    "read", "write", "close",
    # the channel waits on its pipe (select), and spins with short sleeps
    "select", "pselect6", "poll", "ppoll", "sched_yield", "nanosleep", "clock_nanosleep",
    # memory: malloc, the garbage collector, CPython's arenas
    "brk", "mmap", "munmap", "mremap", "madvise", "mprotect",
    # locks inside CPython and libc, clocks where the vDSO does not answer
    "futex", "clock_gettime", "gettimeofday",
    # signals (SIGXCPU from the CPU limit, returning from a handler) and ending
    "rt_sigreturn", "rt_sigaction", "rt_sigprocmask", "sigaltstack", "restart_syscall",
    "exit", "exit_group",
)
# The uid a child started by root drops to (nobody): it owns no file and no process of the host.
CHILD_UID = 65534
