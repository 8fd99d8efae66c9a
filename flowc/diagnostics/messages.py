"""The message registry: every diagnostic's prose, written once, keyed by its code.

Over 800 lines, on purpose: it is the one list of everything the compiler and the host can say
to a user, one short function per message; splitting it by stage would scatter the wording it
exists to keep in one place.

The stages record what went wrong as facts (names, shown types, counts, candidates) by calling one
function of this module, e.g. `M.type_mismatch(expected="Int", found="Text")`; that function alone
decides the message, the notes and the help. It returns a `Message` (code and text, no location
yet); the stage places it with `message.at(location)` (its code's severity) or
`message.warn_at(location)`. This is mypy's `message_registry.py` with Gleam's "facts in, prose in
one place" shape: no stage builds a message string, so wording is reviewed, changed and tested here.

Each function is registered under its code with `@message(code)`; `MESSAGES` maps a code to the
functions that can produce it (tests check that every code in `codes.py` has at least one, unless
it is a host-side code, and that no function names an unregistered code). Facts are keyword-only, so
a call site reads as the list of facts it reports. Text is built only when a diagnostic is reported:
a program without problems never formats a message.

Groups follow `codes.py`; within a code, functions are alphabetical.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from flowc.records import record

if TYPE_CHECKING:
    from flowc.diagnostics import Diagnostic, Location

__all__ = ["MESSAGES", "Message", "message"]


@record
class Message:
    """A diagnostic's code and prose, before it has a place."""

    code: str
    text: str
    notes: tuple[str, ...] = ()
    help: str | None = None

    def at(self, location: Location | None) -> Diagnostic:
        """The diagnostic at `location`, with the code's registered severity."""
        from flowc.diagnostics import error

        return error(self.code, self.text, location, notes=self.notes, help=self.help)

    def warn_at(self, location: Location | None) -> Diagnostic:
        """The diagnostic at `location` as a warning, whatever the code's default severity."""
        from flowc.diagnostics import warning

        return warning(self.code, self.text, location, notes=self.notes, help=self.help)


Said = tuple[str, tuple[str, ...], "str | None"]

#: code -> the message functions that produce it, in definition order
MESSAGES: dict[str, list[Callable[..., Message]]] = {}


def said(text: str, *, help: str | None = None, notes: Iterable[str] = ()) -> Said:
    return text, tuple(notes), help


def message(code: str) -> Callable[[Callable[..., Said]], Callable[..., Message]]:
    """Register a message function under `code`; the function returns `said(...)`, callers get a
    `Message`."""

    def register(build: Callable[..., Said]) -> Callable[..., Message]:
        def make(**facts: Any) -> Message:
            text, notes, help = build(**facts)
            return Message(code, text, notes, help)

        make.__name__ = make.__qualname__ = build.__name__
        make.__doc__ = build.__doc__
        make.__wrapped__ = build  # type: ignore[attr-defined]
        make.code = code  # type: ignore[attr-defined]
        MESSAGES.setdefault(code, []).append(make)
        return make

    return register


# ---- shared wording ------------------------------------------------------------------------------


def _expected_help(expected: list[str]) -> str | None:
    if not expected:
        return None
    if len(expected) <= 8:
        return "expected " + ", ".join(expected[:-1]) + (" or " if len(expected) > 1 else "") + expected[-1]
    return None


def _requirement_help(requirement: str) -> str:
    if requirement == "Ord":
        return "Ord types: Int, Decimal, Text, Bool, Bytes, Duration, Instant, Unit, and lists or tuples of them"
    return "data types hold no functions or tasks"


def _arith_help(shown: str) -> str | None:
    if shown == "Text":
        return "join Text with `++`"
    if shown in ("Duration", "Instant"):
        return "use `duration.add` / `instant.add`"
    return None


def _names(bindings: Iterable[str]) -> str:
    return "{" + ", ".join(sorted(bindings)) + "}"


# ---- the messages --------------------------------------------------------------------------------


@message("file-not-utf8")
def file_not_utf8(*, display: str, start: int) -> Said:
    return said(f'`{display}` is not valid UTF-8 (byte {start})')


@message("file-unreadable")
def file_unreadable(*, display: str, problem) -> Said:
    return said(f'cannot read `{display}`: {problem}')


@message("file-unreadable")
def file_unreadable_directory(*, path: str, reason: str) -> Said:
    return said(f'cannot read directory `{path}`: {reason}')


@message("file-unreadable")
def file_unreadable_manifest_toml(*, problem) -> Said:
    return said(f'flow.toml is not valid TOML: {problem}')


