"""One thread driving many runs (flowrt/run_hub.py): a host's background runs as greenlets over one
`poll`. The hub's own waits (descriptors, a reply queue, deadlines), and runs through
`flowrt.Host.start(..., detach=True)`: many at once record what each records alone, a run whose
Tool blocks stops no other, halts and refusals behave as on a thread of their own, and the hub's
thread ends once its last run has."""

from __future__ import annotations

import os
import queue
import threading
import time
from pathlib import Path

import pytest

import flowrt
from flowrt import quick_calls, run_hub
from flowrt.store import open_store
from tests.test_api import _gated  # an ask Tool that waits for its gate
from tests.test_spare_child import wait_for

ROOT = Path(__file__).resolve().parents[1]
ASK = str(ROOT / "tests" / "programs" / "ask.flow")

COUNT = """
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = loop(n, 0)

flow loop(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }
"""


def facts_without_times(runs: Path, run_id: str) -> list[tuple]:
    """What a history says, without what differs between two runs of one program (ids, times, hashes)."""
    with open_store(str(runs)).open(run_id, for_append=False) as store:
        return [(f["kind"], f.get("call"), store.value(f, "arguments") if f["kind"] == "Call" else None,
                 f.get("outcome")) for f in store.facts()]


def hub_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "flow runs"]


# ---- the hub's own waits ---------------------------------------------------------------------


def _in_hub(function):
    """Run `function` as a run of a fresh hub; its result (or exception) once it ends."""
    hub = run_hub.RunHub(name="flow runs (test)")
    box: dict = {}

    def work():
        try:
            box["result"] = function(hub)
        except BaseException as problem:
            box["error"] = problem

    task = hub.spawn(work)
    task.join(30)
    assert not task.is_alive()
    if "error" in box:
        raise box["error"]
    return box["result"]


def test_a_descriptor_wait_ends_when_the_descriptor_is_ready_and_others_run_meanwhile():
    read_end, write_end = os.pipe()
    order: list[str] = []

    def waiting(hub):
        def writer():
            order.append("writer ran")
            os.write(write_end, b"x")

        hub.spawn(writer)
        events = hub.wait_fds([(read_end, 1)], 10_000)  # POLLIN
        order.append("woke")
        return events

    try:
        events = _in_hub(waiting)
        assert events == [(read_end, 1)]
        assert order == ["writer ran", "woke"]  # the writer ran while the first run waited
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_descriptor_wait_ends_empty_at_its_timeout():
    read_end, write_end = os.pipe()
    try:
        started = time.monotonic()
        assert _in_hub(lambda hub: hub.wait_fds([(read_end, 1)], 50)) == []
        assert time.monotonic() - started >= 0.045
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_queue_put_from_another_thread_wakes_its_run():
    def waiting(hub):
        replies = hub.queue()
        threading.Timer(0.05, replies.put, args=("reply",)).start()
        return replies.get()

    assert _in_hub(waiting) == "reply"


def test_a_queue_get_with_a_timeout_raises_empty_and_get_nowait_never_waits():
    def waiting(hub):
        replies = hub.queue()
        with pytest.raises(queue.Empty):
            replies.get_nowait()
        started = time.monotonic()
        with pytest.raises(queue.Empty):
            replies.get(timeout=0.05)
        waited = time.monotonic() - started
        replies.put(1)
        return waited, replies.get(timeout=0.05)

    waited, got = _in_hub(waiting)
    assert waited >= 0.045 and got == 1


def test_a_wake_up_with_nothing_in_the_queue_waits_again():
    # A notice can outlive the wait it was for (a put racing a timeout); a later wait woken by it
    # finds nothing and must wait on, not raise Empty.
    def waiting(hub):
        replies = hub.queue()
        threading.Timer(0.02, hub.notify, args=(replies,)).start()  # woken, nothing there
        threading.Timer(0.08, replies.put, args=("late",)).start()
        return replies.get()

    assert _in_hub(waiting) == "late"


def test_many_runs_wait_on_their_queues_at_once_and_each_gets_its_own():
    def waiting(hub):
        queues = [hub.queue() for _ in range(20)]
        got: dict[int, object] = {}

        def one(i):
            got[i] = queues[i].get(timeout=10)

        tasks = [hub.spawn(lambda i=i: one(i)) for i in range(20)]
        for i in reversed(range(20)):  # delivered in the other order, from another thread
            threading.Timer(0.001 * i, queues[i].put, args=(i * 10,)).start()
        return tasks, got

    tasks, got = _in_hub(waiting)
    for task in tasks:
        task.join(10)
    assert got == {i: i * 10 for i in range(20)}


