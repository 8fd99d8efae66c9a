"""The live status line of `flow run` and `flow resume` on a terminal: one line on stderr, redrawn
while the run goes (facts so far, the calls out and for how long, the time since the command
began), erased before the command prints its result.

Only for a person watching: stderr must be a terminal, and nothing asked for plain output
(`--json`, `--color never`, `NO_COLOR` set and not empty, `TERM=dumb`); on a pipe or a file there
is never a status line, so logs and scripts see exactly what they saw before.

It follows the run as any viewer does, through the store and read-only (`RunLog.refresh`, from a
thread of its own), so the run itself does no work for it.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from typing import TextIO

from flowrt.fact_times import duration_text
from flowrt.store import RunNotFound, StorageError, open_store

#: seconds between redraws
INTERVAL = 0.2
_ERASE = "\r\x1b[2K"


def wanted(stream: TextIO, *, color: str = "auto", as_json: bool = False) -> bool:
    """Whether a status line may be drawn on `stream`."""
    if as_json or color == "never":
        return False
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


class StatusLine:
    """Draws the status line of one run on `stream` until `stop()`. `follow(run_id)` begins
    following a run (for `flow run`, once storage has accepted Start; for `flow resume`, at once)."""

    def __init__(self, stream: TextIO, runs_dir: str) -> None:
        self.stream = stream
        self.runs_dir = runs_dir
        self.began = time.monotonic()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None
        self.drawn = False
        self.held = False  # a question is on the terminal
        self.lock = threading.Lock()

    def follow(self, run_id: str) -> None:
        if self.thread is not None:
            return
        self.thread = threading.Thread(target=self._loop, args=(run_id,), name="flow-status", daemon=True)
        self.thread.start()

    def asking(self, ask):
        """`ask` (a question put to the person on the terminal) with the line erased and not
        drawn while it waits for the answer."""
        def ask_with_line_away(*args):
            with self.lock:
                self.held = True
                if self.drawn:
                    self._write(_ERASE)
                    self.drawn = False
            try:
                return ask(*args)
            finally:
                self.held = False
        return ask_with_line_away

    def stop(self) -> None:
        """Stop drawing and erase the line (before the command's own output)."""
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(timeout=2)
        with self.lock:
            if self.drawn:
                self._write(_ERASE)
                self.drawn = False

    def _loop(self, run_id: str) -> None:
        try:
            run = open_store(self.runs_dir).open(run_id, for_append=False)
        except (RunNotFound, StorageError, ValueError, OSError):
            return
        try:
            tally = _Tally()
            tally.add(run.facts())
            while not self.stopped.is_set():
                self.draw(tally.text(run_id, time.monotonic(), self.began))
                if self.stopped.wait(INTERVAL):
                    break
                try:
                    new = run.refresh()
                except StorageError:
                    return  # the command reports storage failures itself
                if new is None:
                    return
                tally.add(new)
        finally:
            run.close()

    def draw(self, text: str) -> None:
        width = _width(self.stream)
        if len(text) >= width:
            text = text[:max(0, width - 2)] + "…"
        with self.lock:
            if self.stopped.is_set() or self.held:
                return
            self._write(_ERASE + text)
            self.drawn = True

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass


def _width(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size().columns


class _Tally:
    """What the line says, from the facts as they come: how many the run has, and each call out
    with the moment it was seen to go out."""

    def __init__(self) -> None:
        self.count = 0
        self.out: dict[str, tuple[str, float]] = {}  # call id -> (tool, when it was seen)

    def add(self, facts: list[dict]) -> None:
        now = time.monotonic()
        for fact in facts:
            self.count += 1
            kind = fact["kind"]
            if kind == "Call":
                self.out[fact["call"]] = (fact["tool"], now)
            elif kind == "Reply":
                self.out.pop(fact["call"], None)
            elif kind == "Stop":
                for call in fact.get("closed") or ():
                    self.out.pop(call, None)
            elif kind == "End":
                self.out.clear()

    def text(self, run_id: str, now: float, began: float) -> str:
        parts = [f"run {run_id}", f"{self.count} fact{'s' if self.count != 1 else ''}"]
        if self.out:
            tool, since = min(self.out.values(), key=lambda entry: entry[1])
            waited = duration_text(int((now - since) * 1000))
            more = f" and {len(self.out) - 1} more" if len(self.out) > 1 else ""
            parts.append(f"{len(self.out)} call{'s' if len(self.out) != 1 else ''} out: {tool} {waited}{more}")
        else:
            parts.append("no call out")
        parts.append(duration_text(int((now - began) * 1000)) + " elapsed")
        return " · ".join(parts)
