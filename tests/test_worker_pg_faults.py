"""Faults of `flow worker --store URL` on a real (throwaway) PostgreSQL: two workers forced to race
for one run (exactly one appends), a worker's clock running behind or ahead (leases and deadlines
are judged on the database's clock), the database going away mid-run (a storage failure: the run
stops, and a worker resumes it once the database is back), a lost lease (the host writes nothing
more and stops driving the run), and SIGKILL of a worker mid-run (another takes its runs over
once their leases run out, and each ends with the End an undisturbed run has)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flowrt.store import StorageError
from flowrt.store.postgres import PostgresStore
from tests.test_pg_store import START, lease_runs_out
from tests.test_run_states import GATED_FLOW, GATED_TOOL
from tests.test_worker_pg import detach, ended, facts, flow, notes, rows, stop, wait_until, work, worker  # noqa: F401

LEASE = "2"  # FLOW_LEASE_SECONDS in the workers: a dead one's runs are free this soon


def lease_env(**extra: str) -> dict:
    return dict(os.environ, FLOW_LEASE_SECONDS=LEASE, **extra)


@pytest.fixture
def gated(tmp_path):
    program = tmp_path / "gated"
    program.mkdir()
    (program / "gated.flow").write_text(GATED_FLOW)
    (program / "gated_tool.py").write_text(GATED_TOOL)
    (program / "flow.toml").write_text('[tools]\n"gated" = { python = "gated_tool.py" }\n')
    return program


def detach_gated(url: str, program: Path, gate: Path) -> str:
    done = flow("run", "gated.flow", "--store", url, "--allow", "--detach", "--input", json.dumps({"path": str(gate)}),
                cwd=program)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def call_out(url: str, run: str) -> bool:
    return [f["kind"] for f in facts(url, run)][-1:] == ["Call"]


# -- two workers, one run ----------------------------------------------------------------------------


def test_two_workers_forced_to_race_for_one_run_exactly_one_appends(pg_url):
    """Twenty rounds: two workers claim at once (a barrier) over one claimable run; exactly one
    gets it. Then the loser is handed the winner's run with a lease it forges from the epoch
    it saw before (as a worker whose claim was overtaken would hold): its append inserts
    nothing, the winner's goes in."""
    from flowrt.store.postgres_lease import Lease
    from flowrt.worker import Worker

    for round_ in range(20):
        run = f"race-{round_}"
        PostgresStore(pg_url).create(run, START).close()
        workers = [Worker(pg_url, concurrency=1) for _ in range(2)]
        for i, w in enumerate(workers):  # each its own store: its own owner and connections
            w.store = PostgresStore(pg_url, owner=f"worker-{i}")
        barrier = threading.Barrier(2)
        got: dict[int, list] = {}

        def race(i: int) -> None:
            barrier.wait()
            got[i] = list(workers[i].claim_due([]))

        threads = [threading.Thread(target=race, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        winners = [i for i in got if got[i]]
        assert len(winners) == 1, got
        [(log, why)] = got[winners[0]]
        assert why == "crashed"  # made and let go of with no decision: as a host that died
        loser = workers[1 - winners[0]].store
        stale = loser.open(run, for_append=True, lease=Lease(run, loser.owner, log._lease.epoch - 1, 30))
        with pytest.raises(StorageError, match="lease lost"):
            stale.append("End", {"outcome": {"Completed": "loser"}})
        log.append("End", {"outcome": {"Completed": "winner"}})
        log.close()
        stale.close()
        assert [f.get("outcome") for f in facts(pg_url, run)] == [None, {"Completed": "winner"}]
        for w in workers:
            w.store.close()


# -- clocks ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("skew_seconds", [-7200, 7200])
def test_a_worker_clock_behind_or_ahead_changes_no_lease_and_no_deadline(pg_url, monkeypatch, skew_seconds):
    """A worker whose clock is two hours off: it does not claim a run another host's live lease
    holds, nor a sleeping run not due by the database's clock, and does claim one that is due;
    the lease it takes lasts its length on the database's clock."""
    from flowrt import timers
    from flowrt.worker import Worker

    holder = PostgresStore(pg_url, owner="live-host", lease_seconds=30)
    held = holder.create("held", START)  # driven right now by a live host
    maker = PostgresStore(pg_url)
    db_now_ns = rows(pg_url, "SELECT (extract(epoch FROM clock_timestamp()) * 1e9)::bigint")[0][0]
    for run, due_in_ns in (("later", 3600 * 10**9), ("due", -60 * 10**9)):
        s = maker.create(run, START)
        s.append("Call", {"call": "root#1", "tool": timers.SLEEP, "arguments": {"d": "PT1H"}})
        until = db_now_ns + due_in_ns
        s.host_record(timers.sleeping_record(s.head, until, {"root#1": until}, []))
        s.close()
    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() + skew_seconds * 10**9)
    monkeypatch.setattr(time, "time", lambda: (real() + skew_seconds * 10**9) / 1e9)
    w = Worker(pg_url, concurrency=8)
    w.store = PostgresStore(pg_url, owner="skewed", lease_seconds=5)
    claimed = {log.run_id: (log, why) for log, why in w.claim_due([])}
    assert sorted(claimed) == ["due"] and claimed["due"][1] == "sleeping"
    [(left,)] = rows(pg_url, "SELECT extract(epoch FROM lease_until - clock_timestamp())::float8 FROM flow_runs "
                             "WHERE run = 'due'")
    assert 0 < left <= 5
    assert rows(pg_url, "SELECT owner FROM flow_runs WHERE run = 'held'") == [("live-host",)]
    claimed["due"][0].close()
    held.close()
    for store in (holder, maker, w.store):
        store.close()


# -- the database goes away --------------------------------------------------------------------------


def test_the_database_going_away_mid_run_stops_the_run_and_a_worker_resumes_it(own_cluster, gated, tmp_path):
    from flowrt.store.postgres_schema import init_schema

    url = own_cluster.url
    init_schema(url)
    gate = tmp_path / "gate"
    run = detach_gated(url, gated, gate)
    host = worker(url, "--allow", cwd=gated, env=lease_env())
    try:
        wait_until(lambda: call_out(url, run), "the worker to send the gated call")
        own_cluster.stop_server()
        gate.write_text("late")  # the reply arrives with no database to record it in
        time.sleep(2.0)  # the drive fails; the worker's looks fail, and it keeps looking
        assert host.poll() is None
        own_cluster.start_server()
        wait_until(lambda: ended(url, [run]), "a worker to resume the run once the database is back")
    finally:
        code, out, err = stop(host)
    assert code == 0, err
    assert "storage failure" in out and "Traceback" not in err
    assert f"{run}: recovered (crashed)" in out
    history = facts(url, run)
    # The reply was never recorded: the call was out when the run stopped, so it was settled
    # as after a crash, and the run ended on that.
    assert [f["kind"] for f in history] == ["Start", "Call", "Reply", "End"]
    assert "Unknown" in json.dumps(history[2]["outcome"])
    assert json.loads(flow("replay", run, "--store", url, "--json", cwd=tmp_path).stdout)["verdict"] == "Matched"


# -- a lost lease ------------------------------------------------------------------------------------


def taken_elsewhere(url: str) -> None:
    """Another host takes the run (as after the lease ran out): a new epoch, its owner."""
    rows(url, "UPDATE flow_runs SET epoch = epoch + 1, owner = 'thief', "
              "lease_until = clock_timestamp() + interval '1 hour' RETURNING epoch")


def halted_records(url: str, run: str) -> int:
    return rows(url, "SELECT count(*) FROM flow_host WHERE run = %s AND "
                     "convert_from(line, 'UTF8')::jsonb ->> 'kind' = 'halted'", (run,))[0][0]


def test_a_host_whose_lease_was_lost_writes_nothing_more_and_stops_driving(pg_url, gated, tmp_path):
    gate = tmp_path / "gate"
    run = detach_gated(pg_url, gated, gate)
    host = worker(pg_url, "--allow", cwd=gated, env=lease_env())
    try:
        wait_until(lambda: call_out(pg_url, run), "the worker to send the gated call")
        before = facts(pg_url, run)
        taken_elsewhere(pg_url)
        gate.write_text("too late")
        wait_until(lambda: "lease lost" in _drain(host), "the worker to find its lease lost")
        assert facts(pg_url, run) == before  # its Reply inserted nothing
        assert halted_records(pg_url, run) == 0
        assert rows(pg_url, "SELECT owner FROM flow_runs") == [("thief",)]
    finally:
        code, out, err = stop(host)
    assert code == 0, err


STUCK_TOOL = """\
import threading
from flowrt.toolkit import serve


def wait(path):
    threading.Event().wait()  # never answers: the process ends when the host closes its input


serve({"gated.wait": wait}, declared_in="gated.flow")
"""


def test_a_host_whose_lease_was_lost_stops_driving_though_its_call_never_returns(pg_url, gated, tmp_path):
    """Found lost by the lease's renewal, not at the next write: the call out never returns, and
    the worker still lets go of the run, writing nothing."""
    (gated / "gated_tool.py").write_text(STUCK_TOOL)
    run = detach_gated(pg_url, gated, tmp_path / "gate")
    host = worker(pg_url, "--allow", cwd=gated, env=lease_env())
    try:
        wait_until(lambda: call_out(pg_url, run), "the worker to send the call")
        before = facts(pg_url, run)
        taken_elsewhere(pg_url)
        wait_until(lambda: "lease lost" in _drain(host), "the worker to find its lease lost")
        assert facts(pg_url, run) == before
        assert halted_records(pg_url, run) == 0
    finally:
        code, out, err = stop(host)
    assert code == 0, err


_seen: dict[int, str] = {}


def _drain(host: subprocess.Popen) -> str:
    """What the worker has printed so far (non-blocking), gathered across calls."""
    import select

    text = _seen.get(host.pid, "")
    while select.select([host.stdout], [], [], 0)[0]:
        line = host.stdout.readline()
        if not line:
            break
        text += line
    _seen[host.pid] = text
    return text


# -- SIGKILL -----------------------------------------------------------------------------------------


def test_sigkill_of_a_worker_mid_run_another_takes_its_runs_over_with_the_same_end(pg_url, work):
    names = [f"k{i}" for i in range(4)]
    runs = {name: detach(pg_url, work, name, nap="PT3S") for name in names}
    first = worker(pg_url, "--allow", "--concurrency", "4", cwd=work, env=lease_env())
    try:
        # Each run has had its first call answered and sleeps: no Tool call is out.
        wait_until(lambda: sorted(notes(work)) == sorted(f"{n}:a" for n in names), "every run's first call")
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        held = rows(pg_url, "SELECT count(*) FROM flow_runs WHERE owner IS NOT NULL AND lease_until > clock_timestamp()")
        second = worker(pg_url, "--allow", "--concurrency", "4", cwd=work, env=lease_env())
        try:
            wait_until(lambda: ended(pg_url, list(runs.values())), "the second worker to finish the runs")
        finally:
            code, out, err = stop(second)
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate(timeout=30)
    assert code == 0, err
    assert held[0][0] >= 1  # the dead worker's leases outlived it, until they ran out
    for name, run in runs.items():
        assert facts(pg_url, run)[-1]["outcome"] == {"Completed": f"{name.upper()}:A {name.upper()}:B"}
        assert f"{run}: recovered (crashed): completed" in out
    assert sorted(notes(work)) == sorted(f"{n}:{step}" for n in names for step in "ab")  # none sent twice
