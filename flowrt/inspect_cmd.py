"""Inspecting stored runs: `flow history`, `flow runs`, `flow redact`.

History is shown as data: each fact keeps its number, each Call and Reply its call identity, and a
view says how many facts it hides. Values come from the verified record; a redacted value shows
as a hole with its hash, never as a value. Nothing here evaluates the program or changes the run,
except `redact`, which turns a stored value into a hole (the chain of facts is unchanged).
"""

from __future__ import annotations

from typing import Any

from flowrt import abi
from flowrt.replay import open_calls
from flowrt.store import Hole, RunStore, scan_runs

SUMMARY_WIDTH = 100


def _value(store: RunStore, fact: dict, field: str) -> Any:
    try:
        return store.value(fact, field)
    except Hole as hole:
        return {"hole": hole.hash}
    except KeyError:
        return None


def _short_value(value: Any, width: int | None = SUMMARY_WIDTH) -> str:
    text = abi.canonical_json(value).decode("utf-8") if value is not None else ""
    return text if width is None or len(text) <= width else text[:width - 1] + "…"


def describe_fact(store: RunStore, fact: dict, *, width: int | None = SUMMARY_WIDTH,
                  read: dict | None = None) -> dict:
    """A fact as the inspection view shows it: its identity fields and a one-line summary (each
    value in it cut to `width` code points; None: whole). `read`, when given, gets each value
    field read for the summary (every one the fact has; a hole as `{"hole": hash}`)."""
    kind = fact["kind"]

    def short(value: Any) -> str:
        return _short_value(value, width)

    def value(field: str) -> Any:
        found = _value(store, fact, field)
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


def history_view(store: RunStore, *, kind: str | None = None, search: str | None = None,
                 fact: int | None = None) -> dict:
    facts = store.facts()
    rows = [describe_fact(store, f) for f in facts]
    selected = [r for r in rows
                if (kind is None or r["kind"].lower() == kind.lower())
                and (search is None or search.lower() in r["summary"].lower())
                and (fact is None or r["n"] == fact)]
    ended = store.ended
    pending = open_calls(store) if not ended else []
    rounds = [{"n": r["n"], "function": r["function"], "summary": r["summary"]} for r in rows
              if r["kind"] == "Checkpoint"]
    state = "ended" if ended else ("paused" if pending else "open")
    return {"run": store.run_id, "state": state, "total": len(rows), "hidden": len(rows) - len(selected),
            "facts": selected, "pending": pending, "rounds": rounds,
            "truncated": store.torn_tail is not None}


def render_history(view: dict, *, summary: bool) -> str:
    lines = [f"run {view['run']}: {view['state']}, {view['total']} facts"]
    if summary:
        if view["pending"]:
            lines.append("pending calls: " + ", ".join(view["pending"]))
        if view["rounds"]:
            last = view["rounds"][-1]
            lines.append(f"latest checkpoint: fact {last['n']} {last['summary']}")
        lines.append(f"next: flow history {view['run']}  |  flow replay {view['run']}"
                     + (f"  |  flow resume {view['run']} --call ID --reply JSON" if view["pending"] else ""))
        return "\n".join(lines) + "\n"
    for row in view["facts"]:
        who = row.get("call") or row.get("task") or ""
        hole = f"  [hole {row['hole']['field']} {row['hole']['hash']}]" if "hole" in row else ""
        lines.append(f"{row['n']:>5}  {who:<14} {row['kind']:<11} {row['summary']}{hole}")
    if view["hidden"]:
        lines.append(f"({view['hidden']} of {view['total']} facts hidden by the selection)")
    if view.get("replay") is not None:
        lines.append("rounds (the checkpoint places a re-run passes):")
        for r in view["rounds"]:
            taken = f"checkpoint fact {r['checkpoint']}" if r.get("checkpoint") else "no checkpoint taken"
            lines.append(f"  after fact {r['after_fact']}: {r['function']['name']}({_short_value(r['arguments'])})  [{taken}]")
        lines.append("tasks carried across rounds: none (a checkpoint holds no other live task)")
    if view["pending"]:
        lines.append("pending calls: " + ", ".join(view["pending"]))
    return "\n".join(lines) + "\n"


def recorded_source(store: RunStore, module: str) -> str | None:
    start = store.facts()[0]
    for entry in start.get("modules", []):
        if entry["module"] == module:
            return store.source(entry["hash"])
    return None


def runs_page(root: str, *, limit: int, after: str | None) -> dict:
    return scan_runs(root, limit=limit, after=after)


def render_runs(page: dict) -> str:
    lines = []
    for row in page["runs"]:
        entry = row.get("entry") or {}
        name = f"{entry.get('module')}.{entry.get('function')}" if entry else "-"
        last = row.get("lastFact") or {}
        lines.append(f"{row['run']:<32} {row['record']:<18} {row.get('ending') or '-':<10} {name:<28} "
                     f"facts={last.get('n', 0)}" + (" truncated" if row.get("truncated") else "")
                     + (f" {row['hostDecision'].get('kind')}" if isinstance(row.get("hostDecision"), dict)
                        else (f" {row['hostDecision']}" if row.get("hostDecision") else "")))
    for problem in page["problems"]:
        lines.append(f"problem: {problem}")
    if page.get("nextAfter"):
        lines.append(f"more: --after {page['nextAfter']}")
    return "\n".join(lines) + ("\n" if lines else "")