@message("file-unreadable")
def file_unreadable_not_regular(*, display: str) -> Said:
    return said(f'`{display}` is not a regular file; it is not read')


@message("escape-invalid")
def escape_invalid(*, nxt: str) -> Said:
    return said(f'`\\{nxt}` is not an escape', help='escapes are \\n \\t \\r \\0 \\\\ \\" \\$ and \\u{hex}')


@message("literal-invalid")
def literal_invalid_decimal_exponent() -> Said:
    return said("this decimal's exponent is outside the signed 64-bit range")


@message("literal-invalid")
def literal_invalid_duration(*, value: str) -> Said:
    return said(f'`{value}` is not a whole number of nanoseconds')


@message("nesting-too-deep")
def nesting_too_deep_brackets() -> Said:
    return said('brackets are nested too deeply')


@message("nesting-too-deep")
def nesting_too_deep_brackets_limit(*, limit: int) -> Said:
    return said(f'brackets and type arguments nest more than {limit} levels deep here',
                help='split the expression with `let` bindings or helper functions')


@message("nesting-too-deep")
def nesting_too_deep_chain(*, limit: int, of: str) -> Said:
    links = "calls, fields and `?`" if of == "postfix" else "operators"
    return said(f'a chain of more than {limit} {links}', help='split the expression with `let` bindings or helper functions')


@message("nesting-too-deep")
def nesting_too_deep_expression() -> Said:
    return said('the expression is nested too deeply to compile')


@message("nesting-too-deep")
def nesting_too_deep_stack() -> Said:
    return said('the program nests too deeply here (unary operators, `return`, lambdas, `else if` and brackets together)',
                help='split the expression with `let` bindings or helper functions')


@message("nesting-too-deep")
def nesting_too_deep_program() -> Said:
    return said('the program is nested too deeply to check')


@message("syntax-error")
def syntax_error_chained_comparison(*, first, second: str) -> Said:
    return said(f'comparisons do not chain: `{first}` then `{second}`', help='join the comparisons with `&&`')


@message("syntax-error")
def syntax_error_character(*, shown) -> Said:
    return said(f'unexpected character `{shown}`')


@message("syntax-error")
def syntax_error_empty_interpolation() -> Said:
    return said('an interpolation needs an expression')


@message("syntax-error")
def syntax_error_end_of_file(*, expected) -> Said:
    return said('unexpected end of file', help=_expected_help(expected))


@message("syntax-error")
def syntax_error_path_interpolation() -> Said:
    return said('a module path cannot interpolate')


@message("syntax-error")
def syntax_error_pattern_interpolation() -> Said:
    return said('a pattern cannot interpolate', help='match the text with a plain literal and test the rest in an arm guard')


@message("syntax-error")
def syntax_error_token(*, token: str, token_type: str, expected: list[str]) -> Said:
    if len(token) > 40:
        token = token[:37] + "..."
    help = _expected_help(expected)
    if token_type == "NAME" and "a type or constructor name" in expected and len(expected) <= 2:
        help = "type and constructor names start with an upper-case letter"
    elif token_type == "UPPER" and expected == ["a name"]:
        help = "value, function and field names start with a lower-case letter"
    return said(f'unexpected `{token}`', help=help)


@message("text-unterminated")
def text_unterminated() -> Said:
    return said('this text literal is never closed', help='end it with `"`; inside `${...}` use no `{` or `}`')


@message("import-cycle")
def import_cycle(*, cycle) -> Said:
    return said('import cycle: ' + ' → '.join(cycle), help='move what both modules need into a third module that both use')


@message("import-duplicate")
def import_duplicate(*, alias: str, path: str) -> Said:
    return said(f'`{alias}` is already bound by another `use`', help=f'rename one: `use "{path}" as other_name`')


@message("module-not-found")
def module_not_found(*, identity: str, display: str) -> Said:
    return said(f'no module `{identity}`: `{display}` does not exist')


@message("module-not-found")
def module_not_found_at_sign(*, text: str) -> Said:
    return said(f'`{text}` names a directory whose name holds `@`', help='`@` is for repositories: write "<repo>@<version>/<path>" and pin it')


@message("module-not-found")
def module_not_found_directory(*, text: str) -> Said:
    return said(f'`{text}` names a directory, not a module', help='name the module file without `.flow`, e.g. "./planner"')


@message("module-not-found")
def module_not_found_nul() -> Said:
    return said('a module path cannot hold a NUL character')


