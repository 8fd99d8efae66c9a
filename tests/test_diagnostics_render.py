"""Diagnostics: the data, the code registry, the "did you mean" helper and both renderings.

Each test's docstring states the behaviour it pins down.
"""

from __future__ import annotations

import dataclasses
import random
import re
import time

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowc.diagnostics
from flowc.diagnostics import Diagnostic, Location, error, sort_key, warning
from flowc.diagnostics import codes
from flowc.diagnostics.render import WINDOW, render, render_json, summary_line, use_color
from flowc.diagnostics.suggest import did_you_mean, distance

ESC = "\x1b"
RED = "\x1b[1;31m"
YELLOW = "\x1b[1;33m"
BLUE = "\x1b[1;34m"
RESET = "\x1b[0m"


def loc(line: int, column: int, end_line: int | None = None, end_column: int | None = None, file: str = "main.flow") -> Location:
    return Location(file, line, column, line if end_line is None else end_line, column + 1 if end_column is None else end_column)


def snippet(text: str) -> list[str]:
    """The rendered lines of one diagnostic, without the blank line and summary."""
    return text.split("\n\n")[0].split("\n")


def caret_line_for(source: str, location: Location, **kw) -> tuple[str, str]:
    """(source line as shown, caret line), gutter stripped, for one type-mismatch at `location`."""
    d = error("type-mismatch", "m", location, **kw)
    lines = snippet(render([d], {location.file: source}, color=False))
    gutter = len(str(location.line)) + 3  # "12 | "
    return lines[3][gutter:], lines[4][gutter:]


# --- the human rendering: carets --------------------------------------------------------------------


def test_full_block_matches_the_documented_layout():
    """A located diagnostic renders header, arrow, gutter, source line, carets, notes and help."""
    source = "\n" * 11 + '    let x: Int = "a"\n'
    d = error(
        "type-mismatch",
        "expected Int, found Text",
        loc(12, 18, 12, 21, file="support/main.flow"),
        notes=("Int was declared here",),
        help="did you mean `notes`?",
    )
    assert render([d], {"support/main.flow": source}, color=False) == (
        "error[type-mismatch]: expected Int, found Text\n"
        "  --> support/main.flow:12:18\n"
        "   |\n"
        '12 |     let x: Int = "a"\n'
        "   |                  ^^^\n"
        "   = note: Int was declared here\n"
        "   = help: did you mean `notes`?\n"
        "\n"
        "error: 1 error emitted\n"
    )


def test_single_character_span_gets_one_caret_under_it():
    """A span with end_column == column + 1 is underlined by exactly one caret at that column."""
    shown, carets = caret_line_for("let x = y;\n", loc(1, 9))
    assert shown == "let x = y;"
    assert carets == "        ^"


def test_multi_character_span_underlines_column_to_end_column_exclusive():
    """Carets cover columns column .. end_column - 1."""
    shown, carets = caret_line_for("let total = count + 1\n", loc(1, 13, 1, 18))
    assert carets == " " * 12 + "^^^^^"
    assert shown[12:17] == "count"


def test_multi_line_span_is_underlined_to_the_end_of_its_first_line():
    """A span that continues on later lines is underlined from its column to the end of line one."""
    source = "match x {\n    A => 1,\n}\n"
    shown, carets = caret_line_for(source, loc(1, 1, 3, 2))
    assert shown == "match x {"
    assert carets == "^^^^^^^^^"


def test_multi_line_span_starting_at_the_line_end_still_gets_a_caret():
    """A span starting just past the last character of its first line gets one caret there."""
    shown, carets = caret_line_for("let x = {\n1 }\n", loc(1, 10, 2, 4))
    assert carets == " " * 9 + "^"


def test_empty_span_and_past_end_column_get_one_caret():
    """An empty span (end == start) or a position just past the line's end still shows one caret."""
    assert caret_line_for("abc\n", loc(1, 2, 1, 2))[1] == " ^"
    assert caret_line_for("abc\n", loc(1, 4, 1, 4))[1] == "   ^"


def test_end_column_beyond_the_line_is_clamped_to_the_line():
    """An end column past the end of the line underlines only to the end of the line."""
    assert caret_line_for("abc\n", loc(1, 2, 1, 99))[1] == " ^^"


