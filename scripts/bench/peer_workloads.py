"""One measurement of one system, run as its own process by `peers.py`; prints one JSON object.

    python peer_workloads.py SYSTEM WORKLOAD N DIR

SYSTEM is flow, dbos, langgraph or temporal; WORKLOAD is steps (N sequential durable steps),
replay (recovering or replaying a history of N steps), fanout (N concurrent steps) or workflows
(N workflows of one step each, one after another, as an application starting one per request).
Each is measured as the steady state, (T(N) - T(1)) / (N - 1) per step, after a warm-up in the
same process, so that start-up (Flow's sandbox child, DBOS's launch, a graph's compilation) is
left out of every figure alike; workflows as T(N workflows) / N after three, so that what each
workflow's own start costs (Flow: a run, its sandbox child and its history) is in it. Flow runs under the project's interpreter; the peers under the virtual
environment peers.py makes. Each system keeps its default durability: Flow fsyncs every fact a
consequence depends on; DBOS and LangGraph commit to SQLite with its default synchronous mode.
"""

# No `from __future__ import annotations`: LangGraph reads the state classes' annotations,
# which are defined inside a function here, at run time.
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

STEPS = """
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = loop(n, 0)

flow loop(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }
"""

FANOUT = """
use "std@v1/task"
use "std@v1/list"

@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool =
    list.fold(task.all(list.map(list.range(0, n), flow(i) = flow() = echo(i))), 0, flow(a, b) = a + b)
"""


def per_workflow(start_one, n: int) -> float:
    """Microseconds per workflow of one step: n of them one after another, after three."""
    for i in range(3):
        start_one(f"warm-{i}")
    began = time.perf_counter()
    for i in range(n):
        start_one(f"w-{i}")
    return (time.perf_counter() - began) / n * 1e6


#: How long `steady` goes on repeating its pair of measurements (at most REPEATS pairs).
REPEAT_SECONDS = 2.0
REPEATS = 5


def steady(measure, n: int) -> float:
    """Microseconds per step: (T(n) - T(1)) / (n - 1), after three warm-ups: the runs measured
    then start alike (Flow's first two sandbox children are interpreters started for them, the
    later ones forked from its child template: flowrt/child_template.py). The pair is measured
    again while that is cheap (up to REPEATS pairs within REPEAT_SECONDS), and the medians taken:
    where n steps cost a few milliseconds in all (Flow's fan-out of 100, its calls synced
    together), one pair's difference was within a run's start-up noise on a slow disk (labels
    after the first pair are `one#k`, `many#k`)."""
    for _ in range(3):
        measure(1, "warm")
    ones, manys = [measure(1, "one")], [measure(n, "many")]
    until = time.perf_counter() + REPEAT_SECONDS
    while len(ones) < REPEATS and time.perf_counter() < until:
        ones.append(measure(1, f"one#{len(ones)}"))
        manys.append(measure(n, f"many#{len(manys)}"))
    return (statistics.median(manys) - statistics.median(ones)) / (n - 1) * 1e6


# -- Flow ---------------------------------------------------------------------------------------

def flow(workload: str, n: int, directory: str) -> dict:
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))
    import flowrt
    from flowrt.replay import replay

    program = Path(directory) / ("fan.flow" if workload == "fanout" else "steps.flow")
    program.write_text(FANOUT if workload == "fanout" else STEPS)
    module = program.stem
    runs = os.path.join(directory, "runs")
    host = flowrt.Host({f"{module}.echo": lambda n: n}, runs_dir=runs, durability="fsync")
    recorded: dict[str, str] = {}

    def run(count: int, label: str) -> float:
        start = time.perf_counter()
        outcome = host.run(str(program), {"n": count})
        elapsed = time.perf_counter() - start
        assert outcome.exit_code == 0, outcome
        recorded[label] = outcome.run_id
        return elapsed

    if workload == "workflows":
        return {"us": per_workflow(lambda label: run(1, label), n)}
    if workload != "replay":
        return {"us": steady(run, n)}
    for label, count in (("warm", 1), ("one", 1), ("many", n)):
        run(count, label)

    def replayed(count: int, label: str) -> float:
        start = time.perf_counter()
        result = replay(runs, recorded[label.split("#")[0]])
        elapsed = time.perf_counter() - start
        assert result.verdict.kind == "Matched", result
        return elapsed

    return {"us": steady(replayed, n)}


# -- DBOS ---------------------------------------------------------------------------------------

