"""Durable timers (flowrt/timers.py), through the real `flow` entry point: the deadline of each
`clock.sleep` is a host record written with the Call; a host killed (or interrupted) during a
sleep leaves a run whose resume sends the sleep again for the time that remains, under the same
call id, and ends as an uninterrupted run does; `--park-after` lets go of a run that waits only
on timers with a `sleeping` decision that `flow history` and `flow runs` show."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import given, strategies as st

from flowdata.values import parse_duration, parse_instant
from flowrt import timers

NAP = """\
use "std@v1/clock"

pub flow main(nap: Duration) -> Text !tool = {
    clock.sleep(nap)
    "slept"
}
"""

NOW_THEN_NAP = """\
use "std@v1/clock"

pub flow main() -> Text !tool = {
    let t0 = clock.now()
    clock.sleep(0s)
    if clock.since(t0) >= 0s { "in order" } else { "backwards" }
}
"""

SECOND = 1_000_000_000


def flow(*args: str, cwd: Path, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def host_records(runs: Path, run_id: str) -> list[dict]:
    return [json.loads(line) for line in (runs / run_id / "host.jsonl").read_text().splitlines()]


def facts(runs: Path, run_id: str) -> list[dict]:
    return [json.loads(line) for line in (runs / run_id / "history.jsonl").read_text().splitlines()
            if line.strip("\0")]


def history(runs: Path, run_id: str, cwd: Path) -> dict:
    done = flow("history", run_id, "--runs", str(runs), "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def only_run(runs: Path) -> str:
    [run_id] = os.listdir(runs)
    return run_id


def start_sleeping(work: Path, nap: str) -> tuple[subprocess.Popen, str, dict]:
    """A live `flow run` of NAP, once its sleep's timer record is durable: the host, the run id
    and the timer record."""
    (work / "nap.flow").write_text(NAP)
    runs = work / "runs"
    host = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "run", "nap.flow", "--input",
                             json.dumps({"nap": nap}), "--runs", str(runs)],
                            cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ids = os.listdir(runs) if runs.exists() else []
        if ids and (runs / ids[0] / "host.jsonl").exists():
            timer = [r for r in host_records(runs, ids[0]) if r["kind"] == "timer"]
            if timer:
                return host, ids[0], timer[0]
        if host.poll() is not None:
            break
        time.sleep(0.02)
    host.kill()
    raise AssertionError(f"the sleep never started: {host.communicate(timeout=10)}")


def end_of(runs: Path, run_id: str) -> dict:
    last = facts(runs, run_id)[-1]
    assert last["kind"] == "End"
    return last["outcome"]


def test_a_host_killed_during_a_sleep_resumes_for_the_time_that_remains(tmp_path):
    runs = tmp_path / "runs"
    host, run_id, timer = start_sleeping(tmp_path, "PT2S")
    host.send_signal(signal.SIGKILL)
    host.communicate(timeout=30)
    call = facts(runs, run_id)[-1]
    assert call["kind"] == "Call" and call["tool"] == "std@v1/clock.sleep" and call["arguments"] == {"d": "PT2S"}
    assert timer["call"] == call["call"]
    deadline = parse_instant(timer["deadline"]).nanos
    # The deadline is the wall clock at the Call plus the two seconds, in RFC 3339 UTC.
    assert timer["deadline"].endswith("Z") and abs(deadline - 2 * SECOND - time.time_ns()) < 60 * SECOND

    view = history(runs, run_id, tmp_path)
    assert view["state"] == "crashed"
    assert [(e["call"], e["status"]) for e in view["open"]] == [(call["call"], "clock")]
    assert view["open"][0]["next"][0] == f"flow resume {run_id}"

    before = time.time_ns()
    done = flow("resume", run_id, "--runs", str(runs), cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == '"slept"\n', done.stderr
    [resent] = [r for r in host_records(runs, run_id) if r["kind"] == "resent"]
    assert resent["call"] == call["call"] and resent["deadline"] == timer["deadline"]
    remaining = parse_duration(resent["remaining"]).nanos
    # What was sent again is what remained of the deadline when it was sent, not the 2 s again.
    assert 0 <= remaining <= max(0, deadline - before) and remaining < 2 * SECOND
    [reply] = [f for f in facts(runs, run_id) if f["kind"] == "Reply"]
    assert reply["call"] == call["call"] and reply["outcome"] == {"Ok": None}
    # The same End as an uninterrupted run's, and the history replays.
    whole = tmp_path / "whole"
    assert flow("run", "nap.flow", "--input", '{"nap": "PT0.1S"}', "--runs", str(whole), cwd=tmp_path).returncode == 0
    assert end_of(runs, run_id) == end_of(whole, only_run(whole)) == {"Completed": "slept"}
    assert flow("replay", run_id, "--runs", str(runs), cwd=tmp_path).stdout == "Matched\n"


def test_a_sleep_whose_deadline_passed_while_no_host_ran_is_sent_again_for_nothing(tmp_path):
    runs = tmp_path / "runs"
    host, run_id, timer = start_sleeping(tmp_path, "PT0.5S")
    host.send_signal(signal.SIGKILL)
    host.communicate(timeout=30)
    deadline = parse_instant(timer["deadline"]).nanos
    while time.time_ns() <= deadline:  # the host is dead; the deadline passes meanwhile
        time.sleep(0.05)
    done = flow("resume", run_id, "--runs", str(runs), cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == '"slept"\n', done.stderr
    [resent] = [r for r in host_records(runs, run_id) if r["kind"] == "resent"]
    assert resent["remaining"] == "PT0S" and resent["deadline"] == timer["deadline"]


def test_a_host_killed_before_the_timer_record_resends_the_whole_sleep(tmp_path):
    """Killed right after the Call is durable (fact 2), before the timer record: the sleep had not
    started, so the resume sends it for its whole duration and records the deadline it gave it."""
    (tmp_path / "nap.flow").write_text(NAP)
    runs = tmp_path / "runs"
    env = {**os.environ, "FLOW_FAULT_KILL_AFTER": "2"}
    killed = flow("run", "nap.flow", "--input", '{"nap": "PT0.3S"}', "--runs", str(runs), cwd=tmp_path, env=env)
    assert killed.returncode == -signal.SIGKILL
    run_id = only_run(runs)
    assert not [r for r in host_records(runs, run_id) if r["kind"] == "timer"]
    done = flow("resume", run_id, "--runs", str(runs), cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == '"slept"\n', done.stderr
    records = host_records(runs, run_id)
    [timer] = [r for r in records if r["kind"] == "timer"]
    [resent] = [r for r in records if r["kind"] == "resent"]
    assert records.index(timer) < records.index(resent)
    assert resent["deadline"] == timer["deadline"] and timer["call"] == resent["call"] == "root#1"
    assert 0 < parse_duration(resent["remaining"]).nanos <= parse_duration("PT0.3S").nanos


def test_an_open_clock_now_is_sent_again_not_answered_unknown(tmp_path):
    (tmp_path / "now.flow").write_text(NOW_THEN_NAP)
    runs = tmp_path / "runs"
    env = {**os.environ, "FLOW_FAULT_KILL_AFTER": "2"}  # right after the Call of clock.now
    killed = flow("run", "now.flow", "--runs", str(runs), cwd=tmp_path, env=env)
    assert killed.returncode == -signal.SIGKILL
    run_id = only_run(runs)
    assert facts(runs, run_id)[-1]["tool"] == "std@v1/clock.now"
    done = flow("resume", run_id, "--runs", str(runs), cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == '"in order"\n', done.stderr
    records = host_records(runs, run_id)
    assert [r["call"] for r in records if r["kind"] == "resent"] == ["root#1"]
    assert not [r for r in records if r["kind"] == "settled"]
    reply = [f for f in facts(runs, run_id) if f["kind"] == "Reply" and f["call"] == "root#1"][0]
    assert parse_instant(reply["outcome"]["Ok"]).nanos > 0


def test_an_interrupted_sleep_resumes_for_what_remains(tmp_path):
    runs = tmp_path / "runs"
    host, run_id, timer = start_sleeping(tmp_path, "PT1S")
    host.send_signal(signal.SIGINT)
    _, err = host.communicate(timeout=30)
    assert host.returncode == 130, err
    view = history(runs, run_id, tmp_path)
    assert view["state"] == "halted" and [e["status"] for e in view["open"]] == ["clock"]
    done = flow("resume", run_id, "--runs", str(runs), cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == '"slept"\n', done.stderr
    [resent] = [r for r in host_records(runs, run_id) if r["kind"] == "resent"]
    assert resent["deadline"] == timer["deadline"] and parse_duration(resent["remaining"]).nanos < SECOND


def test_park_after_lets_go_of_a_run_waiting_only_on_a_timer(tmp_path):
    (tmp_path / "nap.flow").write_text(NAP)
    runs = tmp_path / "runs"
    done = flow("run", "nap.flow", "--input", '{"nap": "PT1.5S"}', "--runs", str(runs), "--park-after", "0.2",
                cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    run_id = only_run(runs)
    [timer] = [r for r in host_records(runs, run_id) if r["kind"] == "timer"]
    assert done.stdout.splitlines()[0] == f"sleeping: run {run_id} until {timer['deadline']}"
    view = history(runs, run_id, tmp_path)
    assert view["state"] == "sleeping" and view["pending"] == []
    assert view["hostDecision"] == {"kind": "sleeping", "head": facts(runs, run_id)[-1]["hash"],
                                    "until": timer["deadline"], "pending": [],
                                    "timers": [{"call": "root#1", "deadline": timer["deadline"]}]}
    assert [(e["call"], e["status"]) for e in view["open"]] == [("root#1", "timer")]
    assert f"sleeping until {timer['deadline']}" in view["reason"]
    listed = json.loads(flow("runs", "--runs", str(runs), "--json", cwd=tmp_path).stdout)
    assert listed["runs"][0]["hostDecision"]["kind"] == "sleeping"
    assert f"sleeping until {timer['deadline']}" in flow("runs", "--runs", str(runs), cwd=tmp_path).stdout
    # A resume before the deadline parks it again when asked to, or waits out the rest.
    again = flow("resume", run_id, "--runs", str(runs), "--park-after", "0.2", cwd=tmp_path)
    if again.returncode == 3:
        assert history(runs, run_id, tmp_path)["hostDecision"]["until"] == timer["deadline"]
        again = flow("resume", run_id, "--runs", str(runs), cwd=tmp_path)
    assert again.returncode == 0 and again.stdout == '"slept"\n', again.stderr
    assert {r["deadline"] for r in host_records(runs, run_id) if r["kind"] == "resent"} == {timer["deadline"]}
    assert flow("replay", run_id, "--runs", str(runs), cwd=tmp_path).stdout == "Matched\n"


def test_a_short_sleep_is_not_parked(tmp_path):
    (tmp_path / "nap.flow").write_text(NAP)
    done = flow("run", "nap.flow", "--input", '{"nap": "PT0.1S"}', "--runs", str(tmp_path / "runs"),
                "--park-after", "30", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == '"slept"\n', done.stderr


@given(st.integers(min_value=0, max_value=253402300799 * SECOND), st.text(min_size=1, max_size=20))
def test_a_timer_record_reads_back_as_its_deadline(deadline, call):
    record = timers.timer_record(call, deadline)
    assert timers.recorded_deadlines([{"kind": "other", "call": call}, record]) == {call: deadline}


@given(st.integers(min_value=-10 * SECOND, max_value=10 * SECOND), st.integers(min_value=0, max_value=10 ** 12))
def test_what_remains_is_never_negative(offset, at):
    assert timers.remaining_ns(at + offset, at) == max(0, offset)
    assert parse_duration(timers.remaining_text(at + offset, at)).nanos == max(0, offset)


def test_a_run_is_parked_only_when_every_open_call_is_a_timer_or_pending():
    now = 10 * SECOND
    later = {"t": now + 5 * SECOND}
    pending = {"pending": True}
    out = {"pending": False}
    assert timers.parked_until({"t": out}, later, SECOND, now) == now + 5 * SECOND
    assert timers.parked_until({"t": out, "p": pending}, later, SECOND, now) == now + 5 * SECOND
    assert timers.parked_until({"t": out, "c": out}, later, SECOND, now) is None  # another call is out
    assert timers.parked_until({"t": out}, later, 6 * SECOND, now) is None  # due sooner than the threshold
    assert timers.parked_until({"p": pending}, later, SECOND, now) is None  # no timer: a pause, not a sleep
    assert timers.parked_until({"t": out}, later, None, now) is None  # not asked for


ASK_WITH_TIMEOUT = """\
use "std@v1/task"