@pytest.mark.parametrize("tabsize", [2, 4, 8])
def test_tabs_are_kept_and_carets_align_at_any_tab_width(tabsize):
    """Tabs stay in the source line; the caret line repeats them, so both expand alike."""
    source = "\tlet\ty = zz\n"
    d = error("type-mismatch", "m", loc(1, 10, 1, 12))
    lines = snippet(render([d], {"main.flow": source}, color=False))
    assert lines[3] == "1 | \tlet\ty = zz"
    assert lines[4] == "  | \t   \t    ^^"
    shown = lines[3].expandtabs(tabsize)
    carets = lines[4].expandtabs(tabsize)
    start = carets.index("^")
    assert shown[start : start + 2] == "zz"
    assert carets[start:] == "^^"


def test_wide_characters_take_two_columns_in_the_caret_line():
    """East Asian wide characters before or in the span count two columns for alignment."""
    shown, carets = caret_line_for('let 名前 = "x"\n', loc(1, 5, 1, 7))
    assert carets == "    ^^^^"


def test_crlf_line_endings_do_not_leak_into_the_snippet():
    """A trailing carriage return is not shown as part of the source line."""
    shown, _ = caret_line_for("a\r\nlet x = 1\r\n", loc(2, 5))
    assert shown == "let x = 1"


# --- the human rendering: missing pieces -----------------------------------------------------------


def test_no_location_prints_only_header_notes_and_help():
    """A diagnostic without a location has no arrow and no snippet."""
    d = error("entry-not-found", "no function `main`", None, notes=("looked in app.flow",), help="add `pub flow main()`")
    assert render([d], {}, color=False) == (
        "error[entry-not-found]: no function `main`\n"
        "  = note: looked in app.flow\n"
        "  = help: add `pub flow main()`\n"
        "\n"
        "error: 1 error emitted\n"
    )


def test_missing_source_keeps_the_arrow_line_only():
    """When the file's text is not supplied, the `-->` line stays and the snippet is omitted."""
    d = error("file-not-utf8", "not UTF-8", loc(3, 1, file="bin.flow"))
    lines = snippet(render([d], {"other.flow": "x\n"}, color=False))
    assert lines == ["error[file-not-utf8]: not UTF-8", " --> bin.flow:3:1"]


@pytest.mark.parametrize(
    "source, location",
    [
        ("", loc(1, 1, 1, 1)),  # empty file
        ("let x = 1\n", loc(2, 1, 2, 1)),  # end of file, after the final newline
        ("let x = 1", loc(7, 1)),  # line past the end
        ("let x = 1", loc(0, 1)),  # nonsense line
    ],
)
def test_out_of_range_line_omits_the_snippet(source, location):
    """An empty file, an EOF position or any line outside the file shows no snippet."""
    d = error("syntax-error", "unexpected end of file", location)
    lines = snippet(render([d], {"main.flow": source}, color=False))
    assert lines == ["error[syntax-error]: unexpected end of file", f" --> main.flow:{location.line}:{location.column}"]


def test_blank_line_between_diagnostics_and_summary_last():
    """Blocks are separated by one blank line; the summary follows a blank line and ends the text."""
    ds = [error("name-undefined", "a", None), warning("unused-variable", "b", None)]
    text = render(ds, {}, color=False)
    assert text == (
        "error[name-undefined]: a\n\n"
        "warning[unused-variable]: b\n\n"
        "error: 1 error, 1 warning emitted\n"
    )


def test_render_keeps_the_given_order():
    """render does not reorder; callers sort with sort_key when they want file order."""
    ds = [error("name-undefined", "second", loc(9, 1)), error("name-undefined", "first", loc(1, 1))]
    text = render(ds, {}, color=False)
    assert text.index("second") < text.index("first")


def test_no_diagnostics_render_nothing():
    """An empty list renders as the empty string: no summary."""
    assert render([], {}, color=True) == ""


@pytest.mark.parametrize(
    "errors, warnings, expected",
    [
        (1, 0, "error: 1 error emitted"),
        (3, 0, "error: 3 errors emitted"),
        (3, 1, "error: 3 errors, 1 warning emitted"),
        (1, 2, "error: 1 error, 2 warnings emitted"),
        (0, 1, "warning: 1 warning emitted"),
        (0, 2, "warning: 2 warnings emitted"),
        (0, 0, "no errors or warnings emitted"),
    ],
)
def test_summary_line_counts_with_correct_plurals(errors, warnings, expected):
    """The summary counts errors and warnings with singular and plural words."""
    ds = [error("type-mismatch", "e", None)] * errors + [warning("unused-variable", "w", None)] * warnings
    assert summary_line(ds) == expected


