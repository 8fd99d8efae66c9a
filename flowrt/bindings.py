"""Tool implementations the host binds: Python callables, `flow.toml` commands, pending tools,
and the host's own std Tools (clock).

Every implementation answers a call by delivering an *outcome*, `{"Ok": v}` or `{"Err": problem}`
with problem `{"Failed": e}`, `{"NotRun": text}`, `{"Unknown": text}` or `{"BadReply": text}`, or by
delivering `PENDING` (the call stays open; the run may pause until `flow resume` answers it).
Calls run concurrently: each is served on its own thread (Python callables, the clock) or is
multiplexed by id over one process's pipe (commands).
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flowdata.canonical import dumps as canonical_json
from flowrt import quick_calls
from flowrt.tool_input import HELD_LIMIT, STALL_SECONDS, InputWriter
from flowrt.tool_lines import LINE_LIMIT, REPLY_LIMIT, drain_tail, nesting, tail_text, top_level_id
from flowrt.tool_output import ToolOutput

PENDING = object()
Deliver = Callable[[str, Any], None]


class BindError(Exception):
    """A Tool cannot be bound: the run is refused before its first fact. `key` is the flow.toml
    `[tools]` entry at fault, `syntax` the TOML error, when there is one (to place the diagnostic)."""

    def __init__(self, message: str, *, key: str | None = None, syntax: Exception | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.syntax = syntax


# ---- outcomes a Python implementation can return -----------------------------------------------


@dataclass(frozen=True)
class Problem(Exception):
    """Raise or return one of these from a Python Tool implementation."""

    kind: str  # Failed | NotRun | Unknown | BadReply
    value: Any

    def outcome(self) -> dict:
        return {"Err": {self.kind: self.value}}


def ok(value: Any) -> dict:
    return {"Ok": value}


def failed(error: Any) -> Problem:
    return Problem("Failed", error)


def not_run(text: str) -> Problem:
    return Problem("NotRun", text)


def unknown(text: str) -> Problem:
    return Problem("Unknown", text)


class Implementation:
    """Serves some Tools. `call` must not block: it arranges for `deliver` to be called."""

    #: whether a run hub (flowrt/run_hub.py) drives a run bound to this well: its replies come
    #: on the driving thread or from worker threads at no more than a handoff each. A Tool
    #: process's (and a server's) come through reader threads of their own, and such a run is
    #: driven on a thread of its own.
    drives_in_hub = False

    def describe(self) -> dict[str, str] | None:
        """Fingerprints by Tool identity, when the implementation can say (commands can)."""
        return None

    def call(self, run: str, call_id: str, tool: str, arguments: dict, types: Any, deliver: Deliver) -> None:
        """`types`: the Tool at the call's type arguments (`flowrt.tool_types.Typed`), or None."""
        raise NotImplementedError

    def runs_inline(self, tool: str) -> bool:
        """Whether `call_here` can serve `tool` on the caller's thread."""
        return False

    def serves_in_hub(self, tool: str) -> bool:
        """Whether `call_here` may serve `tool` in a run hub (flowrt/run_hub.py), whose one
        thread drives every background run: only where it never holds that thread for long."""
        return False

    def call_here(self, run: str, call_id: str, tool: str, arguments: dict, types: Any, deliver_here: Deliver,
                  deliver: Deliver) -> None:
        """As `call`, on the caller's thread where `runs_inline(tool)`: an outcome known before
        this returns goes to `deliver_here`; one that comes later (from another thread) to
        `deliver`. The host uses it when the call is the only one out and the program waits for
        it, so nothing could run beside it anyway."""
        self.call(run, call_id, tool, arguments, types, deliver)

    def cancel(self, call_id: str) -> None:
        pass

    def close(self) -> None:
        pass

    def label(self) -> str:
        return type(self).__name__


