"""`flow history RUN --html OUT.html`: a picture of a run as one self-contained page.

The page is a swimlane per task, each Call a bar from its Call to its Reply coloured by outcome,
Choice and Stop marks, checkpoints as vertical lines and the End. It needs nothing but a browser:
the CSS and the script are inline, the drawing is SVG written here, and the details of each call
(id, Tool, arguments, reply) travel as JSON inside the page, shown on a click.

Every recorded text reaches the page escaped: SVG and HTML text through `html.escape`, the JSON
with `<`, `>` and `&` written as `\\u003c`-style escapes, so a Tool argument holding `</script>`
stays data. The script only ever sets `textContent`, never markup.

The horizontal axis is time when every fact drawn has a recorded accept time (the store's `times`
host records, `RunLog.fact_times()`, or an `acceptedAt` on the fact), and fact order otherwise: a
picture that mixed the two would draw facts without a time at made-up places.
"""

from __future__ import annotations

import html
import os
import re
import time
from datetime import datetime
from importlib import resources
from typing import Any

from flowdata import canonical
from flowrt.inspect_cmd import shown_value
from flowrt.run_state import run_state
from flowrt.store import RunLog, open_store

#: the most characters of one value the details panel shows (the rest is counted, not shown)
DETAIL_LIMIT = 4000
#: outcome classes a bar can have, as the legend lists them
OUTCOMES = ("Ok", "Failed", "NotRun", "Unknown", "BadReply", "open", "closed", "hole")

#: the fields of a task parked on its call, as a checkpoint records it (sandbox/checkpoints.py)
PARKED = frozenset({"call", "tool", "arguments", "ctor"})

LANE_HEIGHT = 30
LABEL_WIDTH = 170
FACT_STEP = 30
#: the widest a fact-order picture grows: a long run's facts get narrower instead
MAX_WIDTH = 24000
TIME_WIDTH = 1000
TOP = 46


def task_of(call_id: str) -> str:
    """The task that made a call: the call id up to its last `#` (`c1:root/2#3` -> `c1:root/2`)."""
    return call_id.rsplit("#", 1)[0]


def outcome_class(outcome: Any) -> str:
    """A Reply's outcome as the bar's colour: Ok, or the ToolProblem's constructor."""
    if isinstance(outcome, dict) and "hole" in outcome and len(outcome) == 1:
        return "hole"
    if isinstance(outcome, dict) and "Ok" in outcome:
        return "Ok"
    if isinstance(outcome, dict) and isinstance(outcome.get("Err"), dict) and len(outcome["Err"]) == 1:
        (problem,) = outcome["Err"]
        if problem in ("Failed", "NotRun", "Unknown", "BadReply"):
            return problem
    return "Failed"


def fact_times(store: RunLog) -> dict[int, int]:
    """Unix milliseconds at which the store accepted each fact, where known."""
    reader = getattr(store, "fact_times", None)
    times: dict[int, int] = {}
    if callable(reader):
        times.update(reader())
    else:
        for record in store.host_records():
            if record.get("kind") == "times" and isinstance(record.get("from"), int) \
                    and isinstance(record.get("at"), list):
                for offset, ms in enumerate(record["at"]):
                    if isinstance(ms, int):
                        times[record["from"] + offset] = ms
    for fact in store.facts():
        at = fact.get("acceptedAt")
        if isinstance(at, str) and fact["n"] not in times:
            try:
                times[fact["n"]] = int(datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp() * 1000)
            except ValueError:
                pass
    return times


def _bounded(value: Any) -> dict:
    """A value for the details panel: its canonical JSON, cut to DETAIL_LIMIT characters; a hole
    as a hole (its hash), never as a value."""
    if isinstance(value, dict) and set(value) == {"hole"}:
        return {"hole": value["hole"]}
    text = canonical.dumps(value).decode("utf-8")
    if len(text) <= DETAIL_LIMIT:
        return {"text": text}
    return {"text": text[:DETAIL_LIMIT], "more": len(text) - DETAIL_LIMIT}