def test_multi_line_note_lines_up_under_its_text():
    """Later lines of a note are indented to the note's text."""
    d = error("type-mismatch", "m", loc(1, 1), notes=("one\ntwo",))
    lines = snippet(render([d], {}, color=False))
    assert lines[-2:] == ["  = note: one", "          two"]


# --- long lines ------------------------------------------------------------------------------------


def test_ten_megabyte_line_is_windowed_quickly():
    """A 10 MB line shows about WINDOW code points around the caret, marked with …, in little time."""
    n = 10_000_000
    position = 5_000_000
    line = "a" * position + "XYZ" + "b" * (n - position - 3)
    d = error("type-mismatch", "m", loc(1, position + 1, 1, position + 4, file="big.flow"))
    started = time.perf_counter()
    text = render([d], {"big.flow": line + "\n"}, color=False)
    elapsed = time.perf_counter() - started
    assert elapsed < 2.0
    assert len(text) < 4 * WINDOW
    shown_line, caret_line = snippet(text)[3:5]
    shown, carets = shown_line[4:], caret_line[4:]
    assert shown.startswith("…") and shown.endswith("…")
    assert len(shown) <= WINDOW + 2
    start = carets.index("^")
    assert carets[start:] == "^^^"
    assert shown[start : start + 3] == "XYZ"


def test_long_line_caret_near_the_end_fills_the_window_from_the_left():
    """A caret at the end of a long line shows the window ending there, with … only on the left."""
    line = "c" * 1000
    shown, carets = caret_line_for(line, loc(1, 1001, 1, 1001))
    assert shown.startswith("…") and not shown.endswith("…")
    assert len(shown) == WINDOW + 1
    assert carets == " " * (WINDOW + 1) + "^"


def test_long_span_is_clipped_to_the_window():
    """A span longer than the window is underlined only as far as the shown text goes."""
    line = "d" * 5000
    shown, carets = caret_line_for(line, loc(1, 1, 1, 5001))
    assert shown == "d" * WINDOW + "…"
    assert carets == "^" * WINDOW


# --- colour ----------------------------------------------------------------------------------------


def sample_diagnostics(text: str = "plain") -> list[Diagnostic]:
    return [
        error("type-mismatch", f"expected Int, found {text}", loc(1, 5, 1, 8), notes=(f"note {text}",), help=f"help {text}"),
        warning("unused-variable", f"unused {text}", None),
    ]


def test_color_off_adds_no_escape_byte():
    """With color=False the rendering contains no ESC at all when the inputs have none."""
    text = render(sample_diagnostics(), {"main.flow": "let abc = 1\n"}, color=False)
    assert ESC not in text


def test_color_on_styles_labels_gutter_and_carets_only():
    """With color=True the severity/code label, arrow, gutter and carets are styled; nothing else."""
    text = render(sample_diagnostics(), {"main.flow": "let abc = 1\n"}, color=True)
    lines = text.split("\n")
    assert lines[0] == f"{RED}error[type-mismatch]{RESET}: expected Int, found plain"
    assert lines[1] == f" {BLUE}-->{RESET} main.flow:1:5"
    assert lines[2] == f"{BLUE}  |{RESET}"
    assert lines[3] == f"{BLUE}1 |{RESET} let abc = 1"
    assert lines[4] == f"{BLUE}  |{RESET}     {RED}^^^{RESET}"
    assert lines[5].endswith(": note plain") and lines[5].startswith(f"{BLUE}  ={RESET} ")
    assert lines[8] == f"{YELLOW}warning[unused-variable]{RESET}: unused plain"
    assert lines[-2] == f"{RED}error{RESET}: 1 error, 1 warning emitted"
    # Removing the renderer's own SGR codes gives exactly the uncoloured rendering.
    plain = render(sample_diagnostics(), {"main.flow": "let abc = 1\n"}, color=False)
    assert re.sub(r"\x1b\[[0-9;]*m", "", text) == plain


