"""Tool processes a long-lived host keeps from one run to the next (`ToolProcesses.checkout`, the
one entry): a worker (flowrt/worker.py) and a host queueing many runs (`flowrt.Host.queue`) start
each flow.toml command once instead of once a run, which is most of what a short run costs.

A process is lent to one run at a time: checked out when the run is bound, given back when the
run lets go of its implementations (it ended, paused, was halted or queued). It is kept only if it
is still fit to serve: running, never broke the protocol, never stalled, and with no call out
(a call left open, a pending one say, could be answered after another run has it). Anything else
is closed as a run's Tool process always was. A process is keyed by its command, its working
directory and the modification stamp of each file its command names (a script edited on disk
gets a new process); the environment is the host's own, the same for every run it drives.

A Tool's flow.toml entry opts out with `reuse = false` (docs/cli.md): it gets a process of its
own per run, as under `flow run`."""

from __future__ import annotations

import os
import threading

from flowrt.bindings import CommandTools

#: idle processes kept per command when the keeper is not told (a worker keeps its concurrency)
IDLE_PER_COMMAND = 8


def _stamp(command: tuple[str, ...], cwd: str) -> tuple:
    """The (path, mtime_ns, size) of each file the command names, so an edited script is not
    served by a process that runs the old one."""
    stamps = []
    for part in command:
        path = part if os.path.isabs(part) else os.path.join(cwd, part)
        try:
            stat = os.stat(path)
        except (OSError, ValueError):
            continue
        if os.path.isfile(path):
            stamps.append((part, stat.st_mtime_ns, stat.st_size))
    return tuple(stamps)


class ToolProcesses:
    """The idle Tool processes of one host, by command; thread-safe (a worker's runs bind on
    threads of their own)."""

    def __init__(self, idle_per_command: int = IDLE_PER_COMMAND) -> None:
        self.idle_per_command = idle_per_command
        self.lock = threading.Lock()
        self.idle: dict[tuple, list[CommandTools]] = {}
        self.closed = False
        #: how many processes this keeper started (tests, benchmarks)
        self.started = 0

    def checkout(self, command: list[str], cwd: str, shown: str | None = None) -> CommandTools:
        """A started, described process running `command` in `cwd`, for one run: an idle one
        kept from an earlier run when one is fit, else a new one (`BindError` if it cannot
        start). Closing it (`close()`) gives it back."""
        key = (tuple(command), cwd)
        stamp = _stamp(key[0], cwd)
        stale: list[CommandTools] = []
        with self.lock:
            kept = self.idle.get(key, [])
            stale = [p for p in kept if p.keeper_key != stamp]
            fresh = [p for p in kept if p.keeper_key == stamp]
            chosen = None
            while fresh and chosen is None:
                candidate = fresh.pop()
                if _fit(candidate):
                    chosen = candidate
                else:
                    stale.append(candidate)
            self.idle[key] = fresh
        for process in stale:
            process.keeper = None
            process.close()
        if chosen is not None:
            chosen.lent = True
            return chosen
        process = CommandTools(list(command), cwd, shown)
        process.start()  # BindError as it always was
        with self.lock:
            self.started += 1
        process.keeper, process.keeper_key, process.lent = self, stamp, True
        return process

    def give_back(self, process: CommandTools) -> bool:
        """Keep `process` for a later run (True), or say it must be closed (False): unfit, or
        more idle than kept, or the keeper closed."""
        key = (tuple(process.command), process.cwd)
        with self.lock:
            process.lent = False
            if self.closed or not _fit(process):
                return False
            kept = self.idle.setdefault(key, [])
            if len(kept) >= self.idle_per_command:
                return False
            kept.append(process)
            return True

    def close(self) -> None:
        """Close every idle process; those lent out are closed when their run gives them back."""
        with self.lock:
            self.closed = True
            idle = [p for kept in self.idle.values() for p in kept]
            self.idle.clear()
        for process in idle:
            process.keeper = None
            process.close()

    def __enter__(self) -> "ToolProcesses":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fit(process: CommandTools) -> bool:
    """Whether a process may serve another run: running, trusted, nothing out to it."""
    with process.lock:
        # A cancelled call's reply may still come, and call ids repeat from run to run.
        quiet = not process.deliveries and not process.cancelled and process.gone is None
    return (quiet and process.broke is None and process.process is not None and process.process.poll() is None
            and process.described is not None)
