"""`flow worker --store URL` on a real (throwaway) PostgreSQL, through the real `flow` entry point:
`flow run --detach` queues runs that workers drive, `flow resume --detach` admits a reply and
queues the continuation, a paused run is never claimed, a sleeping run is woken at its deadline,
and the claim (`FOR UPDATE SKIP LOCKED`, flowrt/store/postgres_queue.py) hands a run to exactly
one worker. The faults are in tests/test_worker_pg_faults.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.pg_cluster import tables_at
from tests.test_worker_dir import NOTE_TOOL, WORK

ROOT = Path(__file__).resolve().parents[1]
APPROVAL = ROOT / "examples" / "approval"
EXPENSE = {"expense": {"id": "e-1", "who": "Ada", "cents": 120050, "reason": "a ticket"}}
SERVE_SECONDS = 180  # bound on any wait for workers to finish what they were given


def flow(*args: str, cwd: Path, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def worker(url: str, *args: str, cwd: Path, env: dict | None = None) -> subprocess.Popen:
    """A `flow worker --store URL` process, once it says it is serving."""
    host = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "worker", "--store", url, "--poll", "0.2", *args],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = host.stderr.readline()  # it writes this line first, or exits (EOF)
    if not line.startswith("flow worker: driving the runs of"):
        host.kill()
        raise AssertionError(f"the worker did not start: {line!r} {host.communicate(timeout=30)}")
    return host


def stop(host: subprocess.Popen) -> tuple[int, str, str]:
    if host.poll() is None:
        host.send_signal(signal.SIGTERM)
    try:
        out, err = host.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        host.kill()
        out, err = host.communicate(timeout=30)
    return host.returncode, out, err


def rows(url: str, query: str, args: tuple = ()) -> list:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, args).fetchall()


def facts(url: str, run: str) -> list[dict]:
    return [json.loads(bytes(line)) for (line,) in rows(url, "SELECT line FROM flow_facts WHERE run = %s ORDER BY n",
                                                          (run,))]


def state(url: str, run: str, cwd: Path) -> dict:
    done = flow("history", run, "--store", url, "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def wait_until(condition, what: str, seconds: float = SERVE_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.1)


def ended(url: str, runs: list[str]) -> bool:
    found = rows(url, "SELECT count(*) FROM flow_runs r JOIN flow_facts f ON f.run = r.run AND f.n = r.last_n "
                      "WHERE r.run = ANY(%s) AND convert_from(f.line, 'UTF8')::jsonb ->> 'kind' = 'End'", (runs,))
    return found[0][0] == len(runs)


@pytest.fixture
def work(tmp_path):
    program = tmp_path / "program"
    program.mkdir()
    (program / "work.flow").write_text(WORK)
    (program / "note_tool.py").write_text(NOTE_TOOL)
    (program / "flow.toml").write_text('[tools]\n"work" = { python = "note_tool.py" }\n')
    return program


def detach(url: str, work: Path, name: str, nap: str = "PT0S") -> str:
    done = flow("run", "work.flow", "--store", url, "--allow", "--detach", "--input",
                json.dumps({"name": name, "nap": nap}), cwd=work)
    assert done.returncode == 0, done.stderr
    run = done.stdout.strip()
    assert f"queued: run {run}" in done.stderr
    return run


def notes(work: Path) -> list[str]:
    path = work / "notes.log"
    return path.read_text().splitlines() if path.exists() else []


def test_detached_runs_are_queued_and_two_workers_drive_each_once(pg_url, work):
    runs = {f"r{i}": detach(pg_url, work, f"r{i}") for i in range(6)}
    view = state(pg_url, runs["r0"], work)
    assert view["state"] == "queued" and view["hostDecision"]["kind"] == "queued"
    assert [f["kind"] for f in facts(pg_url, runs["r0"])] == ["Start"]  # recorded, not driven
    hosts = [worker(pg_url, "--allow", "--concurrency", "2", cwd=work) for _ in range(2)]
    try:
        wait_until(lambda: ended(pg_url, list(runs.values())), "the workers to finish the queued runs")
    finally:
        results = [stop(host) for host in hosts]
    assert [code for code, _, _ in results] == [0, 0], results
    for name, run in runs.items():
        end = facts(pg_url, run)[-1]
        assert end["kind"] == "End" and end["outcome"] == {"Completed": f"{name.upper()}:A {name.upper()}:B"}
    # Every call was sent once, by whichever worker claimed its run (the Tool's own log).
    assert sorted(notes(work)) == sorted(f"{name}:{step}" for name in runs for step in "ab")
    driven = [line for _, out, _ in results for line in out.splitlines() if ": drove (queued): completed" in line]
    assert sorted(line.split(":")[0] for line in driven) == sorted(runs.values())
    # Nothing holds a lease, and nothing wants a host any more.
    assert rows(pg_url, "SELECT run, owner, ready_at::text FROM flow_runs WHERE owner IS NOT NULL OR ready_at IS NOT NULL") == []


def test_a_refused_detach_records_nothing(pg_url, work):
    bad_input = flow("run", "work.flow", "--store", pg_url, "--allow", "--detach", "--input", '{"name": 3}', cwd=work)
    assert bad_input.returncode == 2 and bad_input.stdout == ""
    unbound = flow("run", "work.flow", "--store", pg_url, "--detach", "--input",
                   json.dumps({"name": "x", "nap": "PT0S"}), cwd=work)  # no --allow: the Tool is not approved
    assert unbound.returncode == 2 and unbound.stdout == ""
    (work / "broken.flow").write_text("pub flow main() -> Text = 3\n")
    broken = flow("run", "broken.flow", "--store", pg_url, "--detach", cwd=work)
    assert broken.returncode == 2
    both = flow("run", "work.flow", "--store", pg_url, "--detach", "--park-after", "1", cwd=work)
    assert both.returncode == 2
    assert rows(pg_url, "SELECT count(*) FROM flow_runs") == [(0,)]


def test_a_paused_run_holds_no_lease_and_resume_detach_queues_its_continuation(pg_url, tmp_path):
    paused = flow("run", str(APPROVAL / "main.flow"), "--store", pg_url, "--allow", "--input", json.dumps(EXPENSE),
                  cwd=tmp_path)
    assert paused.returncode == 3, paused.stderr
    [(run, owner, ready)] = rows(pg_url, "SELECT run, owner, ready_at FROM flow_runs")
    assert owner is None and ready is None  # a paused run holds no lease and wants no host
    host = worker(pg_url, "--allow", cwd=tmp_path)
    try:
        time.sleep(1.0)  # several looks: the paused run is never claimed
        assert rows(pg_url, "SELECT epoch FROM flow_runs") == [(1,)]
        not_open = flow("resume", run, "--store", pg_url, "--detach", "--call", "root#9", "--reply", '{"Ok": true}',
                        cwd=tmp_path)
        assert not_open.returncode == 2 and "not open" in not_open.stderr
        not_outcome = flow("resume", run, "--store", pg_url, "--detach", "--call", "root#1", "--reply", "true",
                           cwd=tmp_path)
        assert not_outcome.returncode == 2 and "outcome" in not_outcome.stderr
        assert [f["kind"] for f in facts(pg_url, run)][-1] == "Call"  # nothing admitted by a refusal
        queued = flow("resume", run, "--store", pg_url, "--detach", "--call", "root#1",
                      "--reply", '{"Ok": {"Yes": "fine"}}', cwd=tmp_path)
        assert queued.returncode == 0, queued.stderr
        assert queued.stdout.strip() == run
        wait_until(lambda: ended(pg_url, [run]), "a worker to drive the continuation")
    finally:
        code, out, err = stop(host)
    assert code == 0, err
    history = facts(pg_url, run)
    replies = [f for f in history if f["kind"] == "Reply" and f["call"] == "root#1"]
    assert len(replies) == 1 and replies[0]["outcome"] == {"Ok": {"Yes": "fine"}}
    assert history[-1]["kind"] == "End" and "Completed" in history[-1]["outcome"]
    assert f"{run}: drove (queued): completed" in out
    replay = flow("replay", run, "--store", pg_url, "--json", cwd=tmp_path)
    assert json.loads(replay.stdout)["verdict"] == "Matched"


def test_a_sleeping_run_is_woken_by_a_worker_at_its_deadline(pg_url, work):
    run = detach(pg_url, work, "s", nap="PT2S")
    host = worker(pg_url, "--allow", "--park-after", "0.5", cwd=work)
    try:
        wait_until(lambda: state(pg_url, run, work)["state"] == "sleeping", "the run to be let go of as sleeping")
        [(ready, owner)] = rows(pg_url, "SELECT ready_at, owner FROM flow_runs")
        assert ready.year > 2000 and owner is None  # its deadline, and no lease while it sleeps
        wait_until(lambda: ended(pg_url, [run]), "the worker to wake the run")
    finally:
        code, out, err = stop(host)
    assert code == 0, err
    assert "woke (timer due): completed" in out
    assert facts(pg_url, run)[-1]["outcome"] == {"Completed": "S:A S:B"}
    assert notes(work) == ["s:a", "s:b"]


def test_racing_claims_hand_each_run_to_exactly_one_worker(pg_url):
    """Six claimers at once over ten claimable runs: every run is claimed once (SKIP LOCKED:
    none waits for another's claim), each claim with the run's next epoch."""
    import threading

    from flowrt.store.postgres import PostgresStore
    from flowrt.store.postgres_queue import claim_ready
    from tests.test_pg_store import START

    maker = PostgresStore(pg_url)
    for i in range(10):
        maker.create(f"r{i}", START).close()
    barrier = threading.Barrier(6)
    claimed: list[tuple[str, str, int]] = []
    stores = [PostgresStore(pg_url, owner=f"w{i}") for i in range(6)]

    def race(store) -> None:
        barrier.wait()
        for _ in range(3):
            claims, _ = claim_ready(store, limit=1)
            claimed.extend((c.run, store.owner, c.lease.epoch) for c in claims)

    threads = [threading.Thread(target=race, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(run for run, _, _ in claimed) == sorted(f"r{i}" for i in range(10))
    assert {epoch for _, _, epoch in claimed} == {2}
    owners = dict(rows(pg_url, "SELECT run, owner FROM flow_runs"))
    assert owners == {run: owner for run, owner, _ in claimed}
    for store in [maker, *stores]:
        store.close()



def test_version_1_tables_migrate_an_ended_run_wants_no_host_and_the_rest_are_looked_at(pg_cluster, tmp_path):
    url = tables_at(pg_cluster, "migrate_v1", 1)
    old = flow("runs", "--store", url, cwd=tmp_path)
    assert old.returncode == 5 and "flow store init" in old.stderr
    with psycopg.connect(url, autocommit=True) as conn:  # rows as a version-1 flow wrote them
        for run, kinds in (("waiting", ["Start", "Call"]), ("ended", ["Start", "End"])):
            conn.execute("INSERT INTO flow_runs (run, last_n, head) VALUES (%s, %s, 'h')", (run, len(kinds)))
            for n, kind in enumerate(kinds, 1):
                conn.execute("INSERT INTO flow_facts (run, n, line) VALUES (%s, %s, %s)",
                             (run, n, json.dumps({"kind": kind}).encode()))
    done = flow("store", "init", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert rows(url, "SELECT version FROM flow_schema ORDER BY version") == [(1,), (2,), (3,)]
    assert rows(url, "SELECT run, ready_at::text FROM flow_runs ORDER BY run") == [("ended", None),
                                                                                   ("waiting", "-infinity")]


def test_a_run_claimed_for_nothing_has_its_readiness_corrected_from_its_record(pg_url, tmp_path):
    """What a migration leaves (or any column that says more than the record): a paused run
    marked as wanting a host is claimed once, found paused, marked as wanting none and let go."""
    paused = flow("run", str(APPROVAL / "main.flow"), "--store", pg_url, "--allow", "--input", json.dumps(EXPENSE),
                  cwd=tmp_path)
    assert paused.returncode == 3, paused.stderr
    rows(pg_url, "UPDATE flow_runs SET ready_at = '-infinity' RETURNING run")
    once = flow("worker", "--store", pg_url, "--once", cwd=tmp_path)
    assert once.returncode == 0, once.stderr
    assert rows(pg_url, "SELECT epoch, owner, ready_at FROM flow_runs") == [(2, None, None)]
    [(run,)] = rows(pg_url, "SELECT run FROM flow_runs")
    assert state(pg_url, run, tmp_path)["state"] == "paused"
    again = flow("worker", "--store", pg_url, "--once", cwd=tmp_path)
    assert again.returncode == 0 and rows(pg_url, "SELECT epoch FROM flow_runs") == [(2,)]  # not claimed again


@pytest.mark.parametrize("location, shown", [
    ("postgresql://flow:s3cret@db.example/flow", "postgresql://flow:***@db.example/flow"),
    ("postgresql:///flow?host=%2Ftmp&password=s3cret&sslmode=require",
     "postgresql:///flow?host=%2Ftmp&password=***&sslmode=require"),
    ("postgresql:///flow?host=%2Ftmp", "postgresql:///flow?host=%2Ftmp"),
    ("/var/lib/flow/runs", "/var/lib/flow/runs"),
])
def test_the_worker_never_prints_a_password(location, shown):
    from flowrt.worker import _shown

    assert _shown(location) == shown


def test_a_damaged_run_is_given_back_once_and_the_others_are_driven(pg_url, work):
    damaged, sound = detach(pg_url, work, "d"), detach(pg_url, work, "s")
    rows(pg_url, "UPDATE flow_facts SET line = convert_to('{\"kind\": \"Start\"}', 'UTF8') "
                 "WHERE run = %s AND n = 1 RETURNING n", (damaged,))
    once = flow("worker", "--store", pg_url, "--allow", "--once", "--poll", "0.2", cwd=work)
    assert once.returncode == 0, once.stderr
    assert f"{damaged}: storage failure" in once.stdout and f"{sound}: drove (queued): completed" in once.stdout
    assert ended(pg_url, [sound]) and notes(work) == ["s:a", "s:b"]
    # Claimed once, its lease given back at once, and passed over after that.
    assert rows(pg_url, "SELECT epoch, owner FROM flow_runs WHERE run = %s", (damaged,)) == [(2, None)]


def test_detach_on_a_runs_directory_is_driven_by_its_worker(work, tmp_path):
    runs = tmp_path / "runs"
    done = flow("run", "work.flow", "--runs", str(runs), "--allow", "--detach", "--input",
                json.dumps({"name": "d", "nap": "PT0S"}), cwd=work)
    assert done.returncode == 0, done.stderr
    run = done.stdout.strip()
    view = flow("history", run, "--runs", str(runs), "--json", cwd=work)
    assert json.loads(view.stdout)["state"] == "queued"
    once = flow("worker", "--runs", str(runs), "--allow", "--once", cwd=work)
    assert once.returncode == 0, once.stderr
    assert f"{run}: drove (queued): completed" in once.stdout
    assert notes(work) == ["d:a", "d:b"]


def test_resume_detach_without_a_reply_keeps_the_pending_calls_pending(pg_url, tmp_path):
    paused = flow("run", str(APPROVAL / "main.flow"), "--store", pg_url, "--allow", "--input", json.dumps(EXPENSE),
                  cwd=tmp_path)
    assert paused.returncode == 3, paused.stderr
    [(run,)] = rows(pg_url, "SELECT run FROM flow_runs")
    queued = flow("resume", run, "--store", pg_url, "--detach", cwd=tmp_path)
    assert queued.returncode == 0, queued.stderr
    view = state(pg_url, run, tmp_path)
    assert view["state"] == "queued" and view["pending"] == ["root#1"]
    assert view["open"][0]["status"] == "pending"
    once = flow("worker", "--store", pg_url, "--allow", "--once", cwd=tmp_path)
    assert once.returncode == 0, once.stderr
    assert f"{run}: drove (queued): paused" in once.stdout  # the person's call is still theirs to answer
    assert state(pg_url, run, tmp_path)["state"] == "paused"
    assert not any(f["kind"] == "Reply" for f in facts(pg_url, run))
    refused = flow("resume", run, "--store", pg_url, "--detach", "--resend", "root#1", cwd=tmp_path)
    assert refused.returncode == 2
