"""Workers on PostgreSQL (`flow worker --store URL`), in one run on one throwaway cluster (tests/
pg_cluster.py's, Unix socket, fsync on):

1. **Throughput and exactly-once.** RUNS runs of CALLS calls each (a `{ python = ... }` Tool that
   appends `name:i` to a log file of its own, then answers), queued with `--detach`'s code, then
   driven by 1, 2 and 4 `flow worker` processes (each `--concurrency 4`): runs per second for
   each. Checked for every run: its End is the one the program computes; it was claimed exactly
   once (its fencing epoch is 2: made, then one claim), so no two hosts drove it; and the Tool's
   own log holds each of its calls exactly once (no call sent twice).
2. **A recorded call beside a DBOS step, on the same server.** Flow: the steady state of a
   sequential run of N Tool calls recorded in PostgreSQL ((run of N - run of 1) / (N - 1), as
   pg_calls.py measures). DBOS Transact: the steady state of a workflow of N `@DBOS.step`s with
   its system database on the same cluster, in a virtual environment of this script's own
   (created on first use under ~/.cache/flow-bench/dbos-pg, `pip install dbos`). Ratio: DBOS /
   Flow (above 1: Flow is cheaper).
3. **SIGKILL.** KILLS times: a worker is started, claims queued or orphaned runs, and is killed
   with SIGKILL while every run it holds sleeps (no Tool call out), its leases left to run out
   (FLOW_LEASE_SECONDS=1); a second worker, started after the kills, finishes them. Every run
   must end with the End an undisturbed run has, and the Tool log must hold every call once.

Also printed: the claim alone (`FOR UPDATE SKIP LOCKED` and the lease, no drive), 4 claimers at
once over RUNS claimable runs, to tell the queue's cost from the drives'.

    python scripts/bench/workers.py [--runs 1000] [--calls 20] [--kills 20] [--quick]
                                    [--compare-cache] [--throughput-only]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from tests.pg_cluster import Cluster  # noqa: E402

PROGRAM = """\
use "std@v1/clock"

/// Notes `name:n` in the Tool's own log and answers `n`.
@tool pub flow mark(name: Text, n: Int) -> Int

pub flow main(name: Text, n: Int) -> Int !tool = loop(name, n, 0)

flow loop(name: Text, n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(name, n - 1, acc + mark(name, n)) }

pub flow napping(name: Text, n: Int, nap: Duration) -> Int !tool = naps(name, n, nap, 0)

flow naps(name: Text, n: Int, nap: Duration, acc: Int) -> Int !tool = if n == 0 { acc } else {
    let v = mark(name, n)
    clock.sleep(nap)
    naps(name, n - 1, nap, acc + v)
}
"""

TOOL = """\
import os
from flowrt.toolkit import serve

LOG = {log!r}
STARTS = {starts!r}


def mark(name, n):
    # One write of one line (O_APPEND): lines from many processes never interleave.
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{{name}}:{{n}}\\n".encode())
    finally:
        os.close(fd)
    return n


if __name__ == "__main__":
    with open(STARTS, "a") as starts:  # one line a process: how many the hosts started
        starts.write(f"{{os.getpid()}}\\n")
    serve({{"bench.mark": mark}}, declared_in="bench.flow")
"""

DBOS_STEPS = """\
import json, statistics, sys, time
from dbos import DBOS

DBOS(config={"name": "flowbench", "system_database_url": sys.argv[1], "run_admin_server": False})


@DBOS.step()
def echo(i: int) -> int:
    return i


@DBOS.workflow()
def steps(count: int) -> int:
    return sum(echo(i) for i in range(count))


DBOS.launch()


def timed(count: int) -> float:
    start = time.perf_counter()
    steps(count)
    return time.perf_counter() - start


n, rounds = int(sys.argv[2]), int(sys.argv[3])
timed(1)
if rounds:
    per = []
    for _ in range(rounds):
        many, one = timed(n), timed(1)
        per.append((many - one) / (n - 1))
    print(json.dumps({"us": statistics.median(per) * 1e6}))
