"""Inspecting stored runs: `flow history`, `flow runs`, `flow redact`.

History is shown as data: each fact keeps its number, each Call and Reply its call identity, and a
view says how many facts it hides. Values come from the verified record; a redacted value shows
as a hole with its hash, never as a value. Nothing here evaluates the program or changes the run,
except `redact`, which turns a stored value into a hole (the chain of facts is unchanged).
"""

from __future__ import annotations

from typing import Any

from flowdata import canonical
from flowrt.fact_times import CallClock, duration_text, run_times
from flowrt.history_scan import scan_history
from flowrt.reply_check import compact, with_expected_replies
from flowrt.run_state import STATUS_TEXT, run_state
from flowrt.store import Hole, RunLog, open_store

SUMMARY_WIDTH = 100


def shown_value(store: RunLog, fact: dict, field: str) -> Any:
    """A fact's field as a viewer shows it (`flow history`, its picture): the value, a hole as
    `{"hole": hash}`, a field the fact lacks as None."""
    try:
        return store.value(fact, field)
    except Hole as hole:
        return {"hole": hole.hash}
    except KeyError:
        return None


def _short_value(value: Any, width: int | None = SUMMARY_WIDTH) -> str:
    text = canonical.dumps(value).decode("utf-8") if value is not None else ""
    return text if width is None or len(text) <= width else text[:width - 1] + "…"


def describe_fact(store: RunLog, fact: dict, *, width: int | None = SUMMARY_WIDTH,
                  read: dict | None = None) -> dict:
    """A fact as the inspection view shows it: its identity fields and a one-line summary (each
    value in it cut to `width` code points; None: whole). `read`, when given, gets each value
    field read for the summary (every one the fact has; a hole as `{"hole": hash}`)."""
    kind = fact["kind"]

    def short(value: Any) -> str:
        return _short_value(value, width)

    def value(field: str) -> Any:
        found = shown_value(store, fact, field)
        if read is not None and (field in fact or field + "_ref" in fact):
            read[field] = found
        return found

    row: dict[str, Any] = {"n": fact["n"], "kind": kind, "hash": fact["hash"]}
    if kind == "Start":
        row["summary"] = (f"program={fact['program'][:15]} {fact.get('std')} entry={fact['entry']['module']}."
                          f"{fact['entry']['function']} input={short(value('input'))}")
        if isinstance(fact.get("outer"), dict):  # a nested run: the run and call that started it
            row["outer"] = fact["outer"]
            row["summary"] += f" outer={fact['outer'].get('run')} call {fact['outer'].get('call')}"
        elif isinstance(fact.get("parent"), dict):  # a fork
            row["parent"] = fact["parent"]
            row["summary"] += f" forked from {fact['parent'].get('run')} at fact {fact['parent'].get('checkpoint')}"
    elif kind == "Call":
        row.update(call=fact["call"], tool=fact["tool"])
        row["summary"] = f"{fact['tool']}({short(value('arguments'))})"
    elif kind == "Reply":
        row["call"] = fact["call"]
        row["summary"] = short(value("outcome"))
    elif kind == "Choice":
        row.update(task=fact["task"], picked=fact["picked"])
        row["summary"] = f"picked {fact['picked']}"
    elif kind == "Stop":
        row.update(task=fact["task"], by=fact.get("by"), closed=fact.get("closed", []))
        found = value("found")
        row["summary"] = ("found running" if found == "Running" else f"found finished {short(found)}") + \
            (f", closed {', '.join(fact.get('closed', []))} with no reply" if fact.get("closed") else "")
    elif kind == "Checkpoint":
        row["function"] = fact["function"]
        row["summary"] = f"{fact['function']['name']}({short(value('arguments'))})"
    elif kind == "End":
        row["summary"] = short(value("outcome"))
    for name in ("input", "arguments", "outcome", "found"):
        if store.is_hole(fact, name):
            row["hole"] = {"field": name, "hash": fact.get(name + "_ref")}
    return row


