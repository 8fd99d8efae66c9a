"""What is particular to the PostgreSQL store (the contract itself is tests/test_store_contract.py,
run on both stores): the lease and its fencing, the tables' creation and migration, export
between stores, and `flow` end to end against a real server, including the server going away
in the middle of a run. PostgreSQL comes from tests/pg_cluster.py: when it cannot start, these
tests fail."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowrt.store import RunBusy, StorageError, open_store
from flowrt.store.postgres import PostgresStore
from flowrt.store.postgres_lease import holder

ROOT = Path(__file__).resolve().parents[1]
ORDERS = ROOT / "examples" / "orders"
ORDER = json.dumps({"order": {"id": "o-1", "item": "kettle", "quantity": 1, "cents": 2599}})
_runs = itertools.count(1)
START = {"program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "m", "function": "main"},
         "input": {}, "modules": []}


def flow(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 180):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def rows(url: str, query: str, args: tuple = ()) -> list:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, args).fetchall()


def lease_runs_out(url: str, run: str, seconds: float = 30) -> None:
    def out() -> bool:
        with psycopg.connect(url, autocommit=True) as conn:
            return holder(conn, run) is None
    wait_for(out, seconds, f"the lease on {run} to run out")


# -- the lease and its fence ---------------------------------------------------------------------


def test_a_host_whose_lease_was_taken_never_appends_again(pg_url):
    first = PostgresStore(pg_url, lease_seconds=0.6, owner="host-a")
    second = PostgresStore(pg_url, lease_seconds=30, owner="host-b")
    a = first.create("r", START)
    a.append("Call", {"call": "root#1", "tool": "t", "arguments": {}})
    with pytest.raises(RunBusy, match="host-a"):
        second.open("r", for_append=True)
    a._renewer.stop()  # host A stalls (a long pause): nothing renews its lease
    lease_runs_out(pg_url, "r")
    b = second.open("r", for_append=True)  # takes the lease: a new epoch
    assert rows(pg_url, "SELECT owner, epoch FROM flow_runs WHERE run = 'r'") == [("host-b", 2)]
    with pytest.raises(StorageError, match="lease lost") as caught:
        a.append("Reply", {"call": "root#1", "outcome": {"Ok": "from A"}})
    assert "host-b" in str(caught.value)
    for write in (lambda: a.append_many([("Reply", {"call": "root#1", "outcome": {"Ok": 1}})]),
                  lambda: a.host_record({"kind": "paused", "head": a.head}),
                  lambda: a.put_source("text")):
        with pytest.raises(StorageError, match="lease lost"):
            write()
    reply = b.append("Reply", {"call": "root#1", "outcome": {"Ok": "from B"}})
    a.close()  # gives back nothing: the lease is B's
    b.append("End", {"outcome": {"Completed": 1}})
    b.close()
    facts = first.open("r", for_append=False).facts()
    assert [f["kind"] for f in facts] == ["Start", "Call", "Reply", "End"]
    assert facts[2] == reply
    # None of A's host records landed: only the times B's appends recorded
    assert {r["kind"] for r in first.open("r", for_append=False).host_records()} <= {"times"}


def test_an_expired_lease_fences_even_when_nobody_took_it(pg_url):
    store = PostgresStore(pg_url, lease_seconds=0.4)
    s = store.create("r", START)
    s._renewer.stop()
    lease_runs_out(pg_url, "r")
    with pytest.raises(StorageError, match="lease lost"):
        s.append("Call", {"call": "root#1", "arguments": {}})
    assert rows(pg_url, "SELECT last_n FROM flow_runs WHERE run = 'r'") == [(1,)]
    s.close()


def test_a_renewed_lease_outlives_its_length(pg_url):
    store = PostgresStore(pg_url, lease_seconds=0.6)
    s = store.create("r", START)
    time.sleep(1.5)  # the renewer extends it every 0.2 s
    s.append("End", {"outcome": {"Completed": 1}})
    s.close()
    assert rows(pg_url, "SELECT owner FROM flow_runs WHERE run = 'r'") == [(None,)]  # given back


def test_two_hosts_racing_for_one_run_one_wins(pg_url):
    PostgresStore(pg_url).create("r", START).close()
    barrier = threading.Barrier(6)
    won, busy, stores = [], [], []

    def race(i: int) -> None:
        store = PostgresStore(pg_url, owner=f"host-{i}")
        stores.append(store)
        barrier.wait()
        try:
            won.append(store.open("r", for_append=True))
        except RunBusy:
            busy.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and len(busy) == 5
    won[0].append("End", {"outcome": {"Completed": 1}})
    won[0].close()
    for store in stores:
        store.close()


def test_run_state_sees_a_live_lease_as_running(pg_url):
    from flowrt.run_state import run_state

    store = PostgresStore(pg_url)
    s = store.create("r", START)
    s.append("Call", {"call": "root#1", "tool": "t", "arguments": {}})
    reader = PostgresStore(pg_url).open("r", for_append=False)
    assert run_state(reader)["state"] == "running"
    s.close()
    assert run_state(PostgresStore(pg_url).open("r", for_append=False))["state"] == "crashed"


# -- the tables ------------------------------------------------------------------------------------


def test_store_init_is_idempotent_and_refuses_a_newer_layout(pg_cluster):
    url = pg_cluster.url_for("flow", "init_schema_test")
    with psycopg.connect(pg_cluster.url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS init_schema_test CASCADE; CREATE SCHEMA init_schema_test")
    done = flow("run", "--store", url, str(ORDERS / "main.flow"), "--allow", "--input", ORDER)
    assert done.returncode == 5 and "flow store init" in done.stderr
    first = flow("store", "init", url)
    assert first.returncode == 0 and "created" in first.stdout, first.stderr
    again = flow("store", "init", url)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    assert rows(url, "SELECT version FROM flow_schema ORDER BY version") == [(1,), (2,), (3,)]
    rows(url, "INSERT INTO flow_schema (version) VALUES (99) RETURNING version")
    newer = flow("store", "init", url)
    assert newer.returncode == 2 and "newer" in newer.stderr
    refused = flow("runs", "--store", url)
    assert refused.returncode == 5 and "newer" in refused.stderr
    assert flow("store", "init", "some/dir").returncode == 2


# -- export between stores -------------------------------------------------------------------------


def test_export_round_trip_keeps_hashes_holes_and_archive(pg_url, tmp_path):
    directory = str(tmp_path / "runs")
    s = open_store(directory).create("r", dict(START, input={"doc": "x" * 3000}), sources=["source text"],
                                     durability="none")
    s.append("Call", {"call": "root#1", "tool": "t", "arguments": {"big": "y" * 2000}})
    s.append("Checkpoint", {"function": {"module": "m", "name": "f"}, "types": [], "arguments": {}})
    s.append("Reply", {"call": "root#1", "outcome": {"Ok": "z" * 2000}})
    s.host_record({"kind": "halted", "head": s.head})
    assert s.archive() == 1
    s.redact(4, "outcome")
    s.close()
    original = open_store(directory).read_image("r")
    done = flow("export", "r", "--runs", directory, "--to", pg_url)
    assert done.returncode == 0, done.stderr
    in_db = PostgresStore(pg_url).read_image("r")
    assert in_db == original  # every byte: facts, archived facts, anchor, host records, values, sources
    back = str(tmp_path / "back")
    done = flow("export", "r", "--store", pg_url, "--to", back)
    assert done.returncode == 0, done.stderr
    assert open_store(back).read_image("r") == original
    again = open_store(back).open("r", for_append=False)
    assert again.holes() == open_store(directory).open("r", for_append=False).holes()
    assert flow("export", "r", "--runs", directory, "--to", pg_url).returncode == 2  # it is there
    assert flow("export", "nope", "--runs", directory, "--to", pg_url).returncode == 2


def test_a_damaged_run_is_not_exported(pg_url, tmp_path):
    store = PostgresStore(pg_url)
    s = store.create("r", START)
    s.append("End", {"outcome": {"Completed": 1}})
    s.close()
    rows(pg_url, "UPDATE flow_facts SET line = convert_to(replace(convert_from(line, 'UTF8'), 'Completed', 'Completes'), "
                 "'UTF8') "
                 "WHERE run = 'r' AND n = 2 RETURNING 1")
    done = flow("export", "r", "--store", pg_url, "--to", str(tmp_path / "runs"))
    assert done.returncode == 5 and "fact 2" in done.stderr
    assert not (tmp_path / "runs" / "r").exists()


# -- flow end to end ---------------------------------------------------------------------------------


def test_flow_run_on_postgres_then_replay_on_either_store(pg_url, tmp_path):
    done = flow("run", "--store", pg_url, str(ORDERS / "main.flow"), "--allow", "--input", ORDER, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["Ok"]["order"] == "o-1"
    assert not (tmp_path / ".flow").exists()  # nothing went to a runs directory
    env = dict(os.environ, FLOW_STORE=pg_url)
    page = json.loads(flow("runs", "--json", env=env, cwd=tmp_path).stdout)
    [row] = page["runs"]
    assert row["record"] == "complete" and row["ending"] == "completed"
    run = row["run"]
    replayed = flow("replay", run, "--json", env=env, cwd=tmp_path)
    assert replayed.returncode == 0 and json.loads(replayed.stdout)["verdict"] == "Matched", replayed.stderr
    assert flow("export", run, "--to", str(tmp_path / "copy"), env=env).returncode == 0
    there = flow("replay", run, "--json", "--runs", str(tmp_path / "copy"))
    assert json.loads(there.stdout) == json.loads(replayed.stdout)
    history = flow("history", run, "--json", env=env)
    assert history.returncode == 0 and json.loads(history.stdout) == json.loads(
        flow("history", run, "--json", "--runs", str(tmp_path / "copy")).stdout)


WAITING_CHARGE = '''
import os, time
_charge = charge


def charge(order, cents):
    open(os.environ["FLOW_TEST_MARK"] + ".waiting", "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(os.environ["FLOW_TEST_MARK"] + ".go") and time.monotonic() < deadline:
        time.sleep(0.05)
    return _charge(order, cents)
'''


def test_the_database_going_away_mid_run_is_a_storage_failure_and_resume_works(own_cluster, tmp_path):
    from flowrt.store.postgres_schema import init_schema

    url = own_cluster.url
    init_schema(url)
    program = tmp_path / "orders"
    shutil.copytree(ORDERS, program)
    tools = (program / "shop_tools.py").read_text()
    head, main = tools.split('if __name__ == "__main__":')
    (program / "shop_tools.py").write_text(head + WAITING_CHARGE + '\nif __name__ == "__main__":' + main)
    mark = str(tmp_path / "mark")
    env = dict(os.environ, FLOW_TEST_MARK=mark, FLOW_LEASE_SECONDS="1", FLOW_STORE=url)
    running = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "run", str(program / "main.flow"), "--allow",
                                "--input", ORDER], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: os.path.exists(mark + ".waiting") or running.poll() is not None, 120, "the charge call")
        own_cluster.stop_server()
        open(mark + ".go", "w").close()
        out, err = running.communicate(timeout=120)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert running.returncode == 5, (out, err)
    assert "storage failure" in err and "Traceback" not in err
    own_cluster.start_server()
    [row] = json.loads(flow("runs", "--json", env=env).stdout)["runs"]
    assert row["record"] == "incomplete"
    lease_runs_out(url, row["run"])
    resumed = flow("resume", row["run"], "--allow", env=env, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["Ok"]["order"] == "o-1"
    assert json.loads(flow("replay", row["run"], "--json", env=env).stdout)["verdict"] == "Matched"


# -- the same bytes and rows on both stores ----------------------------------------------------------


def _same_runs(directory_store, database_store, run: str, build) -> None:
    for store in (directory_store, database_store):
        s = store.create(run, START, durability="none", inline_limit=build.get("limit", 1024))
        for kind, fields in build["facts"]:
            s.append(kind, fields)
        for record in build.get("host", ()):
            s.host_record(dict(record, head=s.head))
        s.close()


def test_discovery_rows_are_the_same_on_both_stores(pg_url, tmp_path):
    directory = open_store(str(tmp_path / "runs"))
    database = PostgresStore(pg_url)
    call = ("Call", {"call": "root#1", "tool": "t", "arguments": {"q": "é"}})
    end = ("End", {"outcome": {"Completed": 2**80}})
    _same_runs(directory, database, "a-done", {"facts": [call, ("Reply", {"call": "root#1", "outcome": {"Ok": 1}}), end]})
    _same_runs(directory, database, "b-paused", {"facts": [call], "host": [{"kind": "paused", "pending": ["root#1"]}]})
    _same_runs(directory, database, "c-big", {"facts": [("Call", {"call": "root#1", "arguments": "x" * (5 << 20)})],
                                              "limit": 10 << 20})
    _same_runs(directory, database, "d-damaged", {"facts": [call, end]})
    _same_runs(directory, database, "e-faulted", {"facts": [("End", {"outcome": {"Faulted": {
        "kind": "k", "message": "m" * 2000, "location": None, "task": "root"}}})]})
    from tests.store_backends import DirectoryBackend, PostgresBackend

    backends = [DirectoryBackend.__new__(DirectoryBackend), PostgresBackend.__new__(PostgresBackend)]
    backends[0].root, backends[1].url = str(tmp_path / "runs"), pg_url
    for backend in backends:
        backend.alter_fact("d-damaged", 3, "spoof", 1)
    def untimed(page: dict) -> dict:
        # When a store accepted each fact is the one thing two stores cannot share: both say it
        for row in page["runs"]:
            if row["record"] == "readable":
                assert row["startedAt"] and row["lastActivityAt"], row
        return {**page, "runs": [{k: v for k, v in row.items() if k not in ("startedAt", "lastActivityAt")}
                                 for row in page["runs"]]}

    for limit in (1, 2, 50):
        assert untimed(directory.scan(limit=limit)) == untimed(database.scan(limit=limit))
        assert untimed(directory.scan(limit=limit, after="b-paused")) == \
            untimed(database.scan(limit=limit, after="b-paused"))
    rows_by_run = {row["run"]: row for row in database.scan()["runs"]}
    assert rows_by_run["c-big"]["record"] == "inspection-limited"
    assert rows_by_run["d-damaged"]["record"] == "unreadable" and rows_by_run["d-damaged"]["problem"]["fact"] == 3
    assert rows_by_run["b-paused"]["hostDecision"]["kind"] == "paused"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**90), max_value=2**90) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(JSON, min_size=1, max_size=6), limit=st.sampled_from([0, 16, 1024]))
def test_any_values_keep_their_bytes_between_stores(pg_url, tmp_path_factory, values, limit):
    """Whatever the values, a run written to one store is the same bytes in the other after export."""
    directory = open_store(str(tmp_path_factory.mktemp("runs")))
    database = PostgresStore(pg_url)
    run = f"h-{next(_runs)}"
    try:
        s = database.create(run, dict(START, input={"v": values[0]}), durability="none", inline_limit=limit)
        for i, value in enumerate(values[1:], 1):
            s.append("Reply", {"call": f"root#{i}", "outcome": {"Ok": value}})
        s.close()
        image = database.read_image(run)
        assert database.open(run, for_append=False).facts() == s.facts()
    finally:
        database.close()
    directory.write_image(run, image)
    assert directory.read_image(run) == image
    for n, value in enumerate(values, 1):
        field = "input" if n == 1 else "outcome"
        stored = directory.open(run, for_append=False).value(n, field)
        assert stored == ({"v": value} if n == 1 else {"Ok": value})


def test_the_mcp_server_runs_and_lists_runs_on_postgres(pg_url):
    """`flow mcp --store URL`: the run tool records on the server; runs, history and replay read it there."""
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                   args=["-m", "flowrt.cli", "mcp", "--store", pg_url, "--root", "/", "--allow"])

    async def body() -> None:
        with open(os.devnull, "w") as errors:
            async with stdio_client(params, errlog=errors) as (read, write):
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    done = await client.call_tool("run", {"file": str(ORDERS / "main.flow"), "input": json.loads(ORDER)})
                    assert not done.is_error, done.content
                    page = (await client.call_tool("runs", {})).structured_content
                    [row] = page["runs"]
                    assert row["record"] == "complete"
                    view = (await client.call_tool("history", {"run": row["run"]})).structured_content
                    assert view["state"] == "ended"
                    verdict = (await client.call_tool("replay", {"run": row["run"]})).structured_content
                    assert verdict["verdict"]["verdict"] == "Matched", verdict

    anyio.run(body)
    assert [r[0] for r in rows(pg_url, "SELECT count(*) FROM flow_runs")] == [1]


@pytest.mark.parametrize("damage, n", [
    ("DELETE FROM flow_facts WHERE run = 'r' AND n = 4", 3),   # the last fact lost: the head says so
    ("DELETE FROM flow_facts WHERE run = 'r' AND n = 2", 2),   # a gap: fact 3 where 2 should be
    ("UPDATE flow_facts SET n = 9 WHERE run = 'r' AND n = 4", None),  # a row keyed otherwise
    ("DELETE FROM flow_host WHERE run = 'r' AND i = 1", None),  # a host record lost
    ("UPDATE flow_runs SET anchor = 'not json' WHERE run = 'r'", None),
])
def test_lost_and_moved_rows_are_storage_errors(pg_url, damage, n):
    store = PostgresStore(pg_url)
    s = store.create("r", START)
    s.append("Call", {"call": "root#1", "arguments": {}})
    s.host_record({"kind": "halted", "head": s.head})
    s.host_record({"kind": "note"})
    s.append("Reply", {"call": "root#1", "outcome": {"Ok": 1}})
    s.append("End", {"outcome": {"Completed": 1}})
    s.close()
    rows(pg_url, damage + " RETURNING 1")
    for for_append in (False, True):
        with pytest.raises(StorageError) as caught:
            store.open("r", for_append=for_append)
        if n is not None:
            assert caught.value.fact_n == n and caught.value.component == "flow_facts"
    try:  # a deferred open finds the same, by the time it has verified everything
        deferred = store.open("r", for_append=False, defer=True)
    except StorageError as early:
        assert str(early) == str(caught.value)
    else:
        with pytest.raises(StorageError) as late:
            deferred.verify()
        assert str(late.value) == str(caught.value)
    assert flow("history", "r", "--store", pg_url).returncode == 5
    store.close()


@pytest.mark.parametrize("archived_before", [False, True])
def test_a_reader_reads_on_across_an_archive_made_meanwhile(pg_url, monkeypatch, archived_before):
    """An archive moves the facts before the latest checkpoint to flow_archived_facts while
    readers of the run are open: a deferred reader reads the rest of its snapshot there, and a
    reader that let its first facts go (a replay's `release_before`) reads them back from there;
    both read every fact they would have read without the archive, as a run directory's reader
    reads on in the file it opened. (Before, both were a storage failure on a sound run.) A run
    archived once before is read past its first archive's gap as ever."""
    from flowrt.store import postgres_verify
    from flowrt.store import reading as store_reading

    monkeypatch.setattr(postgres_verify.RowPages, "PAGE", 16)
    monkeypatch.setattr(store_reading, "_VERIFY_STEP", 8)
    monkeypatch.setattr(store_reading, "_WINDOW", 512)
    store = PostgresStore(pg_url)
    s = store.create("r", START, durability="none")

    def calls(first: int, count: int) -> None:
        for i in range(first, first + count):
            s.append("Call", {"call": f"root#{i}", "arguments": {"i": i}})
        s.append("Checkpoint", {"function": {"module": "m", "name": "f"}, "types": [], "arguments": {"i": i}})

    calls(0, 40)
    if archived_before:
        assert s.archive() == 40
    calls(40, 60)
    whole = store.open("r", for_append=False).facts()
    deferred = store.open("r", for_append=False, defer=True)
    assert deferred.fact_at(3) == whole[3] and deferred.deferred
    released = store.open("r", for_append=False)
    released.release_before(len(whole) - 5)
    calls(100, 10)
    assert s.archive() > 50  # (the facts both readers still have to read, among them)
    assert deferred.facts() == whole
    assert released.facts() == whole and released.fact_at(7) == whole[7]
    s.close()
    assert store.open("r", for_append=False).fact_at(1)["n"] > whole[-1]["n"] - 1  # (they did move)
    store.close()


def test_a_deferred_reader_reads_the_rows_of_its_snapshot(pg_url, monkeypatch):
    """A deferred open reads its later pages outside its snapshot: facts appended since are not
    read (the run as it was opened), and rows lost meanwhile are a storage failure, never fewer
    facts. (Rows that run short at the end: `RowPages` counts the bytes.)"""
    from flowrt.store import postgres_verify
    from flowrt.store import reading as store_reading

    monkeypatch.setattr(postgres_verify.RowPages, "PAGE", 16)
    monkeypatch.setattr(store_reading, "_VERIFY_STEP", 8)
    monkeypatch.setattr(store_reading, "_WINDOW", 512)  # (a window's rows are fetched for its search)
    store = PostgresStore(pg_url)
    s = store.create("r", START, durability="none")
    for i in range(100):
        s.append("Call", {"call": f"root#{i}", "arguments": {"i": i}})
    opened = store.open("r", for_append=False, defer=True)
    assert opened.fact_at(3)["n"] == 4 and opened.deferred
    for i in range(100, 150):
        s.append("Call", {"call": f"root#{i}", "arguments": {"i": i}})
    s.close()
    assert len(opened) == 101 and opened.head == store.open("r", for_append=False).fact(101)["hash"]
    moved = store.open("r", for_append=False, defer=True)
    assert moved.fact_at(3)["n"] == 4
    rows(pg_url, "DELETE FROM flow_facts WHERE run = 'r' AND n BETWEEN 60 AND 70 RETURNING 1")
    with pytest.raises(StorageError) as caught:  # (the gap is met before the bytes run short)
        moved.verify()
    assert caught.value.fact_n == 60 and caught.value.component == "flow_facts"
    with pytest.raises(StorageError):
        moved.facts()
    store.close()
