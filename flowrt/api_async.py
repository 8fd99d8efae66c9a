"""The Python API for asyncio: `AsyncHost`, whose every method is a coroutine over `Host`'s own
(flowrt/api.py), and `AsyncRunHandle`. A run is driven off the loop as `Host.start(...,
detach=True)` drives one: with the process's other background runs by one thread
(flowrt/run_hub.py), or, on a database store, on a thread of its own. The application's loop
stays free to serve the run's async Tool callables, which are awaited on it; its sync callables
run off the loop, never on it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from flowrt import quick_calls, run_hub
from flowrt.api import _NO_REPLY, TICK, Host, _check_watch
from flowrt.api_results import HistoryPage, PendingCall, ReplayResult, RunResult, RunsPage


class AsyncHost:
    """`Host` for asyncio: every method is a coroutine. A run (`run`, `start`) is driven off the
    loop as `Host.start(..., detach=True)` drives one (with the process's other runs by one
    thread, flowrt/run_hub.py); async Tool callables are awaited on the loop that awaits the
    method (the application's), so they share its clients, locks and context, and sync callables
    run off the loop, never on it. Cancelling a `run`/`resume` halts the run (resumable), as an
    interrupt would."""

    def __init__(self, tools: Mapping[str, Callable[..., Any]] | None = None, *, runs: str | None = None,
                 durability: str = "fsync", allow: bool = False, telemetry: Any = None) -> None:
        self.host = Host(tools, runs=runs, durability=durability, allow=allow, telemetry=telemetry)

    @property
    def tools(self) -> dict[str, Callable[..., Any]]:
        return self.host.tools

    @property
    def location(self) -> str:
        return self.host.location

    async def close(self) -> None:
        """End the Tool processes this host keeps (`Host.close`); the host stays usable."""
        await asyncio.to_thread(self.host.close)

    async def __aenter__(self) -> "AsyncHost":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def run(self, path: str, input: Mapping[str, Any] | str | None = None, *, entry: str = "main",
                  allow: bool | None = None) -> RunResult:
        tools = _on_loop(self.host.tools, asyncio.get_running_loop())
        halt = threading.Event()
        return await _in_background(self.host.location, lambda: self.host._run(path, input, entry, allow, tools,
                                                                                 halt, None), halt)

    async def start(self, path: str, input: Mapping[str, Any] | str | None = None, *, entry: str = "main",
                    detach: bool = False, allow: bool | None = None) -> RunResult | "AsyncRunHandle":
        if not detach:
            return await self.run(path, input, entry=entry, allow=allow)
        loop = asyncio.get_running_loop()
        tools = _on_loop(self.host.tools, loop)
        started: asyncio.Future = loop.create_future()
        halt = threading.Event()

        def on_start(run_id: str, fact: dict) -> None:
            loop.call_soon_threadsafe(_settle, started, run_id, None)

        done = asyncio.ensure_future(_in_background(
            self.host.location, lambda: self.host._run(path, input, entry, allow, tools, halt, on_start), halt))
        await asyncio.wait({started, done}, return_when=asyncio.FIRST_COMPLETED)
        if not started.done():
            started.cancel()
            return await done  # refused before Start (raises), or ended before it (a storage failure)
        return AsyncRunHandle(started.result(), done, halt)

    async def resume(self, run_id: str, *, call: str | None = None, reply: Any = _NO_REPLY,
                     resend: Iterable[str] = (), allow: bool | None = None,
                     detach: bool = False) -> RunResult | "AsyncRunHandle":
        tools = _on_loop(self.host.tools, asyncio.get_running_loop())
        if detach:
            handle = await _in_thread(lambda: self.host._resume_detached(run_id, call, reply, resend, allow, tools))
            return AsyncRunHandle(run_id, asyncio.ensure_future(_in_thread(handle.wait)), handle._halt)
        halt = threading.Event()
        return await _in_thread(lambda: self.host._resume(run_id, call, reply, resend, allow, tools, halt), halt)

    async def replay(self, run_id: str, *, from_start: bool = True) -> ReplayResult:
        return await _in_thread(lambda: self.host.replay(run_id, from_start=from_start))

    async def fork(self, run_id: str, *, checkpoint: int, input: Mapping[str, Any] | str | None = None,
                   program: str | None = None, allow: bool | None = None) -> RunResult:
        tools = _on_loop(self.host.tools, asyncio.get_running_loop())
        return await _in_thread(lambda: self.host._fork(run_id, checkpoint, input, program, allow, tools))

    async def history(self, run_id: str, *, kinds: Iterable[str] | None = None, after: int = 0,
                      limit: int = 100) -> HistoryPage:
        return await _in_thread(lambda: self.host.history(run_id, kinds=kinds, after=after, limit=limit))

    async def runs(self, *, limit: int = 50, after: str | None = None) -> RunsPage:
        return await _in_thread(lambda: self.host.runs(limit=limit, after=after))

    def halt(self, run_id: str) -> None:
        self.host.halt(run_id)

    def watch(self, run_id: str, *, after: int = 0, poll: float = 0.05,
              timeout: float | None = None) -> AsyncIterator[dict]:
        """`async for fact in host.watch(run_id)`: `Host.watch`, its reads on a worker thread and
        its waits on the loop (an absent run is refused at the first step)."""
        _check_watch(after, poll, timeout)
        return _watch_async(self.host, run_id, after, poll, timeout)

    async def pending(self, run_id: str) -> tuple[PendingCall, ...]:
        return await _in_thread(lambda: self.host.pending(run_id))


class AsyncRunHandle:
    """A run going on in the background (`AsyncHost.start(..., detach=True)`), past its Start."""

    def __init__(self, run_id: str, done: asyncio.Future, halt: threading.Event) -> None:
        self.run_id = run_id
        self._done = done
        self._halt = halt

    def done(self) -> bool:
        return self._done.done()

    async def wait(self) -> RunResult:
        return await asyncio.shield(self._done)

    def halt(self) -> None:
        self._halt.set()


async def _watch_async(host: Host, run_id: str, after: int, poll: float, timeout: float | None) -> AsyncIterator[dict]:
    """`flowrt.watch.follow_async` of the run (an absent run is refused at the first step)."""
    from flowrt.watch import follow_async

    watch = await asyncio.to_thread(host._watch_of, run_id, after)
    try:
        async for row in follow_async(watch, poll=poll, timeout=timeout):
            yield row
    finally:
        watch.close()


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


async def _in_thread(work: Callable[[], Any], halt: threading.Event | None = None) -> Any:
    """`work()` on a thread of its own (a run blocks for as long as it goes), awaited without
    blocking the loop. Cancelled, it halts the run it drives (`halt`) and stops waiting."""
    return await _awaited(lambda run: threading.Thread(target=run, name="flow run", daemon=True).start(), work, halt)


async def _in_background(location: str, work: Callable[[], Any], halt: threading.Event) -> Any:
    """`_in_thread` for `work` driving one run of the store at `location`: started as
    `Host.start(..., detach=True)` starts one (`run_hub.in_background`)."""
    return await _awaited(lambda run: run_hub.in_background(location, run), work, halt)


async def _awaited(start: Callable[[Callable[[], None]], Any], work: Callable[[], Any],
                   halt: threading.Event | None) -> Any:
    """`work()`, started off the loop by `start`, awaited (see `_in_thread`)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()

    def run() -> None:
        try:
            result, error = work(), None
        except BaseException as problem:
            result, error = None, problem
        try:
            loop.call_soon_threadsafe(_settle, future, result, error)
        except RuntimeError:
            pass  # the loop closed: nobody waits for it any more

    start(run)
    try:
        return await future
    except asyncio.CancelledError:
        if halt is not None:
            halt.set()
        raise


def _on_loop(tools: Mapping[str, Callable[..., Any]], loop: asyncio.AbstractEventLoop) -> dict:
    """The tools, each awaitable they return awaited on `loop` (the application's) instead of a
    new loop per call. A wrapper keeps its callable's signature (`functools.wraps`), so binding
    checks and the `call` parameter see the callable itself."""
    return {identity: _awaited_on(fn, loop) for identity, fn in tools.items()}


def _awaited_on(fn: Callable[..., Any], loop: asyncio.AbstractEventLoop) -> Callable[..., Any]:
    @functools.wraps(fn)
    def serve(**arguments: Any) -> Any:
        result = fn(**arguments)
        if not inspect.isawaitable(result):
            return result
        awaiting = _await(result)
        future = asyncio.run_coroutine_threadsafe(awaiting, loop)
        while True:
            try:
                return future.result(timeout=TICK)
            except concurrent.futures.TimeoutError:
                if loop.is_closed() or not loop.is_running():
                    future.cancel()
                    awaiting.close()  # never started: nothing of it ran
                    if inspect.iscoroutine(result):
                        result.close()
                    from flowrt.bindings import unknown

                    return unknown("the application's event loop stopped with the call out")

    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
        quick_calls.never_quick(serve)
    return serve


async def _await(awaitable: Any) -> Any:
    return await awaitable