else:  # counted: one workflow of n steps, the counters read around this process (its exit reports them)
    steps(n)
    print(json.dumps({}))
DBOS.destroy()
"""

READY_LINE = "flow worker: driving the runs of"
WAIT_SECONDS = 3600  # bound on any wait for workers


def rows(url: str, query: str, args: tuple = ()) -> list:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, args).fetchall()


def ended_count(url: str) -> int:
    return rows(url, "SELECT count(*) FROM flow_runs WHERE ready_at IS NULL AND owner IS NULL")[0][0]


#: `flow worker` with the in-process cache of recorded programs turned off (flowrt/replay.py
#: `_RECORDED_PROGRAMS_KEPT`), for the before/after figures: the knob lives here, not in `flow`
UNCACHED_WORKER = ("import sys, flowrt.replay, flowrt.cli; flowrt.replay._RECORDED_PROGRAMS_KEPT = 0; "
                   "sys.argv[0] = 'flow'; flowrt.cli.main()")


def start_worker(url: str, directory: Path, *extra: str, env: dict | None = None,
                 cached: bool = True) -> subprocess.Popen:
    flow = ["-m", "flowrt.cli"] if cached else ["-c", UNCACHED_WORKER]
    host = subprocess.Popen([sys.executable, *flow, "worker", "--store", url, "--allow", "--poll", "0.2",
                             *extra], cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    line = host.stderr.readline()
    if not line.startswith(READY_LINE):
        host.kill()
        raise SystemExit(f"the worker did not start: {line!r} {host.communicate(timeout=30)}")
    return host


def stop_worker(host: subprocess.Popen) -> str:
    if host.poll() is None:
        host.send_signal(signal.SIGTERM)
    out, _ = host.communicate(timeout=120)
    return out


def queue(url: str, directory: Path, entry: str, inputs: list[dict]) -> list[str]:
    """Queue runs through the public API in this process (`flowrt.Host.queue`, what `flow run
    --detach` does, its Tool process kept from one run to the next: a process each would
    measure Python's start-up, not the queue)."""
    import flowrt

    with flowrt.Host(runs=url, allow=True) as host:
        return [host.queue(str(directory / "bench.flow"), given, entry=entry) for given in inputs]


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.05)


def check_runs(url: str, ids: list[str], expected: dict[str, int], log: Path, calls: dict[str, int],
               one_claim: bool) -> dict:
    """Every run ended with its expected End; each call in the Tool's log once; (with `one_claim`)
    every run claimed exactly once."""
    ends = dict(rows(url, "SELECT r.run, convert_from(f.line, 'UTF8') FROM flow_runs r JOIN flow_facts f "
                          "ON f.run = r.run AND f.n = r.last_n WHERE r.run = ANY(%s)", (ids,)))
    wrong_end = [run for run in ids if json.loads(ends.get(run, "{}")).get("outcome") != {"Completed": expected[run]}]
    lines = collections.Counter(log.read_text().splitlines()) if log.exists() else collections.Counter()
    wanted = {f"{name}:{i}" for name, n in calls.items() for i in range(1, n + 1)}
    twice = sorted(line for line in wanted if lines[line] > 1)
    missing = sorted(wanted - set(lines))
    epochs = dict(rows(url, "SELECT run, epoch FROM flow_runs WHERE run = ANY(%s)", (ids,)))
    claimed_again = sorted(run for run in ids if epochs[run] != 2) if one_claim else []
    return {"runs": len(ids), "wrong End": len(wrong_end), "calls sent twice": len(twice),
            "calls missing": len(missing), "claimed more than once": len(claimed_again)}