@pytest.mark.parametrize("color", [False, True])
def test_existing_escape_bytes_are_preserved_byte_for_byte(color):
    """Escape bytes already in messages, notes, help, paths and source pass through unchanged."""
    hostile = "\x1b[31mRED\x1b[0m\x1b]8;;http://x\x07"
    path = f"dir{hostile}/m.flow"
    source = f'let s = "{hostile}"\n'
    d = error("type-mismatch", f"msg {hostile}", loc(1, 5, 1, 6, file=path), notes=(f"n {hostile}",), help=f"h {hostile}")
    text = render([d], {path: source}, color=color)
    assert f": msg {hostile}\n" in text
    assert f": n {hostile}\n" in text
    assert f": h {hostile}\n" in text
    assert f" {path}:1:5\n" in text
    assert f'let s = "{hostile}"\n' in text
    if not color:
        assert text.count(ESC) == 5 * hostile.count(ESC)


# --- use_color -------------------------------------------------------------------------------------


class FakeStream:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class RaisingStream:
    def isatty(self) -> bool:
        raise ValueError("I/O operation on closed file")


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    return monkeypatch


def test_auto_colours_a_terminal_in_a_clean_environment(clean_env):
    """auto: a tty, no NO_COLOR, an ordinary TERM: colour."""
    assert use_color("auto", FakeStream(True)) is True


def test_auto_with_term_unset_still_colours_a_terminal(clean_env):
    """auto: TERM being absent is not TERM=dumb."""
    clean_env.delenv("TERM", raising=False)
    assert use_color("auto", FakeStream(True)) is True


def test_auto_with_no_color_set_does_not_colour(clean_env):
    """auto: a non-empty NO_COLOR turns colour off, whatever its value."""
    clean_env.setenv("NO_COLOR", "1")
    assert use_color("auto", FakeStream(True)) is False
    clean_env.setenv("NO_COLOR", "0")
    assert use_color("auto", FakeStream(True)) is False


def test_auto_with_empty_no_color_still_colours(clean_env):
    """auto: NO_COLOR set to the empty string counts as absent."""
    clean_env.setenv("NO_COLOR", "")
    assert use_color("auto", FakeStream(True)) is True


def test_auto_with_dumb_terminal_does_not_colour(clean_env):
    """auto: TERM=dumb turns colour off."""
    clean_env.setenv("TERM", "dumb")
    assert use_color("auto", FakeStream(True)) is False


def test_auto_reads_the_environment_at_call_time(clean_env):
    """auto: a change to the environment after import is seen by the next call."""
    stream = FakeStream(True)
    assert use_color("auto", stream) is True
    clean_env.setenv("NO_COLOR", "yes")
    assert use_color("auto", stream) is False


def test_auto_on_a_non_terminal_does_not_colour(clean_env):
    """auto: a stream that is not a tty, has no isatty, raises from isatty, or is None: no colour."""
    assert use_color("auto", FakeStream(False)) is False
    assert use_color("auto", object()) is False
    assert use_color("auto", RaisingStream()) is False
    assert use_color("auto", None) is False


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}, {}])
@pytest.mark.parametrize("stream", [FakeStream(True), FakeStream(False), object(), RaisingStream()])
def test_always_and_never_ignore_environment_and_stream(clean_env, env, stream):
    """always is always True and never always False, whatever the environment and stream."""
    for key, value in env.items():
        clean_env.setenv(key, value)
    assert use_color("always", stream) is True
    assert use_color("never", stream) is False


def test_unknown_colour_mode_is_refused():
    """Only auto, always and never are modes."""
    with pytest.raises(ValueError):
        use_color("sometimes", FakeStream(True))


# --- JSON ------------------------------------------------------------------------------------------


def test_json_round_trips_and_is_never_styled():
    """render_json is a sorted-key array of to_json() objects ending in a newline; it reads back."""
    ds = sample_diagnostics("\x1b[31mx")
    text = render_json(ds)
    assert text.endswith("\n") and text.count("\n") == 1
    assert ESC not in text  # JSON escapes control characters; the renderer adds no styling
    data = orjson.loads(text)
    assert data == [d.to_json() for d in ds]
    assert [Diagnostic.from_json(item) for item in data] == ds
    assert data[0]["message"] == "expected Int, found \x1b[31mx"
    assert list(data[0]) == sorted(data[0])
    assert list(data[0]["location"]) == sorted(data[0]["location"])


def test_to_json_has_exactly_the_documented_fields():
    """to_json has code, severity, message, location (or null), notes and help."""
    located, unlocated = sample_diagnostics()
    assert located.to_json() == {
        "code": "type-mismatch",
        "severity": "error",
        "message": "expected Int, found plain",
        "location": {"file": "main.flow", "line": 1, "column": 5, "end_line": 1, "end_column": 8},
        "notes": ["note plain"],
        "help": "help plain",
    }
    assert unlocated.to_json()["location"] is None
    assert unlocated.to_json()["help"] is None
    assert render_json([]) == "[]\n"