def picture(store: RunLog) -> dict:
    """The run as the page draws it: lanes, bars, marks and lines, each at a position on the axis
    (`axis` says whether positions are milliseconds since Start or fact numbers)."""
    facts = store.facts()
    times = fact_times(store)
    timed = all(f["n"] in times for f in facts)
    origin = times.get(1, 0) if timed else 0

    def at(n: int) -> int:
        return times[n] - origin if timed else n

    lanes: list[str] = []

    def lane(task: str | None) -> str:
        task = task or "?"
        if task not in lanes:
            lanes.append(task)
        return task

    bars: dict[str, dict] = {}
    marks: list[dict] = []
    checkpoints: list[dict] = []
    end = None
    forked = isinstance(facts[0].get("parent"), dict)
    for fact in facts:
        kind, n = fact["kind"], fact["n"]
        if kind == "Start":
            lane("root")
        elif kind == "Call":
            bars[fact["call"]] = {"call": fact["call"], "tool": fact["tool"], "task": lane(task_of(fact["call"])),
                                  "callFact": n, "from": at(n), "to": None, "replyFact": None, "outcome": "open",
                                  "arguments": _bounded(shown_value(store, fact, "arguments")), "reply": None}
        elif kind == "Reply":
            bar = bars.get(fact["call"])
            if bar is None:  # a Reply to no call this history holds (damage a reader let by): drawn alone
                bar = bars[fact["call"]] = {"call": fact["call"], "tool": "?", "task": lane(task_of(fact["call"])),
                                            "callFact": None, "from": at(n), "arguments": None}
            outcome = shown_value(store, fact, "outcome")
            bar.update(to=at(n), replyFact=n, outcome=outcome_class(outcome), reply=_bounded(outcome))
        elif kind == "Choice":
            lane(fact.get("task"))
            lane(fact.get("picked"))
            marks.append({"kind": "Choice", "task": lane(fact.get("task")), "fact": n, "at": at(n),
                          "label": f"picked {fact.get('picked')}"})
        elif kind == "Stop":
            closed = [c for c in fact.get("closed", []) if c in bars and bars[c]["replyFact"] is None]
            for call in closed:
                bars[call].update(to=at(n), outcome="closed", replyFact=None)
            found = shown_value(store, fact, "found")
            marks.append({"kind": "Stop", "task": lane(fact.get("task")), "fact": n, "at": at(n),
                          "label": f"stopped by {fact.get('by')}" + (" (running)" if found == "Running" else "")})
        elif kind == "Checkpoint":
            parked = shown_value(store, fact, "arguments") if forked and n == 2 else None
            for argument in (parked.values() if isinstance(parked, dict) and "hole" not in parked else ()):
                if isinstance(argument, dict) and PARKED <= set(argument) and isinstance(argument["call"], str) \
                        and argument["call"] not in bars:
                    # a task parked on a call made before this history began (a fork's): its
                    # bar starts at the checkpoint that carries it
                    bars[argument["call"]] = {"call": argument["call"], "tool": str(argument.get("tool", "?")),
                                              "task": lane(task_of(argument["call"])), "callFact": None,
                                              "from": at(n), "to": None, "replyFact": None, "outcome": "open",
                                              "arguments": _bounded(argument.get("arguments")), "reply": None}
            checkpoints.append({"fact": n, "at": at(n), "function": fact["function"]["name"]})
        elif kind == "End":
            end = {"fact": n, "at": at(n), "ending": fact.get("ending"),
                   "outcome": _bounded(shown_value(store, fact, "outcome"))}
    state = run_state(store)
    return {"run": store.run_id, "state": state["state"], "axis": "ms" if timed else "fact",
            "last": at(facts[-1]["n"]), "lanes": lanes, "bars": list(bars.values()), "marks": marks,
            "checkpoints": checkpoints, "end": end, "facts": len(facts)}


