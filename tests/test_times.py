"""When facts were accepted (`times` host records, `RunLog.fact_times`, `RunLog.refresh`) and how
the views show it: `flow history` (acceptedAt, durationMs), `flow runs` (startedAt,
lastActivityAt). Times are host records: never facts, never in the chain; a machine crash can
lose the times of the last facts, which a reader then takes for a torn tail, never damage."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowrt.fact_times import accepted_at, duration_text
from flowrt.store import RunStore, StorageError
from flowrt.store.chain import chain_record
from flowrt.store.host_records import TIMES_WINDOW, _parse_host

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "programs" / "watch"
START = {"program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "m", "function": "main"},
         "input": {"n": 1}, "modules": []}
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def flow(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def host_lines(root: str, run: str) -> list[dict]:
    with open(os.path.join(root, run, "host.jsonl"), "rb") as handle:
        return [json.loads(line) for line in handle.read().splitlines()]


@pytest.mark.parametrize("durability", ["fsync", "none"])
def test_each_fact_gets_the_time_storage_accepted_it(tmp_path, durability):
    root = str(tmp_path)
    writer = RunStore.create(root, "r", START, durability=durability)
    writer.append("Call", {"call": "c1", "tool": "m.t", "arguments": {}})
    writer.append("Reply", {"call": "c1", "outcome": {"Ok": 1}}, sync=False)  # timed when synced
    writer.append_many([("Checkpoint", {"function": {"module": "m", "name": "f"}, "arguments": {}}),
                        ("End", {"outcome": {"Completed": 1}})])
    seen_by_writer = writer.fact_times()
    writer.close()
    reader = RunStore.open(root, "r", for_append=False)
    times = reader.fact_times()
    assert sorted(times) == [1, 2, 3, 4, 5] and times == seen_by_writer
    assert list(times.values()) == sorted(times.values())  # accepted in order
    # Host records, not facts: no fact holds a time, the listed host records hold no `times`.
    assert all(set(f) <= {"n", "kind", "prev", "hash", "call", "tool", "arguments", "outcome", "function",
                          "ending", "program", "std", "entry", "input", "modules", "data", "run"}
               for f in reader.facts())
    assert all(r["kind"] != "times" for r in reader.host_records())
    assert any(r["kind"] == "times" for r in host_lines(root, "r"))


def test_a_times_record_that_says_nothing_sensible_is_damage(tmp_path):
    root = str(tmp_path)
    RunStore.create(root, "r", START, durability="none").close()
    path = os.path.join(root, "r", "host.jsonl")
    head = _parse_host(open(path, "rb").read()).head
    line, _ = chain_record({"kind": "times", "from": 0, "at": ["noon"]}, head)
    with open(path, "ab") as handle:
        handle.write(line)
    with pytest.raises(StorageError, match="times record"):
        RunStore.open(root, "r", for_append=False)


def _host_file(records: int, times: int) -> tuple[bytes, int]:
    """host.jsonl bytes: `records` synced records, then `times` unsynced times records; and where
    the times records begin."""
    data, head = b"", None
    for i in range(records):
        line, head = chain_record({"kind": "binding", "tool": f"m.t{i}"}, head)
        data += line
    synced = len(data)
    for i in range(times):
        line, head = chain_record({"kind": "times", "from": 2 + i, "at": [1_000 + i]}, head)
        data += line
    return data, synced


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.integers(1, 4), times=st.integers(1, 12), data=st.data())
def test_a_crash_that_zeroes_unsynced_times_is_a_torn_tail(records, times, data):
    """What a machine crash can leave of times records written without fsync: any of their pages
    zeroed (in any order), the file cut anywhere in them. Read: the synced records whole, some
    prefix of the times, the rest a torn tail; never damage, never a record that was not written."""
    raw, synced = _host_file(records, times)
    end = data.draw(st.integers(synced + 1, len(raw)), label="cut")
    damaged = bytearray(raw[:end])
    for _ in range(data.draw(st.integers(1, 3), label="holes")):
        start = data.draw(st.integers(synced, end - 1), label="hole start")
        length = data.draw(st.integers(1, end - start), label="hole length")
        damaged[start:start + length] = bytes(length)
    parsed = _parse_host(bytes(damaged))
    assert [r["tool"] for r in parsed.records] == [f"m.t{i}" for i in range(records)]
    assert all(parsed.times[n] == 1_000 + n - 2 for n in parsed.times)
    assert sorted(parsed.times) == list(range(2, 2 + len(parsed.times)))


def test_damaged_times_followed_by_a_synced_record_are_damage():
    """A synced record syncs the times before it first: damage among them is damage."""
    raw, synced = _host_file(2, 3)
    last, _ = chain_record({"kind": "paused", "head": "sha256:" + "0" * 64}, None)
    with pytest.raises(StorageError):
        _parse_host(raw[:synced + 5] + bytes(20) + raw[synced + 25:] + last)


def test_damage_to_a_synced_record_is_still_damage():
    raw, synced = _host_file(3, 2)
    zeroed = raw[:10] + bytes(5) + raw[15:]  # inside the first (synced) record
    with pytest.raises(StorageError):
        _parse_host(zeroed)
    # A synced record whose newline is lost, joined to what follows: damage too.
    first_newline = raw.index(b"\n")
    with pytest.raises(StorageError):
        _parse_host(raw[:first_newline] + b"\0" + raw[first_newline + 1:])
    # Damage further from the end than unsynced times can reach is damage.
    far = raw + b"".join(chain_record({"kind": "times", "from": 9 + i, "at": [1]}, None)[0]
                         for i in range(TIMES_WINDOW // 100))
    assert len(far) - synced > TIMES_WINDOW
    with pytest.raises(StorageError):
        _parse_host(raw[:synced] + b"\0" + far[synced + 1:])


def test_an_appender_cuts_a_torn_times_tail_and_goes_on(tmp_path):
    root = str(tmp_path)
    writer = RunStore.create(root, "r", START, durability="none")
    writer.append("Call", {"call": "c1", "tool": "m.t", "arguments": {}})
    writer.close()
    path = os.path.join(root, "r", "host.jsonl")
    data = open(path, "rb").read()
    last = data.rstrip(b"\n").rfind(b"\n") + 1  # the last record
    assert json.loads(data[last:])["kind"] == "times"
    open(path, "wb").write(data[:last] + bytes(len(data) - last))  # its page never reached the disk
    reader = RunStore.open(root, "r", for_append=False)
    assert 2 not in reader.fact_times() and len(reader.facts()) == 2
    again = RunStore.open(root, "r", for_append=True, durability="none")
    again.append("End", {"outcome": {"Completed": 1}})
    again.close()
    kinds = [r["kind"] for r in RunStore.open(root, "r", for_append=False).host_records()]
    assert "truncated" in kinds
    assert 3 in RunStore.open(root, "r", for_append=False).fact_times()


def test_refresh_reads_on_what_another_store_appends(tmp_path):
    root = str(tmp_path)
    writer = RunStore.create(root, "r", START, durability="none")
    reader = RunStore.open(root, "r", for_append=False)
    assert reader.refresh() == []
    writer.append("Call", {"call": "c1", "tool": "m.t", "arguments": {"big": "x" * 2000}})  # by reference
    writer.sync()
    new = reader.refresh()
    assert [f["kind"] for f in new] == ["Call"] and len(reader.facts()) == 2
    assert reader.value(2, "arguments") == {"big": "x" * 2000}
    assert 2 in reader.fact_times()
    writer.redact(2, "arguments")
    reader.refresh()
    assert reader.is_hole(2, "arguments")
    with pytest.raises(ValueError):
        writer.refresh()  # an appender knows its facts
    writer.close()


def test_history_and_runs_show_times(tmp_path):
    copy = tmp_path / "p"
    shutil.copytree(PROGRAM, copy)
    (copy / "delay").write_text("0.2")
    runs = tmp_path / "runs"
    done = flow("run", str(copy / "main.flow"), "--input", '{"n": 2}', "--runs", str(runs), "--allow")
    assert done.returncode == 0, done.stderr
    [run_id] = os.listdir(runs)
    view = json.loads(flow("history", run_id, "--runs", str(runs), "--json").stdout)
    assert all(RFC3339.match(row["acceptedAt"]) for row in view["facts"])
    replies = [row for row in view["facts"] if row["kind"] == "Reply"]
    assert len(replies) == 2 and all(row["durationMs"] >= 200 for row in replies)  # the Tool's own delay
    assert all("durationMs" not in row for row in view["facts"] if row["kind"] != "Reply")
    assert view["startedAt"] == view["facts"][0]["acceptedAt"]
    assert view["lastActivityAt"] == view["facts"][-1]["acceptedAt"]
    text = flow("history", run_id, "--runs", str(runs)).stdout
    assert f"started {view['startedAt']}" in text and "(took " in text
    assert view["facts"][1]["acceptedAt"][11:23] in text
    page = json.loads(flow("runs", "--runs", str(runs), "--json").stdout)
    [row] = page["runs"]
    assert row["startedAt"] == view["startedAt"] and row["lastActivityAt"] == view["lastActivityAt"]
    listed = flow("runs", "--runs", str(runs)).stdout
    assert "started " + view["startedAt"][:19].replace("T", " ") in listed


def test_a_run_without_times_shows_none(tmp_path):
    """A history written before times were recorded (or whose times were lost): no time shown."""
    root = str(tmp_path)
    writer = RunStore.create(root, "r", START, durability="none")
    writer.close()
    path = os.path.join(root, "r", "host.jsonl")
    os.remove(path)
    view = json.loads(flow("history", "r", "--runs", root, "--json").stdout)
    assert "acceptedAt" not in view["facts"][0] and view["startedAt"] is None
    assert json.loads(flow("runs", "--runs", root, "--json").stdout)["runs"][0]["startedAt"] is None


@pytest.mark.parametrize("ms, text", [(0, "1970-01-01T00:00:00.000Z"), (1_796_134_838_880, "2026-12-01T14:20:38.880Z"),
                                      (951_782_400_007, "2000-02-29T00:00:00.007Z")])
def test_times_are_rfc3339_utc_to_the_millisecond(ms, text):
    assert accepted_at(ms) == text


@pytest.mark.parametrize("ms, text", [(0, "0 ms"), (999, "999 ms"), (1000, "1.0 s"), (12_449, "12.4 s"),
                                      (185_000, "3 min 05 s"), (7_620_000, "2 h 07 min")])
def test_durations_for_people(ms, text):
    assert duration_text(ms) == text


def test_refresh_after_an_archive_says_open_again(tmp_path):
    root = str(tmp_path)
    writer = RunStore.create(root, "r", START, durability="none")
    for i in range(3):
        writer.append("Call", {"call": f"c{i}", "tool": "m.t", "arguments": {}})
        writer.append("Reply", {"call": f"c{i}", "outcome": {"Ok": i}})
        writer.append("Checkpoint", {"function": {"module": "m", "name": "f"}, "arguments": {"i": i}})
    reader = RunStore.open(root, "r", for_append=False)
    assert reader.refresh() == []
    assert writer.archive() > 0  # history.jsonl replaced by rename
    writer.append("Call", {"call": "c9", "tool": "m.t", "arguments": {}})
    writer.sync()
    assert reader.refresh() is None
    writer.close()


ECHO_LOOP = ("@tool pub flow echo(n: Int) -> Int\n\n"
             "pub flow main(n: Int) -> Int !tool = loop(n, 0)\n\n"
             "flow loop(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }\n")


def times_records(runs: Path) -> list[dict]:
    [run] = os.listdir(runs)
    return [line for line in host_lines(str(runs), run) if line["kind"] == "times"]


@pytest.mark.parametrize("durability", ["none", "fsync"])
def test_a_reply_that_comes_at_once_from_a_worker_costs_no_times_record(tmp_path, durability):
    import time

    import flowrt
    from flowrt import quick_calls

    def echo(n):
        time.sleep(0.002)  # the run finds no reply yet and waits for it
        return n

    quick_calls.never_quick(echo)  # every call of the hub's run served on a worker thread
    (tmp_path / "echo.flow").write_text(ECHO_LOOP)
    host = flowrt.Host({"echo.echo": echo}, runs_dir=str(tmp_path / "runs"), durability=durability)
    result = host.start(str(tmp_path / "echo.flow"), {"n": 100}, detach=True).wait(timeout=120)
    assert result.exit_code == 0 and result.output == sum(range(101))
    records = times_records(tmp_path / "runs")
    timed = {r["from"] + i for r in records for i in range(len(r["at"]))}
    [run] = os.listdir(tmp_path / "runs")
    with RunStore.open(str(tmp_path / "runs"), run, for_append=False) as stored:
        facts = len(stored)
    assert timed == set(range(1, facts + 1))  # every fact's time, recorded before the run ended
    assert len(records) < 30  # not one a call (it was, before: 100 and more)


def test_a_reply_slow_to_come_has_the_times_before_it_recorded_while_it_is_awaited(tmp_path):
    import time

    import flowrt

    seen: list[set] = []

    def echo(n):
        time.sleep(0.3)  # longer than the host waits before it records the times it has
        seen.append({r["from"] + i for r in times_records(tmp_path / "runs") for i in range(len(r["at"]))})
        return n

    (tmp_path / "echo.flow").write_text(ECHO_LOOP)
    host = flowrt.Host({"echo.echo": echo}, runs_dir=str(tmp_path / "runs"), durability="none")
    result = host.start(str(tmp_path / "echo.flow"), {"n": 2}, detach=True).wait(timeout=60)
    assert result.exit_code == 0
    [run] = os.listdir(tmp_path / "runs")
    with RunStore.open(str(tmp_path / "runs"), run, for_append=False) as stored:
        calls = [f["n"] for f in stored.facts() if f["kind"] == "Call"]
    assert len(seen) == 2 and all(n in times for n, times in zip(calls, seen))
