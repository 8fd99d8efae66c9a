"""The sandboxed child: load the generated program and run it under a deterministic scheduler.

The child speaks framed canonical JSON on fds 0 (from the host) and 1 (to the host); that pipe is
its only egress (`host.invoke`). One run, one process:

  host  -> {"op": "load", "modules": [...], "entry": {...}, "args": [...], "tools": {...}}
  child -> {"op": "call", "id": "root#1", "task": "root", "tool": "planner.next",
            "arguments": {...}, "types": {...}?}         a Tool call (the host records it first)
  child -> {"op": "checkpoint", "function": {...}, "arguments": {...}}   at a root tail call
  child -> {"op": "wait"}                                  every task waits: admit the next reply
  host  -> {"op": "reply", "id": "root#1", "outcome": {...}}
  child -> {"op": "end", "outcome": {"Completed": value} | {"Faulted": {...}}}

Scheduling is deterministic: every runnable task runs until it waits, in task creation order;
only then does the child ask the host for a reply. So the order of replies alone decides every
interleaving, live and in replay.
"""

from __future__ import annotations

import os
import sys
import traceback

from sandbox import channel
from sandbox import runtime as R
from sandbox import values as V


class Task:
    __slots__ = ("id", "gen", "pure", "calls", "spawns", "waiting", "send", "done", "result", "owner",
                 "closed")

    def __init__(self, task_id: str, gen, owner: "Task | None") -> None:
        self.id = task_id
        self.gen = gen
        self.calls = 0
        self.spawns = 0
        self.waiting: str | None = None  # call id, or "task:<id>" ...
        self.send = None
        self.done = False
        self.result = None
        self.owner = owner
        self.closed = False


class Scheduler:
    def __init__(self, read_fd: int, write_fd: int, load: dict) -> None:
        self.read_fd = read_fd
        self.write_fd = write_fd
        self.load = load
        self.tools: dict = load.get("tools", {})
        self.line_maps: dict[str, list] = {m["filename"]: m.get("line_map", []) for m in load["modules"]}
        self.flow_files: dict[str, str] = {m["filename"]: m.get("flow_file", m["filename"]) for m in load["modules"]}
        self.tasks: list[Task] = []
        self.waiting_calls: dict[str, Task] = {}
        self.checkpoints = 0
        self.prefix = ""

    # -- messages

    def send(self, message: dict) -> None:
        channel.send(self.write_fd, message)

    def recv(self) -> dict:
        message = channel.recv(self.read_fd)
        if message is None:
            os._exit(0)  # the host went away
        return message

    # -- running

    def run(self, entry_fn, args: tuple) -> None:
        root = Task("root", None, None)
        self.tasks.append(root)
        try:
            result = self.run_root(root, entry_fn, args)
            self.send({"op": "end", "outcome": {"Completed": self.encode_result(result)}})
        except R.Fault as fault:
            self.send({"op": "end", "outcome": {"Faulted": self.fault_data(fault, fault.kind, fault.message)}})
        except RecursionError as problem:
            self.send({"op": "end", "outcome": {"Faulted": self.fault_data(
                problem, "limit", "the call depth limit was exceeded (a call that is not a tail call recursed too deep)")}})
        except MemoryError as problem:
            self.send({"op": "end", "outcome": {"Faulted": self.fault_data(problem, "limit", "out of memory")}})

    def run_root(self, root: Task, fn, args: tuple):
        result = fn(*args)
        while True:
            if _is_generator(result):
                result = self.drive(root, result)
            if type(result) is R.Tail:
                fn, args = result.fn, result.args
                result = fn(*args)
                continue
            return result

    def drive(self, task: Task, gen):
        """Run the root task's generator, serving its requests, until it returns."""
        value = None
        while True:
            try:
                request = gen.send(value)
            except StopIteration as done:
                return done.value
            value = self.serve(task, request)

    def serve(self, task: Task, request):
        kind = request[0]
        if kind == "call":
            _, desc, args, type_args = request
            call_id = self.new_call_id(task)
            message = {"op": "call", "id": call_id, "task": task.id, "tool": desc.identity,
                       "arguments": self.encode_arguments(desc, args, type_args)}
            if type_args:
                message["types"] = [{"term": t.term, "defs": t.defs} for t in type_args]
            self.send(message)
            self.send({"op": "wait"})
            while True:
                reply = self.recv()
                if reply.get("op") == "reply" and reply.get("id") == call_id:
                    return self.decode_reply(desc, reply["outcome"], type_args)
        raise R.Fault("internal", f"unknown request {kind!r}")

    def new_call_id(self, task: Task) -> str:
        task.calls += 1
        return f"{self.prefix}{task.id}#{task.calls}"

    # -- values across the pipe

    def encode_arguments(self, desc, args, type_args) -> dict:
        from flowrt import abi

        tool = self.tools.get(desc.identity)
        out = {}
        for index, (name, value) in enumerate(zip(desc.params, args)):
            if tool is None:
                out[name] = R.to_json(value)
                continue
            term = tool["params"][index]["type"]
            defs = dict(tool.get("types", {}))
            term = _substitute(term, tool, type_args, defs)
            out[name] = abi.encode(value, term, defs)
        return out

    def decode_reply(self, desc, outcome: dict, type_args):
        from flowrt import abi

        tool = self.tools[desc.identity]
        defs = dict(tool.get("types", {}))
        ok = _substitute(tool["ok"], tool, type_args, defs)
        err = tool.get("err")
        if err is not None:
            err = _substitute(err, tool, type_args, defs)
        result = abi.decode_outcome(outcome, ok, err, defs)
        if err is None:
            if result[0] == "Ok":
                return result[1]
            problem = result[1]
            raise R.Fault("tool-problem", f"{desc.identity} ended in {problem[0]}: {problem[1] if len(problem) > 1 else ''}")
        return result

    def encode_result(self, value):
        from flowrt import abi

        entry = self.load["entry"]
        return abi.encode(value, entry["result"], entry.get("defs", {}))

    # -- faults

    def fault_data(self, problem: BaseException, kind: str, message: str) -> dict:
        location = None
        for frame, line in traceback.walk_tb(problem.__traceback__):
            filename = frame.f_code.co_filename
            if filename in self.line_maps:
                mapped = _map_line(self.line_maps[filename], line)
                if mapped is not None:
                    location = {"file": self.flow_files[filename], "line": mapped[0], "column": mapped[1]}
        return {"kind": kind, "message": message, "location": location, "task": "root"}