def test_notices_from_many_threads_at_once_never_leave_the_hub_asleep():
    # Each put from another thread may find the hub mid-way through taking the last notices: none
    # may be lost (a lost wake-up leaves a run waiting on a reply already in its queue).
    def waiting(hub):
        queues = [hub.queue() for _ in range(8)]
        got = [0] * 8

        def one(i):
            for _ in range(400):
                queues[i].get(timeout=20)
                got[i] += 1

        tasks = [hub.spawn(lambda i=i: one(i)) for i in range(8)]

        def feed(i):
            for n in range(400):
                queues[i].put(n)
                if n % 50 == 0:
                    time.sleep(0.001)

        feeders = [threading.Thread(target=feed, args=(i,)) for i in range(8)]
        for feeder in feeders:
            feeder.start()
        return tasks, feeders, got

    tasks, feeders, got = _in_hub(waiting)
    for task in tasks:
        task.join(60)
    for feeder in feeders:
        feeder.join(60)
    assert got == [400] * 8


def test_the_hubs_thread_ends_with_its_last_run_and_a_later_spawn_starts_another():
    hub = run_hub.RunHub(name="flow runs (ending)")
    hub.spawn(lambda: None).join(10)
    wait_for(lambda: not [t for t in threading.enumerate() if t.name == "flow runs (ending)"],
             "the hub's thread to end")
    done = threading.Event()
    hub.spawn(done.set).join(10)
    assert done.is_set()


def test_a_run_that_raises_leaves_the_hub_serving_the_others():
    hub = run_hub.RunHub(name="flow runs (raising)")

    def broken():
        raise RuntimeError("a bug in a run")

    hub.spawn(broken).join(10)
    done = threading.Event()
    hub.spawn(done.set).join(10)
    assert done.is_set()


def test_a_blocking_call_runs_on_a_helper_while_other_runs_go_on_and_its_exception_comes_back():
    def waiting(hub):
        release = threading.Event()
        order: list[str] = []

        def slow(value):
            assert release.wait(10)
            order.append("slow done")
            return value * 2

        def other():
            order.append("other ran")
            release.set()

        hub.spawn(other)  # two runs: the call goes to a helper thread
        doubled = hub.blocking(slow, 21)

        def broken(_):
            raise OSError(5, "Input/output error")

        with pytest.raises(OSError, match="Input/output"):
            hub.blocking(broken, None)
        return doubled, order

    doubled, order = _in_hub(waiting)
    assert doubled == 42 and order == ["other ran", "slow done"]


def test_a_hub_with_one_run_makes_a_blocking_call_on_its_own_thread():
    def waiting(hub):
        return hub.blocking(lambda _: threading.current_thread().name, None)

    assert _in_hub(waiting) == "flow runs (test)"


def test_outside_a_hub_the_waits_are_the_ordinary_ones():
    assert run_hub.current() is None
    read_end, write_end = os.pipe()
    try:
        import select

        poller = select.poll()
        poller.register(read_end, select.POLLIN)
        assert run_hub.poll(poller, [(read_end, select.POLLIN)], 0) == []
    finally:
        os.close(read_end)
        os.close(write_end)


# ---- runs through flowrt.Host ------------------------------------------------------------------


def test_many_background_runs_through_one_host_record_what_each_records_alone(tmp_path):
    program = tmp_path / "count.flow"
    program.write_text(COUNT)
    host = flowrt.Host({"count.echo": lambda n: n}, runs=str(tmp_path / "runs"), durability="none")
    try:
        alone = host.run(str(program), {"n": 30})
        handles = [host.start(str(program), {"n": 30}, detach=True) for _ in range(12)]
        assert len(hub_threads()) <= 1
        assert not [t for t in threading.enumerate() if t.name == "flow run"]  # no thread per run
        results = [h.wait(timeout=120) for h in handles]
    finally:
        host.close()
    assert alone.status == "completed" and alone.output == 465
    assert [r.status for r in results] == ["completed"] * 12 and {r.output for r in results} == {465}
    expected = facts_without_times(tmp_path / "runs", alone.run_id)
    for handle in handles:
        assert facts_without_times(tmp_path / "runs", handle.run_id) == expected


def test_a_run_whose_tool_blocks_stops_no_other_run_of_the_hub(tmp_path):
    ask, asked, gate = _gated()
    host = flowrt.Host({"ask.ask": ask, "ask.note": lambda text: None}, runs=str(tmp_path / "runs"),
                       durability="none")
    program = tmp_path / "count.flow"
    program.write_text(COUNT)
    counting = flowrt.Host({"count.echo": lambda n: n}, runs=str(tmp_path / "runs2"), durability="none")
    try:
        blocked = host.start(ASK, {"topic": "tea"}, detach=True)
        assert asked.wait(30)
        others = [counting.start(str(program), {"n": 20}, detach=True) for _ in range(3)]
        assert [o.wait(timeout=60).output for o in others] == [210] * 3  # while `ask` still blocks
        assert not blocked.done()
        gate.set()
        assert blocked.wait(timeout=60).output == "answer: late"
    finally:
        gate.set()
        host.close()
        counting.close()


