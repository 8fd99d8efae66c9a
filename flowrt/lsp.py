"""`flow lsp`: a language server for Flow over stdio (pygls).

Each open `.flow` buffer is checked as the root of a program, as `flow check FILE` checks it,
whenever it is opened or changed; the text of open buffers is read before the files on disk, so
unsaved edits in one module are seen by the programs that use it. What a check found serves every
other request on that buffer until the next check: hover and go to definition (`flowc.query`),
completion, the checkpoint places of `flow check` as code lenses; formatting is `flow fmt`.

Bounds, so that no buffer can stall the server (docs/cli.md, "flow lsp"):
- checks run one at a time on a worker thread, the newest text of a buffer only (a check asked for
  while one runs replaces any that waits), after a short pause for more typing;
- a request waits for the check of the buffer's newest text at most `CHECK_WAIT` seconds, then
  answers from the check it has;
- a buffer over `MAX_LIVE_CHARS` is not checked as you type (one warning says so), and one over
  `MAX_FORMAT_CHARS` is not formatted (the request answers no edits).
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

from lsprotocol import types as L
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path
from pygls.workspace.position_codec import ServerTextPosition, ServerTextRange

from flowc.diagnostics import Diagnostic, Location
from flowc.files import read_text
from flowc.frontend import Checked, check_program
from flowc.program import STD_DIR, STD_VERSION
from flowc.query import Index, source_path

#: Buffers larger than this (in characters) are not checked as you type: a check of a million
#: characters takes about 2.5 s here (docs/impl.md, "flow lsp").
MAX_LIVE_CHARS = 1_000_000
#: Nor formatted: `flow fmt` takes about 8 s on 230,000 characters of 2,000 declarations, and
#: its time grows faster than the text.
MAX_FORMAT_CHARS = 200_000
#: Seconds of quiet after a change before its check starts (typing sends a change per key).
SETTLE = 0.1
#: The longest a request waits for the check of its buffer's newest text.
CHECK_WAIT = 20.0
CHECKPOINT_COMMAND = "flow.showCheckpoint"

_KINDS = {
    "local": L.CompletionItemKind.Variable, "function": L.CompletionItemKind.Function,
    "type": L.CompletionItemKind.Class, "constructor": L.CompletionItemKind.EnumMember,
    "field": L.CompletionItemKind.Field, "module": L.CompletionItemKind.Module,
    "keyword": L.CompletionItemKind.Keyword,
}


class _Buffer:
    """What the server knows of one open buffer: its latest check, and the last check in which
    the buffer itself parsed (completion after `x.` is asked while the line does not parse).

    A std module's buffer (opened by going to a definition in std, say) is never checked: std is
    checked with the compiler, and as a root of its own it would be another program. It is
    answered from the check of any open program that uses it, under its std name (`display`)."""

    __slots__ = ("path", "display", "ticket", "index", "parsed_index", "fresh", "published")

    def __init__(self, path: str, std_name: str | None = None) -> None:
        self.path = path
        self.display = std_name or path  # the module's file as the compiler names it
        self.ticket = 0
        self.index: Index | None = None
        self.parsed_index: Index | None = None
        self.fresh: asyncio.Event = asyncio.Event()
        #: the URIs of other (closed) files this buffer's program last published diagnostics for
        self.published: set[str] = set()
        if std_name is not None:
            self.fresh.set()

    @property
    def is_std(self) -> bool:
        return self.display != self.path


class FlowLanguageServer(LanguageServer):
    def __init__(self) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            known = version("flow-lang")
        except PackageNotFoundError:  # run from a checkout that is not installed
            known = "0"
        super().__init__("flow-lsp", known)
        self.buffers: dict[str, _Buffer] = {}
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flow-lsp-check")
        self.checking = asyncio.Lock()

    # ---- checking

    def open_texts(self) -> dict[str, str]:
        texts: dict[str, str] = {}
        for uri, buffer in self.buffers.items():
            if buffer.is_std:
                continue  # std is read from the package, whatever a buffer of it holds
            document = self.workspace.get_text_document(uri)
            texts[os.path.normpath(buffer.path)] = document.source
        return texts

    async def schedule(self, uri: str, cascade: bool = True) -> None:
        """Check the buffer's newest text; with `cascade`, then the open buffers that read it."""
        buffer = self.buffers.get(uri)
        if buffer is None or buffer.is_std:
            return
        buffer.ticket += 1
        ticket = buffer.ticket
        buffer.fresh.clear()
        await asyncio.sleep(SETTLE)
        if buffer.ticket != ticket:
            return  # a newer change asked for its own check
        async with self.checking:
            if buffer.ticket != ticket or self.buffers.get(uri) is not buffer:
                return
            text = self.workspace.get_text_document(uri).source
            if len(text) > MAX_LIVE_CHARS:
                self.publish(uri, [_too_large(len(text))])
                buffer.index = buffer.parsed_index = None
                buffer.fresh.set()
                return
            texts = self.open_texts()
            loop = asyncio.get_running_loop()
            try:
                checked = await loop.run_in_executor(self.worker, _check, buffer.path, texts)
            except Exception as problem:  # a compiler bug must not end the server
                self.window_log_message(L.LogMessageParams(L.MessageType.Error, f"flow check failed: {problem!r}"))
                buffer.fresh.set()
                return
        if buffer.ticket != ticket or self.buffers.get(uri) is not buffer:
            return  # a newer text is being checked, or the buffer was closed meanwhile
        index = Index(checked)
        buffer.index = index
        own = next((m for m in checked.program.modules if m.file == buffer.path), None)
        if own is not None and own.parsed.ok:
            buffer.parsed_index = index
        self.publish_check(uri, buffer, checked)
        buffer.fresh.set()
        if cascade:
            self.recheck_dependents(uri, buffer.path)

    def recheck_dependents(self, changed_uri: str, changed_path: str) -> None:
        """Open buffers whose programs read the changed buffer see its new text (once: their
        checks do not cascade, so modules that use each other do not check each other forever)."""
        for uri, other in list(self.buffers.items()):
            if uri == changed_uri or other.index is None:
                continue
            files = {m.file for m in other.index.checked.program.modules}
            if changed_path in files:
                other.fresh.clear()  # now, so that a request that comes before the check waits for it
                asyncio.ensure_future(self.schedule(uri, cascade=False))

    async def index_for(self, uri: str, parsed: bool = False) -> tuple[_Buffer | None, Index | None]:
        buffer = self.buffers.get(uri)
        if buffer is None:
            return None, None
        if buffer.is_std:
            for other in self.buffers.values():
                if other.index is not None and other.index.module_env(buffer.display) is not None:
                    return buffer, other.index
            return buffer, None
        try:
            await asyncio.wait_for(buffer.fresh.wait(), CHECK_WAIT)
        except asyncio.TimeoutError:
            pass  # answer from the check there is
        return buffer, (buffer.parsed_index or buffer.index) if parsed else buffer.index

    async def symbol_at(self, uri: str, position: L.Position):
        """(the buffer, its index, the symbol at `position` in it), the symbol None where there is
        none or no index (hover and go-to-definition both start from it)."""
        buffer, index = await self.index_for(uri)
        if index is None:
            return buffer, None, None
        line, column, _ = self.from_position(uri, position)
        return buffer, index, index.at(buffer.display, line, column)

    def publish_check(self, uri: str, buffer: _Buffer, checked: Checked) -> None:
        by_file: dict[str, list[Diagnostic]] = {}
        for d in checked.diagnostics:
            file = d.location.file if d.location is not None else buffer.path
            if file.startswith("std@"):
                continue
            by_file.setdefault(os.path.normpath(file), []).append(d)
        sources = checked.sources()
        own = by_file.pop(os.path.normpath(buffer.path), [])
        self.publish(uri, [self.to_lsp(d, self.lines_of(buffer.path, sources)) for d in own])
        open_paths = {os.path.normpath(b.path) for b in self.buffers.values()}
        now: set[str] = set()
        for file, found in by_file.items():
            if file in open_paths:
                continue  # its own check publishes it
            other = from_fs_path(os.path.abspath(file)) or file
            now.add(other)
            self.publish(other, [self.to_lsp(d, self.lines_of(file, sources)) for d in found])
        for gone in buffer.published - now - set(self.buffers):
            self.publish(gone, [])  # (a file opened since publishes its own, not to be cleared here)
        buffer.published = now

    def publish(self, uri: str, diagnostics: list[L.Diagnostic]) -> None:
        self.text_document_publish_diagnostics(L.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics))

    def lines_of(self, display: str, sources: dict[str, str] | None = None) -> list[str]:
        """A file's lines, for turning code points into the client's units."""
        for uri, buffer in self.buffers.items():
            if os.path.normpath(buffer.path) == os.path.normpath(display):
                return list(self.workspace.get_text_document(uri).lines)
        text = (sources or {}).get(display)
        if text is None:
            try:
                text = read_text(source_path(display))
            except (OSError, UnicodeDecodeError):
                text = ""
        return text.splitlines(True)

    def to_range(self, location: Location, lines: list[str]) -> L.Range:
        """A `Location` (1-based, code points, end exclusive) as an LSP range (0-based, in the
        units the client and server agreed on: UTF-16 unless it asked for another)."""
        return self.workspace.position_codec.range_to_client_units(lines, ServerTextRange(
            ServerTextPosition(location.line - 1, location.column - 1),
            ServerTextPosition(location.end_line - 1, location.end_column - 1)))

    def to_lsp(self, d: Diagnostic, lines: list[str]) -> L.Diagnostic:
        location = d.location or Location("", 1, 1, 1, 1)
        message = d.message
        for note in d.notes:
            message += f"\nnote: {note}"
        if d.help:
            message += f"\nhelp: {d.help}"
        severity = L.DiagnosticSeverity.Error if d.severity == "error" else L.DiagnosticSeverity.Warning
        return L.Diagnostic(range=self.to_range(location, lines), message=message, source="flow", code=d.code,
                            severity=severity)

    def from_position(self, uri: str, position: L.Position) -> tuple[int, int, str]:
        """1-based line and column (code points) of a client position, and that line's text."""
        document = self.workspace.get_text_document(uri)
        lines = document.lines
        at = document.position_codec.position_from_client_units(lines, position)
        text = lines[at.line] if at.line < len(lines) else ""
        return at.line + 1, at.character + 1, text.rstrip("\r\n")


