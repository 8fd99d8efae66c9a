"""`flow lsp` end to end: a real client (pytest-lsp) starts `python -m flowrt.cli lsp` and asks
for each feature on a two-module program that uses std.

A request waits for the check of its buffer's newest text, and the server publishes a check's
diagnostics before it answers anything from that check, so a code-lens request is the barrier
after which the client has the diagnostics of what it sent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as L
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from flowc.fmt import format_source
from flowc.program import STD_DIR

pytestmark = pytest.mark.asyncio

PLANNER = '''/// What the planner wants to do next.
pub type Step { Search(Text), Ask(Text), Done(Text) }

pub type PlanError { Unavailable(Text) }

/// Chooses the next step for a ticket, given the notes gathered so far.
@tool pub flow next(ticket: Text, notes: List<Text>) -> Result<Step, PlanError>
'''

MAIN = '''use "std@v1/list"
use "./planner"

/// A ticket and what was learned.
pub type Notes { ticket: Text, lines: List<Text> }

pub flow main(ticket: Text) -> Int !tool = {
    let notes = Notes { ticket, lines: [] }
    let lines = list.map(notes.lines, flow(x: Text) = x ++ "!")
    match planner.next(ticket, lines) {
        Ok(Search(query)) => count(notes),
        Ok(_) => 0,
        Err(_) => 1,
    }
}

/// Counts the lines.
flow count(n: Notes) -> Int = list.length(n.lines)
'''


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "flowrt.cli", "lsp"]))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(L.InitializeParams(capabilities=client_capabilities("visual-studio-code")))
    yield
    await lsp_client.shutdown_session()


@pytest.fixture
def program(tmp_path: Path) -> Path:
    (tmp_path / "planner.flow").write_text(PLANNER)
    (tmp_path / "main.flow").write_text(MAIN)
    return tmp_path


def uri_of(path: Path) -> str:
    return path.resolve().as_uri()


def position_of(text: str, needle: str, offset: int = 0) -> L.Position:
    """The 0-based position of `needle` (its first occurrence) plus `offset` characters."""
    index = text.index(needle) + offset
    line = text.count("\n", 0, index)
    return L.Position(line, index - (text.rfind("\n", 0, index) + 1))


def open_doc(client: LanguageClient, path: Path, text: str | None = None) -> str:
    uri = uri_of(path)
    client.text_document_did_open(L.DidOpenTextDocumentParams(L.TextDocumentItem(
        uri=uri, language_id="flow", version=1, text=path.read_text() if text is None else text)))
    return uri


def change_doc(client: LanguageClient, uri: str, text: str, version: int = 2) -> None:
    client.text_document_did_change(L.DidChangeTextDocumentParams(
        text_document=L.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[L.TextDocumentContentChangeWholeDocument(text=text)]))


async def lenses(client: LanguageClient, uri: str) -> list[L.CodeLens]:
    return await client.text_document_code_lens_async(L.CodeLensParams(L.TextDocumentIdentifier(uri)))


def flow_check_json(path: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "check", "--json", str(path)],
                          capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout)


def as_lsp(location: dict) -> tuple:
    return (location["line"] - 1, location["column"] - 1, location["end_line"] - 1, location["end_column"] - 1)


def shape(d: L.Diagnostic) -> tuple:
    r = d.range
    return (d.code, r.start.line, r.start.character, r.end.line, r.end.character)


# ---- diagnostics as you type

BROKEN = {
    "type mismatch": MAIN.replace("Ok(_) => 0", 'Ok(_) => "zero"'),
    "undefined name": MAIN.replace("count(notes)", "cuont(notes)"),
    "syntax error": MAIN.replace("Err(_) => 1,", "Err(_) => 1 +,"),
    "missing tool mark": MAIN.replace("-> Int !tool = {", "-> Int = {"),
    "unknown std module": MAIN.replace("std@v1/list", "std@v1/lists"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
async def test_diagnostics_are_those_of_flow_check(client: LanguageClient, program: Path, case: str):
    path = program / "main.flow"
    path.write_text(BROKEN[case])  # on disk for `flow check`; the buffer holds the same text
    uri = open_doc(client, path)
    await lenses(client, uri)
    expected = [d for d in flow_check_json(path)["diagnostics"] if d["location"]["file"] == str(path.resolve())
                or Path(d["location"]["file"]).resolve() == path.resolve()]
    assert expected, "the case must have diagnostics in main.flow"
    got = client.diagnostics[uri]
    assert sorted(shape(d) for d in got) == sorted((d["code"], *as_lsp(d["location"])) for d in expected)
    by_code = {d.code: d for d in got}
    for d in expected:
        mine = by_code[d["code"]]
        assert mine.message.startswith(d["message"])
        assert mine.severity == (L.DiagnosticSeverity.Error if d["severity"] == "error" else L.DiagnosticSeverity.Warning)
        assert mine.source == "flow"


async def test_unsaved_text_is_checked_and_a_fix_clears_it(client: LanguageClient, program: Path):
    uri = open_doc(client, program / "main.flow")
    await lenses(client, uri)
    assert list(client.diagnostics[uri]) == []
    change_doc(client, uri, BROKEN["type mismatch"])
    await lenses(client, uri)
    assert [d.code for d in client.diagnostics[uri]] == ["type-mismatch"]
    change_doc(client, uri, MAIN, version=3)
    await lenses(client, uri)
    assert list(client.diagnostics[uri]) == []


async def test_other_open_buffers_take_precedence_over_disk(client: LanguageClient, program: Path):
    planner_uri = open_doc(client, program / "planner.flow", PLANNER.replace("pub flow next(", "pub flow plan("))
    uri = open_doc(client, program / "main.flow")
    await lenses(client, uri)
    assert [d.code for d in client.diagnostics[uri]] == ["member-undefined"]
    # Putting the buffer back as the disk has it: the program that uses it is checked again.
    change_doc(client, planner_uri, PLANNER)
    await lenses(client, planner_uri)
    await lenses(client, uri)
    assert list(client.diagnostics[uri]) == []


async def test_a_closed_module_reports_its_own_diagnostics(client: LanguageClient, program: Path):
    (program / "planner.flow").write_text(PLANNER.replace("List<Text>)", "Lst<Text>)"))
    uri = open_doc(client, program / "main.flow")
    await lenses(client, uri)
    assert [d.code for d in client.diagnostics[uri_of(program / "planner.flow")]] == ["type-undefined"]


async def test_opening_a_module_keeps_its_own_diagnostics(client: LanguageClient, program: Path):
    (program / "planner.flow").write_text(PLANNER.replace("List<Text>)", "Lst<Text>)"))
    uri = open_doc(client, program / "main.flow")
    await lenses(client, uri)
    planner_uri = open_doc(client, program / "planner.flow")
    await lenses(client, planner_uri)
    change_doc(client, uri, MAIN.replace("Ok(_) => 0", "Ok(_) => 2"))
    await lenses(client, uri)
    assert [d.code for d in client.diagnostics[planner_uri]] == ["type-undefined"]


async def test_a_huge_buffer_is_refused_not_hung_on(client: LanguageClient, program: Path):
    from flowrt.lsp import MAX_LIVE_CHARS

    text = MAIN + "\n" + "// filler\n" * (MAX_LIVE_CHARS // 10 + 1)
    uri = open_doc(client, program / "main.flow", text)
    assert list(await lenses(client, uri)) == []
    assert [d.code for d in client.diagnostics[uri]] == ["buffer-too-large"]
    hover = await client.text_document_hover_async(L.HoverParams(L.TextDocumentIdentifier(uri), L.Position(6, 10)))
    assert hover is None
    edits = await client.text_document_formatting_async(L.DocumentFormattingParams(
        L.TextDocumentIdentifier(uri), L.FormattingOptions(tab_size=4, insert_spaces=True)))
    assert edits is None
    # The server still serves the other buffers.
    other = open_doc(client, program / "planner.flow")
    await lenses(client, other)
    assert list(client.diagnostics[other]) == []


# ---- hover and definitions


async def hover_at(client: LanguageClient, uri: str, position: L.Position) -> str | None:
    found = await client.text_document_hover_async(L.HoverParams(L.TextDocumentIdentifier(uri), position))
    return None if found is None else found.contents.value


HOVERS = [
    ("planner.next(", 9, "@tool flow planner.next(ticket: Text, notes: List<Text>) -> Result<planner.Step, planner.PlanError>",
     "Chooses the next step"),
    ("let notes", 5, "notes: main.Notes", None),
    ("let lines", 5, "lines: List<Text>", None),
    ("list.map(", 6, "flow list.map<T, U>(xs: List<T>, f: flow(T) -> U !e) -> List<U> !e", "Applies `f` to every item"),
    ("count(notes)", 0, "flow main.count(n: main.Notes) -> Int", "Counts the lines."),
    ("Search(query)", 0, "Search(Text) -> planner.Step", None),
    ("query)", 0, "query: Text", None),
    ("n.lines", 2, "main.Notes.lines: List<Text>", None),
    ("Notes {", 0, "type main.Notes { ticket: Text, lines: List<Text> }", "A ticket and what was learned."),
    ("Ok(_)", 0, "Ok(T) -> Result<T, E>", None),
    ("planner.next(", 2, 'use "./planner" (module planner)', "What the planner wants to do next."),
    ("list.map(", 1, 'use "std@v1/list" (module std@v1/list)', "Lists: ordered, immutable sequences"),
]


@pytest.mark.parametrize("needle,offset,detail,doc", HOVERS, ids=[h[0] for h in HOVERS])
async def test_hover_shows_the_type_and_doc(client: LanguageClient, program: Path, needle, offset, detail, doc):
    uri = open_doc(client, program / "main.flow")
    text = await hover_at(client, uri, position_of(MAIN, needle, offset))
    assert text is not None
    assert text.startswith("```flow\n" + detail)
    if doc is not None:
        assert doc in text


async def test_hover_on_nothing_is_empty(client: LanguageClient, program: Path):
    uri = open_doc(client, program / "main.flow")
    assert await hover_at(client, uri, position_of(MAIN, "=> 0", 1)) is None


async def definition_at(client: LanguageClient, uri: str, position: L.Position) -> L.Location | None:
    found = await client.text_document_definition_async(L.DefinitionParams(L.TextDocumentIdentifier(uri), position))
    if isinstance(found, list):
        assert len(found) == 1
        return found[0]
    return found


async def test_definition_across_modules(client: LanguageClient, program: Path):
    uri = open_doc(client, program / "main.flow")
    found = await definition_at(client, uri, position_of(MAIN, "planner.next(", 9))
    assert found.uri == uri_of(program / "planner.flow")
    assert found.range.start == position_of(PLANNER, "next(")
    ctor = await definition_at(client, uri, position_of(MAIN, "Search(query)"))
    assert ctor.uri == uri_of(program / "planner.flow") and ctor.range.start == position_of(PLANNER, "Search(Text)")
    module = await definition_at(client, uri, position_of(MAIN, "planner.next(", 2))
    assert module.uri == uri_of(program / "planner.flow") and module.range.start == L.Position(0, 0)


async def test_definition_inside_the_module(client: LanguageClient, program: Path):
    uri = open_doc(client, program / "main.flow")
    local = await definition_at(client, uri, position_of(MAIN, "count(notes)", 6))
    assert local.uri == uri and local.range.start == position_of(MAIN, "notes = ")
    fn = await definition_at(client, uri, position_of(MAIN, "count(notes)"))
    assert fn.uri == uri and fn.range.start == position_of(MAIN, "count(n: ")
    field = await definition_at(client, uri, position_of(MAIN, "n.lines", 2))
    assert field.range.start == position_of(MAIN, "lines: List")


async def test_definition_into_std(client: LanguageClient, program: Path):
    uri = open_doc(client, program / "main.flow")
    found = await definition_at(client, uri, position_of(MAIN, "list.map(", 6))
    std_file = STD_DIR / "list.flow"
    assert found.uri == uri_of(std_file)
    std_text = std_file.read_text()
    assert found.range.start == position_of(std_text, "map<")
    ok = await definition_at(client, uri, position_of(MAIN, "Ok(_)"))
    assert ok.uri == uri_of(STD_DIR / "prelude.flow")


async def test_a_std_module_opened_is_answered_from_the_program_that_uses_it(client: LanguageClient, program: Path):
    uri = open_doc(client, program / "main.flow")
    found = await definition_at(client, uri, position_of(MAIN, "list.map(", 6))
    std_file = STD_DIR / "list.flow"
    std_text = std_file.read_text()
    std_uri = open_doc(client, std_file)
    assert found.uri == std_uri
    text = await hover_at(client, std_uri, position_of(std_text, "length(xs) == 0"))
    assert text.startswith("```flow\nflow list.length<T>(xs: List<T>) -> Int")
    local = await definition_at(client, std_uri, position_of(std_text, "length(xs) == 0", 7))
    assert local.uri == std_uri and local.range.start == position_of(std_text, "xs: List<T>) -> Bool")
    assert std_uri not in client.diagnostics  # std is never checked on its own


# ---- completion


async def complete(client: LanguageClient, uri: str, position: L.Position) -> dict[str, L.CompletionItem]:
    found = await client.text_document_completion_async(L.CompletionParams(L.TextDocumentIdentifier(uri), position))
    items = found.items if isinstance(found, L.CompletionList) else found
    return {item.label: item for item in items}


async def test_completion_of_record_fields_after_a_dot_while_the_line_does_not_parse(client: LanguageClient, program: Path):
    uri = open_doc(client, program / "main.flow")
    await lenses(client, uri)
    typing = MAIN.replace("        Ok(_) => 0,", "        Ok(_) => notes.\n        Ok(_) => 0,")
    change_doc(client, uri, typing)
    items = await complete(client, uri, position_of(typing, "notes.\n", 6))
    assert set(items) == {"ticket", "lines"}
    assert items["lines"].kind == L.CompletionItemKind.Field and items["lines"].detail == "List<Text>"


async def test_completion_of_module_members_and_constructors(client: LanguageClient, program: Path):
    uri = open_doc(client, program / "main.flow")
    await lenses(client, uri)
    typing = MAIN.replace("        Ok(_) => 0,", "        Ok(_) => planner.\n        Ok(_) => 0,")
    change_doc(client, uri, typing)
    items = await complete(client, uri, position_of(typing, "planner.\n", 8))
    assert {"next", "Step", "Search", "Ask", "Done", "PlanError", "Unavailable"} <= set(items)
    assert items["Search"].kind == L.CompletionItemKind.EnumMember
    assert items["next"].kind == L.CompletionItemKind.Function
    std = await complete(client, uri, position_of(MAIN, "list.map(", 5))
    assert {"map", "filter", "length", "first"} <= set(std)


async def test_completion_of_names(client: LanguageClient, program: Path):
    uri = open_doc(client, program / "main.flow")
    items = await complete(client, uri, position_of(MAIN, "count(notes)", 0))
    for label, kind in [("count", L.CompletionItemKind.Function), ("notes", L.CompletionItemKind.Variable),
                        ("ticket", L.CompletionItemKind.Variable), ("planner", L.CompletionItemKind.Module),
                        ("Notes", L.CompletionItemKind.Class), ("Some", L.CompletionItemKind.EnumMember),
                        ("Ok", L.CompletionItemKind.EnumMember), ("match", L.CompletionItemKind.Keyword)]:
        assert items[label].kind == kind, label
    typed = await complete(client, uri, position_of(MAIN, "count(notes)", 2))
    assert "count" in typed and "notes" not in typed


# ---- formatting and checkpoint places


async def format_doc(client: LanguageClient, uri: str) -> list[L.TextEdit] | None:
    return await client.text_document_formatting_async(L.DocumentFormattingParams(
        L.TextDocumentIdentifier(uri), L.FormattingOptions(tab_size=4, insert_spaces=True)))


async def test_formatting_is_flow_fmt(client: LanguageClient, program: Path):
    messy = MAIN.replace("flow count(n: Notes) -> Int = list.length(n.lines)",
                         "flow   count( n :Notes )->Int=list.length( n.lines )")
    uri = open_doc(client, program / "main.flow", messy)
    edits = await format_doc(client, uri)
    assert len(edits) == 1
    edit = edits[0]
    assert edit.range.start == L.Position(0, 0)
    assert edit.range.end.line >= messy.count("\n")
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "fmt"], input=messy, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0
    assert edit.new_text == done.stdout
    formatted = open_doc(client, program / "planner.flow", format_source(PLANNER).text)
    assert list(await format_doc(client, formatted)) == []


async def test_formatting_refuses_what_does_not_parse(client: LanguageClient, program: Path):
    uri = open_doc(client, program / "main.flow", BROKEN["syntax error"])
    assert await format_doc(client, uri) is None


async def test_checkpoint_places_are_code_lenses(client: LanguageClient, program: Path):
    uri = open_doc(client, program / "main.flow")
    found = await lenses(client, uri)
    places = flow_check_json(program / "main.flow")["checkpoints"]
    assert places, "the program has a tail call to a top-level function"
    assert sorted((l.range.start.line, l.range.start.character, l.range.end.line, l.range.end.character)
                  for l in found) == sorted(as_lsp(p) for p in places)
    assert found[0].command.title == "checkpoint: tail call to `count` in `main`"
    assert found[0].command.command == "flow.showCheckpoint"


async def test_positions_count_utf16_units(client: LanguageClient, program: Path):
    """An emoji before a mistake is two UTF-16 units: the range starts after both."""
    text = MAIN.replace('x ++ "!"', 'x ++ "\U0001F600" ++ 1')
    uri = open_doc(client, program / "main.flow", text)
    await lenses(client, uri)
    [d] = [d for d in client.diagnostics[uri] if d.severity == L.DiagnosticSeverity.Error]
    line = text.splitlines()[d.range.start.line]
    units = line.encode("utf-16-le")
    assert units[2 * d.range.start.character:].decode("utf-16-le").startswith("1")