def test_a_background_run_halted_while_its_call_is_out_is_halted_and_resumes(tmp_path):
    ask, asked, gate = _gated()
    host = flowrt.Host({"ask.ask": ask, "ask.note": lambda text: None}, runs=str(tmp_path / "runs"),
                       durability="none")
    try:
        handle = host.start(ASK, {"topic": "tea"}, detach=True)
        assert asked.wait(30)
        handle.halt()
        assert handle.wait(timeout=60).status == "halted"
        gate.set()
        # The call was out at the halt: resume settles it Unknown (docs/api.md), as on a thread
        resumed = host.resume(handle.run_id)
        assert resumed.status == "completed" and resumed.output == "no answer"
    finally:
        gate.set()
        host.close()


def test_a_refused_background_run_raises_as_before_and_the_hub_goes_on(tmp_path):
    program = tmp_path / "count.flow"
    program.write_text(COUNT)
    host = flowrt.Host({"count.echo": lambda n: n}, runs=str(tmp_path / "runs"), durability="none")
    try:
        with pytest.raises(flowrt.Refused):
            host.start(str(program), {"n": "not a number"}, detach=True)
        assert host.start(str(program), {"n": 3}, detach=True).wait(timeout=60).output == 6
    finally:
        host.close()


def test_background_runs_with_fsync_complete_and_their_histories_check(tmp_path):
    program = tmp_path / "count.flow"
    program.write_text(COUNT)
    host = flowrt.Host({"count.echo": lambda n: n}, runs=str(tmp_path / "runs"), durability="fsync")
    try:
        handles = [host.start(str(program), {"n": 10}, detach=True) for _ in range(4)]
        results = [h.wait(timeout=120) for h in handles]
        assert [r.output for r in results] == [55] * 4
        assert all(host.replay(h.run_id).verdict == "Matched" for h in handles)
    finally:
        host.close()


# ---- which Python Tools the hub serves on its own thread ---------------------------------------


def test_a_callable_is_proven_quick_after_its_first_quick_calls_and_never_again_once_slow_twice():
    def quick(n):
        return n

    def slow(n):
        time.sleep(quick_calls.QUICK_SECONDS * 3)
        return n

    fast, sluggish = quick_calls.record_of(quick), quick_calls.record_of(slow)
    assert quick_calls.record_of(quick) is fast  # one record per callable, whoever binds it
    for n in range(quick_calls.PROVEN_AFTER):
        assert not fast.proven
        assert fast.timed(quick, {"n": n}) == n
    assert fast.proven
    assert sluggish.timed(slow, {"n": 1}) == 1 and not sluggish.proven
    for n in range(quick_calls.PROVEN_AFTER * 2):
        sluggish.quick = 0
        sluggish.timed(quick, {"n": n})  # quick calls after a slow one do not prove it again
    assert not sluggish.proven
    with pytest.raises(ZeroDivisionError):
        fast.timed(lambda: 1 / 0, {})  # a call that raises is timed too
    assert fast.proven
    # A proven callable's one slow call (its thread put aside mid-call) leaves it proven; a
    # second within SLOW_AGAIN_WITHIN calls makes it slow for good.
    assert fast.timed(slow, {"n": 2}) == 2 and fast.proven
    for n in range(quick_calls.SLOW_AGAIN_WITHIN):
        fast.timed(quick, {"n": n})
    assert fast.timed(slow, {"n": 3}) == 3 and fast.proven  # long after the one before
    for n in range(quick_calls.SLOW_AGAIN_WITHIN - 2):
        fast.timed(quick, {"n": n})
    assert fast.timed(slow, {"n": 4}) == 4 and not fast.proven
    fast.timed(quick, {"n": 5})
    assert not fast.proven


def test_the_hub_serves_a_quick_tool_on_its_thread_and_a_slow_one_on_workers(tmp_path):
    program = tmp_path / "count.flow"
    program.write_text(COUNT)
    seen: dict[str, set] = {"quick": set(), "slow": set()}

    def quick(n):
        seen["quick"].add(threading.current_thread().name)
        return n

    def slow(n):
        seen["slow"].add(threading.current_thread().name)
        time.sleep(0.002)
        return n

    for name, fn in (("quick", quick), ("slow", slow)):
        host = flowrt.Host({"count.echo": fn}, runs=str(tmp_path / name), durability="none")
        try:
            handles = [host.start(str(program), {"n": 8}, detach=True) for _ in range(2)]
            assert [h.wait(timeout=60).output for h in handles] == [36, 36]
        finally:
            host.close()
    assert "flow runs" in seen["quick"]  # once proven, on the hub's own thread
    assert "flow runs" not in seen["slow"] and seen["slow"]  # always on a worker