def history_view(store: RunLog, *, kind: str | None = None, search: str | None = None,
                 fact: int | None = None, runs: str | None = None) -> dict:
    """The CLI's history view. `kind` must be one of the store's fact kinds (any case): the
    command refuses another before calling this. `runs`: the runs directory the commands shown
    must name, when it was named (`--runs`).

    One pass over the facts (`scan_history`), holding only what it shows: `flow history --fact 5`
    of a run of 100,000 calls held every fact, +450 MB. A StorageError is the run's damage."""
    wanted = kind.lower() if kind is not None else None
    needle = search.lower() if search is not None else None
    selected: list[dict] = []
    checkpoints: list[dict] = []

    def visit(f: dict) -> None:
        fact_kind = f["kind"]
        chosen = (wanted is None or fact_kind.lower() == wanted) and (fact is None or f["n"] == fact)
        if chosen or fact_kind == "Checkpoint":
            # Described only if shown (a run of 100,000 calls took 3.9 s to describe every fact
            # for `--fact 5`).
            row = describe_fact(store, f)
            if fact_kind == "Checkpoint":
                checkpoints.append({"n": row["n"], "function": row["function"], "summary": row["summary"]})
            if chosen and (needle is None or needle in row["summary"].lower()):
                selected.append(row)

    scanned = scan_history(store, visit)
    times = store.fact_times()
    # Stamped once every time is known: a row holds the fields of its fact that `stamp` reads.
    clock = CallClock()
    for row in selected:
        if row["kind"] == "Reply" and (made := times.get(scanned.call_facts.get(row["call"], 0))) is not None:
            clock.called[row["call"]] = made
        clock.stamp(row, row, times)
    state = run_state(store, open_calls=scanned.open_calls)
    # each pending call: what answers it
    open_calls = with_expected_replies(store, state["open"], runs=runs, open_call_facts=scanned.open_calls)
    last_n = scanned.last["n"] if scanned.last else None
    return {"run": store.run_id, "state": state["state"], "reason": state["reason"],
            **run_times(times, last_n),
            "hostDecision": state["hostDecision"], "pending": state["pending"], "open": open_calls,
            "total": scanned.count, "hidden": scanned.count - len(selected), "facts": selected,
            # the recorded checkpoints; `--rounds` replaces `rounds` with the computed ones
            "checkpoints": checkpoints, "rounds": checkpoints,
            "truncated": store.torn_tail is not None}


def carried_tasks(rounds: list[dict]) -> list[dict]:
    """Every task that two rounds or more carry (the execution seed's rounds view): a task parked
    on its only call, named by that call's id, with the rounds (numbered from 1) that hold it."""
    by_call: dict[str, dict] = {}
    for number, r in enumerate(rounds, 1):
        for task in r.get("tasks", []):
            entry = by_call.setdefault(task["call"], {"call": task["call"], "tool": task["tool"], "params": [],
                                                      "rounds": [], "after_facts": []})
            if task["param"] not in entry["params"]:
                entry["params"].append(task["param"])
            if not entry["rounds"] or entry["rounds"][-1] != number:
                entry["rounds"].append(number)
                entry["after_facts"].append(r["after_fact"])
    return [entry for entry in by_call.values() if len(entry["rounds"]) >= 2]


def _state_line(view: dict) -> str:
    line = f"run {view['run']}: {view['state']} ({view['reason']}), {view['total']} facts"
    if view.get("startedAt"):
        line += f"; started {view['startedAt']}, last activity {view['lastActivityAt']}"
    return line


def fact_line(row: dict) -> str:
    """A fact as `flow history` prints it: number, time of day (UTC), call or task, kind, summary."""
    who = row.get("call") or row.get("task") or ""
    hole = f"  [hole {row['hole']['field']} {row['hole']['hash']}]" if "hole" in row else ""
    at = row["acceptedAt"][11:23] if row.get("acceptedAt") else "-"
    took = f"  (took {duration_text(row['durationMs'])})" if "durationMs" in row else ""
    return f"{row['n']:>5}  {at:<12}  {who:<14} {row['kind']:<11} {row['summary']}{hole}{took}"


