"""A statement of the hot path (a recorded call's append) sent over libpq directly, through
psycopg's documented low-level connection (`Connection.pgconn`): prepared once per connection,
its parameters encoded in binary here, its result read for the one number the store needs (the
rows it changed).

Why not `Connection.execute`: for APPEND it cost ~20 µs of Python per statement (a cursor, the
parameters' adaptation, the prepared-statement bookkeeping, a result wrapper) beside ~11 µs this
way, and a recorded call is two statements (docs/impl.md, "The PostgreSQL store's recorded
call"). Everything else the store sends goes through psycopg as before.

The wait for the server's answer is a `poll` on the connection's socket, so a signal (Ctrl-C)
interrupts it as it interrupts psycopg's own wait; the answer is then read (a few seconds at
most) so that the connection goes on serving. The server's `statement_timeout` bounds the wait
otherwise, and the caller's `timeout` a server or network gone silent."""

from __future__ import annotations

import re
import select
import struct
import time
import weakref
from typing import Any, Callable

import psycopg
from psycopg import errors, pq

INT8, BOOL, TEXT, BYTEA, TEXT_ARRAY, BYTEA_ARRAY = 20, 16, 25, 17, 1009, 1001

_INT8 = struct.Struct("!q").pack
_LENGTH = struct.Struct("!i").pack
_ARRAY_HEAD = struct.Struct("!iiIii").pack  # dimensions, has nulls, element type, length, lower bound


def _array(element: int) -> Callable[[list], bytes]:
    def encode(items: list) -> bytes:
        if element == TEXT:
            items = [item.encode("utf-8") for item in items]
        return _ARRAY_HEAD(1, 0, element, len(items), 1) + b"".join(_LENGTH(len(item)) + item for item in items)
    return encode


_ENCODERS: dict[int, Callable[[Any], bytes]] = {
    INT8: _INT8,
    BOOL: lambda value: b"\x01" if value else b"\x00",
    TEXT: lambda value: value.encode("utf-8"),
    BYTEA: bytes,
    TEXT_ARRAY: _array(TEXT),
    BYTEA_ARRAY: _array(BYTEA),
}

#: how long an interrupted statement's answer is waited for before the connection is given up
DRAIN_SECONDS = 5.0

_PLACEHOLDER = re.compile(r"%\((\w+)\)[sb]")


class PreparedStatement:
    """`query` in psycopg's `%(name)s` / `%(name)b` style, each name's PostgreSQL type in `types`
    (a type above); `rows_changed(conn, args)` runs it with `args` (name -> value, None for
    NULL) and returns how many rows it inserted, updated or deleted. An interruption of the
    wait (a signal's exception) is raised after the answer was read, its `rows_changed`
    attribute set to that number (None when the answer could not be read: the connection is
    closed then)."""

    def __init__(self, name: str, query: str, types: dict[str, int]) -> None:
        self.name = name.encode("ascii")
        self.names: list[str] = []

        def number(match: re.Match) -> str:
            if match.group(1) not in self.names:
                self.names.append(match.group(1))
            return f"${self.names.index(match.group(1)) + 1}"

        self.query = _PLACEHOLDER.sub(number, query).encode("utf-8")
        if set(self.names) != set(types):
            raise ValueError(f"the statement's parameters are {sorted(self.names)}, typed {sorted(types)}")
        self.types = [types[name] for name in self.names]
        self._encoders = [_ENCODERS[oid] for oid in self.types]
        self._formats = [pq.Format.BINARY] * len(self.names)
        self._prepared_on: weakref.WeakSet = weakref.WeakSet()  # the pgconns holding it

    def rows_changed(self, conn: psycopg.Connection, args: dict[str, Any], timeout: float) -> int:
        """`timeout`: seconds the answer is waited for (beyond the server's own statement
        timeout: a server or network gone silent), after which the connection is closed and
        the statement failed (psycopg.OperationalError)."""
        pgconn = conn.pgconn
        if pgconn not in self._prepared_on:
            self._prepare(pgconn)
        params = [None if (value := args[name]) is None else encode(value)
                  for name, encode in zip(self.names, self._encoders)]
        try:
            pgconn.send_query_prepared(self.name, params, param_formats=self._formats)
            result = _answer(pgconn, timeout)
        except psycopg.Error:
            conn.close()  # the connection failed mid-statement: nothing more can be read in order
            raise
        except TimeoutError:
            conn.close()
            raise psycopg.OperationalError(f"the server did not answer within {timeout:.0f} s") from None
        except BaseException as interruption:
            # Interrupted (Ctrl-C): read the answer, on its way, so that the connection goes on
            # serving (the host records why it stopped on it), as psycopg's own wait does, and
            # the caller learns what the statement did; a server that does not answer within
            # DRAIN_SECONDS costs the connection instead.
            interruption.rows_changed = None
            try:
                answer = _answer(pgconn, DRAIN_SECONDS)
            except BaseException:
                conn.close()
                raise interruption from None
            try:
                interruption.rows_changed = _rows(answer, pgconn)
            except psycopg.Error:
                interruption.rows_changed = 0  # the statement failed: it changed nothing
            raise
        return _rows(result, pgconn)

    def _prepare(self, pgconn: pq.PGconn) -> None:
        result = pgconn.prepare(self.name, self.query, self.types)
        if result.status != pq.ExecStatus.COMMAND_OK:
            raise _error(result, pgconn)
        self._prepared_on.add(pgconn)


def _answer(pgconn: pq.PGconn, seconds: float | None = None) -> pq.PGresult:
    """The statement's result, waiting on the socket (interruptible by a signal), at most
    `seconds` when given (TimeoutError after)."""
    poller = select.poll()
    deadline = None if seconds is None else time.monotonic() + seconds
    fd = pgconn.socket
    while pgconn.flush():  # the connection is non-blocking (psycopg's): the query may not be out yet
        poller.register(fd, select.POLLIN | select.POLLOUT)
        _wait(poller, deadline)
        pgconn.consume_input()
    poller.register(fd, select.POLLIN)
    result = _next_result(pgconn, poller, deadline)
    # The answer ends with a NULL result (libpq's), which may still be on the way.
    while _next_result(pgconn, poller, deadline) is not None:
        pass
    if result is None:
        reason = pgconn.error_message.decode("utf-8", "replace").strip()
        raise psycopg.OperationalError(reason or "the server sent no result")
    return result


def _next_result(pgconn: pq.PGconn, poller: select.poll, deadline: float | None) -> pq.PGresult | None:
    """The next result, or None at the answer's end; never blocking in libpq (`get_result` of a
    busy connection would wait there, where no signal reaches Python)."""
    pgconn.consume_input()
    while pgconn.is_busy():
        _wait(poller, deadline)
        pgconn.consume_input()
    return pgconn.get_result()


def _wait(poller: select.poll, deadline: float | None) -> None:
    if deadline is None:
        poller.poll()
        return
    left = deadline - time.monotonic()
    if left <= 0 or not poller.poll(left * 1000):
        raise TimeoutError("the server did not answer in time")


def _rows(result: pq.PGresult, pgconn: pq.PGconn) -> int:
    if result.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
        raise _error(result, pgconn)
    return result.command_tuples or 0


def _error(result: pq.PGresult, pgconn: pq.PGconn) -> psycopg.Error:
    state = result.error_field(pq.DiagnosticField.SQLSTATE)
    message = (result.error_message or pgconn.error_message or b"the statement failed").decode("utf-8", "replace")
    try:
        kind = errors.lookup(state.decode("ascii")) if state else psycopg.OperationalError
    except KeyError:
        kind = psycopg.DatabaseError
    return kind(message.strip())
