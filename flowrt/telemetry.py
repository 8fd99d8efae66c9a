"""Host-side OpenTelemetry spans (docs/telemetry.md): one span per run, one child span per Tool call
from its Call to its Reply. Never a fact and never seen by the program: a run traced and a run not
traced have byte-identical histories.

Off unless configured: by `flowrt.Host(telemetry=...)` (a TracerProvider or a Tracer), or by the
environment (`FLOW_OTEL=1`, or an `OTEL_TRACES_EXPORTER` other than `none`, or an OTLP endpoint).
Off, this module is not imported and opentelemetry is never loaded; on, a run's Driver gets its
`record` wrapped (`instrument`), so the recorded-call path of an untraced run is exactly as it was.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

TRACER_NAME = "flowrt"
TRACE_ENV = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

_configured_lock = threading.Lock()
_environment_tracer: Any = None


def wanted(option: Any = None) -> bool:
    """Whether a run is traced, read without importing anything. `option` is the Host's
    (`False` turns tracing off whatever the environment says)."""
    if option is False:
        return False
    if option is not None:
        return True
    switch = os.environ.get("FLOW_OTEL", "").strip().lower()
    if switch in ("1", "true", "yes", "on"):
        return True
    if switch in ("0", "false", "no", "off"):
        return False  # off for flow, whatever OTEL_* says to the rest of the process
    exporter = os.environ.get("OTEL_TRACES_EXPORTER")
    if exporter is not None:
        return exporter.strip().lower() != "none"
    return any(os.environ.get(name) for name in TRACE_ENV[1:])


def tracer_for(option: Any = None):
    """The Tracer a run reports to, or None when tracing is off (or opentelemetry is not installed,
    said once on standard error: telemetry never stops a run)."""
    if not wanted(option):
        return None
    if option is not None:
        if hasattr(option, "start_span"):
            return option  # a Tracer
        return option.get_tracer(TRACER_NAME)  # a TracerProvider
    return _tracer_from_environment()


def _tracer_from_environment():
    global _environment_tracer
    with _configured_lock:
        if _environment_tracer is not None:
            return _environment_tracer or None
        try:
            from opentelemetry import trace
        except ImportError:
            sys.stderr.write("flow: FLOW_OTEL/OTEL_* asks for telemetry, but opentelemetry is not installed "
                             "(pip install 'flow-lang[otel]'); the run is not traced\n")
            _environment_tracer = False
            return None
        provider = trace.get_tracer_provider()
        if not hasattr(provider, "add_span_processor"):
            # Nothing in this process set up the SDK (the CLI): set it up from OTEL_* as the SDK
            # documents them, so `FLOW_OTEL=1 flow run` exports without any code.
            provider = _sdk_provider()
            if provider is None:
                _environment_tracer = False
                return None
            trace.set_tracer_provider(provider)
        _environment_tracer = trace.get_tracer(TRACER_NAME)
        return _environment_tracer


def _sdk_provider():
    import atexit

    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError:
        sys.stderr.write("flow: telemetry asked for, but opentelemetry-sdk is not installed "
                         "(pip install 'flow-lang[otel]'); the run is not traced\n")
        return None
    kind = (os.environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(",")[0].strip().lower()
    provider = TracerProvider(resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "flow")}))
    if kind == "console":
        # Standard error: standard output carries the run's result.
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    elif kind == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            sys.stderr.write("flow: OTLP export asked for, but opentelemetry-exporter-otlp-proto-http is not "
                             "installed; the run is not traced (OTEL_TRACES_EXPORTER=console prints spans)\n")
            return None
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        sys.stderr.write(f"flow: OTEL_TRACES_EXPORTER={kind} is not one flow sets up (otlp, console); "
                         "the run is not traced\n")
        return None
    atexit.register(provider.shutdown)  # a CLI run exits right after its End: flush the batch first
    return provider


def outcome_kind(outcome: Any) -> str:
    """Ok, or the ToolProblem's variant (Failed, NotRun, Unknown, BadReply)."""
    if isinstance(outcome, dict):
        if "Ok" in outcome:
            return "Ok"
        problem = outcome.get("Err")
        if isinstance(problem, dict) and len(problem) == 1:
            return next(iter(problem))
        return "Err"
    return "unknown"