class PythonTools(Implementation):
    """Python callables by Tool identity (`planner.next`). A callable takes the arguments as
    keyword arguments (JSON values, as the Tool protocol carries them) and returns the Ok value,
    an outcome dict, `PENDING`, or a `Problem` (returned or raised). Async callables are awaited.
    Any other exception is the implementation's failure after the call may have had effects, so
    the call is answered `Unknown`. A callable with a `call` parameter is also handed the
    `flowrt.ToolCall` (run and call id; a generic Tool's concrete types and their schemas)."""

    drives_in_hub = True

    def __init__(self, functions: Mapping[str, Callable[..., Any]]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.functions = dict(functions)
        # Calls run concurrently on reused threads (a thread per call costs more than a call).
        self.pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="tool")
        self.inline: dict[str, bool] = {}
        self.takes_call: dict[str, bool] = {}
        #: per Tool, how quick its callable's calls have been (flowrt/quick_calls.py)
        self.records: dict[str, quick_calls.Record] = {}

    def call(self, run, call_id, tool, arguments, types, deliver) -> None:
        fn = self.functions[tool]
        arguments = self.with_call(fn, run, call_id, tool, arguments, types)
        record = self.record_of(tool, fn)
        self.pool.submit(_serve, call_id, lambda: record.timed(fn, arguments), deliver)

    def record_of(self, tool: str, fn) -> quick_calls.Record:
        record = self.records.get(tool)
        if record is None:
            record = self.records[tool] = quick_calls.record_of(fn)
        return record

    def with_call(self, fn, run, call_id, tool, arguments, typed) -> dict:
        """The keyword arguments for `fn`: the call's own, and `call=ToolCall(...)` when `fn`
        takes a `call` parameter and the Tool has none of that name (a Tool's own argument wins)."""
        takes = self.takes_call.get(tool)
        if takes is None:
            takes = self.takes_call[tool] = accepts_call(fn)
        if not takes or "call" in arguments:
            return arguments
        from flowrt.tool_types import ToolCall

        told = typed.tool_call(run, call_id, tool) if typed is not None else ToolCall(run, call_id, tool)
        return {**arguments, "call": told}

    def runs_inline(self, tool: str) -> bool:
        inline = self.inline.get(tool)
        if inline is None:
            fn = self.functions[tool]
            inline = not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)))
            self.inline[tool] = inline
        return inline

    def serves_in_hub(self, tool: str) -> bool:
        # only a callable proven quick (flowrt/quick_calls.py): a slow one would hold every run
        return self.record_of(tool, self.functions[tool]).proven

    def call_here(self, run, call_id, tool, arguments, types, deliver_here, deliver) -> None:
        fn = self.functions[tool]
        arguments = self.with_call(fn, run, call_id, tool, arguments, types)
        try:
            result = self.record_of(tool, fn).timed(fn, arguments)
        except Problem as problem:
            deliver_here(call_id, problem.outcome())
            return
        except Exception as problem:  # the implementation failed; effects are unknown
            deliver_here(call_id, _failed_unknown(problem))
            return
        if type(result) not in _PLAIN and inspect.isawaitable(result):
            # Awaited on a worker: this thread may be inside an event loop of its own.
            self.pool.submit(_serve, call_id, lambda: result, deliver)
            return
        deliver_here(call_id, _as_outcome(result))

    def close(self) -> None:
        self.pool.shutdown(wait=False)

    def label(self) -> str:
        return "python"


def accepts_call(fn: Callable[..., Any]) -> bool:
    """Whether `fn` declares a parameter `call` that can be passed by keyword (it is then handed
    the `flowrt.ToolCall`); a `**kwargs` alone does not ask for it."""
    try:
        parameter = inspect.signature(fn).parameters.get("call")
    except (TypeError, ValueError):  # a builtin or other callable without a signature
        return False
    return parameter is not None and parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                        inspect.Parameter.KEYWORD_ONLY)


_PLAIN = frozenset({int, str, dict, list, bool, type(None), float})  # never awaitable