def _substitute(term, tool: dict, type_args, defs: dict):
    if not type_args:
        return term
    names = tool.get("type_params", [])
    mapping = {}
    for name, arg in zip(names, type_args):
        mapping[name] = arg.term
        defs.update(arg.defs)
    return _subst(term, mapping)


def _subst(term, mapping):
    if isinstance(term, dict):
        if "Param" in term:
            return mapping.get(term["Param"], term)
        return {k: _subst(v, mapping) for k, v in term.items()}
    if isinstance(term, list):
        return [_subst(v, mapping) for v in term]
    return term


def _map_line(line_map: list, line: int):
    best = None
    for py, fl, fc in line_map:
        if py <= line:
            best = (fl, fc)
        else:
            break
    return best


def _is_generator(value) -> bool:
    return type(value).__name__ == "generator"


def main() -> None:
    read_fd, write_fd = channel.claim_stdio()
    load = channel.recv(read_fd)
    if load is None or load.get("op") != "load":
        return
    sys.setrecursionlimit(12_000)
    from flowrt import abi
    from sandbox.intrinsics import INTRINSICS
    from sandbox.loader import SandboxRefusal, load as load_modules

    injected = dict(R.names())
    injected.update(INTRINSICS)
    try:
        namespaces = load_modules([(m["key"][2:], m["filename"], m["source"]) for m in load["modules"]], injected)
    except SandboxRefusal as refusal:
        channel.send(write_fd, {"op": "refused", "message": str(refusal)})
        return
    entry = load["entry"]
    namespace = namespaces[entry["module"][2:]]
    fn = getattr(namespace, entry["function"])
    defs = entry.get("defs", {})
    args = tuple(abi.decode(value, term, defs) for value, term in zip(load["args"], entry["params"]))
    decimal_context = R.EXACT
    import decimal

    decimal.setcontext(decimal_context)
    Scheduler(read_fd, write_fd, load).run(fn, args)


if __name__ == "__main__":
    main()
