"""How the front end's record classes are made: `flowc.records` (`record` classes, and `maker`s
that build a frozen node by `__class__` assignment) against the public ways: plain
`@dataclass(frozen=True, slots=True)`, and classes written out as source (what a generator would
check in: `__slots__` and a straight `__init__`, either frozen, filling slots through their
descriptors as `records` does, or not frozen, plain `self.x = x`).

    python scripts/bench/record_choice.py [--runs 7] [--lines 10000]
    python scripts/bench/record_choice.py --callgrind

Three figures, the variants interleaved, medians:
  1. making one node (a `Span` of four fields, a `Var` of two), ns per node;
  2. making the front end's 79 record classes from the same bodies: `record`, `record` with each
     `__init__` compiled (no `CodeType.replace`), dataclasses, and the classes written out as
     source, run from bytecode;
  3. parse only, lines/s of a generated program: makers (today), calling the record classes,
     and the classes as dataclasses.
`--callgrind` counts instructions per node made instead of wall time (valgrind), by the
difference between 200,000 and 100,000 nodes.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import marshal
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

RECORD_MODULES = ("flowc.syntax", "flowc.types", "flowc.resolve", "flowc.program", "flowc.exhaust",
                  "flowc.check", "flowc.parse")
MAKE_VARIANTS = ("records maker", "records class", "dataclass", "source, frozen", "source, not frozen")


def class_source(name: str, names: tuple[str, ...], frozen: bool) -> str:
    """A record class as a generator would write it: slots, a straight `__init__`, equality and
    hashing over the fields, and the frozen guard."""
    params = "".join(f", {n}" for n in names)
    if frozen:
        body = "".join(f"        _set_{name}_{n}(self, {n})\n" for n in names) or "        pass\n"
    else:
        body = "".join(f"        self.{n} = {n}\n" for n in names) or "        pass\n"
    key = "(" + "".join(f"self.{n}, " for n in names) + ")"
    lines = [f"class {name}:", f"    __slots__ = {names!r}", f"    __match_args__ = {names!r}",
             f"    def __init__(self{params}):", body.rstrip("\n"),
             "    def __eq__(self, other):",
             "        if other.__class__ is not self.__class__:",
             "            return NotImplemented",
             f"        return {key} == {key.replace('self.', 'other.')}",
             "    def __hash__(self):",
             f"        return hash({key})"]
    if frozen:
        lines += ["    def __setattr__(self, name, value):",
                  "        raise FrozenInstanceError(f'cannot assign to field {name!r}')"]
    lines.append("")
    if frozen:
        lines += [f"_set_{name}_{n} = {name}.{n}.__set__" for n in names]
    return "\n".join(lines) + "\n"


def module_source(classes, frozen: bool) -> str:
    parts = ["from dataclasses import FrozenInstanceError\n"]
    for cls in classes:
        parts.append(class_source(cls.__name__, tuple(cls.__dataclass_fields__), frozen))
    return "\n".join(parts)


def record_classes() -> list[type]:
    import importlib

    found = []
    for module_name in RECORD_MODULES:
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if isinstance(value, type) and getattr(value, "__module__", None) == module_name \
                    and "__dataclass_fields__" in value.__dict__:
                found.append(value)
    return found


def _as_dataclasses() -> None:
    """Make `flowc.records.record` a dataclass decorator (before the record modules are imported)."""
    import flowc.records

    def record(cls=None, /, *, frozen: bool = True):
        wrap = dataclasses.dataclass(frozen=frozen, slots=True)
        return wrap if cls is None else wrap(cls)

    flowc.records.record = record


def constructors(folder: str) -> dict[str, tuple]:
    """For each variant, (Span, Var) constructors."""
    from flowc import syntax as S
    from flowc.records import maker

    span_fields = tuple(S.Span.__dataclass_fields__)
    var_fields = tuple(S.Var.__dataclass_fields__)
    spans = {"records maker": maker(S.Span), "records class": S.Span,
             "dataclass": dataclasses.dataclass(frozen=True, slots=True)(
                 type("Span", (), {"__annotations__": {n: int for n in span_fields}}))}
    vars_ = {"records maker": maker(S.Var), "records class": S.Var,
             "dataclass": dataclasses.dataclass(frozen=True, slots=True)(
                 type("Var", (), {"__annotations__": {n: object for n in var_fields}}))}
    for variant, frozen in (("source, frozen", True), ("source, not frozen", False)):
        path = os.path.join(folder, f"nodes_{'frozen' if frozen else 'plain'}.py")
        with open(path, "w") as handle:
            handle.write(module_source([S.Span, S.Var], frozen))
        namespace: dict = {}
        exec(compile(Path(path).read_text(), path, "exec"), namespace)
        spans[variant] = namespace["Span"]
        vars_[variant] = namespace["Var"]
    return {variant: (spans[variant], vars_[variant]) for variant in MAKE_VARIANTS}


def make_nodes(span, var, count: int) -> None:
    for i in range(count):
        var("x", span(i, 1, i, 2))


def _child_make(variant: str, folder: str, count: int) -> None:
    span, var = constructors(folder)[variant]
    make_nodes(span, var, count)


def _plain_body(cls) -> type:
    """A fresh undecorated class with the fields of the record class `cls`."""
    body: dict = {"__annotations__": {}, "__module__": cls.__module__}
    for name, f in cls.__dataclass_fields__.items():
        body["__annotations__"][name] = f.type
        if f.default is not dataclasses.MISSING:
            body[name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            body[name] = dataclasses.field(default_factory=f.default_factory)
    return type(cls.__name__, (), body)


def _make_classes(kind: str, bodies: list[type], code: bytes) -> None:
    from flowc import records

    if kind == "records":
        for body in bodies:
            records.record(body)
    elif kind == "records, __init__ compiled":
        # What `records` does without `CodeType.replace`: compile each class's `__init__`.
        template = records._init_from_template
        records._init_from_template = lambda cls, names, defaults, frozen: records._compiled_init(
            cls, names, defaults, {}, frozen, False)
        try:
            for body in bodies:
                records.record(body)
        finally:
            records._init_from_template = template
    elif kind == "dataclass":
        for body in bodies:
            dataclasses.dataclass(frozen=True, slots=True)(body)
    else:
        exec(marshal.loads(code), {})


def _child_import(variant: str, folder: str) -> None:
    start = time.perf_counter()
    if variant == "records":
        import flowc.records  # noqa: F401
    elif variant == "dataclass":
        import flowc.records  # noqa: F401

        _as_dataclasses()
    else:
        sys.path.insert(0, folder)
        import all_nodes  # noqa: F401
        print(time.perf_counter() - start)
        return
    import flowc.check  # noqa: F401
    import flowc.exhaust  # noqa: F401
    import flowc.program  # noqa: F401
    import flowc.resolve  # noqa: F401
    import flowc.syntax  # noqa: F401
    import flowc.types  # noqa: F401
    print(time.perf_counter() - start)


def _child_parse(variant: str, lines: int, runs: int) -> None:
    if variant == "dataclass":
        _as_dataclasses()
    from gen_program import generate

    from flowc import parse as P

    if variant != "records maker":
        for name in vars(P.make):
            setattr(P.make, name, getattr(P.S, name))
    source = generate(lines)
    P._fast_parser()
    times = []
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter()
        parsed = P.parse(source, "big.flow")
        times.append(time.perf_counter() - start)
        assert parsed.ok
        del parsed
    print(statistics.median(times))


def run_child(*args: str, env=None) -> float:
    done = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True,
                          env=env)
    return float(done.stdout.split()[-1])


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--runs", type=int, default=7)
    options.add_argument("--lines", type=int, default=10_000)
    options.add_argument("--callgrind", action="store_true")
    options.add_argument("--child", choices=("make", "import", "parse"))
    options.add_argument("--variant")
    options.add_argument("--folder")
    options.add_argument("--count", type=int, default=100_000)
    args = options.parse_args()
    if args.child == "make":
        return _child_make(args.variant, args.folder, args.count)
    if args.child == "import":
        return _child_import(args.variant, args.folder)
    if args.child == "parse":
        return _child_parse(args.variant, args.lines, args.count)

    with tempfile.TemporaryDirectory() as folder:
        if args.callgrind:
            return callgrind(folder)
        made = constructors(folder)
        count = 100_000
        per_node: dict[str, list[float]] = {v: [] for v in MAKE_VARIANTS}
        for round_ in range(args.runs):
            shift = round_ % len(MAKE_VARIANTS)
            for variant in MAKE_VARIANTS[shift:] + MAKE_VARIANTS[:shift]:
                span, var = made[variant]
                gc.collect()
                gc.disable()
                start = time.perf_counter()
                make_nodes(span, var, count)
                per_node[variant].append((time.perf_counter() - start) / (2 * count))
                gc.enable()
        base = statistics.median(per_node["records maker"])
        print(f"making a node (Span of 4 fields and Var of 2, alternately), {args.runs} interleaved rounds:")
        for variant in MAKE_VARIANTS:
            median = statistics.median(per_node[variant])
            print(f"  {variant:20} {median * 1e9:6.0f} ns  {median / base:5.2f}x the maker")

        # Making the classes, from the same bodies (fields, annotations, defaults) each time.
        classes = record_classes()
        code = marshal.dumps(compile(module_source(classes, True), "all_nodes.py", "exec"))
        kinds = ("records", "records, __init__ compiled", "dataclass", "source from bytecode")
        making: dict[str, list[float]] = {k: [] for k in kinds}
        for round_ in range(args.runs):
            for kind in kinds[round_ % 4:] + kinds[:round_ % 4]:
                bodies = [_plain_body(cls) for cls in classes]
                gc.collect()
                start = time.perf_counter()
                _make_classes(kind, bodies, code)
                making[kind].append(time.perf_counter() - start)
        print(f"making the front end's {len(classes)} record classes (in-process, fields only):")
        for kind in kinds:
            print(f"  {kind:28} {statistics.median(making[kind]) * 1000:5.1f} ms")

        parse_variants = ("records maker", "records class", "dataclass")
        parses: dict[str, list[float]] = {v: [] for v in parse_variants}
        for round_ in range(max(3, args.runs // 2)):
            for variant in parse_variants[round_ % 3:] + parse_variants[:round_ % 3]:
                parses[variant].append(run_child("--child", "parse", "--variant", variant,
                                                 "--lines", str(args.lines), "--count", "3"))
        base = statistics.median(parses["records maker"])
        print(f"parse only, generated {args.lines}-line program (medians of per-process medians):")
        for variant in parse_variants:
            median = statistics.median(parses[variant])
            print(f"  {variant:20} {args.lines / median:8.0f} lines/s  {median / base:5.2f}x the time "
                  f"(range {min(parses[variant]) * 1000:.0f}-{max(parses[variant]) * 1000:.0f} ms)")


def callgrind(folder: str) -> None:
    constructors(folder)  # writes the source modules
    print("instructions per node made (callgrind, Span and Var alternately):")
    counts = {}
    for variant in MAKE_VARIANTS:
        totals = []
        for count in (100_000, 200_000):
            out = os.path.join(folder, "cg.out")
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                            __file__, "--child", "make", "--variant", variant, "--folder", folder,
                            "--count", str(count)], check=True, capture_output=True,
                           env=dict(os.environ, PYTHONHASHSEED="0"))
            with open(out) as handle:
                totals.append(next(int(line.split()[1]) for line in handle if line.startswith("totals:")))
        counts[variant] = (totals[1] - totals[0]) / (2 * 100_000)
    for variant in MAKE_VARIANTS:
        print(f"  {variant:20} {counts[variant]:7.0f}  {counts[variant] / counts['records maker']:5.2f}x the maker")
    lines = 2000
    print(f"instructions per parse of a generated {lines}-line program (callgrind):")
    parses = {}
    for variant in ("records maker", "records class", "dataclass"):
        parses[variant] = _callgrind_difference(folder, ["--child", "parse", "--variant", variant,
                                                         "--lines", str(lines)])
    for variant, count in parses.items():
        print(f"  {variant:20} {count / 1e6:7.1f} M  {count / parses['records maker']:5.2f}x")


def _callgrind_difference(folder: str, args: list[str]) -> int:
    """Instructions of running the child twice as often less once as often (`--count` 2 and 1)."""
    totals = []
    for count in (1, 2):
        out = os.path.join(folder, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                        __file__, *args, "--count", str(count)], check=True, capture_output=True,
                       env=dict(os.environ, PYTHONHASHSEED="0"))
        with open(out) as handle:
            totals.append(next(int(line.split()[1]) for line in handle if line.startswith("totals:")))
    return totals[1] - totals[0]


if __name__ == "__main__":
    main()