def _check(path: str, texts: dict[str, str]) -> Checked:
    def read(name: str) -> str:
        text = texts.get(os.path.normpath(name))
        if text is not None:
            return text
        return read_text(name)

    return check_program(path, read)


def _too_large(size: int) -> L.Diagnostic:
    return L.Diagnostic(
        range=L.Range(L.Position(0, 0), L.Position(0, 1)), source="flow", severity=L.DiagnosticSeverity.Warning,
        code="buffer-too-large",
        message=(f"not checked as you type: the buffer has {size} characters, over the {MAX_LIVE_CHARS} "
                 "`flow lsp` checks live; run `flow check` on the saved file"))


def _std_name(path: str) -> str | None:
    """`std@v1/list.flow` for the shipped file of std's `list` module; None for any other file."""
    std = os.path.normpath(str(STD_DIR))
    if os.path.dirname(os.path.normpath(path)) != std or not path.endswith(".flow"):
        return None
    return f"std@{STD_VERSION}/{os.path.basename(path)}"


def _fs_path(uri: str) -> str:
    return os.path.normpath(to_fs_path(uri) or uri)


def _markdown(detail: str, doc: str | None) -> str:
    text = f"```flow\n{detail}\n```"
    if doc:
        text += "\n\n" + doc
    return text