def dbos(workload: str, n: int, directory: str) -> dict:
    if workload == "replay":
        return dbos_recovery(n, directory)
    import asyncio

    from dbos import DBOS

    DBOS(config={"name": "bench", "system_database_url": f"sqlite:///{directory}/dbos.sqlite",
                 "run_admin_server": False})

    @DBOS.step()
    def echo(i: int) -> int:
        return i

    @DBOS.workflow()
    def steps(count: int) -> int:
        return sum(echo(i) for i in range(count))

    @DBOS.step()
    async def echo_async(i: int) -> int:
        return i

    @DBOS.workflow()
    async def fan(count: int) -> int:
        # Of DBOS's ways to run steps at once (asyncio.gather in an async workflow, a queue,
        # start_workflow per step) this was the quickest here.
        return sum(await asyncio.gather(*(echo_async(i) for i in range(count))))

    DBOS.launch()
    try:
        if workload == "workflows":
            return {"us": per_workflow(lambda label: steps(1), n)}
        if workload == "steps":
            def measure(count: int, label: str) -> float:
                start = time.perf_counter()
                steps(count)
                return time.perf_counter() - start
            return {"us": steady(measure, n)}

        async def fanned() -> float:
            timings = []
            for count in (1, 1, n):
                start = time.perf_counter()
                await fan(count)
                timings.append(time.perf_counter() - start)
            return (timings[2] - timings[1]) / (n - 1) * 1e6
        return {"us": asyncio.run(fanned())}
    finally:
        DBOS.destroy()


DBOS_RECOVERY = '''
import os, sys, time
from dbos import DBOS, SetWorkflowID
DBOS(config={"name": "bench", "system_database_url": "sqlite:///" + sys.argv[1], "run_admin_server": False})
timing = {}

@DBOS.step()
def echo(i):
    return i

@DBOS.workflow()
def steps(count):
    timing["start"] = time.perf_counter()
    total = sum(echo(i) for i in range(count))
    timing["end"] = time.perf_counter()
    if sys.argv[2] == "crash":
        os._exit(9)  # a crash after the last step: recovery replays every step from the database
    return total

DBOS.launch()
if sys.argv[2] == "crash":
    with SetWorkflowID("w"):
        steps(int(sys.argv[3]))
else:
    DBOS.retrieve_workflow("w").get_result()
    print((timing["end"] - timing["start"]) * 1e6)
DBOS.destroy()
'''


def dbos_recovery(n: int, directory: str) -> dict:
    """A workflow whose process died after its last step, recovered by a new process at launch:
    the time the recovered workflow takes over its recorded steps (launch left out)."""
    script = Path(directory) / "dbos_recovery.py"
    script.write_text(DBOS_RECOVERY)
    database = os.path.join(directory, "recovery.sqlite")
    subprocess.run([sys.executable, str(script), database, "crash", str(n)], capture_output=True, timeout=600)
    done = subprocess.run([sys.executable, str(script), database, "recover"], capture_output=True, text=True,
                          timeout=600, check=True)
    return {"us": float(done.stdout.strip().splitlines()[-1]) / n}


# -- LangGraph ----------------------------------------------------------------------------------

def langgraph(workload: str, n: int, directory: str) -> dict:
    if workload == "replay":
        return {"us": None, "why": "resumes at its latest checkpoint; it has no replay of the steps before it"}
    import operator
    import sqlite3
    from typing import Annotated, TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    saver = SqliteSaver(sqlite3.connect(os.path.join(directory, "lg.sqlite"), check_same_thread=False))

    class Loop(TypedDict):
        n: int
        i: int
        acc: int

    def step(state: Loop) -> dict:
        return {"i": state["i"] + 1, "acc": state["acc"] + state["i"]}

    def again(state: Loop) -> str:
        return "step" if state["i"] < state["n"] else END

    class Fan(TypedDict):
        n: int
        total: Annotated[int, operator.add]

    def work(state: dict) -> dict:
        return {"total": state["k"]}

    def spread(state: Fan) -> list:
        return [Send("work", {"k": k}) for k in range(state["n"])]

    if workload in ("steps", "workflows"):
        graph = StateGraph(Loop)
        graph.add_node("step", step)
        graph.add_edge(START, "step")
        graph.add_conditional_edges("step", again)
        start_state = lambda count: {"n": count, "i": 0, "acc": 0}  # noqa: E731
    else:
        graph = StateGraph(Fan)
        graph.add_node("work", work)
        graph.add_conditional_edges(START, spread, ["work"])
        graph.add_edge("work", END)
        start_state = lambda count: {"n": count, "total": 0}  # noqa: E731
    app = graph.compile(checkpointer=saver)

    def measure(count: int, label: str) -> float:
        config = {"configurable": {"thread_id": f"{label}-{count}"}, "recursion_limit": count + 10}
        start = time.perf_counter()
        app.invoke(start_state(count), config)
        return time.perf_counter() - start

    if workload == "workflows":
        return {"us": per_workflow(lambda label: measure(1, label), n)}
    return {"us": steady(measure, n)}


# -- Temporal -----------------------------------------------------------------------------------

def temporal(workload: str, n: int, directory: str) -> dict:
    if workload != "replay":
        return {"us": None, "why": "needs a Temporal server (none offline); its Replayer runs without one"}
    import asyncio

    from temporal_replay import replay_per_activity

    return {"us": asyncio.run(replay_per_activity(n))}


def main() -> None:
    system, workload, n, directory = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    figures = {"flow": flow, "dbos": dbos, "langgraph": langgraph, "temporal": temporal}[system](workload, n, directory)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