@message("module-not-found")
def module_not_found_path_syntax(*, text: str) -> Said:
    return said(f'`{text}` is not a module path', help='write "./name" for a file beside this one, or "std@v1/name"')


def _repo_path(text: str, head: str) -> Said:
    return said(f'`{text}` is not a module path inside `{head}`',
                help=f'write "{head}/<path>" with a path below the repository\'s directory, no `.` or `..`')


@message("module-not-found")
def module_not_found_repo_path(*, text: str, head: str) -> Said:
    return _repo_path(text, head)


@message("module-outside-root")
def module_outside_root_repo_path(*, text: str, head: str) -> Said:
    return _repo_path(text, head)


def _root_or_pin(repo: str | None) -> str:
    return f"the pinned directory of `{repo}`" if repo else "the program root"


@message("module-outside-root")
def module_outside_root_link(*, display: str, repo: str | None) -> Said:
    return said(f'`{display}` leads outside {_root_or_pin(repo)} through a symbolic link; it is not read',
                help="modules are read only inside the program root and the pinned repositories' directories")


@message("module-outside-root")
def module_outside_root_manifest() -> Said:
    return said('flow.toml is a link that leaves the program root, or not a file; it is not read')


@message("module-outside-root")
def module_outside_root_path(*, text: str, repo: str | None) -> Said:
    return said(f'`{text}` leaves {_root_or_pin(repo)}',
                help="modules are read only inside the program root and the pinned repositories' directories: "
                     "move the module below it, or pin its directory in flow.toml's [pins]"
                if not repo else "a repository's modules use only modules of the same repository")


@message("pin-unverified")
def pin_unverified(*, repo: str, message, actual: str | None) -> Said:
    return said(f'`{repo}` cannot be used: {message}', help=f'if that directory is what you mean to run, pin it: "{repo}" = {{ path = "...", commit = "{actual}" }}' if actual else 'make the directory hold the pinned commit, or change the pin')


@message("repo-unpinned")
def repo_unpinned(*, head) -> Said:
    return said(f'`{head}` is not pinned', help=f'add `[pins] "{head}" = {{ path = "...", commit = "..." }}` to flow.toml')


@message("std-module-unknown")
def std_module_unknown(*, std_version: str, rest: str, guess: str | None, known) -> Said:
    return said(f'std@{std_version} has no module `{rest}`', help=f'did you mean `std@{std_version}/{guess}`?' if guess else 'std modules: ' + ', '.join(known))


@message("std-version-unknown")
def std_version_unknown(*, version: str, std_version: str) -> Said:
    return said(f'there is no std `{version}`; this compiler ships std@{std_version}')


@message("ctor-undefined")
def ctor_undefined_here(*, name: str, guess: str | None, other: str | None) -> Said:
    return said(f'there is no constructor `{name}` here', help=f'did you mean `{guess}`?' if guess else f'it is declared in module `{other}`: write `{other}.{name}`' if other else None)


@message("ctor-undefined")
def ctor_undefined_host_type(*, name: str) -> Said:
    return said(f'`{name}` is a host type: only the host, or a `@fake`, makes its values')


@message("ctor-undefined")
def ctor_undefined_module(*, qualifier: str, name: str, guess: str | None) -> Said:
    return said(f'module `{qualifier}` has no constructor `{name}`', help=f'did you mean `{qualifier}.{guess}`?' if guess else None)


@message("ctor-undefined")
def ctor_undefined_of_type(*, type_name: str, name: str, guess: str | None, ctors) -> Said:
    return said(f'`{type_name}` has no constructor `{name}`', help=f'did you mean `{guess}`?' if guess else 'its constructors are ' + ', '.join((f'`{c.name}`' for c in ctors)))


@message("definition-duplicate")
def definition_duplicate_builtin_type(*, name: str) -> Said:
    return said(f'`{name}` is a built-in type')


@message("definition-duplicate")
def definition_duplicate_constructor(*, name: str) -> Said:
    return said(f'constructor `{name}` is declared twice')


@message("definition-duplicate")
def definition_duplicate_in_module(*, name: str, first_line: int) -> Said:
    return said(f'`{name}` is defined twice in this module', notes=(f'first defined at line {first_line}',))


@message("definition-duplicate")
def definition_duplicate_in_pattern(*, name: str) -> Said:
    return said(f'`{name}` is bound twice in this pattern')


@message("definition-duplicate")
def definition_duplicate_module_name(*, name: str) -> Said:
    return said(f'`{name}` is already the name of an imported module')


@message("definition-duplicate")
def definition_duplicate_parameter(*, name: str) -> Said:
    return said(f'parameter `{name}` is declared twice')