def throughput(url: str, directory: Path, log: Path, runs: int, calls: int, workers: int, tag: str,
               cached: bool = True, env: dict | None = None) -> dict:
    names = [f"{tag}{i}" for i in range(runs)]
    began = time.perf_counter()
    ids = queue(url, directory, "main", [{"name": name, "n": calls} for name in names])
    queue_ms = (time.perf_counter() - began) / runs * 1e3
    starts_log = directory / "starts.log"
    expected = {run: calls * (calls + 1) // 2 for run in ids}
    before = ended_count(url)
    # Held back until every worker is up (start-up is not what is measured), then let go at once.
    rows(url, "UPDATE flow_runs SET ready_at = 'infinity' WHERE run = ANY(%s) RETURNING 1", (ids,))
    used_before = children_cpu()
    starts_before = len(starts_log.read_text().splitlines()) if starts_log.exists() else 0
    hosts = [start_worker(url, directory, "--concurrency", "4", cached=cached, env=env) for _ in range(workers)]
    rows(url, "UPDATE flow_runs SET ready_at = '-infinity' WHERE run = ANY(%s) RETURNING 1", (ids,))
    start = time.perf_counter()
    wait_until(lambda: ended_count(url) - before >= runs, f"{workers} workers to drive {runs} runs")
    elapsed = time.perf_counter() - start
    outs = [stop_worker(host) for host in hosts]
    # The workers' CPU with their sandbox children and Tool processes (each reaped by its worker,
    # each worker by this process), start-up included: what a run costs, whatever else loads the machine.
    cpu_ms = (children_cpu() - used_before) / runs * 1e3
    driven = sum(out.count(": drove (queued): completed") for out in outs)
    checks = check_runs(url, ids, expected, log, dict.fromkeys(names, calls), one_claim=True)
    checks["drive lines"] = driven
    checks["Tool processes started"] = len(starts_log.read_text().splitlines()) - starts_before
    return {"workers": workers, "runs per second": runs / elapsed, "seconds": elapsed,
            "CPU ms a run": round(cpu_ms, 1), "queue ms a run": round(queue_ms, 1),
            "load average": " ".join(f"{x:.1f}" for x in os.getloadavg()), **checks}


def children_cpu() -> float:
    """CPU seconds (user and system) of this process's reaped children and theirs."""
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def claims_alone(url: str, runs: int, claimers: int) -> dict:
    """The queue alone: `runs` claimable runs (Start only), claimed one at a time by `claimers`
    threads, each its own store (owner, connections), as workers would: claims per second, and
    whether any run was claimed twice."""
    import threading

    from flowrt.store.postgres import PostgresStore
    from flowrt.store.postgres_queue import claim_ready

    maker = PostgresStore(url)
    start = {"program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "m", "function": "main"},
             "input": {}, "modules": []}
    ids = [f"claim-{i}" for i in range(runs)]
    for run in ids:
        maker.create(run, start, durability="none").close()
    stores = [PostgresStore(url, owner=f"claimer-{i}") for i in range(claimers)]
    taken: list[str] = []
    barrier = threading.Barrier(claimers + 1)

    def claim(store) -> None:
        barrier.wait()
        while True:
            claims, _ = claim_ready(store, limit=1)
            if not claims:
                return
            taken.extend(c.run for c in claims)

    threads = [threading.Thread(target=claim, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    barrier.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    for store in [maker, *stores]:
        store.close()
    counts = collections.Counter(taken)
    return {"claims per second": len(taken) / elapsed, "claimed": len(counts),
            "claimed twice": sum(1 for n in counts.values() if n > 1)}


def flow_recorded_call(url: str, directory: Path, n: int, rounds: int) -> float:
    def timed(count: int) -> float:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "flowrt.cli", "run", "bench.flow", "--allow", "--store", url,
                               "--input", json.dumps({"name": f"solo{count}", "n": count})],
                              cwd=directory, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise SystemExit(f"flow run failed: {done.stderr}")
        return time.perf_counter() - start

    timed(1)
    per = []
    for _ in range(rounds):
        many, one = timed(n), timed(1)
        per.append((many - one) / (n - 1))
    return statistics.median(per) * 1e6


def dbos_python(venv: Path) -> str:
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "dbos>=3.4", "psycopg[binary]>=3.1"], check=True)
    return str(python)


