"""What a worker on a runs directory reads of it at each look (`DirectoryRuns.rows`, the one
entry): a discovery row (flowrt/store/discovery.py) for every run, read again only for a run whose
files changed since the last look.

A worker looks every `--poll` seconds and whenever a drive ends. Discovery reads each run's
history.jsonl and host.jsonl whole (within its bounds) and lists the root again for every page of
200, which made a look cost ~250 µs a run: 2.5 s, a whole core, for 10,000 runs polled every 2 s;
and past `discovery.ENTRY_LIMIT` entries discovery refuses to examine the root at all, which
stopped the worker. Here the root is listed once a look, without that bound (a worker must find
every due run, however many ended ones are beside them), and a run's row is kept with the
`lstat` of its two files (size, modification time, inode): while neither changed, the row stands.
A run that has ended is final: its row is kept without looking at its files again (removed, it
drops out of the listing). A file's modification time has a coarse clock, so a file modified in
the last `RECENT_NS` is read again even if it looks the same, as `RunLog.refresh` does."""

from __future__ import annotations

import os
import time

from flowrt.store.discovery import PAGE_LIMIT, _Budget, _inspect
from flowrt.store.layout import HISTORY, HOST

#: a file modified this recently is read again even when its size and time look unchanged
RECENT_NS = 2_000_000_000


def _stamp(path: str) -> tuple | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


class DirectoryRuns:
    """The rows of one runs directory, kept from look to look."""

    def __init__(self, root: str) -> None:
        self.root = os.fspath(root)
        self._rows: dict[str, tuple[tuple | None, dict]] = {}  # run -> (stamps, row)
        #: rows read from the files at the last look (tests, benchmarks)
        self.read = 0

    def rows(self) -> list[dict]:
        """Every run's discovery row, by run id; an OSError listing the root is raised."""
        names = sorted((entry.name for entry in os.scandir(self.root) if not entry.name.startswith(".")),
                       key=os.fsencode)
        kept: dict[str, tuple[tuple | None, dict]] = {}
        now = time.time_ns()
        self.read = 0
        out = []
        for name in names:
            known = self._rows.get(name)
            if known is not None and known[0] is None:  # ended: final
                kept[name] = known
                out.append(known[1])
                continue
            path = os.path.join(self.root, name)
            stamps = (_stamp(os.path.join(path, HISTORY)), _stamp(os.path.join(path, HOST)))
            fresh = all(s is None or now - s[1] > RECENT_NS for s in stamps)
            if known is not None and known[0] == stamps and fresh:
                kept[name] = known
                out.append(known[1])
                continue
            row = _inspect(self.root, name, _Budget(PAGE_LIMIT), first=True)
            self.read += 1
            ended = row.get("record") == "complete"
            kept[name] = (None if ended else stamps if fresh else ("recent",), row)
            out.append(row)
        self._rows = kept
        return out
