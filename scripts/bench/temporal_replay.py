"""Temporal's Replayer over a history of N activities, for `peer_workloads.py temporal replay`.

No Temporal server runs offline, so the history is built here, event by event, as a server
would have recorded a workflow that ran N activities one after the other (each with its
workflow task), and replayed by the SDK's own Replayer with its default (sandboxed) runner.
A module of its own because the workflow sandbox re-imports the module that defines a workflow.
"""

from __future__ import annotations

import time
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import default
from temporalio.worker import Replayer


@activity.defn
async def echo(n: int) -> int:
    return n


@workflow.defn
class Steps:
    @workflow.run
    async def run(self, n: int) -> int:
        total = 0
        for i in range(n):
            total += await workflow.execute_activity(echo, i, start_to_close_timeout=timedelta(seconds=10))
        return total


def _payloads(*values):
    return default().payload_converter.to_payloads(list(values))


def history(n: int) -> WorkflowHistory:
    events: list[HistoryEvent] = []

    def add(kind) -> HistoryEvent:
        event = HistoryEvent(event_id=len(events) + 1, event_type=kind)
        event.event_time.FromSeconds(1_700_000_000 + len(events))
        events.append(event)
        return event

    def workflow_task() -> int:
        scheduled = add(EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED)
        scheduled.workflow_task_scheduled_event_attributes.task_queue.name = "q"
        started = add(EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED)
        started.workflow_task_started_event_attributes.scheduled_event_id = scheduled.event_id
        completed = add(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
        completed.workflow_task_completed_event_attributes.scheduled_event_id = scheduled.event_id
        completed.workflow_task_completed_event_attributes.started_event_id = started.event_id
        return completed.event_id

    start = add(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED).workflow_execution_started_event_attributes
    start.workflow_type.name = "Steps"
    start.task_queue.name = "q"
    start.input.payloads.extend(_payloads(n))
    start.workflow_task_timeout.FromSeconds(10)
    start.original_execution_run_id = start.first_execution_run_id = "run-1"
    decided = workflow_task()
    for i in range(n):
        scheduled = add(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
        attributes = scheduled.activity_task_scheduled_event_attributes
        attributes.activity_id = str(i + 1)
        attributes.activity_type.name = "echo"
        attributes.task_queue.name = "q"
        attributes.input.payloads.extend(_payloads(i))
        attributes.workflow_task_completed_event_id = decided
        attributes.start_to_close_timeout.FromSeconds(10)
        started = add(EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
        started.activity_task_started_event_attributes.scheduled_event_id = scheduled.event_id
        completed = add(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED).activity_task_completed_event_attributes
        completed.scheduled_event_id = scheduled.event_id
        completed.started_event_id = started.event_id
        completed.result.payloads.extend(_payloads(i))
        decided = workflow_task()
    end = add(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED).workflow_execution_completed_event_attributes
    end.result.payloads.extend(_payloads(sum(range(n))))
    end.workflow_task_completed_event_id = decided
    return WorkflowHistory("steps", events)


async def replay_per_activity(n: int) -> float:
    """Microseconds per activity: (T(n) - T(1)) / (n - 1) of the Replayer, after a warm-up."""
    replayer = Replayer(workflows=[Steps])
    timings = []
    for count in (1, 1, n):
        recorded = history(count)
        start = time.perf_counter()
        result = await replayer.replay_workflow(recorded)
        timings.append(time.perf_counter() - start)
        if getattr(result, "replay_failure", None) is not None:
            raise RuntimeError(f"replay failed: {result.replay_failure}")
    return (timings[2] - timings[1]) / (n - 1) * 1e6
