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
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flowrt.abi import canonical_json, parse_int

PENDING = object()
Deliver = Callable[[str, Any], None]


class BindError(Exception):
    """A Tool cannot be bound: the run is refused before its first fact."""


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

    def describe(self) -> dict[str, str] | None:
        """Fingerprints by Tool identity, when the implementation can say (commands can)."""
        return None

    def call(self, run: str, call_id: str, tool: str, arguments: dict, types: Any, deliver: Deliver) -> None:
        raise NotImplementedError

    def runs_inline(self, tool: str) -> bool:
        """Whether `call_here` can serve `tool` on the caller's thread."""
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
    the call is answered `Unknown`."""

    def __init__(self, functions: Mapping[str, Callable[..., Any]]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.functions = dict(functions)
        # Calls run concurrently on reused threads (a thread per call costs more than a call).
        self.pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="tool")
        self.inline: dict[str, bool] = {}

    def call(self, run, call_id, tool, arguments, types, deliver) -> None:
        fn = self.functions[tool]
        self.pool.submit(_serve, call_id, lambda: fn(**arguments), deliver)

    def runs_inline(self, tool: str) -> bool:
        inline = self.inline.get(tool)
        if inline is None:
            fn = self.functions[tool]
            inline = not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)))
            self.inline[tool] = inline
        return inline

    def call_here(self, run, call_id, tool, arguments, types, deliver_here, deliver) -> None:
        fn = self.functions[tool]
        try:
            result = fn(**arguments)
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

    def call(self, run, call_id, tool, arguments, types, deliver) -> None:
        deliver(call_id, PENDING)

    def label(self) -> str:
        return "pending"


class ClockTools(Implementation):
    """The host's std@v1/clock: `now` reads the wall clock, `sleep` waits."""

    def call(self, run, call_id, tool, arguments, types, deliver) -> None:
        if tool.endswith(".now"):
            deliver(call_id, {"Ok": _rfc3339(time.time_ns())})
            return
        seconds = _duration_seconds(arguments.get("d", "PT0S"))

        def later() -> None:
            time.sleep(max(0.0, seconds))
            deliver(call_id, {"Ok": None})

        threading.Thread(target=later, name=f"sleep {call_id}", daemon=True).start()

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
    """A process speaking the JSON-lines Tool protocol (DESIGN.md §3) on its stdin and stdout."""

    def __init__(self, command: list[str], cwd: str) -> None:
        self.command = command
        self.cwd = cwd
        self.process: subprocess.Popen | None = None
        self.deliveries: dict[str, Deliver] = {}
        self.lock = threading.Lock()
        self.described: dict[str, str] | None = None
        self.described_event = threading.Event()
        self.stderr_tail: list[str] = []

    def start(self) -> None:
        try:
            self.process = subprocess.Popen(self.command, cwd=self.cwd, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            text=True, encoding="utf-8", bufsize=1)
        except OSError as problem:
            raise BindError(f"cannot start {' '.join(self.command)}: {problem.strerror or problem}") from None
        threading.Thread(target=self._read, name="tool reader", daemon=True).start()
        threading.Thread(target=self._drain_stderr, name="tool stderr", daemon=True).start()
        self._send({"op": "describe"})
        if not self.described_event.wait(30):
            raise BindError(f"{' '.join(self.command)} did not answer `describe` within 30 s")
        if self.described is None:
            raise BindError(f"{' '.join(self.command)} did not describe its tools")

    def describe(self) -> dict[str, str] | None:
        return self.described

    def _send(self, message: dict) -> None:
        assert self.process is not None and self.process.stdin is not None
        line = canonical_json(message).decode("utf-8") + "\n"  # Ints of any size (json.dumps: 4,300 digits)
        with self.lock:
            try:
                self.process.stdin.write(line)
                self.process.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self._line(line)
        # The process ended: every call still out is answered Unknown (its effects are unknown).
        with self.lock:
            open_calls = list(self.deliveries.items())
            self.deliveries.clear()
        code = self.process.wait()
        for call_id, deliver in open_calls:
            deliver(call_id, {"Err": {"Unknown": f"the implementation exited (status {code}) with the call out"}})
        self.described_event.set()

    def _line(self, line: str) -> None:
        try:
            message = json.loads(line, parse_int=parse_int)  # Ints past 4,300 digits too
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        if message.get("op") == "described":
            tools = message.get("tools")
            if isinstance(tools, list):
                self.described = {t.get("tool"): t.get("fingerprint") for t in tools if isinstance(t, dict)}
            self.described_event.set()
            return
        call_id = message.get("id")
        if not isinstance(call_id, str):
            return
        with self.lock:
            deliver = self.deliveries.get(call_id)
            if deliver is not None and not message.get("pending"):
                del self.deliveries[call_id]
        if deliver is None:
            return
        if message.get("pending") is True:
            deliver(call_id, PENDING)
        elif "outcome" in message:
            deliver(call_id, message["outcome"])
        else:
            deliver(call_id, {"Err": {"BadReply": "the reply line carries neither an outcome nor pending"}})

    def _drain_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr_tail.append(line)
            del self.stderr_tail[:-50]

    def call(self, run, call_id, tool, arguments, types, deliver) -> None:
        with self.lock:
            self.deliveries[call_id] = deliver
        message = {"op": "call", "run": run, "id": call_id, "tool": tool, "arguments": arguments}
        if types is not None:
            message["types"] = types
        self._send(message)

    def cancel(self, call_id: str) -> None:
        with self.lock:
            self.deliveries.pop(call_id, None)
        self._send({"op": "cancel", "id": call_id})

    def close(self) -> None:
        if self.process is None:
            return
        try:
            if self.process.stdin:
                self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def label(self) -> str:
        return "command " + " ".join(self.command)


# ---- the manifest ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ManifestEntry:
    key: str  # a module identity or a Tool identity
    command: tuple[str, ...] | None
    pending: bool


def read_manifest(path: str) -> dict[str, ManifestEntry]:
    """The `[tools]` table of a flow.toml; missing file: no entries."""
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
        raise BindError(f"cannot read {path}: {problem}") from None
    table = data.get("tools", {})
    if not isinstance(table, dict):
        raise BindError(f"{path}: [tools] must be a table")
    out: dict[str, ManifestEntry] = {}
    for key, spec in sorted(table.items()):
        if not isinstance(spec, dict):
            raise BindError(f"{path}: tools.{key} must be a table like {{ command = [...] }}")
        command = spec.get("command")
        if command is not None and (not isinstance(command, list) or not all(isinstance(c, str) for c in command)
                                    or not command):
            raise BindError(f"{path}: tools.{key}.command must be a list of strings")
        out[key] = ManifestEntry(key, tuple(command) if command else None, bool(spec.get("pending", False)))
    return out


def manifest_entry_for(manifest: Mapping[str, ManifestEntry], tool: str) -> ManifestEntry | None:
    if tool in manifest:
        return manifest[tool]
    module = tool.rsplit(".", 1)[0]
    return manifest.get(module)


def manifest_dir(root_file: str) -> str:
    return os.path.dirname(os.path.abspath(root_file))