/// A person's answer; it comes through `flow resume --reply`.
@tool pub flow ask(question: Text) -> Text

flow asking() -> Text !tool = ask("ship it?")

pub flow main(limit: Duration) -> Text !tool =
    match task.timeout(asking, limit) {
        Some(answer) => "answered: ${answer}",
        None => "nobody answered in time",
    }
"""


def test_a_question_with_a_timeout_sleeps_with_its_pending_call_and_either_can_win(tmp_path):
    """The common wait: a person's answer raced with a timer. The run is let go of as sleeping
    with the question pending; an answer before the deadline wins, and the sleep is stopped."""
    (tmp_path / "ask.flow").write_text(ASK_WITH_TIMEOUT)
    (tmp_path / "flow.toml").write_text('[tools]\n"ask" = { pending = true }\n')
    runs = tmp_path / "runs"
    done = flow("run", "ask.flow", "--input", '{"limit": "PT1H"}', "--runs", str(runs), "--park-after", "1",
                cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    run_id = only_run(runs)
    view = history(runs, run_id, tmp_path)
    assert view["state"] == "sleeping" and view["pending"] == ["root/1#1"]
    assert {e["call"]: e["status"] for e in view["open"]} == {"root/1#1": "pending", "root/2#1": "timer"}
    assert view["hostDecision"]["pending"] == ["root/1#1"]
    answered = flow("resume", run_id, "--runs", str(runs), "--call", "root/1#1", "--reply", '{"Ok": "yes"}',
                    cwd=tmp_path)
    assert answered.returncode == 0 and answered.stdout == '"answered: yes"\n', answered.stderr
    [stop] = [f for f in facts(runs, run_id) if f["kind"] == "Stop"]
    assert stop["closed"] == ["root/2#1"]  # the timer lost the race and was closed with no reply
    [resent] = [r for r in host_records(runs, run_id) if r["kind"] == "resent"]
    assert resent["call"] == "root/2#1" and parse_duration(resent["remaining"]).nanos > 3000 * SECOND
