"""The live status line of `flow run` and `flow resume` (flowrt/status_line.py), through the real
`flow` entry point: drawn and erased on a terminal (a pty), never on a pipe, under `NO_COLOR` or
`--color never`."""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from flowrt.status_line import _Tally, wanted

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "programs" / "watch"
ERASE = b"\r\x1b[2K"


def program(tmp_path: Path, delay: float) -> Path:
    copy = tmp_path / "p"
    shutil.copytree(PROGRAM, copy)
    (copy / "delay").write_text(str(delay))
    return copy


def on_terminal(args: list[str], env: dict | None = None) -> tuple[int, str, bytes]:
    """Run `flow ARGS` with stderr on a pty (stdout a pipe): (exit code, stdout, what the
    terminal got)."""
    master, slave = os.openpty()
    # Wide enough for the whole line: it is cut to the terminal's width, and a pty's default
    # size is whatever the machine gives (the text this test reads must not depend on it).
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 250, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "flowrt.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=slave, stdin=subprocess.DEVNULL,
                               env={**os.environ, "TERM": "xterm", **(env or {})})
    os.close(slave)
    got = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the other side closed
                break
            if not chunk:
                break
            got += chunk
        elif process.poll() is not None:
            break
    os.close(master)
    out = process.stdout.read().decode()
    return process.wait(timeout=60), out, got


def run_args(copy: Path, runs: Path, *extra: str, entry: str = "main", n: int = 3) -> list[str]:
    return ["run", str(copy / "main.flow"), "--entry", entry, "--input", json.dumps({"n": n}), "--runs", str(runs),
            "--allow", *extra]


def test_flow_run_on_a_terminal_shows_a_status_line_and_erases_it(tmp_path):
    copy = program(tmp_path, delay=0.5)
    code, out, terminal = on_terminal(run_args(copy, tmp_path / "runs"))
    assert code == 0 and out == "6\n"
    text = terminal.decode("utf-8")
    [run_id] = os.listdir(tmp_path / "runs")
    assert f"run {run_id} · " in text and " facts · " in text and " elapsed" in text
    assert "1 call out: main.step " in text  # a call out, and for how long
    # erased before the command's own output: then only the line naming the run that completed
    assert terminal.endswith(ERASE + f"run {run_id} completed\r\n".encode())


def test_flow_resume_on_a_terminal_shows_a_status_line(tmp_path):
    copy = program(tmp_path, delay=0.5)
    runs = tmp_path / "runs"
    code, out, _ = on_terminal(run_args(copy, runs, entry="ask_first", n=2))
    assert code == 3
    [run_id] = os.listdir(runs)
    call = out.split("pending call ")[1].split()[0]
    code, out, terminal = on_terminal(["resume", run_id, "--runs", str(runs), "--call", call, "--reply",
                                       '{"Ok": "yes"}', "--allow"])
    assert code == 0 and out == '"yes 3"\n'
    assert f"run {run_id} · ".encode() in terminal
    assert terminal.endswith(ERASE + f"run {run_id} completed\r\n".encode())


@pytest.mark.parametrize("how", ["NO_COLOR", "--color never"])
def test_plain_output_asked_for_has_no_status_line(tmp_path, how):
    copy = program(tmp_path, delay=0.3)
    extra, env = (["--color", "never"], None) if how == "--color never" else ([], {"NO_COLOR": "1"})
    code, out, terminal = on_terminal(run_args(copy, tmp_path / "runs", *extra, n=2), env)
    assert code == 0 and out == "3\n"
    assert ERASE not in terminal and b"elapsed" not in terminal


def test_a_pipe_gets_no_status_line(tmp_path):
    copy = program(tmp_path, delay=0.3)
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", *run_args(copy, tmp_path / "runs", n=2)], cwd=ROOT,
                          capture_output=True, timeout=120, env={**os.environ, "TERM": "xterm"})
    assert done.returncode == 0 and done.stdout == b"3\n"
    [run_id] = os.listdir(tmp_path / "runs")
    assert done.stderr == f"run {run_id} completed\n".encode()  # and no status line


def test_wanted_only_on_a_terminal_without_plain_output(monkeypatch):
    class Terminal:
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert wanted(Terminal())
    assert not wanted(Terminal(), as_json=True) and not wanted(Terminal(), color="never")
    monkeypatch.setenv("TERM", "dumb")
    assert not wanted(Terminal())
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wanted(Terminal())
    monkeypatch.setenv("NO_COLOR", "")  # set but empty: no request
    assert wanted(Terminal())


def test_the_tally_counts_facts_and_calls_out():
    tally = _Tally()
    tally.add([{"n": 1, "kind": "Start"}, {"n": 2, "kind": "Call", "call": "a", "tool": "m.slow"},
               {"n": 3, "kind": "Call", "call": "b", "tool": "m.fast"}])
    now = max(since for _, since in tally.out.values())
    text = tally.text("r1", now + 2.5, now - 10)
    assert text.startswith("run r1 · 3 facts · 2 calls out: m.slow 2.5 s and 1 more · ")
    tally.add([{"n": 4, "kind": "Stop", "task": "t", "closed": ["a"]}, {"n": 5, "kind": "Reply", "call": "b"}])
    assert " · no call out · " in tally.text("r1", now, now)