# --- constructing diagnostics ----------------------------------------------------------------------


def test_unknown_code_raises_in_error_and_warning():
    """Building a diagnostic with an unregistered code is a compiler bug and raises."""
    with pytest.raises(codes.UnknownCodeError):
        error("no-such-code", "m", None)
    with pytest.raises(ValueError):
        warning("type_mismatch", "m", None)


def test_error_takes_the_registered_severity_and_warning_forces_warning():
    """error() uses the code's registered severity; warning() always makes a warning."""
    assert error("type-mismatch", "m", None).severity == "error"
    assert error("match-unreachable-arm", "m", None).severity == "warning"
    assert warning("type-mismatch", "m", None).severity == "warning"


def test_diagnostics_are_frozen_hashable_and_store_notes_as_tuples():
    """Diagnostics are immutable values; notes given as a list are stored as a tuple."""
    d = error("type-mismatch", "m", loc(1, 1), notes=["a", "b"])
    assert d.notes == ("a", "b")
    assert hash(d) == hash(error("type-mismatch", "m", loc(1, 1), notes=("a", "b")))
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.message = "x"  # type: ignore[misc]
    with pytest.raises(ValueError):
        Diagnostic("type-mismatch", "fatal", "m", None)


def test_sort_key_orders_by_file_line_column_code_with_unlocated_first():
    """sort_key puts unlocated diagnostics first, then by file, line, column and code."""
    ds = [
        error("type-mismatch", "b3", loc(3, 1, file="b.flow")),
        error("type-mismatch", "a10", loc(10, 1, file="a.flow")),
        error("name-undefined", "a2c5n", loc(2, 5, file="a.flow")),
        error("arity-mismatch", "a2c5a", loc(2, 5, file="a.flow")),
        error("entry-not-found", "none", None),
        error("name-undefined", "a2c1", loc(2, 1, file="a.flow")),
    ]
    expected = ["none", "a2c1", "a2c5a", "a2c5n", "a10", "b3"]
    for seed in range(5):
        shuffled = ds[:]
        random.Random(seed).shuffle(shuffled)
        assert [d.message for d in sorted(shuffled, key=sort_key)] == expected


# --- the registry ----------------------------------------------------------------------------------

REQUIRED = """
syntax-error text-unterminated escape-invalid literal-invalid nesting-too-deep file-unreadable
file-not-utf8 module-not-found import-cycle std-module-unknown std-version-unknown repo-unpinned
import-duplicate name-undefined type-undefined ctor-undefined member-undefined name-private
definition-duplicate field-undefined field-private field-duplicate field-missing type-mismatch
arity-mismatch type-arity-mismatch not-callable not-a-record cannot-infer requirement-unmet
operator-mismatch not-comparable try-outside-result try-error-mismatch guard-must-leave
match-not-exhaustive match-unreachable-arm pattern-mismatch pattern-bindings-differ let-refutable
missing-tool-mark unneeded-tool-mark tool-not-data attribute-unknown attribute-misplaced
body-unexpected body-missing test-signature fake-target-invalid fake-signature-mismatch
intrinsic-outside-std generic-tool-requirement tool-in-pure-context not-data effect-variable-unbound
entry-not-found unused-variable
""".split()
WARNINGS = {"match-unreachable-arm", "unused-variable"}


def test_every_registered_code_is_kebab_case_with_a_one_sentence_summary():
    """Each registry entry is keyed by its kebab-case name and says what it means in a sentence."""
    assert codes.REGISTRY
    for name, code in codes.REGISTRY.items():
        assert code.name == name
        assert re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", name), name
        assert code.severity in ("error", "warning"), name
        assert code.summary.strip() and code.summary[0].isupper() and code.summary.endswith("."), name


def test_the_compilers_codes_are_registered_with_their_severities():
    """Every code the compiler stages use is registered; only the lints default to warning."""
    missing = [name for name in REQUIRED if name not in codes.REGISTRY]
    assert missing == []
    for name in REQUIRED:
        assert codes.REGISTRY[name].severity == ("warning" if name in WARNINGS else "error"), name
    assert flowc.diagnostics.REGISTRY is codes.REGISTRY


