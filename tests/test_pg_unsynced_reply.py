"""The PostgreSQL store writes an unsynced Reply at once and commits it without waiting for the
flush (the next synchronous commit flushes the log past it): what the host promises holds. The
Reply is in the database (read back by another connection) before the host reports an End or a
pause, and before the program sees it, so a SIGKILL of the host right after it was admitted, or
while the program computes, loses nothing. The store's own side (fencing, failure, what a call
costs the server) is tests/test_pg_commits.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg

import flowrt
from flowrt.run import Driver, prepare, start_fields
from flowrt.store.postgres import PostgresStore
from tests.test_group_commit import PROGRAM as TASKS, ScriptedChild, call
from tests.test_pg_store import flow, lease_runs_out, wait_for

QUIET = """
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = {
    let first = echo(1)
    let busy = count(n, 0)
    first + busy
}

flow count(n: Int, acc: Int) -> Int = if n == 0 { acc } else { count(n - 1, acc + 1) }
"""

ECHO_TOOL = """import os
from flowrt.toolkit import serve


def echo(n):
    with open("echo.log", "a") as log:  # the Tool's own count of the calls it was sent
        log.write(f"{n}\\n")
    return n


serve({"quiet.echo": echo}, declared_in="quiet.flow")
"""

#: iterations of the pure loop after the Reply: seconds of the child computing, the host quiet
BUSY = 20_000_000


def stored_kinds(url: str, run: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT convert_from(line, 'UTF8')::json->>'kind' FROM flow_facts "
                            "WHERE run = %s ORDER BY n", (run,)).fetchall()
    return [kind for (kind,) in rows]


def drive(url: str, tmp_path: Path, frames: list, tool) -> tuple:
    """The Driver over a scripted child on the PostgreSQL store; the record as another connection
    reads it the moment the Driver returns its outcome, before the store is closed."""
    path = tmp_path / "tasks.flow"
    path.write_text(TASKS)
    prepared = prepare(str(path), "main", '{"n": 2}', python_tools={"tasks.work": tool})
    fields, sources = start_fields(prepared)
    store = PostgresStore(url, lease_seconds=600)
    log = store.create("held", fields, sources=sources)
    try:
        outcome = Driver(prepared, log, "held", ScriptedChild(frames)).run()
        seen = stored_kinds(url, "held")
        kinds = [f["kind"] for f in log.facts()]
    finally:
        log.close()
        store.close()
    return outcome, seen, kinds


def test_an_unsynced_reply_is_written_before_the_end_is_reported(pg_url, tmp_path):
    frames = [[call(0, wait=True)], [{"op": "end", "outcome": {"Completed": 0}}]]
    outcome, seen, kinds = drive(pg_url, tmp_path, frames, lambda n: n)
    assert outcome.exit_code == 0
    assert seen == kinds == ["Start", "Call", "Reply", "End"]


def test_an_unsynced_reply_is_written_before_the_pause_is_reported(pg_url, tmp_path):
    """Two calls out: one answered (its Reply unsynced), the other pending; the child then waits, so
    the run pauses, and the Reply is in the database when the pause is reported."""
    frames = [[call(0), call(1, wait=True)], [{"op": "wait"}]]
    outcome, seen, kinds = drive(pg_url, tmp_path, frames, lambda n: n if n == 0 else flowrt.PENDING)
    assert outcome.exit_code == 3 and outcome.pending == ["root/1#1"]
    assert seen == kinds == ["Start", "Call", "Call", "Reply"]


def test_a_quiet_program_has_its_reply_written_and_a_sigkill_then_loses_nothing(pg_url, tmp_path):
    """The child computes for seconds after the Reply: the Reply is in the database within the
    idle bound (the child's `before_sleep`), not at the End; SIGKILL of the host then, and the
    resumed run has the Reply (the Tool is not sent the call again) and the End it would have had."""
    (tmp_path / "quiet.flow").write_text(QUIET)
    (tmp_path / "echo_tool.py").write_text(ECHO_TOOL)
    (tmp_path / "flow.toml").write_text('[tools]\n"quiet" = { python = "echo_tool.py" }\n')
    env = dict(os.environ, FLOW_LEASE_SECONDS="1")
    host = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "run", "quiet.flow", "--allow", "--store", pg_url,
                             "--input", json.dumps({"n": BUSY})], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def run_id() -> str | None:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                row = conn.execute("SELECT run FROM flow_runs").fetchone()
            return row[0] if row else None

        wait_for(lambda: run_id() is not None and "Reply" in stored_kinds(pg_url, run_id()), 120, "the Reply")
        alive = host.poll() is None
        seen = stored_kinds(pg_url, run_id())
        host.send_signal(signal.SIGKILL)
    finally:
        if host.poll() is None:
            host.kill()
        _, err = host.communicate(timeout=30)
    assert alive and seen == ["Start", "Call", "Reply"], err  # written while the child computed
    run = run_id()
    assert stored_kinds(pg_url, run) == ["Start", "Call", "Reply"]
    lease_runs_out(pg_url, run)
    resumed = flow("resume", run, "--allow", "--store", pg_url, cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == BUSY + 1
    assert (tmp_path / "echo.log").read_text().splitlines() == ["1"]  # sent once


def test_a_host_killed_right_after_a_reply_keeps_it(pg_url, tmp_path):
    """FLOW_FAULT_KILL_AFTER=3: the host dies right after admitting the Reply (fact 3): the Reply
    was written before the program saw it, so the record holds it, and the resume finishes the
    run without sending the call again."""
    (tmp_path / "quiet.flow").write_text(QUIET)
    (tmp_path / "echo_tool.py").write_text(ECHO_TOOL)
    (tmp_path / "flow.toml").write_text('[tools]\n"quiet" = { python = "echo_tool.py" }\n')
    env = dict(os.environ, FLOW_LEASE_SECONDS="1")
    done = flow("run", "quiet.flow", "--allow", "--store", pg_url, "--input", json.dumps({"n": 10}), cwd=tmp_path,
                env=dict(env, FLOW_FAULT_KILL_AFTER="3"))
    assert done.returncode == -signal.SIGKILL and done.stdout == ""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        [(run,)] = conn.execute("SELECT run FROM flow_runs").fetchall()
    assert stored_kinds(pg_url, run) == ["Start", "Call", "Reply"]
    lease_runs_out(pg_url, run)
    assert json.loads(flow("history", run, "--json", "--store", pg_url, env=env).stdout)["open"] == []
    resumed = flow("resume", run, "--allow", "--store", pg_url, cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == 11
    assert (tmp_path / "echo.log").read_text().splitlines() == ["1"]  # sent once