def _serve(call_id: str, produce: Callable[[], Any], deliver: Deliver) -> None:
    """Run one call on a worker thread and deliver its outcome."""
    try:
        result = produce()
        if inspect.isawaitable(result):
            result = _run_async(result)
        deliver(call_id, _as_outcome(result))
    except Problem as problem:
        deliver(call_id, problem.outcome())
    except Exception as problem:  # the implementation failed; effects are unknown
        deliver(call_id, _failed_unknown(problem))


def _failed_unknown(problem: Exception) -> dict:
    return {"Err": {"Unknown": f"{type(problem).__name__}: {problem}"}}


def _run_async(awaitable):
    import asyncio  # only embeddings with async implementations pay for it

    return asyncio.run(_await(awaitable))


async def _await(awaitable):
    return await awaitable


def _as_outcome(result: Any) -> Any:
    if result is PENDING:
        return PENDING
    if isinstance(result, Problem):
        return result.outcome()
    if isinstance(result, dict) and len(result) == 1 and ("Ok" in result or "Err" in result):
        return result
    return {"Ok": result}


class PendingTools(Implementation):
    """`pending = true`: every call stays open until `flow resume --call ID --reply ...`."""

    drives_in_hub = True

    def call(self, run, call_id, tool, arguments, types, deliver) -> None:
        deliver(call_id, PENDING)

    def label(self) -> str:
        return "pending"


class ClockTools(Implementation):
    """The host's std@v1/clock: `now` reads the wall clock, `sleep` waits until its deadline.

    The Driver serves a sleep through `sleep_until` once its deadline is a host record
    (flowrt/timers.py), so a resumed run waits only for what remains; a sleep that is cancelled
    (its task stopped) or whose run lets go of it (`close`) delivers nothing."""

    drives_in_hub = True

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waits: dict[str, threading.Event] = {}  # call id -> set to stop its sleep
        self.closed = False

    def call(self, run, call_id, tool, arguments, types, deliver) -> None:
        if tool.endswith(".now"):
            deliver(call_id, {"Ok": _rfc3339(time.time_ns())})
            return
        seconds = _duration_seconds(arguments.get("d", "PT0S"))
        self.sleep_until(call_id, time.time_ns() + int(max(0.0, seconds) * 1e9), deliver)

    def sleep_until(self, call_id: str, deadline_ns: int, deliver: Deliver) -> None:
        """Deliver Ok(()) to `call_id` once the wall clock reaches `deadline_ns` (at once if it has)."""
        stop = threading.Event()
        with self.lock:
            if self.closed:
                return
            self.waits[call_id] = stop

        def later() -> None:
            # Waits in steps, each against the wall clock, so a long sleep ends at its deadline
            # even if the machine was suspended meanwhile.
            while not stop.is_set():
                left = (deadline_ns - time.time_ns()) / 1e9
                if left <= 0:
                    break
                stop.wait(min(left, 60.0))
            with self.lock:
                self.waits.pop(call_id, None)
            if not stop.is_set():
                deliver(call_id, {"Ok": None})

        threading.Thread(target=later, name=f"sleep {call_id}", daemon=True).start()

    def cancel(self, call_id: str) -> None:
        with self.lock:
            stop = self.waits.pop(call_id, None)
        if stop is not None:
            stop.set()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            waits, self.waits = self.waits, {}
        for stop in waits.values():
            stop.set()

    def label(self) -> str:
        return "host clock"


def _rfc3339(nanos: int) -> str:
    seconds, frac = divmod(nanos, 1_000_000_000)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + "Z"


def _duration_seconds(text: str) -> float:
    negative = text.startswith("-")
    body = text.lstrip("-")
    if not (body.startswith("PT") and body.endswith("S")):
        return 0.0
    value = float(body[2:-1])
    return -value if negative else value