@message("definition-duplicate")
def definition_duplicate_type_parameter(*, name: str) -> Said:
    return said(f'type parameter `{name}` is declared twice')


@message("member-undefined")
def member_undefined(*, alias: str, name: str, guess: str | None) -> Said:
    return said(f'module `{alias}` has no function `{name}`', help=f'did you mean `{alias}.{guess}`?' if guess else None)


@message("name-private")
def name_private_ctor_type(*, type_name: str, name: str) -> Said:
    return said(f'type `{type_name}` of `{name}` is private to its module')


@message("name-private")
def name_private_member(*, alias: str, name: str) -> Said:
    return said(f'`{alias}.{name}` is private to its module', help='mark it `pub` where it is declared to use it here')


@message("name-private")
def name_private_type(*, qualifier: str, name: str) -> Said:
    return said(f'type `{qualifier}.{name}` is private to its module')


@message("name-private")
def name_private_type_with_help(*, qualifier: str, name: str) -> Said:
    return said(f'type `{qualifier}.{name}` is private to its module', help='mark it `pub` where it is declared to use it here')


@message("name-undefined")
def name_undefined(*, name: str, guess: str | None) -> Said:
    return said(f'`{name}` is not defined', help=f'did you mean `{guess}`?' if guess else None)


@message("name-undefined")
def name_undefined_module(*, alias: str, guess: str | None) -> Said:
    return said(f'no module is imported as `{alias}`', help=f'did you mean `{guess}`?' if guess else f'add `use "./{alias}"` or `use "std@v1/{alias}"`')


@message("type-undefined")
def type_undefined(*, name: str, guess: str | None) -> Said:
    return said(f'there is no type `{name}`', help=f'did you mean `{guess}`?' if guess else None)


@message("type-undefined")
def type_undefined_module(*, qualifier: str, name: str, guess: str | None) -> Said:
    return said(f'module `{qualifier}` has no type `{name}`', help=f'did you mean `{qualifier}.{guess}`?' if guess else None)


@message("type-undefined")
def type_undefined_requirement(*, bound: str) -> Said:
    return said(f'`{bound}` is not a requirement; use Eq, Ord or Data')


@message("arity-mismatch")
def arity_mismatch_call(*, n_params: int, n_args: int, fn_type) -> Said:
    return said(f"this function takes {n_params} argument{('s' if n_params != 1 else '')}, found {n_args}", help=f'its type is `{fn_type}`')


@message("arity-mismatch")
def arity_mismatch_host_token(*, name: str) -> Said:
    return said(f'`{name}(token)` takes the token text')


@message("arity-mismatch")
def arity_mismatch_lambda(*, n_expected: int, n_found: int) -> Said:
    return said(f"a function taking {n_expected} parameter{('s' if n_expected != 1 else '')} is expected here, this one takes {n_found}")


@message("arity-mismatch")
def arity_mismatch_no_payload(*, name: str) -> Said:
    return said(f'`{name}` takes no payload', help=f'write `{name}` alone')


@message("arity-mismatch")
def arity_mismatch_pattern_payload(*, name: str, n_payload: int, n_args: int) -> Said:
    return said(f"`{name}` carries {n_payload} value{('s' if n_payload != 1 else '')}, the pattern has {n_args}")


@message("arity-mismatch")
def arity_mismatch_payload(*, name: str, n_payload: int, n_args: int) -> Said:
    return said(f"`{name}` takes {n_payload} value{('s' if n_payload != 1 else '')}, found {n_args}")


@message("cannot-infer")
def cannot_infer_callee() -> Said:
    return said('the type of this function must be known to call it')


@message("cannot-infer")
def cannot_infer_constructor(*, name: str, types: list[str]) -> Said:
    return said(f'`{name}` could be a constructor of {", ".join(types)}', help='give the expected type, e.g. with a `let` annotation')


@message("cannot-infer")
def cannot_infer_parameter(*, name: str) -> Said:
    return said(f'the type of parameter `{name}` cannot be inferred', help=f'write it: `{name}: Type`')


@message("cannot-infer")
def cannot_infer_record_type(*, name: str) -> Said:
    return said(f'the type of this value must be known to read `.{name}`', help="annotate the value's type")


@message("cannot-infer")
def cannot_infer_type_argument(*, tool: str) -> Said:
    return said(f"the type argument of `{tool.replace('std@v1/', '')}` cannot be inferred", help='annotate the result, e.g. `let plan: Plan = ...`')