def build_server() -> FlowLanguageServer:
    server = FlowLanguageServer()

    @server.feature(L.TEXT_DOCUMENT_DID_OPEN)
    async def did_open(ls: FlowLanguageServer, params: L.DidOpenTextDocumentParams) -> None:
        uri = params.text_document.uri
        path = _fs_path(uri)
        ls.buffers[uri] = _Buffer(path, _std_name(path))
        await ls.schedule(uri)

    @server.feature(L.TEXT_DOCUMENT_DID_CHANGE)
    async def did_change(ls: FlowLanguageServer, params: L.DidChangeTextDocumentParams) -> None:
        await ls.schedule(params.text_document.uri)

    @server.feature(L.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(ls: FlowLanguageServer, params: L.DidSaveTextDocumentParams) -> None:
        await ls.schedule(params.text_document.uri)

    @server.feature(L.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: FlowLanguageServer, params: L.DidCloseTextDocumentParams) -> None:
        buffer = ls.buffers.pop(params.text_document.uri, None)
        if buffer is not None:
            ls.publish(params.text_document.uri, [])
            for other in buffer.published:
                ls.publish(other, [])

    @server.feature(L.TEXT_DOCUMENT_HOVER)
    async def hover(ls: FlowLanguageServer, params: L.HoverParams) -> L.Hover | None:
        buffer, _, symbol = await ls.symbol_at(params.text_document.uri, params.position)
        if symbol is None:
            return None
        span = symbol.span
        where = Location(buffer.path, span.line, span.column, span.end_line, span.end_column)
        return L.Hover(contents=L.MarkupContent(kind=L.MarkupKind.Markdown, value=_markdown(symbol.detail, symbol.doc)),
                       range=ls.to_range(where, ls.lines_of(buffer.path)))

    @server.feature(L.TEXT_DOCUMENT_DEFINITION)
    async def definition(ls: FlowLanguageServer, params: L.DefinitionParams) -> L.Location | None:
        _, index, symbol = await ls.symbol_at(params.text_document.uri, params.position)
        if symbol is None or symbol.definition is None:
            return None
        target = symbol.definition
        path = os.path.abspath(source_path(target.file))
        lines = ls.lines_of(target.file, index.checked.sources())
        return L.Location(uri=from_fs_path(path) or path, range=ls.to_range(target, lines))

    @server.feature(L.TEXT_DOCUMENT_COMPLETION, L.CompletionOptions(trigger_characters=["."]))
    async def completion(ls: FlowLanguageServer, params: L.CompletionParams) -> L.CompletionList | None:
        buffer, index = await ls.index_for(params.text_document.uri, parsed=True)
        if index is None:
            return None
        line, column, text = ls.from_position(params.text_document.uri, params.position)
        found = index.completions(buffer.display, line, column, text)
        items = [L.CompletionItem(label=c.label, kind=_KINDS[c.kind], detail=c.detail,
                                  documentation=L.MarkupContent(L.MarkupKind.Markdown, c.doc) if c.doc else None)
                 for c in found.items]
        return L.CompletionList(is_incomplete=not found.complete, items=items)

    @server.feature(L.TEXT_DOCUMENT_FORMATTING)
    async def formatting(ls: FlowLanguageServer, params: L.DocumentFormattingParams) -> list[L.TextEdit] | None:
        from flowc.fmt import format_source

        uri = params.text_document.uri
        document = ls.workspace.get_text_document(uri)
        source = document.source
        if len(source) > MAX_FORMAT_CHARS:
            ls.window_show_message(L.ShowMessageParams(L.MessageType.Warning, (
                f"not formatted: the buffer has {len(source)} characters, over the {MAX_FORMAT_CHARS} "
                "`flow lsp` formats; run `flow fmt` on the saved file")))
            return None
        loop = asyncio.get_running_loop()
        formatted = await loop.run_in_executor(ls.worker, format_source, source, _fs_path(uri))
        if formatted.text is None:
            return None  # it does not parse: the diagnostics say why
        if formatted.text == source:
            return []
        lines = document.lines
        end = L.Position(len(lines), 0)
        return [L.TextEdit(range=L.Range(L.Position(0, 0), end), new_text=formatted.text)]

    @server.feature(L.TEXT_DOCUMENT_CODE_LENS)
    async def code_lens(ls: FlowLanguageServer, params: L.CodeLensParams) -> list[L.CodeLens]:
        buffer, index = await ls.index_for(params.text_document.uri)
        if index is None:
            return []
        lines = ls.lines_of(buffer.path)
        lenses = []
        for place in index.checked.places:
            if os.path.normpath(place.file) != os.path.normpath(buffer.display):
                continue
            span = place.span
            where = Location(place.file, span.line, span.column, span.end_line, span.end_column)
            callee = place.callee.rsplit(".", 1)[-1]
            caller = place.caller.rsplit(".", 1)[-1]
            title = f"checkpoint: tail call to `{callee}` in `{caller}`"
            if place.marked:
                title += " (marked: an argument may hold a function; decided as the run goes)"
            lenses.append(L.CodeLens(range=ls.to_range(where, lines), command=L.Command(
                title=title, command=CHECKPOINT_COMMAND, arguments=[place.caller, place.callee])))
        return lenses

    @server.feature(L.SHUTDOWN)
    def shutdown(ls: FlowLanguageServer, params: None) -> None:
        ls.worker.shutdown(wait=False, cancel_futures=True)

    return server


def serve() -> None:
    """Answer one client on stdin and stdout until it says exit."""
    build_server().start_io()