class RunSpans:
    """The spans of one run (or one resume of it) in this process."""

    def __init__(self, tracer, run_id: str, span_name: str, attributes: dict) -> None:
        from opentelemetry import trace

        self.trace = trace
        self.tracer = tracer
        self.run_id = run_id
        self.span = tracer.start_span(span_name, attributes={"flow.run.id": run_id, **attributes})
        self.context = trace.set_span_in_context(self.span)
        self.calls: dict[str, Any] = {}
        self.ended = False

    def call(self, fields: dict) -> None:
        self.calls[fields["call"]] = self.tracer.start_span(
            f"flow.call {fields['tool']}", context=self.context,
            attributes={"flow.run.id": self.run_id, "flow.call.id": fields["call"], "flow.tool": fields["tool"]})

    def reply(self, fields: dict, tool_of) -> None:
        call_id = fields["call"]
        span = self.calls.pop(call_id, None)
        if span is None:
            # A call made before this process took the run over (a resume): its span starts here.
            tool = tool_of(call_id)
            span = self.tracer.start_span(f"flow.call {tool}", context=self.context,
                                          attributes={"flow.run.id": self.run_id, "flow.call.id": call_id,
                                                      "flow.tool": tool, "flow.call.resumed": True})
        kind = outcome_kind(fields["outcome"])
        span.set_attribute("flow.outcome.kind", kind)
        if kind != "Ok":
            span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, kind))
        span.end()

    def close_calls(self, call_ids, kind: str) -> None:
        for call_id in call_ids:
            span = self.calls.pop(call_id, None)
            if span is not None:
                span.set_attribute("flow.outcome.kind", kind)
                span.end()

    def finish_with(self, outcome) -> None:
        """`finish` for a RunOutcome, or None: the host raised before it had one."""
        if outcome is None:
            self.finish(1, "HostError")
        else:
            self.finish(outcome.exit_code, ENDINGS.get(outcome.exit_code, "Refused"))

    def finish(self, exit_code: int, ending: str) -> None:
        """The run span ends with how this process left the run; calls still out end as Pending."""
        if self.ended:
            return
        self.ended = True
        self.close_calls(list(self.calls), "Pending")
        self.span.set_attribute("flow.exit_code", exit_code)
        self.span.set_attribute("flow.outcome", ending)
        if ending in ("Faulted", "StorageFailure", "HostError"):
            self.span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, ending))
        self.span.end()


ENDINGS = {0: "Completed", 4: "Completed", 1: "Faulted", 3: "Paused", 5: "StorageFailure", 130: "Halted"}


def traced(driver, option: Any = None, span_name: str = "flow.run") -> "RunSpans | None":
    """The spans of the run `driver` drives, when telemetry is on (see `wanted`), else None."""
    tracer = tracer_for(option)
    return None if tracer is None else instrument(driver, tracer, span_name)


def instrument(driver, tracer, span_name: str = "flow.run") -> RunSpans:
    """Wrap `driver.record` so that each Call, Reply, Stop and End it records is seen after it is
    durable. The instance attribute shadows the method only on this driver."""
    prepared = driver.prepared
    spans = RunSpans(tracer, driver.run_id, span_name,
                     {"flow.program": prepared.compiled.identity,
                      "flow.entry": f"{prepared.entry.module}.{prepared.entry.name}"})
    record = driver.record

    def tool_of(call_id: str) -> str:
        for fact in reversed(driver.store.verified_facts()):
            if fact.get("kind") == "Call" and fact.get("call") == call_id:
                return fact["tool"]
        return ""

    def traced_record(kind: str, fields: dict, *, sync: bool = True) -> dict:
        fact = record(kind, fields, sync=sync)
        if kind == "Call":
            spans.call(fields)
        elif kind == "Reply":
            spans.reply(fields, tool_of)
        elif kind == "Stop":
            spans.close_calls(fields.get("closed", ()), "Closed")
        elif kind == "End":
            spans.span.set_attribute("flow.end", "Completed" if "Completed" in fields["outcome"] else "Faulted")
        return fact

    driver.record = traced_record
    return spans
