"""Why a run halts when nothing it did ended it: the interrupts a host raises out of a run's
drive (`flowrt.run.Driver`), and the `halted` record's reason for each (`halt_reason`). A halt
leaves the run resumable; it is never an End."""

from __future__ import annotations

from flowrt.store.format import SHARED_CHILD_LOST, TEMPLATE_LOST


class HaltRequested(KeyboardInterrupt):
    """A halt asked for from another thread by setting the run's `halt` event (an MCP client
    cancelled the call that drives the run). It is an interrupt, handled exactly as Ctrl-C is.
    `reason` is the `halted` record's: the event's own `reason` attribute when it has one (a
    worker that stops says `worker-stop`), else `interrupt`."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason or "interrupt")
        self.reason = reason or "interrupt"


class DeadlineHalt(KeyboardInterrupt):
    """The child passed its wall-clock deadline (`flowrt.sandbox_process.ChildDeadline`). A limit of this
    host, not an outcome of the program, so the run is halted as an interrupt halts it (a
    `halted` host record with reason `deadline`, exit 130, resumable), never Faulted."""

    reason = "deadline"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class TemplateLostHalt(DeadlineHalt):
    """The child died because the child template it was forked from ended (killed from outside:
    flowrt/child_template.py). Nothing the program did: the run is halted (reason `template`,
    resumable), never Faulted."""

    reason = TEMPLATE_LOST


class SharedChildHalt(DeadlineHalt):
    """The child that served the run beside other runs of its program died, or was killed for
    its wall-clock deadline (flowrt/lane_child.py). Which run caused it the host cannot tell, so
    every run in it is halted (reason `shared-child`, resumable), never Faulted; resumed, each
    runs in a child of its own."""

    reason = SHARED_CHILD_LOST


def halt_reason(interrupt: KeyboardInterrupt) -> tuple[str, str]:
    """(the `halted` record's reason, the message) for an interrupt that halted a run."""
    if isinstance(interrupt, DeadlineHalt):
        return interrupt.reason, f"halted: {interrupt.message}"
    if isinstance(interrupt, HaltRequested) and interrupt.reason != "interrupt":
        return interrupt.reason, f"halted ({interrupt.reason})"
    return "interrupt", "halted by an interrupt"