def test_register_refuses_bad_names_severities_and_duplicates():
    """register() refuses a non-kebab name, an unknown severity, an empty summary and a repeat."""
    before = dict(codes.REGISTRY)
    with pytest.raises(ValueError):
        codes.register("Not_Kebab", "error", "Bad.")
    with pytest.raises(ValueError):
        codes.register("fine-name", "fatal", "Bad.")
    with pytest.raises(ValueError):
        codes.register("fine-name", "error", "  ")
    with pytest.raises(ValueError):
        codes.register("type-mismatch", "error", "Again.")
    assert codes.REGISTRY == before


# --- did you mean ----------------------------------------------------------------------------------


def test_did_you_mean_finds_close_names():
    """A close candidate is suggested: a typo, a dropped letter, a swapped pair, a case slip."""
    assert did_you_mean("nots", ["notes", "round", "ticket"]) == "notes"
    assert did_you_mean("lenght", ["length", "list"]) == "length"
    assert did_you_mean("tickte", ["ticket"]) == "ticket"
    assert did_you_mean("report", ["Report", "repost"]) == "Report"


def test_did_you_mean_rejects_distant_names():
    """Nothing is suggested when every candidate is further than max(1, len // 3) edits away."""
    assert did_you_mean("abcdef", ["abxdxf"]) == "abxdxf"  # 2 edits, len 6: allowed
    assert did_you_mean("abcdef", ["axxdxf"]) is None  # 3 edits, len 6: too far
    assert did_you_mean("abc", ["axc"]) == "axc"  # 1 edit is always allowed...
    assert did_you_mean("abc", ["xxc"]) is None  # ...but 2 is too many for a short name
    assert did_you_mean("x", ["y", "xs"]) is None  # a one-letter name never matches by edits
    assert did_you_mean("main", []) is None
    assert did_you_mean("", ["a"]) is None


def test_did_you_mean_never_suggests_the_name_itself():
    """A candidate equal to the name is skipped."""
    assert did_you_mean("notes", ["notes"]) is None
    assert did_you_mean("notes", ["notes", "note"]) == "note"


def test_did_you_mean_breaks_ties_by_sorted_order_whatever_the_input_order():
    """Equally close candidates resolve to the first in sorted order, for any iteration order."""
    candidates = ["car", "bat", "cap", "hat", "cut", "cab"]
    answers = set()
    for seed in range(30):
        shuffled = candidates[:]
        random.Random(seed).shuffle(shuffled)
        answers.add(did_you_mean("cat", shuffled))
        answers.add(did_you_mean("cat", set(shuffled)))
        answers.add(did_you_mean("cat", iter(shuffled)))
    assert answers == {"bat"}


def test_distance_is_optimal_string_alignment():
    """distance counts insertions, deletions, substitutions and adjacent swaps as one edit each."""
    assert distance("", "") == 0
    assert distance("abc", "") == 3
    assert distance("kitten", "sitting") == 3
    assert distance("ab", "ba") == 1
    assert distance("ca", "abc") == 3


# --- properties ------------------------------------------------------------------------------------

SAFE_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from("\t\n\r"), max_size=60)


@settings(max_examples=200, deadline=None, database=None)
@given(
    source=SAFE_TEXT,
    line=st.integers(-1, 6),
    column=st.integers(-1, 70),
    end_line=st.integers(-1, 8),
    end_column=st.integers(-1, 80),
    color=st.booleans(),
)
def test_any_location_renders_without_failing(source, line, column, end_line, end_column, color):
    """Any location on any source renders; without colour no ESC appears; there is always a summary."""
    d = error("syntax-error", "m", Location("f.flow", line, column, end_line, end_column))
    text = render([d], {"f.flow": source}, color=color)
    assert re.sub(r"\x1b\[[0-9;]*m", "", text).endswith("\n\nerror: 1 error emitted\n")
    if not color:
        assert ESC not in text
    if "^" in text:
        assert text.count("\n") >= 5


@settings(max_examples=200, deadline=None, database=None)
@given(name=st.text("abcde", max_size=8), candidates=st.lists(st.text("abcde", max_size=8), max_size=8))
def test_did_you_mean_is_order_independent_and_within_threshold(name, candidates):
    """The answer is the same for reversed input, and is within the distance threshold."""
    answer = did_you_mean(name, candidates)
    assert answer == did_you_mean(name, list(reversed(candidates)))
    if answer is not None:
        assert answer in candidates and answer != name
        assert answer.casefold() == name.casefold() or distance(name, answer) <= max(1, len(name) // 3)
