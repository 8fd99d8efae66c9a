"""The run directory's probes of a run that another process may be appending to: whether an
appender holds the run's lock, and what the history's last fact is now (flowrt.run_state reads
them through `RunLog.appender_active` and `RunLog.stored_head`)."""

from __future__ import annotations

import errno
import fcntl
import json
import os

_TAIL_CHUNK = 1 << 16


def appender_holds(history_path: str) -> bool | None:
    """Whether another open file description holds the appender's lock on `history_path`: True,
    False, or None when that cannot be found out.

    It asks for a *shared* lock without waiting and gives it back at once. A live appender's
    exclusive lock refuses it (so the holder is never blocked or disturbed), and two readers'
    shared probes do not refuse each other. An appender that starts in the microseconds a probe
    holds the shared lock retries its lock for a bounded time (`store.APPEND_LOCK_SECONDS`), so a
    probe never makes it fail."""
    try:
        fd = os.open(history_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as problem:
            if problem.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return True
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def history_tail(history_path: str) -> tuple[str | None, bool] | None:
    """(the last complete line's `hash`, whether bytes of a torn line follow it) of the history
    file as it is now, skipping the NUL bytes of reserved space; None when it cannot be read.
    Reads from the end, only as far back as the last complete line."""
    try:
        with open(history_path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            data = b""
            start = end
            while True:
                step = min(_TAIL_CHUNK, start)
                start -= step
                f.seek(start)
                data = f.read(step) + data
                body = data.rstrip(b"\0")
                last = body.rfind(b"\n")
                if last >= 0:
                    before = body.rfind(b"\n", 0, last)
                    if before >= 0 or start == 0:
                        line = body[before + 1:last]
                        return json.loads(line).get("hash"), last + 1 < len(body)
                if start == 0:
                    return None, bool(body)
    except (OSError, ValueError, AttributeError):
        return None
