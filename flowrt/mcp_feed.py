"""The MCP server's live feed: for a `run` or `resume` request that carries a progress token, one
standard progress notification per fact storage accepts while the request drives the run (the
execution seed: a run's progress is its history), after the Start notification of a run.

Each notification is bounded and carries no Flow value: `progress` is the fact's number (so it
only grows), `message` names the run, the fact and its kind (and a Call's id and Tool), at most
MESSAGE_LIMIT code points, and `_meta` holds `ng.flowla/request` (the request id as the client
typed it), `ng.flowla/run`, `ng.flowla/fact` (the number as a decimal string), `ng.flowla/hash`
and `ng.flowla/kind`, plus `ng.flowla/acceptedAt` where the time is recorded. The facts are read
through the store (`flowrt.watch.RunWatch`), so the run does no work for the feed; the last ones
are sent before the request is answered, and none after. A notification that cannot be sent
halts the run, as for Start (a failed transport)."""

from __future__ import annotations

import threading
from typing import Any, Awaitable

import anyio
import anyio.to_thread

#: code points of a progress message
MESSAGE_LIMIT = 200
#: seconds between reads of the run
POLL = 0.05


class Feed:
    """One request's feed. `begin(run_id, since)` (from the worker thread, once the run exists)
    starts following; `around(driving)` awaits the request's work with the feed alongside."""

    def __init__(self, context, runs_dir: str) -> None:
        meta = context.meta or {}
        self.token = meta.get("progress_token") if isinstance(meta, dict) else getattr(meta, "progress_token", None)
        self.session = context.session
        self.request_id = context.request_id
        self.runs_dir = runs_dir
        self.watch = None
        self.halt: threading.Event | None = None
        self.finished = False

    @property
    def wanted(self) -> bool:
        return self.token is not None

    def begin(self, run_id: str, since: int | None = None) -> None:
        """Follow run `run_id`, from the fact after `since` (None: after its last fact now)."""
        if not self.wanted or self.watch is not None:
            return
        from flowrt.store import RunNotFound, StorageError
        from flowrt.watch import RunWatch

        try:
            watch = RunWatch(self.runs_dir, run_id, settle=False)
        except (RunNotFound, StorageError, ValueError):
            return  # the request's own work reports it
        watch.since = watch.run.facts()[-1]["n"] if since is None else since
        self.watch = watch

    async def around(self, driving: Awaitable[dict[str, Any]]) -> dict[str, Any]:
        if not self.wanted:
            return await driving
        async with anyio.create_task_group() as group:
            group.start_soon(self._follow)
            try:
                return await driving
            finally:
                self.finished = True

    async def _follow(self) -> None:
        watch = None
        try:
            while True:
                last_round = self.finished
                watch = self.watch
                if watch is not None:
                    rows = await anyio.to_thread.run_sync(lambda: watch.step(final=last_round))
                    for row in rows:
                        await self._send(watch.run_id, row)
                if last_round:
                    return
                await anyio.sleep(POLL)
        except Exception:  # noqa: BLE001 - a feed that cannot read on stops; the run goes on
            return
        finally:
            if watch is not None:
                watch.close()

    async def _send(self, run_id: str, row: dict) -> None:
        from mcp_types import ProgressNotification, ProgressNotificationParams

        text = f"run {run_id}: fact {row['n']} {row['kind']}"
        if row["kind"] == "Call":
            text += f" {row['call']} {row['tool']}"
        elif "call" in row:
            text += f" {row['call']}"
        meta = {"ng.flowla/request": self.request_id, "ng.flowla/run": run_id, "ng.flowla/fact": str(row["n"]),
                "ng.flowla/hash": row["hash"], "ng.flowla/kind": row["kind"]}
        if "acceptedAt" in row:
            meta["ng.flowla/acceptedAt"] = row["acceptedAt"]
        notification = ProgressNotification(params=ProgressNotificationParams(
            progress_token=self.token, progress=row["n"], message=text[:MESSAGE_LIMIT], _meta=meta))
        try:
            await self.session.send_notification(notification, self.request_id)
        except Exception:  # noqa: BLE001 - the transport failed: halt the run, as for Start
            if self.halt is not None:
                self.halt.set()
            raise