def dbos_runner(python: str, cluster: Cluster, directory: Path):
    """A database for DBOS on `cluster` and a function running DBOS_STEPS there with its
    arguments (its JSON line as a dict), for `dbos_step` and for pg_calls.py's paired rounds."""
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE flowbench_dbos")
    url = f"postgresql://postgres@/flowbench_dbos?host={cluster.dir}"
    script = directory / "dbos_steps.py"
    script.write_text(DBOS_STEPS)

    def dbos(*argv: str) -> dict:
        done = subprocess.run([python, str(script), url, *argv], capture_output=True, text=True,
                              timeout=3600, cwd=directory)
        if done.returncode != 0:
            raise SystemExit(f"DBOS failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    dbos.url = url
    return dbos


def dbos_step(python: str, cluster: Cluster, n: int, rounds: int, directory: Path, *,
              count_steps: int = 0, dbos=None) -> dict:
    """A DBOS step's steady-state cost in µs (`us`) on `cluster`; with `count_steps`, also the
    server's counters per step (scripts/bench/pg_calls.py's: WAL flushes and records, commits,
    statements) over workflows of that many steps, every statement logged for those only.
    `dbos`: a `dbos_runner` made already (`rounds` 0: the counters only)."""
    if dbos is None:
        dbos = dbos_runner(python, cluster, directory)
    url = dbos.url

    figures = dbos(str(n), str(rounds)) if rounds else {}
    if count_steps:
        from scripts.bench.pg_calls import per_call, server_counters

        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute("ALTER DATABASE flowbench_dbos SET log_statement = 'all'")

        def counted(steps: int) -> dict:
            # around the whole process, as for `flow run`: a backend reports its counters at exit
            before = server_counters(url, cluster.log)
            dbos(str(steps), "0")
            time.sleep(0.6)
            after = server_counters(url, cluster.log)
            return {name: after[name] - before[name] for name in after}

        try:
            figures.update(per_call(counted(count_steps), counted(1), count_steps))
        finally:
            with psycopg.connect(cluster.url, autocommit=True) as conn:
                conn.execute("ALTER DATABASE flowbench_dbos RESET log_statement")
    return figures


def kills(url: str, directory: Path, log: Path, count: int, steps: int) -> dict:
    env = dict(os.environ, FLOW_LEASE_SECONDS="1")
    names = [f"kill{i}" for i in range(count * 2)]
    ids = queue(url, directory, "napping", [{"name": name, "n": steps, "nap": "PT1S"} for name in names])
    expected = {run: steps * (steps + 1) // 2 for run in ids}
    killed_holding = []
    for _ in range(count):
        host = start_worker(url, directory, "--concurrency", "4", env=env)

        def all_asleep() -> bool:
            # Every run it holds has its sleep's Call last: no Tool call out.
            held = rows(url, "SELECT r.run, convert_from(f.line, 'UTF8') FROM flow_runs r JOIN flow_facts f "
                             "ON f.run = r.run AND f.n = r.last_n WHERE r.owner LIKE %s AND r.lease_until > "
                             "clock_timestamp()", (f"%:{host.pid}:%",))
            return bool(held) and all(json.loads(line).get("tool") == "std@v1/clock.sleep" for _, line in held)

        wait_until(all_asleep, "the worker to hold sleeping runs")
        held = rows(url, "SELECT count(*) FROM flow_runs WHERE owner LIKE %s", (f"%:{host.pid}:%",))[0][0]
        host.send_signal(signal.SIGKILL)
        host.communicate(timeout=60)
        killed_holding.append(held)
    finisher = start_worker(url, directory, "--concurrency", "8", env=env)

    def all_done() -> bool:
        done = rows(url, "SELECT count(*) FROM flow_runs WHERE ready_at IS NULL AND owner IS NULL AND run = ANY(%s)",
                    (ids,))
        return done[0][0] == len(ids)

    wait_until(all_done, "the runs of killed workers to finish")
    stop_worker(finisher)
    checks = check_runs(url, ids, expected, log, dict.fromkeys(names, steps), one_claim=False)
    return {"kills": count, "runs held at each kill": killed_holding, **checks}


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--runs", type=int, default=1000)
    options.add_argument("--calls", type=int, default=20)
    options.add_argument("--kills", type=int, default=20)
    options.add_argument("--call-n", type=int, default=1000, help="calls in a run for the per-call figure")
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--venv", type=Path, default=Path.home() / ".cache" / "flow-bench" / "dbos-pg")
    options.add_argument("--quick", action="store_true", help="Fewer runs and calls, 5 kills.")
    options.add_argument("--compare-cache", action="store_true",
                         help="Part 1 also with workers that keep no recorded programs (before/after).")
    options.add_argument("--throughput-only", action="store_true", help="Part 1 only.")
    options.add_argument("--compare-template", action="store_true",
                         help="Part 1 also with workers whose sandbox children are all started as interpreters of "
                              "their own (FLOW_SANDBOX_TEMPLATE=0), beside forked ones (before/after).")
    args = options.parse_args()
    if args.quick:
        args.runs, args.kills, args.call_n, args.rounds = (40 if args.runs == 1000 else args.runs), 5, 200, 1
    cluster = Cluster(fsync=True)
    try:
        from flowrt.store.postgres_schema import init_schema

        init_schema(cluster.url)
        url = cluster.url
        with tempfile.TemporaryDirectory() as scratch:
            directory = Path(scratch)
            log = directory / "calls.log"
            (directory / "bench.flow").write_text(PROGRAM)
            (directory / "bench_tool.py").write_text(TOOL.format(log=str(log), starts=str(directory / "starts.log")))
            (directory / "flow.toml").write_text('[tools]\n"bench" = { python = "bench_tool.py" }\n')
            print(f"1. {args.runs} runs of {args.calls} calls, queued, then driven by N workers (--concurrency 4 each)")
            for workers in (1, 2, 4):
                # Before (no cache of recorded programs) and after, one beside the other.
                ways = [(cached, None) for cached in ((False, True) if args.compare_cache else (True,))]
                if args.compare_template:
                    ways = [(True, "0"), (True, "auto")]
                for cached, template in ways:
                    tag = f"w{workers}{'' if cached else 'u'}{template or ''}-"
                    env = None if template is None else {**os.environ, "FLOW_SANDBOX_TEMPLATE": template}
                    figures = throughput(url, directory, log, args.runs, args.calls, workers, tag, cached=cached,
                                         env=env)
                    label = ("" if not args.compare_cache else " (programs kept)" if cached else " (no cache)") + (
                        "" if template is None else " (children started)" if template == "0"
                        else " (children forked)")
                    print(f"   {workers} worker(s){label}: {figures['runs per second']:.1f} runs/s "
                          f"({figures['seconds']:.1f} s); " + ", ".join(
                              f"{k}: {v}" for k, v in figures.items() if k not in ("workers", "runs per second",
                                                                                   "seconds")))
            if args.throughput_only:
                return
            claimed = claims_alone(url, args.runs, 4)
            print(f"   the claim alone, 4 claimers over {args.runs} runs: {claimed['claims per second']:.0f} claims/s, "
                  f"{claimed['claimed']} runs claimed, {claimed['claimed twice']} twice")
            print(f"2. a recorded call on PostgreSQL beside a DBOS step on the same server "
                  f"(steady state, runs of {args.call_n}, median of {args.rounds})")
            flow_us = flow_recorded_call(url, directory, args.call_n, args.rounds)
            dbos_us = dbos_step(dbos_python(args.venv), cluster, args.call_n, args.rounds, directory)["us"]
            print(f"   flow recorded call: {flow_us:8.0f} µs; dbos step: {dbos_us:8.0f} µs; "
                  f"dbos / flow: {dbos_us / flow_us:.2f}x")
            print(f"3. SIGKILL of a worker mid-run, {args.kills} times (runs of 4 steps, each a call and a 1 s sleep)")
            print("   " + json.dumps(kills(url, directory, log, args.kills, 4)))
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
