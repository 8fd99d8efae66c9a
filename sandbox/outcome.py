"""How a run ends, as the `end` message says it: the entry's result encoded by its declared type,
or a fault with the place in the Flow source where it happened (the generated modules' line maps
turn a Python line into a Flow line and column)."""

from __future__ import annotations


from flowdata import codec as abi
from sandbox import runtime as R
from flowdata import values as V

#: what ends a run in a fault rather than a crash of the child: Flow's own faults, and the limits
#: the interpreter or the number types reach
FAULTS = (R.Fault, RecursionError, MemoryError, V.IntOverLimit, V.DecimalOverLimit)


class Ending:
    """The outcomes of a run of the program the load message holds."""

    def __init__(self, load: dict) -> None:
        self.entry = load.get("entry")
        self.line_maps: dict[str, list] = {m["filename"]: m.get("line_map", []) for m in load["modules"]}
        self.flow_files: dict[str, str] = {m["filename"]: m.get("flow_file", m["filename"]) for m in load["modules"]}

    def completed(self, value) -> dict:
        entry = self.entry
        return {"Completed": abi.encode(value, entry["result"], entry.get("defs", {}))}

    def faulted(self, problem: BaseException) -> dict:
        """The outcome of one of `FAULTS`."""
        if isinstance(problem, R.Fault):
            kind, message = problem.kind, problem.message
        elif isinstance(problem, RecursionError):
            kind, message = "limit", "the call depth limit was exceeded (a call that is not a tail call recursed too deep)"
        elif isinstance(problem, MemoryError):
            kind, message = "limit", "out of memory"
        elif isinstance(problem, V.IntOverLimit):
            # Int arithmetic is Python's own; an Int over the limit is caught where it is turned
            # into text or leaves the evaluator (a result, a Tool's arguments, interpolation).
            kind, message = "limit", str(problem)
        else:  # V.DecimalOverLimit: an exponent beyond signed 64 bits, or too many digits
            kind, message = "limit", str(problem)
        return {"Faulted": self.fault_data(problem, kind, message)}

    def fault_data(self, problem: BaseException, kind: str, message: str) -> dict:
        location = None
        tb = problem.__traceback__
        while tb is not None:  # as traceback.walk_tb, which the locked-down child cannot import
            filename, line = tb.tb_frame.f_code.co_filename, tb.tb_lineno
            tb = tb.tb_next
            if filename in self.line_maps:
                mapped = _map_line(self.line_maps[filename], line)
                if mapped is not None:
                    location = {"file": self.flow_files[filename], "line": mapped[0], "column": mapped[1]}
        return {"kind": kind, "message": message, "location": location,
                "task": getattr(problem, "flow_task", "root")}


def _map_line(line_map: list, line: int):
    best = None
    for py, fl, fc in line_map:
        if py <= line:
            best = (fl, fc)
        else:
            break
    return best
