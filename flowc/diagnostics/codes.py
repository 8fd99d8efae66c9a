"""The registry of diagnostic codes.

Every diagnostic the compiler can emit carries a stable kebab-case code registered here, in the
style of mypy's `errorcodes.py`: one `register(name, severity, summary)` call per code, all in this
one file, grouped by the stage that emits them and alphabetical within a group. A code is stable
once released: rename or remove one only with a migration note in `docs/diagnostics.md`.

`severity` is the code's default ("error" or "warning"); `summary` is one sentence saying what the
code means (it is documentation, not the message a diagnostic shows).

To add a code: add one `register` call in the right group, keep the group alphabetical, give it a
case in the tests and an entry in `docs/diagnostics.md`.
"""

from __future__ import annotations

import re
from typing import Final

from flowc.records import record

SEVERITIES: Final = ("error", "warning")

_KEBAB = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


@record
class Code:
    name: str
    severity: str
    summary: str


REGISTRY: dict[str, Code] = {}


class UnknownCodeError(ValueError):
    """A diagnostic was built with a code that is not in `REGISTRY` (a compiler bug)."""


def register(name: str, severity: str, summary: str) -> Code:
    """Add one code to `REGISTRY` and return it. Refuses bad names, severities and duplicates."""
    if not _KEBAB.fullmatch(name):
        raise ValueError(f"diagnostic code {name!r} is not kebab-case")
    if severity not in SEVERITIES:
        raise ValueError(f"diagnostic code {name!r}: severity {severity!r} is not one of {SEVERITIES}")
    if not summary.strip():
        raise ValueError(f"diagnostic code {name!r} has no summary")
    if name in REGISTRY:
        raise ValueError(f"diagnostic code {name!r} is registered twice")
    code = Code(name, severity, summary)
    REGISTRY[name] = code
    return code