class CommandTools(Implementation):
    """A process speaking the JSON-lines Tool protocol (DESIGN.md §3) on its stdin and stdout.

    What the process writes is read with a bound (`flowrt.tool_lines`). A line that is not a
    protocol message breaks the protocol: the process is no longer trusted, every call out to
    it is answered BadReply, it is closed, and later calls to it are NotRun (never sent). A
    reply line too long or too deep to read, whose start names a call out, is that call's
    BadReply alone (a limit, as the reply limit is). When the process exits, its calls out are
    Unknown, and later calls NotRun. Its output is read by a reader thread of its own, or, for
    the only call out when the run waits for it (`call_here`), by the driving thread
    (`flowrt.tool_output`)."""

    def __init__(self, command: list[str], cwd: str, shown: str | None = None) -> None:
        self.command = command
        self.cwd = cwd
        self.shown = shown or " ".join(command)  # how messages name it
        self.process: subprocess.Popen | None = None
        self.deliveries: dict[str, Deliver] = {}
        self.cancelled: set[str] = set()  # a reply may still come for these: not a breach
        self.lock = threading.Lock()  # deliveries, cancelled, gone
        self.writer: InputWriter | None = None
        #: why calls to it are no longer sent (it exited, or broke the protocol); None while it serves
        self.gone: str | None = None
        self.broke: str | None = None
        self.described: dict[str, str] | None = None
        self.described_event = threading.Event()
        self.stderr_tail = bytearray()
        self.stderr_done = threading.Event()
        #: the `flowrt.tool_processes.ToolProcesses` that lent it to a run (closing it gives it
        #: back), the stamp of its command's files then, and whether a run holds it now
        self.keeper = None
        self.keeper_key: tuple | None = None
        self.lent = False
        self.output: ToolOutput | None = None
        self.line_number = 0  # of the last line read from its output, by whichever thread

    def start(self) -> None:
        try:
            self.process = subprocess.Popen(self.command, cwd=self.cwd, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
        except OSError as problem:
            raise BindError(f"cannot start {self.shown}: {problem.strerror or problem}") from None
        self.writer = InputWriter(self.process.stdin, self._stalled, self._input_closed)
        self.output = ToolOutput(self.process.stdout.fileno(), self._serve_lines, self._output_ended)
        threading.Thread(target=self.output.run, name="tool reader", daemon=True).start()
        threading.Thread(target=self._drain_stderr, name="tool stderr", daemon=True).start()
        self._send(None, {"op": "describe"})
        if not self.described_event.wait(DESCRIBE_SECONDS):
            self._end()
            raise BindError(self._describe_failure(f"did not answer `describe` within {DESCRIBE_SECONDS} s"))
        if self.described is None:
            self._end()
            raise BindError(self._describe_failure(self.broke or "did not describe its tools"))

    def _describe_failure(self, what: str) -> str:
        """What a person needs to see why: the command, how it ended, the end of its stderr."""
        assert self.process is not None
        code = self.process.poll()
        status = "it is still running" if code is None else f"exit status {code}" if code >= 0 \
            else f"killed by signal {-code}"
        self.stderr_done.wait(2)
        tail = tail_text(self.stderr_tail)
        text = f"`{self.shown}` {what} ({status})"
        if tail:
            text += "; the end of its stderr:\n" + "\n".join("    " + line for line in tail.split("\n"))
        else:
            text += "; it wrote nothing to stderr"
        return text

    def describe(self) -> dict[str, str] | None:
        return self.described

    def _send(self, call_id: str | None, message: dict) -> str | None:
        """Queue the line (never blocks): None, or why it was not (`InputWriter.put`)."""
        assert self.writer is not None
        line = canonical_json(message) + b"\n"  # Ints of any size (json.dumps stops at 4,300 digits)
        return self.writer.put(call_id, line)

    def _settle(self, open_calls: list[tuple[str, Deliver]], never: str, seen: dict) -> None:
        """Answer the calls out, in the order they were made: NotRun (`never`) for those the
        process provably never got, `seen` for those it may have read (a byte of the line went
        into its pipe). The writer must be stopped first, so which is which is final."""
        assert self.writer is not None
        for call_id, deliver in open_calls:
            deliver(call_id, seen if self.writer.was_started(call_id) else {"Err": {"NotRun": never}})

    def _stalled(self) -> None:
        """Lines waited and the process read none of them for STALL_SECONDS: it no longer serves
        the protocol. The calls it may have read are Unknown; the others were never sent."""
        reason = f"left its input unread for {STALL_SECONDS:g} s"
        self._stop_serving(f"{reason} (the host had lines waiting for it)", f"not sent: the implementation {reason}",
                           {"Err": {"Unknown": f"the implementation {reason} with the call out; it was closed"}})

    def _input_closed(self, unsent: list[str]) -> None:
        """The process closed its stdin (or exited): the calls whose lines never went in are
        NotRun; calls it has read may still be answered on its output."""
        with self.lock:
            dropped = [(c, self.deliveries.pop(c)) for c in unsent if c in self.deliveries]
        for call_id, deliver in dropped:
            deliver(call_id, {"Err": {"NotRun": "not sent: the implementation no longer reads its input"}})

    def _serve_lines(self, lines: list[tuple[bytes, bool]]) -> None:
        for line, cut in lines:
            self.line_number += 1
            if self.broke is None:
                try:
                    self._line(self.line_number, line, cut)
                except Exception as problem:  # a host bug must not leave the calls out waiting forever
                    self._break(self.line_number, f"a line the host failed to read ({type(problem).__name__}: {problem})", line)

    def _output_ended(self) -> None:
        """The process closed its output: it cannot answer any more. Every call still out is
        answered Unknown (its effects are unknown), and later calls are not sent."""
        assert self.writer is not None
        self.writer.stop()
        with self.lock:
            open_calls = list(self.deliveries.items())
            self.deliveries.clear()
            if self.gone is None:
                self.gone = "the implementation had exited"
        self.described_event.set()
        ended = self._end()
        self._settle(open_calls, f"not sent: the implementation {ended} first",
                     {"Err": {"Unknown": f"the implementation {ended} with the call out"}})

    def _line(self, number: int, line: bytes, cut: bool) -> None:
        from flowdata import codec

        if not cut and not line.strip():
            return  # a blank line says nothing
        message = None
        if not cut:
            try:
                message = codec.parse_json(line)
            except codec.DecodeError as problem:
                reason = problem.message
            else:
                reason = None
        if message is None:
            # Unread: too long, too deep, not UTF-8 or not JSON. A limit its start can pin on a
            # call out is that call's BadReply; anything else says nothing the host can trust.
            text = line.decode("utf-8", errors="replace")
            call_id = top_level_id(text)
            limit = f"over the {LINE_LIMIT}-byte line limit" if cut \
                else "nested too deeply" if call_id is not None and nesting(text) > DEPTH_LIMIT else None
            if limit is not None and call_id is not None and self._answer(call_id, {"Err": {"BadReply": (
                    f"the reply line is {limit} (an outcome may have {REPLY_LIMIT} bytes of canonical JSON)"
                    if cut else f"the reply is {limit} to read")}}):
                return
            self._break(number, f"{'a line over the ' + str(LINE_LIMIT) + '-byte limit' if cut else reason}"
                        f"{' naming no call out' if limit is not None else ''}", line)
            return
        if not isinstance(message, dict):
            self._break(number, f"a JSON {_json_kind(message)}, not an object", line)
            return
        if message.get("op") == "described":
            tools = message.get("tools")
            if self.described is None and isinstance(tools, list) and all(
                    isinstance(t, dict) and isinstance(t.get("tool"), str) for t in tools):
                self.described = {t["tool"]: t.get("fingerprint") for t in tools}
                self.described_event.set()
            elif self.described is None:
                self._break(number, "a `described` message whose tools are not a list of {tool, fingerprint}", line)
            return
        call_id = message.get("id")
        if not isinstance(call_id, str):
            self._break(number, "an object with no `id`" if "op" not in message and call_id is None
                        else "an object whose `id` is not a string" if "op" not in message
                        else f"an object with op {str(message['op'])[:40]!r}, which is not a reply", line)
            return
        if message.get("pending") is True and "outcome" not in message:
            with self.lock:
                deliver = self.deliveries.get(call_id)
            if deliver is not None:
                deliver(call_id, PENDING)
                return
        elif self._answer(call_id, message["outcome"] if "outcome" in message else {"Err": {
                "BadReply": "the reply line carries neither an outcome nor pending"}}):
            return
        with self.lock:
            late = call_id in self.cancelled
        if not late:
            self._break(number, f"a reply for {call_id[:80]!r}, which is not a call out to it", line)

    def _answer(self, call_id: str, outcome: Any) -> bool:
        """Deliver the outcome of a call out; False when `call_id` is not one."""
        with self.lock:
            deliver = self.deliveries.pop(call_id, None)
        if deliver is None:
            return False
        deliver(call_id, outcome)
        return True

    def _break(self, number: int, what: str, line: bytes) -> None:
        """The process broke the protocol: every call out is BadReply, the process is closed."""
        shown = line[:60].decode("utf-8", errors="replace")
        broke = f"broke the Tool protocol: its output line {number} is {what} ({shown!r}{'...' if len(line) > 60 else ''})"
        self._stop_serving(broke, f"not sent: the implementation {broke}",
                           {"Err": {"BadReply": f"the implementation {broke}"}})

    def _stop_serving(self, broke: str, never: str, seen: dict) -> None:
        """The process is no longer trusted (`broke` says why): its writer stops, every call out is
        settled (`seen` if any of its line reached the process, NotRun `never` if none did),
        later calls are NotRun, and the process is killed."""
        self.broke = broke
        assert self.writer is not None
        self.writer.stop()
        with self.lock:
            open_calls = list(self.deliveries.items())
            self.deliveries.clear()
            self.gone = f"the implementation {broke}; it was closed"
        self.described_event.set()
        self._settle(open_calls, never, seen)
        self._end(grace=0)

    def _end(self, grace: float = 2) -> str:
        """Close the process (killed if it does not exit within `grace` s of its stdin closing);
        how it ended, as `the implementation ...` goes on."""
        assert self.process is not None
        if self.writer is not None:
            self.writer.stop()  # the writer closes the process's stdin within POLL_SECONDS
        try:
            code = self.process.wait(timeout=grace) if grace else self.process.poll()
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            self.process.kill()
            self.process.wait()
            return "closed its output and was killed (it did not exit)"
        return f"exited (status {code})" if code >= 0 else f"exited (killed by signal {-code})"

    def _drain_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        try:
            drain_tail(self.process.stderr.fileno(), self.stderr_tail)
        finally:
            self.stderr_done.set()

    def runs_inline(self, tool: str) -> bool:
        return True

    def call_here(self, run, call_id, tool, arguments, types, deliver_here, deliver) -> None:
        """Send the call and read its reply on this thread for up to REPLY_HERE_SECONDS; a reply
        later than that is read by the reader thread, given the output back."""
        output = self.output
        if output is None or not output.take():
            self.call(run, call_id, tool, arguments, types, deliver)
            return
        here = threading.get_ident()
        answered: list[str] = []

        def delivery(got_id: str, outcome: Any) -> None:
            answered.append(got_id)
            # Settled from another thread (the writer's, when the process stops reading): queued.
            (deliver_here if threading.get_ident() == here else deliver)(got_id, outcome)

        try:
            output.read_here(0)  # what it wrote since the last call: it may have exited, or broken the protocol
            self._call(run, call_id, tool, arguments, types, delivery)
            deadline = time.monotonic() + REPLY_HERE_SECONDS
            while call_id not in answered and not output.done and self.broke is None:
                left = deadline - time.monotonic()
                if left <= 0 or not output.read_here(left):
                    break
        finally:
            with self.lock:
                if call_id in self.deliveries:
                    self.deliveries[call_id] = deliver  # its reply comes later, from the reader thread
                out = bool(self.deliveries)
            if output.done_here() or out or output.done or self.broke is not None:
                output.give_back()

    def call(self, run, call_id, tool, arguments, types, deliver) -> None:
        if self.output is not None:
            self.output.give_back()  # its reply is read by the reader thread
        self._call(run, call_id, tool, arguments, types, deliver)

    def _call(self, run, call_id, tool, arguments, types, deliver) -> None:
        with self.lock:
            gone = self.gone
            if gone is None:
                self.deliveries[call_id] = deliver
        if gone is not None:
            deliver(call_id, {"Err": {"NotRun": f"not sent: {gone}"}})
            return
        message = {"op": "call", "run": run, "id": call_id, "tool": tool, "arguments": arguments}
        if types is not None:
            message.update(types.message_fields())
        refused = self._send(call_id, message)
        if refused is not None:
            # Its stdin is closed, or too much already waits for it: the call never reached it.
            with self.lock:
                deliver = self.deliveries.pop(call_id, None)
            if deliver is not None:
                deliver(call_id, {"Err": {"NotRun": "not sent: the implementation no longer reads its input"
                                          if refused == "closed" else
                                          f"not sent: {HELD_LIMIT // (1024 * 1024)} MiB of earlier calls wait "
                                          "for the implementation to read them"}})

    def cancel(self, call_id: str) -> None:
        if self.output is not None:
            self.output.give_back()  # a late reply to it is read as the reader thread reads
        with self.lock:
            if self.deliveries.pop(call_id, None) is not None:
                self.cancelled.add(call_id)
        self._send(None, {"op": "cancel", "id": call_id})

    def close(self) -> None:
        if self.process is None:
            return
        if self.output is not None:
            self.output.give_back()  # between runs, and until it ends, the reader thread reads
        if self.keeper is not None:
            if not self.lent:
                return  # idle with its keeper, which closes it
            if self.keeper.give_back(self):
                return  # kept for a later run of the same host
            self.keeper = None
        with self.lock:
            if self.gone is None:
                self.gone = "the implementation was closed"
        self._end(grace=5)

    def label(self) -> str:
        return "command " + self.shown


DESCRIBE_SECONDS = 30
#: how long the driving thread reads a Tool process's output for the reply to the call it waits
#: for before the reader thread does (a run's halt tick: on_wait looks at the halt after it)
REPLY_HERE_SECONDS = 0.05
DEPTH_LIMIT = 256  # a line that failed to parse and nests deeper was too deep, not broken


def _json_kind(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


# ---- the manifest ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ManifestEntry:
    key: str  # a module identity or a Tool identity
    command: tuple[str, ...] | None
    pending: bool
    #: how messages and the approval prompt name the command (`python tools/x.py`)
    shown: str | None = None
    #: an MCP server (`flowrt.mcp_tools`): `mcp = [...]` runs it on stdio (`command` is then that
    #: command, approved as any command is); `mcp_url = "..."` reaches it over streamable HTTP
    mcp: bool = False
    mcp_url: str | None = None
    #: a model binding's table (flowrt/model_tools.py), resolved against the environment when bound
    model: Mapping[str, Any] | None = None
    #: `reuse = false`: a host that keeps Tool processes across runs (flowrt/tool_processes.py)
    #: starts this command afresh for each run
    reuse: bool = True


def read_manifest(path: str) -> dict[str, ManifestEntry]:
    """The `[tools]` table of a flow.toml; missing file: no entries.

    An entry is `{ command = [...] }` (looked up on PATH, as a shell would), `{ python = "x.py" }`
    or `{ python = ["x.py", "arg"] }` (a script run by the host's own interpreter, so it runs
    whatever PATH holds, in the environment that has `flowrt`), `{ mcp = [...] }` or
    `{ mcp_url = "http://..." }` (an MCP server, `flowrt.mcp_tools`), `{ pending = true }`, or a
    model binding `{ model = "...", base_url = "...", ... }` (flowrt/model_tools.py)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return {}
    except OSError as problem:
        raise BindError(f"cannot read {path}: {problem}") from None
    import tomllib  # only a run that has a flow.toml pays for it

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as problem:
        raise BindError(f"cannot read {path}: {problem}", syntax=problem) from None
    table = data.get("tools", {})
    if not isinstance(table, dict):
        raise BindError(f"{path}: [tools] must be a table")
    out: dict[str, ManifestEntry] = {}
    for key, spec in sorted(table.items()):
        if not isinstance(spec, dict):
            raise BindError(f"{path}: tools.{key} must be a table like {{ python = \"tools/x.py\" }}", key=key)
        from flowrt.model_tools import is_model_entry

        if is_model_entry(spec):
            others = sorted(set(spec) & {"command", "python", "pending"})
            if others:
                raise BindError(f"{path}: tools.{key} binds a model and names {', '.join(others)}: keep one", key=key)
            out[key] = ManifestEntry(key, None, False, model=dict(spec))
            continue
        command = spec.get("command")
        script = spec.get("python")
        server = spec.get("mcp")
        url = spec.get("mcp_url")
        named = [k for k in ("command", "python", "mcp", "mcp_url", "pending") if spec.get(k) not in (None, False)]
        if len(named) > 1:
            raise BindError(f"{path}: tools.{key} names {' and '.join(named)}: keep one", key=key)
        if server is not None:
            if not isinstance(server, list) or not server or not all(isinstance(c, str) and c for c in server):
                raise BindError(f"{path}: tools.{key}.mcp must be the server's command, a list of strings", key=key)
            out[key] = ManifestEntry(key, tuple(server), False, None, mcp=True)
            continue
        if url is not None:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise BindError(f"{path}: tools.{key}.mcp_url must be an http:// or https:// address", key=key)
            out[key] = ManifestEntry(key, None, False, None, mcp=True, mcp_url=url)
            continue
        if command is not None and (not isinstance(command, list) or not all(isinstance(c, str) for c in command)
                                    or not command):
            raise BindError(f"{path}: tools.{key}.command must be a list of strings", key=key)
        shown = None
        if script is not None:
            if isinstance(script, str):
                script = [script]
            if not isinstance(script, list) or not script or not all(isinstance(c, str) and c for c in script):
                raise BindError(f"{path}: tools.{key}.python must be a script path, or a list of it and its arguments", key=key)
            command = [sys.executable, *script]
            shown = " ".join(["python", *script])
        pending = spec.get("pending", False)
        if not isinstance(pending, bool):
            raise BindError(f"{path}: tools.{key}.pending must be true or false", key=key)
        reuse = spec.get("reuse", True)
        if not isinstance(reuse, bool):
            raise BindError(f"{path}: tools.{key}.reuse must be true or false", key=key)
        if command is None and not pending:
            raise BindError(f"{path}: tools.{key} names no implementation: give it python = \"tools/x.py\", "
                            "command = [...], mcp = [...], mcp_url = \"...\", model = \"...\" or pending = true", key=key)
        out[key] = ManifestEntry(key, tuple(command) if command else None, pending, shown, reuse=reuse)
    return out


def manifest_entry_for(manifest: Mapping[str, ManifestEntry], tool: str) -> ManifestEntry | None:
    if tool in manifest:
        return manifest[tool]
    module = tool.rsplit(".", 1)[0]
    return manifest.get(module)


def manifest_dir(root_file: str) -> str:
    return os.path.dirname(os.path.abspath(root_file))
