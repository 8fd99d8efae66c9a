"""examples/webapp end to end through HTTP: the server as a process on 127.0.0.1 at a free port;
start an expense approval from the form, see it paused in the list with its question, stream its
facts, answer it with the form, and see it complete with its facts; a small expense completes
without a question; bad forms are refused and change nothing; a run started at the terminal is
answered here; a stream reconnects after its last fact. The application uses flowrt's public API
only (docs/api.md)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "examples" / "webapp" / "app.py"
BOUND = 60.0  # seconds any wait below may take before the test fails


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


OPENER = urllib.request.build_opener(NoRedirect)


@contextlib.contextmanager
def serving(tmp_path: Path, *extra: str):
    process = subprocess.Popen([sys.executable, str(APP), "--port", "0", "--runs", str(tmp_path / "runs"), *extra],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()  # the server prints its address once it listens
        assert line.startswith("listening on http://127.0.0.1:"), line + process.stderr.read()
        yield line.split()[-1].rstrip("/")
    finally:
        process.kill()
        process.wait(timeout=30)


@pytest.fixture
def server(tmp_path):
    with serving(tmp_path) as url:
        yield url


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=BOUND) as response:
        return json.loads(response.read())


def post(url: str, fields: dict) -> tuple[int, dict, str]:
    data = urllib.parse.urlencode(fields).encode()
    try:
        with OPENER.open(urllib.request.Request(url, data=data, method="POST"), timeout=BOUND) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as answered:
        return answered.code, dict(answered.headers), answered.read().decode()


def wait_for(url: str, state: str) -> dict:
    deadline = time.monotonic() + BOUND
    while True:
        run = get_json(url)
        if run["state"] == state:
            return run
        assert time.monotonic() < deadline, f"still {run['state']}, not {state}: {run}"
        time.sleep(0.1)


def events(url: str) -> list[tuple[str, dict]]:
    """The Server-Sent Events of a stream, read until the server ends it (at a pause or End)."""
    out = []
    with urllib.request.urlopen(url, timeout=BOUND) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        kind = None
        for raw in response:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[len("event: "):]
            elif line.startswith("data: "):
                out.append((kind, json.loads(line[len("data: "):])))
    return out


def test_start_list_answer_and_follow_a_run(server):
    status, headers, _ = post(server + "/runs", {"who": "Ada", "cents": "120000", "reason": "a conference"})
    assert status == 303
    location = headers["Location"]
    run_id = location.rsplit("/", 1)[-1]
    assert location == f"/runs/{run_id}"

    paused = wait_for(f"{server}/api/runs/{run_id}", "paused")
    [question] = paused["pending"]
    assert question["tool"] == "people.approve"
    assert question["question"] == "Ada asks 1200.00 EUR for a conference"
    listed = {row["run"]: row for row in get_json(server + "/api/runs")["runs"]}
    assert listed[run_id]["state"] == "paused" and listed[run_id]["pending"] == paused["pending"]

    page = urllib.request.urlopen(server + location, timeout=BOUND).read().decode()
    assert "Ada asks 1200.00 EUR for a conference" in page and f'value="{question["call"]}"' in page

    streamed = events(f"{server}/runs/{run_id}/events")
    assert [kind for kind, _ in streamed][-1] == "state" and streamed[-1][1]["state"] == "paused"
    facts = [data for kind, data in streamed if kind == "fact"]
    assert [f["kind"] for f in facts][0] == "Start" and facts[-1]["kind"] == "Call"
    assert [f["n"] for f in facts] == list(range(1, len(facts) + 1))

    status, headers, _ = post(f"{server}/runs/{run_id}/answer",
                              {"call": question["call"], "decision": "Yes", "note": "enjoy"})
    assert status == 303 and headers["Location"] == location
    done = wait_for(f"{server}/api/runs/{run_id}", "completed")
    assert done["output"]["Approved"].endswith(": enjoy") and done["pending"] == []
    kinds = [f["kind"] for f in done["history"]]
    assert kinds[0] == "Start" and kinds[-1] == "End" and "Reply" in kinds
    reply = next(f for f in done["history"] if f["kind"] == "Reply" and f["call"] == question["call"])
    assert reply["outcome"] == {"Ok": {"Yes": "enjoy"}}
    # A stream opened after the End sends every fact, then the final state.
    streamed = events(f"{server}/runs/{run_id}/events")
    assert [d["kind"] for k, d in streamed if k == "fact"] == kinds
    assert streamed[-1] == ("state", {**{k: v for k, v in done.items() if k != "history"}})
    # Answered once: a second answer is refused.
    status, _, body = post(f"{server}/runs/{run_id}/answer", {"call": question["call"], "decision": "No"})
    assert status == 409 and "not open" in body


def test_a_stream_until_end_follows_an_answer_given_at_the_terminal(server, tmp_path):
    import threading

    _, headers, _ = post(server + "/runs", {"who": "Cy", "cents": "99000", "reason": "a laptop"})
    run_id = headers["Location"].rsplit("/", 1)[-1]
    [question] = wait_for(f"{server}/api/runs/{run_id}", "paused")["pending"]
    box: list = []
    follower = threading.Thread(target=lambda: box.append(events(f"{server}/runs/{run_id}/events?until=end")))
    follower.start()
    # Another process answers: the CLI, in the server's runs directory (the ledger is flow.toml's script).
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "resume", run_id, "--runs", str(tmp_path / "runs"),
                           "--call", question["call"], "--reply", '{"Ok": {"No": "not this year"}}', "--allow"],
                          cwd=ROOT, capture_output=True, text=True, timeout=BOUND,
                          env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert done.returncode == 0, done.stderr
    follower.join(BOUND)
    assert not follower.is_alive()
    [streamed] = box
    kinds = [d["kind"] for k, d in streamed if k == "fact"]
    assert kinds == ["Start", "Call", "Reply", "End"]
    assert streamed[-1][0] == "state" and streamed[-1][1]["output"] == {"Rejected": "not this year"}


def test_a_small_expense_completes_without_a_question(server):
    status, headers, _ = post(server + "/runs", {"who": "Bo", "cents": "900", "reason": "a taxi"})
    assert status == 303
    run = wait_for(server + "/api" + headers["Location"], "completed")
    assert run["output"]["Approved"].endswith(": within policy")
    assert [f["tool"] for f in run["history"] if f["kind"] == "Call"] == ["ledger.record"]


@pytest.mark.parametrize("fields, why", [
    ({"who": "Ada", "cents": "lots", "reason": "x"}, "cents must be a whole number"),
    ({"who": "", "cents": "5", "reason": "x"}, "who and reason are needed"),
])
def test_a_bad_start_form_is_refused_and_records_nothing(server, fields, why):
    status, _, body = post(server + "/runs", fields)
    assert status == 400 and why in body
    assert get_json(server + "/api/runs")["runs"] == []


def test_a_program_that_does_not_check_refuses_the_start(tmp_path):
    (tmp_path / "broken.flow").write_text("pub flow main(expense: Int) -> Int = expense + \"x\"\n")
    with serving(tmp_path, "--program", str(tmp_path / "broken.flow")) as url:
        status, _, body = post(url + "/runs", {"who": "Ada", "cents": "5", "reason": "x"})
        assert status == 400 and "Refused" in body
        assert get_json(url + "/api/runs")["runs"] == []


def test_an_unknown_run_is_404(server):
    for path in ("/api/runs/run-20260101-000000-abcdef", "/runs/run-20260101-000000-abcdef/events"):
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(server + path, timeout=BOUND)
        assert raised.value.code == 404


def events_after(url: str, last: int) -> list[tuple[str, dict]]:
    """`events`, as an EventSource reconnecting after fact `last` asks for them."""
    out = []
    request = urllib.request.Request(url, headers={"Last-Event-ID": str(last)})
    with urllib.request.urlopen(request, timeout=BOUND) as response:
        kind = None
        for raw in response:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[len("event: "):]
            elif line.startswith("data: "):
                out.append((kind, json.loads(line[len("data: "):])))
    return out


def test_a_run_paused_at_the_terminal_is_answered_here_and_a_stream_reconnects_after_its_last_fact(server, tmp_path):
    """A run this application did not start (`flow run` in another process): its question comes
    from the history (`Host.pending`), the form answers it, and a stream that reconnects with
    `Last-Event-ID` goes on after the fact it names."""
    expense = {"id": "cli-1", "who": "Di", "cents": 250000, "reason": "a printer"}
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "run", str(ROOT / "examples" / "approval" / "main.flow"),
                           "--runs", str(tmp_path / "runs"), "--input", json.dumps({"expense": expense}), "--allow"],
                          cwd=ROOT, capture_output=True, text=True, timeout=BOUND,
                          env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert done.returncode == 3, done.stderr
    [row] = get_json(server + "/api/runs")["runs"]
    [question] = row["pending"]
    assert row["state"] == "paused" and question["question"] == "Di asks 2500.00 EUR for a printer"

    status, _, _ = post(f"{server}/runs/{row['run']}/answer", {"call": question["call"], "decision": "No",
                                                                "note": "use the shared one"})
    assert status == 303
    finished = wait_for(f"{server}/api/runs/{row['run']}", "completed")
    assert finished["output"] == {"Rejected": "use the shared one"}
    streamed = events_after(f"{server}/runs/{row['run']}/events", 2)
    facts = [data for kind, data in streamed if kind == "fact"]
    assert [f["n"] for f in facts] == list(range(3, finished["facts"] + 1)) and facts[-1]["kind"] == "End"
    assert streamed[-1][0] == "state" and streamed[-1][1]["state"] == "completed"


def test_the_application_uses_only_the_public_api():
    import ast
    import re

    imported = set()
    for node in ast.walk(ast.parse(APP.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names if alias.name.startswith("flow"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flow"):
            imported.update(f"{node.module}.{alias.name}" for alias in node.names)
    assert imported == {"flowrt", "flowrt.store.StorageError"}
    assert re.findall(r"(?<!self)\._[a-z]\w*", APP.read_text(encoding="utf-8")) == []  # no private members