def lookup(name: str) -> Code:
    """The registered code called `name`; raises `UnknownCodeError` for anything else."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownCodeError(f"unknown diagnostic code {name!r}") from None


# --- Reading sources (the CLI/loader, before parsing) ---------------------------------------------

FILE_NOT_UTF8: Final = register(
    "file-not-utf8", "error", "A source file's bytes are not valid UTF-8."
)
FILE_UNREADABLE: Final = register(
    "file-unreadable", "error", "A source file could not be read (missing, a directory, or no permission)."
)

# --- Syntax (parse) --------------------------------------------------------------------------------

ESCAPE_INVALID: Final = register(
    "escape-invalid", "error", "A Text literal contains an escape sequence that Flow does not define."
)
LITERAL_INVALID: Final = register(
    "literal-invalid",
    "error",
    "A numeric or Duration literal is malformed or outside what the language can represent.",
)
NESTING_TOO_DEEP: Final = register(
    "nesting-too-deep", "error", "Expressions, blocks or types are nested deeper than the compiler's limit."
)
SYNTAX_ERROR: Final = register(
    "syntax-error", "error", "The source does not match Flow's grammar at this point."
)
TEXT_UNTERMINATED: Final = register(
    "text-unterminated", "error", "A Text literal or interpolation is not closed before the end of the line or file."
)

# --- Modules and imports (resolve) -----------------------------------------------------------------

IMPORT_CYCLE: Final = register(
    "import-cycle", "error", "Modules import each other in a cycle, which Flow does not allow."
)
IMPORT_DUPLICATE: Final = register(
    "import-duplicate", "error", "Two `use` declarations in one module bind the same name."
)
MODULE_NOT_FOUND: Final = register(
    "module-not-found", "error", "A `use` path names a module file that does not exist."
)
MODULE_OUTSIDE_ROOT: Final = register(
    "module-outside-root", "error",
    "A `use` path, or a link a module file is, leaves the program root or its repository's pinned directory."
)
PIN_UNVERIFIED: Final = register(
    "pin-unverified", "error", "A pinned repository's directory does not hold the commit its pin in `flow.toml` names."
)
REPO_UNPINNED: Final = register(
    "repo-unpinned", "error", "A repository module is used without a pin for its repository in `flow.toml`."
)
STD_MODULE_UNKNOWN: Final = register(
    "std-module-unknown", "error", "A `use \"std@vN/...\"` names a module that the bundled std does not have."
)
STD_VERSION_UNKNOWN: Final = register(
    "std-version-unknown", "error", "A `use \"std@...\"` names a std version that this compiler does not ship."
)

# --- Names (resolve) -------------------------------------------------------------------------------

CTOR_UNDEFINED: Final = register(
    "ctor-undefined", "error", "A constructor name does not resolve to a constructor of any type in scope or of the expected type."
)
DEFINITION_DUPLICATE: Final = register(
    "definition-duplicate", "error", "Two declarations in one scope (module, type, or parameter list) have the same name."
)
MEMBER_UNDEFINED: Final = register(
    "member-undefined", "error", "A qualified name `module.name` refers to something the module does not declare."
)
NAME_PRIVATE: Final = register(
    "name-private", "error", "A name declared without `pub` in another module is used outside that module."
)
NAME_UNDEFINED: Final = register(
    "name-undefined", "error", "A value or function name is not bound in any enclosing scope."
)
TYPE_UNDEFINED: Final = register(
    "type-undefined", "error", "A type name does not resolve to a built-in, declared or imported type."
)

# --- Types and expressions (check) -----------------------------------------------------------------

ARITY_MISMATCH: Final = register(
    "arity-mismatch", "error", "A function or constructor is called with the wrong number of arguments."
)
CANNOT_INFER: Final = register(
    "cannot-infer", "error", "The type of an expression or type argument cannot be determined from its context."
)
FIELD_DUPLICATE: Final = register(
    "field-duplicate", "error", "A record literal, pattern or declaration names the same field twice."
)
FIELD_MISSING: Final = register(
    "field-missing", "error", "A record literal or named constructor omits a field that the type requires."
)
FIELD_PRIVATE: Final = register(
    "field-private", "error", "A field declared without `pub` is accessed or constructed outside its module."
)
FIELD_UNDEFINED: Final = register(
    "field-undefined", "error", "A record type or named constructor has no field with this name."
)
NOT_A_RECORD: Final = register(
    "not-a-record", "error", "Field access, record literal or record update syntax is used on a type that is not a record."
)
NOT_CALLABLE: Final = register(
    "not-callable", "error", "An expression is called like a function but its type is not a function type."
)
NOT_COMPARABLE: Final = register(
    "not-comparable", "error", "Values are compared with `==` or an ordering operator but their type is not data or not ordered."
)
OPERATOR_MISMATCH: Final = register(
    "operator-mismatch", "error", "An operator is applied to operand types it is not defined for."
)
REQUIREMENT_UNMET: Final = register(
    "requirement-unmet", "error", "A type argument does not satisfy a requirement (`Eq`, `Ord`, `Data`) of the type parameter."
)
TYPE_ARITY_MISMATCH: Final = register(
    "type-arity-mismatch", "error", "A generic type is given the wrong number of type arguments."
)
TYPE_MISMATCH: Final = register(
    "type-mismatch", "error", "An expression's type is not the type its context expects."
)

# --- Control flow and Result (check) ---------------------------------------------------------------

GUARD_MUST_LEAVE: Final = register(
    "guard-must-leave", "error", "A `guard ... else` block can finish normally instead of leaving with `return`."
)
TRY_ERROR_MISMATCH: Final = register(
    "try-error-mismatch", "error", "The error type of a `?` operand differs from the enclosing function's Result error type."
)
TRY_OUTSIDE_RESULT: Final = register(
    "try-outside-result", "error", "The `?` operator is used on a non-Result value or in a function that does not return a Result."
)

# --- Patterns and matches (check) ------------------------------------------------------------------

LET_REFUTABLE: Final = register(
    "let-refutable", "error", "A `let` pattern can fail to match, but `let` needs a pattern that always matches."
)
MATCH_NOT_EXHAUSTIVE: Final = register(
    "match-not-exhaustive", "error", "A `match` has no arm for some values of the scrutinee's type."
)
MATCH_UNREACHABLE_ARM: Final = register(
    "match-unreachable-arm", "warning", "A `match` arm can never be chosen because earlier arms cover all its values."
)
MATCH_TOO_COMPLEX: Final = register(
    "match-too-complex", "error", "Whether a `match` or `let` pattern covers every value takes too long to decide."
)
PATTERN_BINDINGS_DIFFER: Final = register(
    "pattern-bindings-differ", "error", "The alternatives of an `A | B` pattern do not bind the same names with the same types."
)
PATTERN_MISMATCH: Final = register(
    "pattern-mismatch", "error", "A pattern's shape or type cannot match values of the scrutinee's type."
)

# --- Effects, Tools and data (check) ---------------------------------------------------------------

EFFECT_VARIABLE_UNBOUND: Final = register(
    "effect-variable-unbound", "error", "An effect variable used in a signature is not introduced by any of its function-typed parameters."
)
GENERIC_TOOL_REQUIREMENT: Final = register(
    "generic-tool-requirement", "error", "A generic Tool has a type parameter without the `Data` requirement."
)
MISSING_TOOL_MARK: Final = register(
    "missing-tool-mark", "error", "A function can make a Tool call but its signature lacks the `!tool` mark."
)
NOT_DATA: Final = register(
    "not-data", "error", "A type that must be data (encodable: no functions or tasks inside) is not."
)
TOOL_IN_PURE_CONTEXT: Final = register(
    "tool-in-pure-context", "error", "A `!tool` function is called or passed where only a pure function is allowed."
)
TOOL_NOT_DATA: Final = register(
    "tool-not-data", "error", "A Tool's parameter or result type is not a data type, so it cannot cross to the host."
)
UNNEEDED_TOOL_MARK: Final = register(
    "unneeded-tool-mark", "error", "A function is marked `!tool` but can never make a Tool call."
)

# --- Declarations, attributes and tests (check) ----------------------------------------------------

ATTRIBUTE_MISPLACED: Final = register(
    "attribute-misplaced", "error", "A known attribute is attached to a declaration it does not apply to."
)
ATTRIBUTE_UNKNOWN: Final = register(
    "attribute-unknown", "error", "An `@attribute` name is not one that Flow defines."
)
BODY_MISSING: Final = register(
    "body-missing", "error", "A function that is not a `@tool` or `@intrinsic` declaration has no body."
)
BODY_UNEXPECTED: Final = register(
    "body-unexpected", "error", "A `@tool` or `@intrinsic` declaration has a body, which only the host or runtime may provide."
)
FAKE_SIGNATURE_MISMATCH: Final = register(
    "fake-signature-mismatch", "error", "A `@fake` function's signature differs from the signature of the Tool it fakes."
)
FAKE_TARGET_INVALID: Final = register(
    "fake-target-invalid", "error", "The target named in `@fake(...)` is not a Tool."
)
INTRINSIC_OUTSIDE_STD: Final = register(
    "intrinsic-outside-std", "error", "The `@intrinsic` attribute is used outside the bundled std modules."
)
TEST_SIGNATURE: Final = register(
    "test-signature", "error", "A `@test` function's signature is not a test's: no parameters, returning `Result<Unit, Text>`."
)

# --- Entry point (the CLI, after check) ------------------------------------------------------------

ENTRY_NOT_FOUND: Final = register(
    "entry-not-found", "error", "The requested entry function does not exist or is not `pub` in the root module."
)

# --- Lints (check) ---------------------------------------------------------------------------------

UNUSED_VARIABLE: Final = register(
    "unused-variable", "warning", "A local binding is never used."
)

# --- Running: input and bindings (flow run, before the first fact) --------------------------------

BINDING_FAILED: Final = register(
    "binding-failed", "error", "A Tool implementation named in flow.toml could not be started or described."
)
BINDING_MISMATCH: Final = register(
    "binding-mismatch", "error", "A Tool implementation does not describe the Tool with the declaration's fingerprint."
)
BINDING_MISSING: Final = register(
    "binding-missing", "error", "A Tool the entry can reach has no implementation bound."
)
BINDING_NOT_APPROVED: Final = register(
    "binding-not-approved", "error", "Running an implementation flow.toml names was not approved (`--allow`)."
)
INPUT_INVALID: Final = register(
    "input-invalid", "error", "The run's input is not a JSON object whose fields decode as the entry's parameters."
)
REPLY_INVALID: Final = register(
    "reply-invalid", "error", "A reply supplied to an open call (`flow resume --reply`) does not decode as the call's declared types."
)
NESTED_REFUSED: Final = register(
    "nested-refused", "error", "A nested run or resume (std@v1/runner) was refused for a reason that is not a diagnostic of its program."
)
