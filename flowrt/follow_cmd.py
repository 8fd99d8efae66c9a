"""`flow history RUN --follow`: each fact printed as it lands, until the run ends, pauses or halts
(`flowrt.watch`), and an exit code that says which, as `flow run`'s would (docs/cli.md)."""

from __future__ import annotations

import sys

from flowrt.store import RunNotFound, StorageError

#: the exit code of a followed run by how the watch ended: as `flow run`'s for the same ending
#: (a crash, and a watch that timed out, are Incomplete: 3)
EXIT_BY_ENDING = {"paused": 3, "halted": 130, "crashed": 3, "unknown": 3}


def ending_code(watch) -> int:
    """The exit code for how `watch` ended: at End 0, or 4 when the entry's result is its own
    `Err` (an outcome `{"Completed": {"Err": ...}}`), or 1 when it faulted."""
    if watch.ending != "ended":
        return EXIT_BY_ENDING.get(watch.ending, 3)
    end = watch.last
    if end.get("ending") == "faulted":
        return 1
    outcome = watch.run.value(end, "outcome") if not watch.run.is_hole(end, "outcome") else None
    value = outcome.get("Completed") if isinstance(outcome, dict) else None
    if isinstance(value, dict) and list(value) == ["Err"]:
        return 4
    return 1 if isinstance(outcome, dict) and "Faulted" in outcome else 0


def follow_history(runs_dir: str, run_id: str, *, kind: str | None, as_json: bool, timeout: float | None) -> int:
    import orjson

    from flowrt.inspect_cmd import fact_line
    from flowrt.watch import RunWatch, follow

    out = sys.stdout
    try:
        watch = RunWatch(runs_dir, run_id)
    except StorageError as problem:
        sys.stderr.write(f"storage failure: {problem}\n")
        return 5
    except (RunNotFound, ValueError) as problem:
        sys.stderr.write(f"{problem}\n")
        return 2
    try:
        try:
            for row in follow(watch, timeout=timeout):
                if kind is not None and row["kind"].lower() != kind.lower():
                    continue
                if as_json:
                    out.buffer.write(orjson.dumps(row, option=orjson.OPT_SORT_KEYS) + b"\n")
                else:
                    out.write(fact_line(row) + "\n")
                out.flush()
        except TimeoutError as problem:
            sys.stderr.write(f"{problem}\n")
            return 3
        except StorageError as problem:
            sys.stderr.write(f"storage failure: {problem}\n")
            return 5
        except KeyboardInterrupt:
            sys.stderr.write("stopped following (the run goes on)\n")
            return 130
        if not as_json:
            out.write(f"run {run_id}: {watch.ending}" + (f" ({watch.reason})" if watch.reason else "") + "\n")
        return ending_code(watch)
    finally:
        watch.close()
