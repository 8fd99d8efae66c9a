"""Stored-run discovery of a runs directory: the execution seed's rows, within read bounds."""

from __future__ import annotations

import errno
import os
import stat
from typing import Any

from flowrt.store.archive import _read_anchor
from flowrt.store.durable import _strerror
from flowrt.store.errors import StorageError
from flowrt.store.format import _ending_of, rfc3339_ms, valid_run_id
from flowrt.store.host_records import _Host, _parse_host
from flowrt.store.layout import HISTORY, HOST
from flowrt.store.reading import _parse_history


COMPONENT_LIMIT = 4 * 1024 * 1024  # bytes of one component a page may read ...
PROBE = 1  # ... plus one byte, to tell "exactly 4 MiB" from "more"
PAGE_LIMIT = 16 * 1024 * 1024  # bytes a page may read in all
ENTRY_LIMIT = 10_000  # non-dot root entries examined before interpreting names


class _Budget:
    def __init__(self, total: int):
        self.left = total


def _bounded_read(path: str, budget: _Budget) -> tuple[bytes | None, str | None, OSError | None]:
    """Read at most min(4 MiB + 1, budget) bytes. Returns (data, limit reason, error)."""
    cap = min(COMPONENT_LIMIT + PROBE, budget.left)
    chunks: list[bytes] = []
    got = 0
    try:
        # O_NONBLOCK: a FIFO in place of a component must not hang discovery.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as problem:
        return None, None, problem
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        while got < cap:
            chunk = os.read(fd, min(cap - got, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        # Stopped by the page ceiling rather than the component bound: more bytes exist?
        more = got >= cap and os.fstat(fd).st_size > got
    except OSError as problem:
        budget.left -= got  # partial bytes retained before a read error count
        return None, None, problem
    finally:
        os.close(fd)
    budget.left -= got
    if got >= COMPONENT_LIMIT + PROBE:
        return None, "larger than the 4 MiB component read bound", None
    if more:
        return None, "the 16 MiB page read ceiling was reached", None
    return b"".join(chunks), None, None


def _display_name(name: str) -> str:
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")


def _row(name: str) -> dict:
    return {
        "run": _display_name(name),
        "historyPresent": False,
        "record": "not-started",
        "truncated": False,
        "ending": None,
        "entry": None,
        "program": None,
        "lastFact": None,
        "hostDecision": None,
        "startedAt": None,
        "lastActivityAt": None,
        "problem": None,
    }


def _problem(component: str, status: str, message: str, fact: int | None = None) -> dict:
    return {"component": component, "status": status, "message": message, "fact": fact}


def _component_size(path: str) -> int:
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _inspect(root: str, name: str, budget: _Budget, first: bool) -> dict | None:
    """One discovery row, or None when the page ceiling leaves no room to examine this run."""
    row = _row(name)
    path = os.path.join(root, name)
    try:
        st = os.lstat(path)
    except OSError as problem:
        row["record"] = "unreadable"
        row["problem"] = _problem("run", "unreadable", _strerror(problem))
        return row
    if not stat.S_ISDIR(st.st_mode):
        row["record"] = "unreadable"
        row["problem"] = _problem("run", "unreadable", "not a run directory")
        return row
    if not valid_run_id(name):
        row["record"] = "unreadable"
        row["problem"] = _problem("run", "unreadable", "the directory name is not a run id")
        return row
    history_path = os.path.join(path, HISTORY)
    host_path = os.path.join(path, HOST)
    row["historyPresent"] = os.path.lexists(history_path)
    if not row["historyPresent"]:
        return row
    need = (min(_component_size(history_path), COMPONENT_LIMIT + PROBE)
            + min(_component_size(host_path), COMPONENT_LIMIT + PROBE))
    if need > budget.left and not first:
        return None
    data, limited, error = _bounded_read(history_path, budget)
    if error is not None:
        row["record"] = "unreadable"
        row["truncated"] = None
        row["problem"] = _problem(HISTORY, "unreadable", _strerror(error))
        return row
    if limited is not None:
        row["record"] = "inspection-limited"
        row["truncated"] = None
        row["problem"] = _problem(HISTORY, "inspection-limited", limited)
        return row
    try:
        anchor = _read_anchor(os.path.join(root, name))
    except StorageError:
        anchor = None
    # host.jsonl is read before the history is judged: its `durable` record decides where a torn
    # tail may start (docs/trace.md section 10); its own problems are reported below.
    host_data, host_limited, host_error = _bounded_read(host_path, budget)
    host = None
    if host_data is not None and host_error is None and host_limited is None:
        try:
            host = _parse_host(host_data)
        except StorageError as problem:
            host_error = problem
    return judge_row(row, name, data, anchor, host, host_error, host_limited)


def judge_row(row: dict, name: str, data: bytes, anchor: dict | None, host: _Host | None,
              host_error: BaseException | None, host_limited: str | None) -> dict:
    """Fill a discovery row from what was read of one run: its history's bytes, its archive
    anchor, and its host records as parsed (or why they are not: `host_error`, a StorageError or
    an OSError; `host_limited`, a read bound). Shared by every store, so rows are the same."""
    parsed = _parse_history(data, name, anchor, host.durable if host else None)
    facts = parsed.facts
    row["truncated"] = parsed.torn is not None
    if facts:
        start = facts[0]
        entry = start.get("entry")
        if isinstance(entry, dict):
            module, function = entry.get("module"), entry.get("function")
            row["entry"] = {"module": module if isinstance(module, str) else None,
                            "function": function if isinstance(function, str) else None}
        program = start.get("program")
        row["program"] = program if isinstance(program, str) else None
        last = facts[-1]
        row["lastFact"] = {"n": last["n"], "hash": last["hash"]}
        if last["kind"] == "End":
            ending = last.get("ending")
            row["ending"] = ending if ending is not None else _ending_of(last.get("outcome"))
    if parsed.error is not None:
        row["record"] = "unreadable"
        row["truncated"] = None  # the tail was not reached
        err = parsed.error
        row["problem"] = _problem(HISTORY, "unreadable", err.message, err.fact_n)
        return row
    if not facts:
        row["record"] = "not-started"
        return row
    row["record"] = "complete" if facts[-1]["kind"] == "End" else "incomplete"
    if isinstance(host_error, StorageError):
        row["record"] = "unreadable"
        row["problem"] = _problem(HOST, "unreadable", host_error.message)
        return row
    if host_error is not None:
        if isinstance(host_error, FileNotFoundError):
            return row
        row["record"] = "unreadable"
        row["problem"] = _problem(HOST, "unreadable", _strerror(host_error))
        return row
    if host_limited is not None:
        row["record"] = "inspection-limited"
        row["problem"] = _problem(HOST, "inspection-limited", host_limited)
        return row
    records = host.records
    head = facts[-1]["hash"]
    # When Start and the latest fact with a recorded time were accepted (host records: a crash
    # may have lost the times of the last facts).
    last_n = facts[-1]["n"]
    if 1 in host.times:
        row["startedAt"] = rfc3339_ms(host.times[1])
    known = [n for n in host.times if n <= last_n]
    if known:
        row["lastActivityAt"] = rfc3339_ms(host.times[max(known)])
    for record in records:
        if record["kind"] in ("paused", "sleeping", "queued", "halted") and record.get("head") == head:
            row["hostDecision"] = record
    return row


def scan_runs(root: str, *, limit: int = 50, after: str | None = None) -> dict:
    """Stored-run discovery (the execution seed's rows): a page of runs under `root`, by id.

    Returns `{"runs": [row...], "nextAfter": id | None, "problems": [problem...]}`. Reads only
    history.jsonl and host.jsonl of each run (never a value or source file), within the read
    bounds, and never creates or changes anything. Invalid arguments raise ValueError."""
    if type(limit) is not int or not 1 <= limit <= 200:
        raise ValueError("limit is an integer from 1 to 200")
    if after is not None and (not isinstance(after, str) or not after or "/" in after
                              or "\0" in after):
        raise ValueError("after is a run id")
    root = os.fspath(root)
    result: dict[str, Any] = {"runs": [], "nextAfter": None, "problems": []}
    try:
        st = os.stat(root)
    except FileNotFoundError:
        result["problems"].append(_problem("root", "not-created", "the runs directory does not exist"))
        return result
    except OSError as problem:
        result["problems"].append(_problem("root", "unreadable", _strerror(problem)))
        return result
    if not stat.S_ISDIR(st.st_mode):
        result["problems"].append(_problem("root", "unreadable", "not a directory"))
        return result
    names: list[str] = []
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                names.append(entry.name)
                if len(names) > ENTRY_LIMIT:
                    result["problems"].append(_problem(
                        "root", "inspection-limited",
                        f"more than {ENTRY_LIMIT} entries; discovery examines at most {ENTRY_LIMIT}"))
                    return result
    except OSError as problem:
        result["problems"].append(_problem("root", "unreadable", _strerror(problem)))
        return result
    names.sort(key=os.fsencode)
    if after is not None:
        floor = os.fsencode(after)
        names = [name for name in names if os.fsencode(name) > floor]
    budget = _Budget(PAGE_LIMIT)
    examined = 0
    for name in names:
        if len(result["runs"]) >= limit:
            break
        row = _inspect(root, name, budget, first=not result["runs"])
        if row is None:
            break
        result["runs"].append(row)
        examined += 1
    if examined < len(names) and result["runs"]:
        result["nextAfter"] = result["runs"][-1]["run"]
    return result
