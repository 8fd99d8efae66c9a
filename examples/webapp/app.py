"""A small web application over Flow runs: start expense approvals (examples/approval), list them,
show a paused run's question, take the answer from a form, and stream each run's facts live.

    python examples/webapp/app.py [--port 8080] [--runs DIR] [--program examples/approval/main.flow]

The standard library and flowrt's public API only (docs/api.md): runs are started and answered
in the background (`Host.start` / `Host.resume` with `detach=True`), listed with `Host.runs`, read
with `Host.history` and `Host.pending`, and streamed with `Host.watch`. The history is the state:
the pages read it from the run store every time, so a run started or answered from the command
line (`flow resume`) shows up here exactly as one started here.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import importlib.util
import json
import os
import re
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import flowrt
from flowrt.store import StorageError

HERE = Path(__file__).resolve().parent
APPROVAL = HERE.parent / "approval" / "main.flow"
RUN_ID = re.compile(r"^run-[0-9A-Za-z-]+$")
STREAM_TICK = 0.1  # seconds between looks, while a streamed run waits, at whether it goes on
STREAM_LIMIT = 600.0  # an event stream ends after this long; the page's EventSource reconnects
PAGE = 100  # facts per history page read


def ledger_tools() -> dict:
    """The approval example's ledger, in this process (its flow.toml binds it as a script)."""
    spec = importlib.util.spec_from_file_location("approval_ledger", HERE.parent / "approval" / "ledger_tool.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"ledger.record": module.record}


class Runs:
    """The runs this application drives (their `RunHandle`s), and what it reads of any run in
    the store, through `flowrt.Host` only."""

    def __init__(self, program: Path, runs_dir: str) -> None:
        self.program = program
        self.host = flowrt.Host(ledger_tools(), runs=runs_dir)
        self.lock = threading.Lock()
        self.driving: dict[str, flowrt.RunHandle] = {}  # run id -> the handle of a run or resume going on
        self.answering: set[str] = set()  # run ids an answer is being admitted for now
        self.failures: dict[str, str] = {}  # run id -> why the host could not drive it

    # -- driving

    def start(self, expense: dict) -> tuple[str | None, str | None]:
        """Start a run in the background; (run id, None) once its Start is recorded, or (None,
        why) when it was refused."""
        try:
            started = self.host.start(str(self.program), {"expense": expense}, detach=True)
        except flowrt.Refused as refused:
            return None, refused.message
        if isinstance(started, flowrt.RunResult):  # ended before its Start: a storage failure
            return None, started.message or started.status
        with self.lock:
            self.driving[started.run_id] = started
        return started.run_id, None

    def answer(self, run_id: str, call: str, decision: str, note: str) -> str | None:
        """Resume `run_id` in the background, answering `call`; None once the answer is
        recorded, or why it was not."""
        with self.lock:
            if self._running(run_id) or run_id in self.answering:
                return "the run is running; answer it once it pauses"
            self.answering.add(run_id)
        handle = None
        try:
            if call not in {p.call for p in self.host.pending(run_id)}:
                return f"call {call} is not open in {run_id}"
            handle = self.host.resume(run_id, call=call, reply=flowrt.Variant(decision, note), detach=True)
            return None
        except flowrt.Refused as refused:  # the reply does not fit, the run is held elsewhere, ...
            return refused.message
        except StorageError as problem:
            return f"cannot read {run_id}: {problem}"
        finally:
            with self.lock:
                self.answering.discard(run_id)
                if handle is not None:
                    self.driving[run_id] = handle
                    self.failures.pop(run_id, None)

    def _running(self, run_id: str) -> bool:
        """Whether a run or resume this application drives is going on (under `lock`); a finished
        one is let go of, its failure kept for the page."""
        handle = self.driving.get(run_id)
        if handle is None:
            return False
        if not handle.done():
            return True
        del self.driving[run_id]
        try:
            result = handle.wait(0)
            if result.status == "storage-failure":
                self.failures[run_id] = result.message or "storage failure"
        except Exception as problem:  # noqa: BLE001 - reported to the page, never swallowed
            self.failures[run_id] = f"{type(problem).__name__}: {problem}"
        return False

    # -- reading

    def facts(self, run_id: str) -> list[dict]:
        """The whole history, page by page, each fact as JSON data."""
        out: list[dict] = []
        after: int | None = 0
        while after is not None:
            page = self.host.history(run_id, after=after, limit=PAGE)
            out.extend(fact_data(f) for f in page.facts)
            after = page.next_after
        return out

    def pending(self, run_id: str) -> list[dict]:
        """The open calls of a run, each with its question when the Tool asks one."""
        rows = []
        for p in self.host.pending(run_id):
            arguments = p.arguments if isinstance(p.arguments, dict) else {}
            rows.append({"call": p.call, "tool": p.tool, "question": arguments.get("question")})
        return rows

    def summary(self, run_id: str) -> dict:
        ends = self.host.history(run_id, kinds=["Start", "End"])
        with self.lock:
            running = self._running(run_id)
            failure = self.failures.get(run_id)
        start = ends.facts[0] if ends.facts and ends.facts[0].kind == "Start" else None
        row = {"run": run_id, "facts": ends.total, "input": start.input if start else None,
               "pending": [], "output": None, "problem": failure}
        end = ends.facts[-1] if ends.facts and ends.facts[-1].kind == "End" else None
        if end is not None:
            outcome = end.outcome if isinstance(end.outcome, dict) else {}
            row["state"] = "completed" if "Completed" in outcome else "faulted"
            row["output"] = outcome.get("Completed", outcome.get("Faulted"))
        elif running or ends.state == "running":  # here, or by another process (`flow resume`)
            row["state"] = "running"
        else:
            row["pending"] = self.pending(run_id)
            row["state"] = "paused" if row["pending"] else "stopped"
        return row

    def list(self) -> list[dict]:
        rows = []
        for found in self.host.runs(limit=200).runs:
            if found.record == "not-started" or not RUN_ID.match(found.run_id):
                continue
            try:
                rows.append(self.summary(found.run_id))
            except (StorageError, flowrt.Refused) as problem:
                rows.append({"run": found.run_id, "state": "unreadable", "problem": str(problem)})
        return rows


def fact_data(fact: flowrt.Fact) -> dict:
    """A typed fact as the JSON the page shows (a redacted value as its hash)."""
    return dataclasses.asdict(fact)


# ---- HTTP --------------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    runs: Runs  # set on the server's handler class
    server_version = "FlowWebapp/1"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        if os.environ.get("FLOW_WEBAPP_LOG"):
            super().log_message(format, *args)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = urlsplit(self.path).path
        try:
            if path == "/":
                return self.send_html(index_page())
            if path == "/api/runs":
                return self.send_json({"runs": self.runs.list()})
            match = re.fullmatch(r"/(api/)?runs/([^/]+)(/events)?", path)
            if match and RUN_ID.match(match.group(2)):
                run_id = match.group(2)
                if match.group(3):
                    return self.stream(run_id, until_end=parse_qs(urlsplit(self.path).query).get("until") == ["end"])
                summary = self.runs.summary(run_id)
                if match.group(1):
                    return self.send_json({**summary, "history": self.runs.facts(run_id)})
                return self.send_html(run_page(summary))
            self.send_error(HTTPStatus.NOT_FOUND)
        except flowrt.Refused:  # no such run
            self.send_json({"error": "no such run"}, HTTPStatus.NOT_FOUND)
        except StorageError as problem:
            self.send_json({"error": f"storage failure: {problem}"}, HTTPStatus.SERVICE_UNAVAILABLE)

    def do_POST(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        form = self.read_form()
        if form is None:
            return
        if path == "/runs":
            expense, why = expense_from(form)
            if expense is None:
                return self.send_html(error_page(why), HTTPStatus.BAD_REQUEST)
            run_id, why = self.runs.start(expense)
            if run_id is None:
                return self.send_html(error_page(why), HTTPStatus.BAD_REQUEST)
            return self.redirect(f"/runs/{run_id}")
        match = re.fullmatch(r"/runs/([^/]+)/answer", path)
        if match and RUN_ID.match(match.group(1)):
            run_id = match.group(1)
            decision = form.get("decision", "")
            if decision not in ("Yes", "No") or not form.get("call"):
                return self.send_html(error_page("choose Yes or No for an open call"), HTTPStatus.BAD_REQUEST)
            why = self.runs.answer(run_id, form["call"], decision, form.get("note", ""))
            if why is not None:
                return self.send_html(error_page(why), HTTPStatus.CONFLICT)
            return self.redirect(f"/runs/{run_id}")
        self.send_error(HTTPStatus.NOT_FOUND)

    def read_form(self) -> dict[str, str] | None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= 64 * 1024:
            self.send_error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE if length > 0 else HTTPStatus.BAD_REQUEST)
            return None
        body = self.rfile.read(length).decode("utf-8", "replace")
        return {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}

    def stream(self, run_id: str, until_end: bool = False) -> None:
        """Server-Sent Events: each fact as it is accepted (`Host.watch`, whoever writes it), then
        a `state` event, ending when the run ends or waits (paused, stopped) with nothing here
        driving it; with `?until=end`, only at its End (an answer may come from another process,
        `flow resume` at a terminal), or after STREAM_LIMIT seconds. A reconnecting EventSource
        sends `Last-Event-ID`: the stream goes on after that fact."""
        try:
            sent = max(0, int(self.headers.get("Last-Event-ID") or 0))
        except ValueError:
            sent = 0
        deadline = time.monotonic() + STREAM_LIMIT
        watch = self.runs.host.watch(run_id, after=sent, timeout=STREAM_LIMIT)  # Refused: a 404
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        try:
            while True:
                # The state first, then the facts: a fact accepted after the state was read is
                # still sent, and the stream ends only on a state read before the facts it sent.
                summary = self.runs.summary(run_id)
                try:
                    for fact in watch:
                        self.wfile.write(b"id: %d\nevent: fact\ndata: %s\n\n" % (fact["n"], json.dumps(fact).encode()))
                        self.wfile.flush()
                        sent = fact["n"]
                except TimeoutError:
                    pass  # STREAM_LIMIT: the page reconnects
                # The watch ended at the End, a pause or a halt; the state says whether something
                # (this application's thread, or another process) still drove the run.
                finished = summary["state"] in ("completed", "faulted") or \
                    (not until_end and summary["state"] != "running")
                left = deadline - time.monotonic()
                if finished or left <= 0:
                    self.wfile.write(b"event: state\ndata: " + json.dumps(summary).encode() + b"\n\n")
                    self.wfile.flush()
                    return
                time.sleep(min(STREAM_TICK, left))
                watch = self.runs.host.watch(run_id, after=sent, timeout=left)
        except (BrokenPipeError, ConnectionResetError):
            return  # the page went away
        finally:
            watch.close()

    def send_html(self, body: str, status: HTTPStatus = HTTPStatus.OK) -> None:
        self.send_bytes(body.encode("utf-8"), "text/html; charset=utf-8", status)

    def send_json(self, data, status: HTTPStatus = HTTPStatus.OK) -> None:
        self.send_bytes(json.dumps(data).encode("utf-8"), "application/json", status)

    def send_bytes(self, body: bytes, kind: str, status: HTTPStatus) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def redirect(self, location: str) -> None:
        self.send_response(HTTPStatus.SEE_OTHER)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()


def expense_from(form: dict[str, str]) -> tuple[dict | None, str]:
    """The program's `Expense` from the start form; the program's input decoding checks it again."""
    who, reason = form.get("who", "").strip(), form.get("reason", "").strip()
    try:
        cents = int(form.get("cents", ""))
    except ValueError:
        return None, "cents must be a whole number"
    if not who or not reason:
        return None, "who and reason are needed"
    identifier = form.get("id", "").strip() or f"web-{time.time_ns()}"
    return {"id": identifier, "who": who, "cents": cents, "reason": reason}, ""


# ---- pages ---------------------------------------------------------------------------------------

STYLE = """body{font-family:sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem}
table{border-collapse:collapse}td,th{padding:.2rem .6rem;border-bottom:1px solid #ddd;text-align:left}
pre{background:#f6f6f6;padding:.5rem;overflow:auto}.paused{color:#a60}.completed{color:#070}.faulted{color:#a00}"""


def page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>{body}</body></html>")


def index_page() -> str:
    return page("Expense approvals", """<h1>Expense approvals</h1>
<form method=post action=/runs>
 <label>Who <input name=who required></label>
 <label>Cents <input name=cents type=number required></label>
 <label>Reason <input name=reason required></label>
 <button>Start</button>
</form>
<h2>Runs</h2><table id=runs><tr><th>Run</th><th>State</th><th>Question or result</th></tr></table>
<script>
async function refresh() {
  const data = await (await fetch('/api/runs')).json();
  const table = document.getElementById('runs');
  table.querySelectorAll('tr.run').forEach(r => r.remove());
  for (const run of data.runs) {
    const tr = table.insertRow(); tr.className = 'run';
    const a = document.createElement('a'); a.href = '/runs/' + run.run; a.textContent = run.run;
    tr.insertCell().append(a);
    const state = tr.insertCell(); state.textContent = run.state; state.className = run.state;
    tr.insertCell().textContent = run.state === 'paused'
      ? run.pending.map(p => p.question).join('; ') : JSON.stringify(run.output ?? '');
  }
}
refresh(); setInterval(refresh, 2000);
</script>""")


def run_page(summary: dict) -> str:
    run_id = html.escape(summary["run"])
    questions = "".join(
        f"""<form method=post action="/runs/{run_id}/answer"><p class=question>{html.escape(str(p['question']))}</p>
<input type=hidden name=call value="{html.escape(p['call'])}">
<label>Note <input name=note></label>
<button name=decision value=Yes>Approve</button> <button name=decision value=No>Reject</button></form>"""
        for p in summary["pending"])
    problem = f"<p class=faulted>{html.escape(summary['problem'])}</p>" if summary.get("problem") else ""
    return page(summary["run"], f"""<p><a href="/">All runs</a></p><h1>{run_id}</h1>
<p>State: <b id=state class="{html.escape(summary['state'])}">{html.escape(summary['state'])}</b></p>
{problem}{questions}
<h2>Facts</h2><pre id=facts></pre>
<script>
const facts = document.getElementById('facts');
const events = new EventSource('/runs/{run_id}/events?until=end');
events.addEventListener('fact', e => {{ facts.textContent += e.data + '\\n'; }});
events.addEventListener('state', e => {{
  events.close();
  const state = JSON.parse(e.data).state;
  if (state !== document.getElementById('state').textContent) location.reload();
}});
</script>""")


def error_page(why: str) -> str:
    return page("Refused", f"<h1>Refused</h1><p>{html.escape(why)}</p><p><a href='/'>Back</a></p>")


def make_server(port: int = 0, runs_dir: str = ".flow/runs", program: Path = APPROVAL,
                host: str = "127.0.0.1") -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"runs": Runs(program, runs_dir)})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--runs", default=os.environ.get("FLOW_RUNS", ".flow/runs"))
    parser.add_argument("--program", type=Path, default=APPROVAL)
    args = parser.parse_args(argv)
    server = make_server(args.port, args.runs, args.program, args.host)
    print(f"listening on http://{args.host}:{server.server_address[1]}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