@message("field-duplicate")
def field_duplicate_declaration(*, name: str) -> Said:
    return said(f'field `{name}` is declared twice')


@message("field-duplicate")
def field_duplicate_literal(*, name: str) -> Said:
    return said(f'field `{name}` is given twice')


@message("field-duplicate")
def field_duplicate_pattern(*, name: str) -> Said:
    return said(f'field `{name}` appears twice in this pattern')


@message("field-missing")
def field_missing_literal(*, name: str, n_absent: int, absent) -> Said:
    return said(f"`{name}` is missing field{('s' if n_absent > 1 else '')} " + ', '.join((f'`{n}`' for n in absent)))


@message("field-missing")
def field_missing_pattern(*, absent) -> Said:
    return said('this pattern does not mention ' + ', '.join((f'`{n}`' for n in absent)), help='add the fields, or `..` to ignore the rest')


@message("field-private")
def field_private(*, field: str, record: str) -> Said:
    return said(f'field `{field}` of `{record}` is private to its module')


@message("field-undefined")
def field_undefined_access(*, record: str, field: str, guess: str | None) -> Said:
    return said(f'`{record}` has no field `{field}`', help=f'did you mean `{guess}`?' if guess else None)


@message("field-undefined")
def field_undefined_literal(*, record: str, field: str, guess: str | None) -> Said:
    return said(f'`{record}` has no field `{field}`', help=f'did you mean `{guess}`?' if guess else None)


@message("field-undefined")
def field_undefined_pattern(*, record: str, field: str, guess: str | None) -> Said:
    return said(f'`{record}` has no field `{field}`', help=f'did you mean `{guess}`?' if guess else None)


@message("field-undefined")
def field_undefined_tuple(*, n_items: int, index: int) -> Said:
    return said(f'a {n_items}-tuple has no element {index}')


@message("not-a-record")
def not_a_record_field_read(*, type: str, name: str) -> Said:
    return said(f'`{type}` has no fields; `.{name}` cannot be read')


@message("not-a-record")
def not_a_record_positional_ctor(*, name: str, form: str) -> Said:
    return said(f'`{name}` has no named fields', help=f'write `{name}(...)`' if form == 'positional' else f'write `{name}`')


@message("not-a-record")
def not_a_record_type(*, name: str) -> Said:
    return said(f'`{name}` is not a record type', help='an enum value is built with one of its constructors')


@message("not-callable")
def not_callable(*, type: str) -> Said:
    return said(f'`{type}` is not a function')


@message("not-callable")
def not_callable_module(*, name: str) -> Said:
    return said(f'`{name}` is a module, not a value', help=f'name one of its members: `{name}.name`')


@message("not-comparable")
def not_comparable_equality(*, type: str, op: str) -> Said:
    return said(f'`{type}` values cannot be compared with `{op}`', help='only data types (no functions or tasks) have equality')


@message("not-comparable")
def not_comparable_order(*, type: str, op: str) -> Said:
    return said(f'`{type}` has no order; `{op}` needs an Ord type', help='Int, Decimal, Text, Bool, Bytes, Duration, Instant and lists or tuples of them are ordered')


@message("operator-mismatch")
def operator_mismatch_arith_left(*, op: str, type: str) -> Said:
    return said(f'`{op}` works on Int or Decimal, not `{type}`', help=_arith_help(type))


@message("operator-mismatch")
def operator_mismatch_arith_right(*, op: str, type: str) -> Said:
    return said(f'`{op}` works on Int or Decimal, not `{type}`')


@message("operator-mismatch")
def operator_mismatch_concat(*, type: str) -> Said:
    return said(f'`++` joins Text or Lists, not `{type}`')


@message("operator-mismatch")
def operator_mismatch_negate(*, type: str) -> Said:
    return said(f'`-` works on Int or Decimal, not `{type}`')


@message("operator-mismatch")
def operator_mismatch_sides(*, op: str, left, right: str) -> Said:
    return said(f'`{op}` needs both sides of one type: `{left}` and `{right}`', help='convert explicitly, e.g. `decimal.from_int(n)`')


@message("requirement-unmet")
def requirement_unmet(*, type: str, requirement: str) -> Said:
    return said(f'`{type}` does not satisfy `{requirement}`', help=_requirement_help(requirement))


@message("requirement-unmet")
def requirement_unmet_type_argument(*, arg_type: str, bound: str, info_name: str, param_name: str) -> Said:
    return said(f'`{arg_type}` does not satisfy `{bound}`, which `{info_name}` requires of `{param_name}`')


