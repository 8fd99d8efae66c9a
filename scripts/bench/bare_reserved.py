"""For context beside the bare append+fsync loops: the same lines written over space filled with
zeros and synced first, as the store writes a durable history (docs/trace.md section 9)."""

from __future__ import annotations

import os
import time


def write_over_zeros(path: str, lines: list[bytes]) -> float:
    """Seconds to write `lines` one by one over reserved zeros, each followed by fdatasync."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, bytes(sum(map(len, lines)) + 4096))
        os.fsync(fd)
        start = time.perf_counter()
        at = 0
        for line in lines:
            os.pwrite(fd, line, at)
            at += len(line)
            os.fdatasync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