def _json_for_script(value: Any) -> str:
    """JSON that can sit inside a <script> element whatever it holds (integers past 64 bits
    included: a Flow Int is unbounded)."""
    text = canonical.dumps(value).decode("utf-8")
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e") \
        .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render(model: dict, *, refresh_seconds: int | None = None) -> str:
    """The page. `refresh_seconds`: the page reloads itself from its file that often (`--follow`)."""
    e = html.escape
    lanes = model["lanes"]
    span = max(model["last"], 1)
    width = TIME_WIDTH if model["axis"] == "ms" else min(MAX_WIDTH, max(600, (span + 1) * FACT_STEP))
    scale = width / (span + (0 if model["axis"] == "ms" else 1))

    def x(position: int) -> float:
        return round(LABEL_WIDTH + position * scale, 1)

    y_of = {task: TOP + i * LANE_HEIGHT for i, task in enumerate(lanes)}
    height = TOP + len(lanes) * LANE_HEIGHT + 20
    total_width = LABEL_WIDTH + width + 130
    svg: list[str] = [f'<svg xmlns="http://www.w3.org/2000/svg" id="picture" width="{total_width}" '
                      f'height="{height}" role="img">']
    for task in lanes:
        y = y_of[task]
        svg.append(f'<g class="lane" data-task="{e(task)}"><rect class="lane-bg" x="0" y="{y}" '
                   f'width="{total_width}" height="{LANE_HEIGHT}"/><text class="lane-label" x="6" '
                   f'y="{y + 19}">{e(task)}</text></g>')
    svg.append(_ticks(model["axis"], span, x, TOP - 5))
    for cp in model["checkpoints"]:
        cx = x(cp["at"])
        svg.append(f'<g class="checkpoint" data-fact="{cp["fact"]}"><line x1="{cx}" y1="{TOP - 30}" x2="{cx}" '
                   f'y2="{height - 10}"/><text x="{cx + 3}" y="{TOP - 22}">checkpoint {cp["fact"]} '
                   f'{e(cp["function"])}</text></g>')
    last = model["last"]
    for index, bar in enumerate(model["bars"]):
        start = bar["from"]
        stop = bar["to"] if bar["to"] is not None else last + (0 if model["axis"] == "ms" else 0.6)
        bx, bw = x(start), max(x(stop) - x(start), 6.0)
        y = y_of[bar["task"]] + 6
        svg.append(f'<rect class="bar outcome-{e(bar["outcome"])}" data-index="{index}" '
                   f'data-call="{e(bar["call"])}" data-task="{e(bar["task"])}" data-outcome="{e(bar["outcome"])}" '
                   f'x="{bx}" y="{y}" width="{round(bw, 1)}" height="{LANE_HEIGHT - 12}" rx="3">'
                   f'<title>{e(bar["call"])} {e(bar["tool"])}: {e(bar["outcome"])}</title></rect>')
    for mark in model["marks"]:
        mx, my = x(mark["at"]), y_of[mark["task"]] + LANE_HEIGHT // 2
        shape = (f'<polygon points="{mx},{my - 7} {mx + 7},{my} {mx},{my + 7} {mx - 7},{my}"/>'
                 if mark["kind"] == "Choice" else
                 f'<rect x="{mx - 6}" y="{my - 6}" width="12" height="12"/>')
        svg.append(f'<g class="mark mark-{mark["kind"]}" data-fact="{mark["fact"]}" data-task="{e(mark["task"])}">'
                   f'{shape}<title>fact {mark["fact"]} {mark["kind"]}: {e(mark["label"])}</title></g>')
    if model["end"] is not None:
        ex = x(model["end"]["at"])
        svg.append(f'<g class="end end-{e(str(model["end"]["ending"]))}"><line x1="{ex}" y1="{TOP - 14}" '
                   f'x2="{ex}" y2="{height - 10}"/><text x="{ex + 3}" y="{height - 2}">End '
                   f'({e(str(model["end"]["ending"]))})</text></g>')
    svg.append("</svg>")
    axis = "time since Start (from the store's accept times)" if model["axis"] == "ms" else \
        "fact order (no accept times recorded)"
    legend = "".join(f'<span class="key"><i class="swatch outcome-{o}"></i>{o}</span>' for o in OUTCOMES)
    template = resources.files("flowrt").joinpath("run_picture.html").read_text(encoding="utf-8")
    refresh = f'<meta http-equiv="refresh" content="{int(refresh_seconds)}">' if refresh_seconds else ""
    summary = (f"run {model['run']}: {model['state']}, {model['facts']} facts, {len(lanes)} tasks, "
               f"{len(model['bars'])} calls; axis: {axis}")
    details = {"bars": model["bars"], "end": model["end"]}
    slots = {"REFRESH": refresh, "TITLE": e(f"run {model['run']}"), "SUMMARY": e(summary), "LEGEND": legend,
             "SVG": "".join(svg), "DATA": _json_for_script(details)}
    # One pass: a slot's text is never searched for another slot's marker.
    return re.sub(r"\{\{([A-Z]+)\}\}", lambda m: slots[m.group(1)], template)


def _ticks(axis: str, span: int, x, y: int) -> str:
    """About ten labelled ticks along the top: fact numbers, or seconds since Start."""
    step = 1
    for candidate in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 30_000, 60_000, 300_000,
                      600_000, 1_800_000, 3_600_000, 21_600_000, 86_400_000):
        step = candidate
        if span / candidate <= 12:
            break
    first = step if axis == "fact" else 0
    marks = []
    for position in range(first, span + 1, step):
        label = str(position) if axis == "fact" else _seconds(position)
        marks.append(f'<text class="tick" x="{x(position)}" y="{y}">{label}</text>')
    return '<g class="ticks">' + "".join(marks) + "</g>"


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s" if ms < 60_000 else f"{ms / 60_000:g} min"


def write_page(path: str, text: str) -> None:
    """Write the page whole (a temporary file renamed over it), so a reload never reads half."""
    folder = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)


def write_picture(runs_dir: str, run_id: str, out: str, *, follow: bool = False, poll: float = 1.0) -> int:
    """Write the page for a run; with `follow`, write it again each time the run's head moves,
    until the run ends (the last page stops reloading) or the user interrupts (130). Storage
    failures propagate (the command reports them, exit 5)."""
    head = None
    try:
        while True:
            store = open_store(runs_dir).open(run_id, for_append=False)
            try:
                ended = store.ended
                if store.head != head:
                    head = store.head
                    write_page(out, render(picture(store), refresh_seconds=2 if follow and not ended else None))
            finally:
                store.close()
            if not follow or ended:
                return 0
            time.sleep(poll)
    except KeyboardInterrupt:
        return 130