@message("type-arity-mismatch")
def type_arity_mismatch(*, name: str, expected, found: str) -> Said:
    return said(f"`{name}` takes {expected} type argument{('s' if expected != 1 else '')}, found {found}")


@message("type-mismatch")
def type_mismatch(*, expected: str, found: str) -> Said:
    return said(f'expected `{expected}`, found `{found}`')


@message("type-mismatch")
def type_mismatch_argument(*, expected: str, found: str, param: str, callee: str, declared: str) -> Said:
    return said(f"expected `{expected}` for parameter `{param}` of `{callee}`, found `{found}`",
                notes=(f"`{param}` is declared at {declared}",))


@message("type-mismatch")
def type_mismatch_named_fields(*, name: str) -> Said:
    return said(f'`{name}` has named fields: write `{name} {{ ... }}`')


@message("type-mismatch")
def type_mismatch_update_of_constructor() -> Said:
    return said('`..base` updates a record; a constructor is built whole')


@message("guard-must-leave")
def guard_must_leave() -> Said:
    return said('the `else` block of a `guard` must leave: end it with `return`')


@message("try-error-mismatch")
def try_error_mismatch(*, operand_error: str, function_error: str) -> Said:
    return said(f"`?` would return `{operand_error}`, but this function's error type is `{function_error}`", help='convert the error first, e.g. with `result.map_err`')


@message("try-outside-result")
def try_outside_result_function(*, returns: str) -> Said:
    return said(f'`?` returns the error early, but this function returns `{returns}`, not a Result', help='match on the Result instead')


@message("try-outside-result")
def try_outside_result_operand(*, type: str) -> Said:
    return said(f'`?` needs a Result, found `{type}`', help="`?` returns a Result's Err early; match on other values instead")


@message("let-refutable")
def let_refutable(*, missing: str) -> Said:
    return said('this pattern does not match every value: `' + missing + '` is not covered', help='use `match` for a pattern that can fail')


@message("match-not-exhaustive")
def match_not_exhaustive(*, shown, more: str) -> Said:
    return said('this match does not cover ' + ', '.join((f'`{s}`' for s in shown)) + more, help='add an arm for each missing case, or a `_` arm')


@message("match-too-complex")
def match_too_complex_match() -> Said:
    return said('whether this match covers every value is too costly to decide',
                help='match fewer alternatives at once: nest a `match` in an arm, or add a `_` arm')


@message("match-too-complex")
def match_too_complex_pattern() -> Said:
    return said('whether this pattern matches every value is too costly to decide', help='use `match` with a `_` arm')


@message("match-unreachable-arm")
def match_unreachable_arm() -> Said:
    return said('no value reaches this arm: the arms above match everything it does', help='remove it or move it above the arm that covers it')


@message("pattern-bindings-differ")
def pattern_bindings_differ(*, first, own) -> Said:
    return said(f'every alternative must bind the same names: {_names(first)} and {_names(own)}')


@message("pattern-bindings-differ")
def pattern_bindings_differ_types(*, name: str) -> Said:
    return said(f'`{name}` has different types in the alternatives')


@message("pattern-mismatch")
def pattern_mismatch_carries_positional(*, name: str) -> Said:
    return said(f'`{name}` carries positional values, not named fields')


@message("pattern-mismatch")
def pattern_mismatch_ctor_of_other_type(*, name: str, owner: str, type: str) -> Said:
    return said(f'`{name}` is a constructor of `{owner}`, not of `{type}`')


@message("pattern-mismatch")
def pattern_mismatch_list(*, type: str) -> Said:
    return said(f'a list pattern cannot match `{type}`')


@message("pattern-mismatch")
def pattern_mismatch_literal(*, kind: str, type: str) -> Said:
    return said(f'a {kind} literal cannot match a value of type `{type}`')


@message("pattern-mismatch")
def pattern_mismatch_named_by_position(*, name: str) -> Said:
    return said(f'`{name}` has named fields: match them by name')


@message("pattern-mismatch")
def pattern_mismatch_named_fields(*, name: str) -> Said:
    return said(f'`{name}` has named fields', help=f'write `{name} {{ .. }}`')


@message("pattern-mismatch")
def pattern_mismatch_no_payload(*, name: str) -> Said:
    return said(f'`{name}` has no payload', help=f'write `{name}`')


@message("pattern-mismatch")
def pattern_mismatch_payload_omitted(*, name: str, n_payload: int, payload) -> Said:
    return said(f"`{name}` carries {n_payload} value{('s' if n_payload != 1 else '')}", help=f'write `{name}(' + ', '.join(('_' for _ in payload)) + ')`')