def test_a_background_run_of_a_tool_process_is_driven_on_a_thread_of_its_own(tmp_path):
    # A Tool process answers through reader threads, each answer then waiting for the hub's thread:
    # such a run leaves the hub once bound (flowrt/run.py `run`), and ends as it would anywhere.
    (tmp_path / "count.flow").write_text(COUNT)
    (tmp_path / "count_tool.py").write_text(
        "from flowrt.toolkit import serve\n\n"
        "def echo(n):\n    return n\n\n"
        "if __name__ == '__main__':\n    serve({'count.echo': echo}, declared_in='count.flow')\n")
    (tmp_path / "flow.toml").write_text('[tools]\n"count" = { python = "count_tool.py" }\n')
    seen: list[str] = []
    original = run_hub.RunHub.on_own_thread

    def noted(self, function):
        seen.append("own thread")
        return original(self, function)

    run_hub.RunHub.on_own_thread = noted
    host = flowrt.Host({}, runs=str(tmp_path / "runs"), durability="none", allow=True)
    try:
        handles = [host.start(str(tmp_path / "count.flow"), {"n": 5}, detach=True) for _ in range(3)]
        assert [h.wait(timeout=60).output for h in handles] == [15] * 3
    finally:
        run_hub.RunHub.on_own_thread = original
        host.close()
    assert seen == ["own thread"] * 3


def test_an_async_hosts_runs_are_driven_by_the_hub_and_its_async_tools_stay_on_the_loop(tmp_path):
    # `await host.run(...)` from many requests at once: one thread drives them all (as
    # `Host.start(..., detach=True)`), not a thread each. A sync Tool proven quick is served on the
    # hub's thread; an async one is awaited on the application's loop, its call never held by the
    # hub's thread, however quick it is.
    import asyncio

    program = tmp_path / "count.flow"
    program.write_text(COUNT)
    seen: dict[str, set] = {"sync": set(), "async": set()}

    def echo(n):
        seen["sync"].add(threading.current_thread().name)
        return n

    async def echo_async(n):
        await asyncio.sleep(0)
        seen["async"].add(threading.current_thread().name)
        return n

    async def main(fn) -> tuple[list, list]:
        host = flowrt.AsyncHost({"count.echo": fn}, runs=str(tmp_path / fn.__name__), durability="none")
        async with host:
            started = [host.run(str(program), {"n": 12}) for _ in range(6)]
            handle = await host.start(str(program), {"n": 12}, detach=True)
            threads = [t.name for t in threading.enumerate() if t.name == "flow run"]
            results = await asyncio.gather(*started, handle.wait())
        return [r.output for r in results], threads

    outputs, threads = asyncio.run(main(echo))
    assert outputs == [78] * 7 and threads == []  # no thread per run
    assert "flow runs" in seen["sync"]
    outputs, _ = asyncio.run(main(echo_async))
    assert outputs == [78] * 7
    assert seen["async"] == {threading.main_thread().name}  # on the loop's own thread


def test_an_async_tool_that_waits_on_the_loop_never_holds_the_hubs_other_runs(tmp_path):
    # Quick for its first calls, then waiting on the loop until the hub's other runs have ended:
    # served on the hub's thread, it would hold them until it is let go (after 30 s, and then
    # this test fails rather than waits).
    import asyncio

    program = tmp_path / "count.flow"
    program.write_text(COUNT)
    others = flowrt.Host({"count.echo": lambda n: n}, runs=str(tmp_path / "others"), durability="none")
    box: dict = {}

    def run_others() -> None:
        handles = [others.start(str(program), {"n": 10}, detach=True) for _ in range(3)]
        box["done"] = [h.wait(timeout=60).output for h in handles]

    async def main() -> int:
        released = asyncio.Event()
        calls = 0

        async def echo(n):
            nonlocal calls
            calls += 1
            if calls == 5:
                await asyncio.wait_for(released.wait(), 60)
            return n

        host = flowrt.AsyncHost({"count.echo": echo}, runs=str(tmp_path / "runs"), durability="none")
        waiting = asyncio.ensure_future(host.run(str(program), {"n": 8}))
        while calls < 5:
            await asyncio.sleep(0.01)
        thread = threading.Thread(target=run_others, daemon=True)
        thread.start()
        for _ in range(600):
            if not thread.is_alive():
                break
            await asyncio.sleep(0.05)
        box["before_release"] = "done" in box
        released.set()
        return (await waiting).output

    try:
        output = asyncio.run(main())
    finally:
        others.close()
    assert box["before_release"] and box["done"] == [55] * 3 and output == 36
