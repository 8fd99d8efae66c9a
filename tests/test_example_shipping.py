"""examples/shipping (issue 15, item 5): seed 002's shipping flow, run live through the real `flow`
CLI against the fake model server the example ships (examples/shipping/fake_model.py on a free
port of 127.0.0.1), paused on a person, resumed, and replayed from its history alone with the
server stopped and nothing bound; and its own `flow test` suite."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "shipping"

ADA = "Hi! Please ship my order to Ada Lovelace, 12 Harbour Road, Portsmouth."
BRIAN = "Send it to Brian Ode, 4 Castle Street, Belfast BT1 1AA please"


def flow(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "FLOW_MODEL")}
    env["SHIPPING_MODEL_KEY"] = "fake"
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


class FakeModel:
    """fake_model.py as the README starts it, on a port the OS picks; its first line names the URL."""

    def __init__(self, script: Path) -> None:
        self.process = subprocess.Popen([sys.executable, str(script), "--port", "0"], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: lines.put(self.process.stdout.readline()), daemon=True).start()
        try:
            line = lines.get(timeout=60)
        except queue.Empty:
            self.stop()
            raise AssertionError("the fake model server did not say where it listens within 60 s") from None
        found = re.search(r"(http://127\.0\.0\.1:\d+/v1)", line)
        if found is None:
            self.stop()
            raise AssertionError(f"unexpected first line from the fake model server: {line!r}")
        self.url = found.group(1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        for stream in (self.process.stdout, self.process.stderr):
            stream.close()


@pytest.fixture
def example(tmp_path: Path):
    """A copy of the example whose flow.toml points the model binding at a fresh fake server."""
    where = tmp_path / "shipping"
    shutil.copytree(EXAMPLE, where, ignore=shutil.ignore_patterns(".flow", "__pycache__"))
    server = FakeModel(where / "fake_model.py")
    toml = where / "flow.toml"
    text = toml.read_text()
    assert 'base_url = "http://127.0.0.1:8765/v1"' in text
    toml.write_text(text.replace("http://127.0.0.1:8765/v1", server.url))
    try:
        yield where, server
    finally:
        server.stop()


def paused(done: subprocess.CompletedProcess) -> tuple[str, str]:
    """The run id and the one pending call of a run that paused."""
    assert done.returncode == 3, done.stdout + done.stderr
    run = re.search(r"^paused: run (\S+)$", done.stdout, re.M)
    calls = re.findall(r"^  pending call (\S+)$", done.stdout, re.M)
    assert run is not None and len(calls) == 1, done.stdout
    return run.group(1), calls[0]


def open_tool(where: Path, run: str) -> str:
    """The Tool of the run's one open call, as `flow history` shows it."""
    shown = flow("history", run, "--runs", "runs", cwd=where)
    assert shown.returncode == 0, shown.stderr
    (line,) = [l for l in shown.stdout.splitlines() if "pending: it waits for its reply" in l]
    return line.split()[1]


def test_live_runs_pause_on_people_resume_and_replay_with_nothing_bound(example):
    where, server = example

    # 1. The model guesses a postcode the person never wrote: refused, and the person is asked.
    first = flow("run", "main.flow", "--runs", "runs", "--allow", "--input", json.dumps({"request": ADA}), cwd=where)
    ada, call = paused(first)
    assert open_tool(where, ada) == "customer.ask"
    history = flow("history", ada, "--runs", "runs", cwd=where).stdout
    assert 'customer.ask({"question":"Which postcode should the parcel go to?"})' in history
    done = flow("resume", ada, "--runs", "runs", "--allow", "--call", call, "--reply",
                json.dumps({"Ok": "It's PO1 3AX."}), cwd=where)
    assert done.returncode == 0, done.stdout + done.stderr
    booked = json.loads(done.stdout)["Booked"]
    assert booked["address"] == {"name": "Ada Lovelace", "street": "12 Harbour Road", "city": "Portsmouth",
                                 "postcode": "PO1 3AX"}
    assert booked["refused"] == ["postcode=PO1 1AA"]
    assert re.fullmatch(r"TRK-[0-9A-F]{8}", booked["tracking"])

    # 2. The carrier wants a person's sign-off: escalated to the desk, which answers days later.
    # This run asks the model for a streamed answer (flow.toml is not part of the program).
    toml = where / "flow.toml"
    toml.write_text(toml.read_text().replace('api_key_env = "SHIPPING_MODEL_KEY" }',
                                             'api_key_env = "SHIPPING_MODEL_KEY", stream = true }'))
    assert "stream = true" in toml.read_text()
    second = flow("run", "main.flow", "--runs", "runs", "--allow", "--input", json.dumps({"request": BRIAN}),
                  cwd=where)
    brian, call = paused(second)
    assert open_tool(where, brian) == "staff.handle"
    done = flow("resume", brian, "--runs", "runs", "--allow", "--call", call, "--reply",
                json.dumps({"Ok": {"Shipped": "TRK-CUSTOMS-0042"}}), cwd=where)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == {"ShippedByStaff": {
        "reason": "the carrier needs a person's sign-off: parcels to Northern Ireland need a customs declaration",
        "tracking": "TRK-CUSTOMS-0042"}}

    # 3. Replay from history alone: the model server is gone and no flow.toml binds anything.
    server.stop()
    (where / "flow.toml").unlink()
    for run in (ada, brian):
        replayed = flow("replay", run, "--runs", "runs", cwd=where)
        assert replayed.returncode == 0 and replayed.stdout.strip() == "Matched", replayed.stdout + replayed.stderr


def test_the_fake_model_insists_on_the_draft_response_format(example):
    _, server = example
    request = urllib.request.Request(server.url + "/chat/completions", method="POST", headers={
        "Content-Type": "application/json"}, data=json.dumps({
            "model": "m", "messages": [{"role": "user", "content": "<<<It's PO1 3AX.>>>"}]}).encode())
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 400
    refused.value.close()


def test_the_examples_own_flow_tests_pass():
    done = flow("test", "examples/shipping", cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "14 passed, 0 failed" in done.stdout
    for name in ("a_guessed_postcode_is_refused_and_asked_for", "going_back_and_forth_more_than_twice_is_escalated",
                 "takes_what_the_person_said_and_refuses_a_guessed_postcode"):
        assert f"PASS {name}" in done.stdout