@message("pattern-mismatch")
def pattern_mismatch_shape(*, name: str, type: str) -> Said:
    return said(f'a `{name}` pattern cannot match `{type}`')


@message("pattern-mismatch")
def pattern_mismatch_tuple(*, n_items: int, type: str) -> Said:
    return said(f'a {n_items}-tuple pattern cannot match `{type}`')


@message("effect-variable-unbound")
def effect_variable_unbound(*, name: str) -> Said:
    return said(f'effect variable `!{name}` is not introduced by a parameter of this signature', help='write `!tool`, or use the variable on a function-typed parameter first')


@message("generic-tool-requirement")
def generic_tool_requirement(*, name: str) -> Said:
    return said(f'type parameter `{name}` of a Tool must require `Data`: `{name}: Data`')


@message("missing-tool-mark")
def missing_tool_mark(*, callee: str | None, name: str) -> Said:
    what = f"`{callee}`" if callee else "this call"
    return said(f'{what} can make a Tool call, but `{name}` is not marked `!tool`', help='mark the function: `-> ... !tool`')


@message("missing-tool-mark")
def missing_tool_mark_lambda() -> Said:
    return said('this function makes Tool calls but is not marked `!tool`')


@message("not-data")
def not_data_entry_parameter(*, name: str, type: str) -> Said:
    return said(f'entry parameter `{name}` has type `{type}`, which is not data', help="a run's input is JSON: functions and tasks cannot be given")


@message("not-data")
def not_data_entry_result(*, result: str) -> Said:
    return said(f"the entry's result `{result}` is not data")


@message("not-data")
def not_data_in_text(*, type: str) -> Said:
    return said(f'`{type}` cannot be shown in text')


@message("tool-in-pure-context")
def tool_in_pure_context() -> Said:
    return said('this function can make Tool calls, but a pure function is expected here', help="the parameter's type would need `!tool`")


@message("tool-in-pure-context")
def tool_in_pure_context_lambda() -> Said:
    return said('this function makes Tool calls, but a pure function is expected here', help='the expected function type would need `!tool`')


@message("tool-not-data")
def tool_not_data_parameter(*, name: str, type: str) -> Said:
    return said(f'Tool parameter `{name}` has type `{type}`, which is not data', help='functions and tasks cannot cross to a Tool')


@message("tool-not-data")
def tool_not_data_result(*, result: str) -> Said:
    return said(f'a Tool cannot return `{result}`, which is not data')


@message("unneeded-tool-mark")
def unneeded_tool_mark(*, name: str) -> Said:
    return said(f'`{name}` is marked `!tool` but makes no Tool call', help='remove `!tool`')


@message("unneeded-tool-mark")
def unneeded_tool_mark_on_tool() -> Said:
    return said('a Tool declaration is not marked `!tool`; calling it is the Tool call')


@message("attribute-misplaced")
def attribute_misplaced_argument(*, name: str) -> Said:
    return said(f'`@{name}` takes no argument')


@message("attribute-misplaced")
def attribute_misplaced_exclusive(*, first: str, second: str) -> Said:
    return said(f'a function cannot be both `@{first}` and `@{second}`')


@message("attribute-misplaced")
def attribute_misplaced_repeated(*, name: str) -> Said:
    return said(f'`@{name}` is written twice')


@message("attribute-misplaced")
def attribute_misplaced_on_type(*, name: str) -> Said:
    return said(f"`@{name}` cannot mark a type")


@message("attribute-unknown")
def attribute_unknown_on_type(*, name: str) -> Said:
    return said(f"`@{name}` cannot mark a type")


@message("attribute-unknown")
def attribute_unknown(*, name: str, guess: str | None) -> Said:
    return said(f'there is no attribute `@{name}`', help=f'did you mean `@{guess}`?' if guess else 'attributes are @tool, @test, @fake(tool) and @intrinsic')


@message("body-missing")
def body_missing_function(*, name: str) -> Said:
    return said(f'function `{name}` has no body', help='write `= expression`, or mark a Tool declaration `@tool`')


@message("body-missing")
def body_missing_type(*, name: str) -> Said:
    return said(f'type `{name}` needs a body: `{{ field: Type }}` or `{{ Constructor }}`', help='a host token type is written `@tool pub type Name`')


@message("body-unexpected")
def body_unexpected(*, tool: bool) -> Said:
    what = "a Tool declaration" if tool else "an intrinsic"
    return said(f'{what} has no body: its implementation is outside Flow')


