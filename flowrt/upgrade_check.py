"""`flow upgrade-check NEW.flow --runs DIR`: would a new version of a program carry its stored runs?

For every stored run of the program (its Start's entry module is NEW's root module: a checkpoint
can only be forked onto a function of the same name in the same module, so a run of another root
module could never move to NEW) the run's record is replayed against NEW, calling nothing:

* a run that has ended is safe when the replay is Matched (Diverged at fact N, with the reason,
  is not: the new version would not have recorded what this run recorded);
* a run that has not ended (paused, halted, crashed or still running) is safe when its recorded
  prefix replays on NEW (the record runs out before the program does: Incomplete with no fact at
  fault) and its latest checkpoint, if it has one, can be forked onto NEW (the execution seed's
  Forks rule: the same top-level function in the same module, every argument fitting the new
  parameter types; `flowrt.replay.fit_checkpoint_arguments` is the rule `flow fork` applies).

Each unsafe run gets a hint: the `flow fork` that moves it onto NEW where one can (with `--input`
for an argument that no longer fits), or `flow resume`, which finishes it on the version it
recorded (a resume never switches programs). Nothing here writes to any run.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

import flowc
from flowc.files import read_text
from flowrt.store import Hole, StorageError, open_store

SCAN_PAGE = 200


@dataclass
class UpgradeReport:
    program: str | None = None
    file: str = ""
    runs: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    #: why nothing could be checked (NEW does not check, the root cannot be read)
    refusal: str | None = None
    diagnostics: list = field(default_factory=list)
    sources: dict = field(default_factory=dict)

    def exit_code(self) -> int:
        if self.refusal is not None:
            return 2
        if any(r["status"] == "damaged" for r in self.runs):
            return 5
        return 0 if all(r["safe"] for r in self.runs) else 1

    def to_json(self) -> dict:
        return {"file": self.file, "program": self.program, "safe": self.exit_code() == 0 and self.refusal is None,
                "runs": self.runs, "skipped": self.skipped, "refusal": self.refusal,
                "diagnostics": [d.to_json() for d in self.diagnostics]}


def upgrade_check(new_file: str, runs_dir: str) -> UpgradeReport:
    """Check every stored run of NEW's program against NEW (see the module's docstring)."""
    report = UpgradeReport(file=new_file)
    compiled = flowc.compile(new_file, read_text)
    if not compiled.ok:
        report.refusal = f"{new_file} does not check"
        report.diagnostics, report.sources = list(compiled.diagnostics), compiled.sources()
        return report
    report.program = compiled.identity
    store = open_store(runs_dir)
    after = None
    while True:
        try:
            page = store.scan(limit=SCAN_PAGE, after=after)
        except ValueError as problem:
            report.refusal = str(problem)
            return report
        for problem in page["problems"]:
            if problem.get("status") != "not-created":
                report.refusal = f"the runs root {runs_dir} cannot be read: {problem.get('message')}"
                return report
        for row in page["runs"]:
            _check_row(report, compiled, runs_dir, new_file, row)
        after = page.get("nextAfter")
        if after is None:
            return report


def _check_row(report: UpgradeReport, compiled, runs_dir: str, new_file: str, row: dict) -> None:
    run_id = row["run"]
    if row["record"] == "not-started":
        report.skipped.append({"run": run_id, "reason": "not started"})
        return
    if row["record"] in ("unreadable", "inspection-limited") and not row.get("entry"):
        report.runs.append(_row(run_id, "unknown", "damaged", safe=False,
                                replay=f"cannot be read: {(row.get('problem') or {}).get('message')}"))
        return
    entry = row.get("entry") or {}
    if entry.get("module") != compiled.root:
        report.skipped.append({"run": run_id, "reason": f"another program (entry module `{entry.get('module')}`)"})
        return
    try:
        report.runs.append(check_run(compiled, runs_dir, run_id, new_file))
    except StorageError as problem:
        report.runs.append(_row(run_id, "unknown", "damaged", safe=False, replay=f"storage failure: {problem}"))


def _row(run_id: str, state: str, status: str, *, safe: bool, replay: str, fact: int | None = None,
         checkpoint: dict | None = None, hint: str | None = None) -> dict:
    return {"run": run_id, "state": state, "status": status, "safe": safe, "replay": replay, "fact": fact,
            "checkpoint": checkpoint, "hint": hint}


def check_run(compiled, runs_dir: str, run_id: str, new_file: str) -> dict:
    """One run's row: `status` is `matched` / `diverged` (a run that ended), `replays` /
    `diverged` (one that has not), or `refused` / `incomplete` / `damaged`; `checkpoint` (runs
    that have not ended) `{fact, function, fits, reason, param}` or None when there is none."""
    from flowrt.replay import replay
    from flowrt.run_state import run_state

    store = open_store(runs_dir).open(run_id, for_append=False)
    try:
        state = run_state(store)["state"]
        ended = store.ended
        start = store.fact(1)
        latest = None if ended else _latest_checkpoint(store)
        checkpoint = None if latest is None else _fits(compiled, store, latest)
    finally:
        store.close()
    if compiled.entry(start["entry"]["function"]) is None:
        return _row(run_id, state, "refused", safe=False, checkpoint=checkpoint,
                    replay=f"the new version has no entry `{start['entry']['function']}`",
                    hint=_hint(run_id, new_file, ended, checkpoint))
    result = replay(runs_dir, run_id, current=compiled, from_start=True)
    verdict = result.verdict
    if verdict is None:
        status = "damaged" if result.exit_code == 5 else "refused"
        return _row(run_id, state, status, safe=False, checkpoint=checkpoint,
                    replay=result.message or "the run could not be replayed",
                    hint=None if status == "damaged" else _hint(run_id, new_file, ended, checkpoint))
    if ended:
        if verdict.kind == "Matched":
            return _row(run_id, state, "matched", safe=True, replay="Matched")
        status = "diverged" if verdict.kind == "Diverged" else "incomplete"
        return _row(run_id, state, status, safe=False, fact=verdict.fact,
                    replay=f"{verdict.kind}" + (f" at fact {verdict.fact}" if verdict.fact else "") +
                    f": {verdict.reason}", hint=_hint(run_id, new_file, ended, None, verdict.fact))
    # A run that has not ended replays as far as it goes: Incomplete because the history ends
    # means every recorded fact was met; any other Incomplete (a hole, a re-run that died) means
    # the prefix could not be checked.
    if verdict.kind == "Incomplete" and verdict.fact is None and verdict.reason.startswith("the history ends"):
        status, replayed = "replays", f"the recorded prefix replays ({verdict.reason})"
    elif verdict.kind == "Diverged":
        status, replayed = "diverged", f"Diverged at fact {verdict.fact}: {verdict.reason}"
    else:
        status = "incomplete"
        replayed = f"{verdict.kind}" + (f" at fact {verdict.fact}" if verdict.fact else "") + f": {verdict.reason}"
    safe = status == "replays" and (checkpoint is None or checkpoint["fits"])
    return _row(run_id, state, status, safe=safe, replay=replayed, fact=verdict.fact, checkpoint=checkpoint,
                hint=None if safe else _hint(run_id, new_file, ended, checkpoint))


def _latest_checkpoint(store) -> dict | None:
    for fact in reversed(store.facts()):
        if fact["kind"] == "Checkpoint":
            return fact
    return None


def _fits(compiled, store, fact: dict) -> dict:
    """Whether the Checkpoint `fact` can be forked onto `compiled`, as `flow fork --program` decides."""
    from flowrt.replay import CheckpointMisfit, fit_checkpoint_arguments

    function = fact["function"]
    found: dict[str, Any] = {"fact": fact["n"], "function": function, "fits": False, "reason": None, "param": None}
    fn = compiled.functions.get(f"{function['module']}.{function['name']}")
    if fn is None:
        found["reason"] = (f"the new version has no top-level function `{function['name']}` in module "
                           f"`{function['module']}`")
        return found
    try:
        arguments = dict(store.value(fact, "arguments"))
    except Hole as hole:
        found["reason"] = f"its arguments are a hole ({hole.hash})"
        return found
    try:
        fit_checkpoint_arguments(fn, arguments)
    except CheckpointMisfit as misfit:
        found.update(reason=str(misfit), param=misfit.param)
        return found
    found["fits"] = True
    return found


def _hint(run_id: str, new_file: str, ended: bool, checkpoint: dict | None, fact: int | None = None) -> str:
    """What to do about an unsafe run."""
    program = shlex.quote(new_file)
    if ended:
        where = f"flow history {run_id} --fact {fact}" if fact else f"flow replay {run_id}"
        return f"it has ended, so nothing is to move; the new version departs from its record ({where})"
    if checkpoint is not None and checkpoint["fits"]:
        return (f"flow fork {run_id} --checkpoint {checkpoint['fact']} --program {program} "
                f"(continue it on the new version from its latest checkpoint)")
    if checkpoint is not None and checkpoint["param"] is not None and "does not fit" in (checkpoint["reason"] or ""):
        replacement = shlex.quote('{"' + checkpoint["param"] + '": ...}')
        return (f"flow fork {run_id} --checkpoint {checkpoint['fact']} --program {program} --input {replacement} "
                f"(give `{checkpoint['param']}` a value of its new type), or flow resume {run_id} (finish it on "
                f"the version it recorded)")
    return f"flow resume {run_id} (finish it on the version it recorded; it cannot move to the new one)"


def render(report: UpgradeReport) -> str:
    if report.refusal is not None:
        return f"upgrade-check: {report.refusal}\n"
    lines = [f"{'RUN':<34} {'STATE':<8} {'SAFE':<4}  REPLAY / CHECKPOINT"]
    for r in report.runs:
        checkpoint = r["checkpoint"]
        fork = "" if checkpoint is None else (
            f"; checkpoint {checkpoint['fact']} {checkpoint['function']['name']}: "
            + ("forks onto the new version" if checkpoint["fits"] else f"cannot fork: {checkpoint['reason']}"))
        lines.append(f"{r['run']:<34} {r['state']:<8} {'yes' if r['safe'] else 'NO':<4}  {r['replay']}{fork}")
        if r["hint"]:
            lines.append(f"{'':<34}   hint: {r['hint']}")
    unsafe = sum(1 for r in report.runs if not r["safe"])
    lines.append(f"{len(report.runs)} runs of {report.file} checked, {unsafe} not safe"
                 + (f"; {len(report.skipped)} other runs skipped" if report.skipped else ""))
    return "\n".join(lines) + "\n"