def _open_lines(view: dict) -> list[str]:
    lines = []
    if view["open"]:
        lines.append("open calls:")
        for entry in view["open"]:
            lines.append(f"  {entry['call']:<14} {entry['tool'] or '?':<24} {STATUS_TEXT[entry['status']]}")
            for command in entry["next"]:
                lines.append(f"      {command}")
            if entry.get("reply") is not None:
                lines.append(f'      expects {{"Ok": V}}, V: {compact(entry["reply"]["okSchema"])}')
    if view["pending"] == "unknown":
        lines.append("pending calls: unknown (the record cannot identify them)")
    elif view["pending"]:
        lines.append("pending calls: " + ", ".join(view["pending"]))
    return lines


def render_history(view: dict, *, summary: bool) -> str:
    lines = [_state_line(view)]
    if summary:
        lines += _open_lines(view)
        if view["checkpoints"]:
            last = view["checkpoints"][-1]
            lines.append(f"latest checkpoint: fact {last['n']} {last['summary']}")
        if view.get("replay") is not None:
            lines.append(f"rounds: {len(view['rounds'])}; replay: {view['replay']['verdict']}")
        lines.append(f"next: flow history {view['run']}  |  flow replay {view['run']}")
        return "\n".join(lines) + "\n"
    for row in view["facts"]:
        lines.append(fact_line(row))
    if view["hidden"]:
        lines.append(f"({view['hidden']} of {view['total']} facts hidden by the selection)")
    if view.get("replay") is not None:
        lines.append("rounds (the checkpoint places a re-run passes):")
        for number, r in enumerate(view["rounds"], 1):
            taken = f"checkpoint fact {r['checkpoint']}" if r.get("checkpoint") else "no checkpoint taken"
            lines.append(f"  {number}. after fact {r['after_fact']}: {r['function']['name']}"
                         f"({_short_value(r['arguments'])})  [{taken}]")
        carried = view.get("carried") or []
        if not carried:
            lines.append("tasks carried across rounds: none")
        else:
            lines.append("tasks carried across rounds:")
            for task in carried:
                lines.append(f"  {task['call']} ({task['tool']}, as {', '.join(task['params'])}): rounds "
                             f"{', '.join(map(str, task['rounds']))} (after facts "
                             f"{', '.join(map(str, task['after_facts']))})")
    lines += _open_lines(view)
    return "\n".join(lines) + "\n"


def recorded_source(store: RunLog, module: str) -> str | None:
    start = store.facts()[0]
    for entry in start.get("modules", []):
        if entry["module"] == module:
            return store.source(entry["hash"])
    return None


def runs_page(root: str, *, limit: int, after: str | None) -> dict:
    return open_store(root).scan(limit=limit, after=after)


def render_runs(page: dict) -> str:
    lines = []
    for row in page["runs"]:
        entry = row.get("entry") or {}
        name = f"{entry.get('module')}.{entry.get('function')}" if entry else "-"
        last = row.get("lastFact") or {}
        started = (row.get("startedAt") or "-")[:19].replace("T", " ")
        active = (row.get("lastActivityAt") or "-")[:19].replace("T", " ")
        lines.append(f"{row['run']:<32} {row['record']:<18} {row.get('ending') or '-':<10} {name:<28} "
                     f"started {started:<19}  active {active:<19}  facts={last.get('n', 0)}"
                     + (" truncated" if row.get("truncated") else "")
                     + (f" {_decision_text(row['hostDecision'])}" if isinstance(row.get("hostDecision"), dict)
                        else (f" {row['hostDecision']}" if row.get("hostDecision") else "")))
    for row in page["runs"]:
        if row.get("problem"):
            lines.append(f"problem: run {row['run']}: {_problem_text(row['problem'])}")
    for problem in page["problems"]:
        lines.append(f"problem: {_problem_text(problem)}")
    if page.get("nextAfter"):
        lines.append(f"more: --after {page['nextAfter']}")
    return "\n".join(lines) + ("\n" if lines else "")


def _problem_text(problem: dict) -> str:
    """A discovery problem as a line: its component, status, message and damaged fact."""
    fact = f" (fact {problem['fact']})" if problem.get("fact") is not None else ""
    return f"{problem.get('component')} {problem.get('status')}: {problem.get('message')}{fact}"


def _decision_text(decision: dict) -> str:
    """A host decision in a line of `flow runs`: its kind, and for a sleeping run until when."""
    if decision.get("kind") == "sleeping" and decision.get("until"):
        return f"sleeping until {decision['until']}"
    return str(decision.get("kind"))