@message("body-unexpected")
def body_unexpected_tool_type() -> Said:
    return said('a `@tool` type is a host token and has no body')


@message("body-unexpected")
def body_unexpected_tool_type_parameters() -> Said:
    return said('a `@tool` type takes no type parameters')


@message("fake-signature-mismatch")
def fake_signature_mismatch(*, identity: str, params, ret_type: str) -> Said:
    return said(f'a fake for `{identity}` takes ({params}), optionally after `call: Int`, and returns `{ret_type}`')


@message("fake-signature-mismatch")
def fake_signature_mismatch_generic(*, identity: str, params) -> Said:
    return said(f"a fake for the generic Tool `{identity}` takes the same type parameters ({', '.join((p.name for p in params))})")


@message("fake-target-invalid")
def fake_target_invalid(*, target: str, exists: bool) -> Said:
    what = "is not a Tool declaration" if exists else "names no function"
    return said(f'`@fake({target})` {what}')


@message("fake-target-invalid")
def fake_target_invalid_syntax() -> Said:
    return said('`@fake` names the Tool it stands in for: `@fake(module.tool)`')


@message("intrinsic-outside-std")
def intrinsic_outside_std() -> Said:
    return said('`@intrinsic` is reserved for the standard library', help='declare a Tool with `@tool` and bind an implementation')


@message("test-signature")
def test_signature() -> Said:
    return said('a `@test` function takes no parameters and returns `Result<Unit, Text>`')


@message("unused-variable")
def unused_variable(*, name: str) -> Said:
    return said(f'`{name}` is never used', help=f'remove it, or name it `_{name}`')


@message("unused-variable")
def unused_variable_shadowed(*, name: str) -> Said:
    return said(f'`{name}` is never used before it is bound again', help=f'remove it, or name it `_{name}`')



# ---- running: the entry, its input and its bindings (the host, before the first fact) -----------


@message("entry-not-found")
def entry_not_found(*, entry: str, root_file: str) -> Said:
    return said(f"`{entry}` is not a `pub flow` of {root_file}", help="name a top-level `pub flow` with --entry")


@message("not-data")
def not_data_entry_input(*, name: str) -> Said:
    return said(f"entry parameter `{name}` is not data")


@message("input-invalid")
def input_invalid_json(*, problem) -> Said:
    return said(f"the input is not JSON: {problem}")


@message("input-invalid")
def input_invalid_missing(*, name: str) -> Said:
    return said(f"the input has no `{name}`")


@message("input-invalid")
def input_invalid_not_object() -> Said:
    return said("the input is a JSON object keyed by parameter name")


@message("input-invalid")
def input_invalid_unknown_parameter(*, entry: str, key: str, names: list[str]) -> Said:
    return said(f"the entry `{entry}` has no parameter `{key}`",
                help="parameters: " + ", ".join(names) if names else "it takes no input")


@message("input-invalid")
def input_invalid_value(*, name: str, problem) -> Said:
    return said(f"`{name}`: {problem}")


@message("reply-invalid")
def reply_invalid(*, call: str, tool: str, path: str, problem: str, schema: str, command: str) -> Said:
    return said(f"the reply to {call} ({tool}) does not fit: {path}: {problem}",
                notes=[f"nothing was recorded; the call stays open. The outcome it takes (JSON Schema): {schema}"],
                help=f"answer again, e.g. `{command}`, or admit this reply as BadReply with --admit-bad-reply")


@message("binding-failed")
def binding_failed(*, problem) -> Said:
    return said(str(problem))


@message("binding-mismatch")
def binding_mismatch(*, shown: str, identity: str, found: str | None, declared: str) -> Said:
    detail = f" (fingerprint {found}, declared {declared})" if found else " (it does not list it)"
    return said(f"`{shown}` does not implement `{identity}` as declared" + detail,
                help="regenerate the implementation's description from `flow tools`")


@message("binding-missing")
def binding_missing(*, identity: str) -> Said:
    module = identity.rsplit(".", 1)[0]
    return said(f"no implementation is bound for the Tool `{identity}`",
                help=f'add to flow.toml: [tools] "{module}" = '
                     '{ python = "tools/impl.py" } (or command = [...], or pending = true)')


@message("binding-not-approved")
def binding_not_approved(*, shown: str, nobody_to_ask: bool) -> Said:
    return said(f"running `{shown}` was not approved" + (" (nobody could be asked)" if nobody_to_ask else ""),
                help="pass --allow to approve the implementations flow.toml names, "
                     "or answer yes at a terminal (remembered for this commit)")
