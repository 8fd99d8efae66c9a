"""The intrinsics of std@v1 (sandbox/intrinsics.py).

Coverage is checked against the std sources themselves: every `@intrinsic` declaration has its
`i_<module>_<name>` (and `_t` generator version when it is effect-polymorphic), and there is
nothing else. Behaviour is checked from the doc comments' examples and edge cases, the generator
versions with a small fake scheduler, and the collection and number functions against Python
models with hypothesis.
"""

from __future__ import annotations

import inspect
import decimal
from decimal import Decimal as PyD

from flowdata.flowdecimal import FlowDecimal as D  # the Python value of a Flow Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from flowc import syntax as S
from flowc.parse import parse
from flowdata import codec
from sandbox import intrinsics as I
from flowdata import values as V
from sandbox.intrinsics import INTRINSICS, SCHEDULER_INTRINSICS, missing
from sandbox.runtime import Fault, TypeArg

# Python's decimal as the oracle for exponents within its range.
EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
from flowdata.values import NONE, Duration, FlowDict, FlowSet, Instant, err, ok, some

STD = Path(__file__).resolve().parent.parent / "flowc" / "std" / "v1"
J = V.JSON_VALUE
JNULL = J.flow_bare["Null"]


def jnum(x):
    return J.make("Number", D(x))


def jstr(s):
    return J.make("String", s)


def jarr(*xs):
    return J.make("Array", tuple(xs))


def jobj(**kv):
    return J.make("Object", FlowDict(kv.items()))


# ---------------------------------------------------------------------------------------------
# Coverage: the declarations in std and the implementations agree


def _declared():
    """(python name, declaration, effect-polymorphic) for every @intrinsic in std@v1."""
    out = []
    for path in sorted(STD.glob("*.flow")):
        parsed = parse(path.read_text(encoding="utf-8"), path.name)
        assert parsed.ok, (path, parsed.diagnostics)
        for item in parsed.module.items:
            if isinstance(item, S.FnDecl) and item.attr("intrinsic") is not None:
                poly = any(isinstance(p.type, S.TFn) and p.type.effect not in (None, "tool") for p in item.params)
                out.append((f"i_{path.stem}_{item.name}", item, poly))
    return out


DECLARED = _declared()
TYPED = {"i_json_decode", "i_json_from_value"}


def test_declarations_found():
    """The std sources declare the intrinsics this module is about (a sanity check of the scan)."""
    names = {n for n, _, _ in DECLARED}
    assert {"i_list_map", "i_text_join", "i_dict_get", "i_json_decode", "i_task_spawn"} <= names
    assert len(names) == len(DECLARED) == 88


def test_every_intrinsic_implemented_and_nothing_extra():
    """Every declared intrinsic except the scheduler's has a function, effect-polymorphic ones
    also a `_t` version, and INTRINSICS holds nothing else."""
    expected = set()
    for name, _, poly in DECLARED:
        if name in SCHEDULER_INTRINSICS:
            continue
        expected.add(name)
        if poly:
            expected.add(name + "_t")
    assert set(INTRINSICS) == expected
    assert len(INTRINSICS) == 93
    assert SCHEDULER_INTRINSICS == {n for n, _, _ in DECLARED if n.startswith("i_task_")}
    assert missing(sorted(expected | SCHEDULER_INTRINSICS)) == []
    assert missing(["i_list_map", "i_list_nope", "i_task_wait", "i_text_nope_t"]) == ["i_list_nope", "i_text_nope_t"]


def test_shapes():
    """Pure versions are plain functions, `_t` versions generator functions; each takes the
    declared parameters (typed json intrinsics one more, the type argument, first)."""
    for name, decl, poly in DECLARED:
        if name in SCHEDULER_INTRINSICS:
            continue
        fn = INTRINSICS[name]
        assert fn.__name__ == name
        assert not inspect.isgeneratorfunction(fn), name
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        assert len(params) == len(decl.params) + (name in TYPED), name
        if poly:
            gen = INTRINSICS[name + "_t"]
            assert inspect.isgeneratorfunction(gen), name
            assert len(inspect.signature(gen).parameters) == len(decl.params)


# ---------------------------------------------------------------------------------------------
# A fake scheduler for the `_t` versions


def effectful(label, fn):
    """A Tool-capable function value: it yields one request, whose reply is `fn(*args)`."""
    def call(*args):
        reply = yield ("call", label, args, fn)
        return reply
    return call


def drive(gen):
    """Run `gen` like the scheduler: answer every request. Returns (result, [(label, args)])."""
    log = []
    reply = None
    while True:
        try:
            request = gen.send(reply)
        except StopIteration as done:
            return done.value, log
        if request[0] in ("enter", "leave"):  # a call's frame (task ownership): nothing to do here
            reply = request[1] if request[0] == "leave" else None
            continue
        kind, label, args, fn = request
        assert kind == "call"
        log.append((label, args))
        reply = fn(*args)


def both(name, *args, pure_fns=None):
    """Run intrinsic `name` pure (with `pure_fns`) and as `_t` with effectful versions of the
    same functions; check they agree and return (result, log of the effectful run)."""
    fns = pure_fns or {}
    pure_args = [fns.get(i, a) for i, a in enumerate(args)]
    eff_args = [effectful(f"f{i}", fns[i]) if i in fns else a for i, a in enumerate(args)]
    expected = INTRINSICS[name](*pure_args)
    got, log = drive(INTRINSICS[name + "_t"](*eff_args))
    assert got == expected and type(got) is type(expected)
    # a pure function handed to the `_t` version is called directly, without yielding
    got2, log2 = drive(INTRINSICS[name + "_t"](*pure_args))
    assert got2 == expected and log2 == []
    return got, log


def test_t_versions_call_in_order():
    """Each `_t` version yields once per call, in the order and number the docs give."""
    xs = (1, 2, 3, 4)
    got, log = both("i_list_map", xs, None, pure_fns={1: lambda x: x * 10})
    assert got == (10, 20, 30, 40) and [a for _, a in log] == [(1,), (2,), (3,), (4,)]
    got, log = both("i_list_filter", xs, None, pure_fns={1: lambda x: x % 2 == 0})
    assert got == (2, 4) and len(log) == 4
    got, log = both("i_list_fold", ("a", "b"), ">", None, pure_fns={2: lambda acc, x: acc + x})
    assert got == ">ab" and [a for _, a in log] == [(">", "a"), (">a", "b")]
    got, log = both("i_list_sort_by", ("ccc", "a", "bb", "d"), None, pure_fns={1: len})
    assert got == ("a", "d", "bb", "ccc") and [a for _, a in log] == [("ccc",), ("a",), ("bb",), ("d",)]
    got, log = both("i_list_find", (1, 4, 6), None, pure_fns={1: lambda x: x > 3})
    assert got == some(4) and [a for _, a in log] == [(1,), (4,)]
    got, log = both("i_list_find", (1, 2), None, pure_fns={1: lambda x: x > 3})
    assert got == NONE and len(log) == 2
    got, log = both("i_list_any", (1, 2, 3), None, pure_fns={1: lambda x: x > 1})
    assert got is True and len(log) == 2
    got, log = both("i_list_all", (1, 2, 3), None, pure_fns={1: lambda x: x > 1})
    assert got is False and len(log) == 1
    got, log = both("i_list_all", (), None, pure_fns={1: lambda x: False})
    assert got is True and log == []
    got, log = both("i_list_any", (), None, pure_fns={1: lambda x: True})
    assert got is False and log == []
    got, log = both("i_list_partition", (1, 2, 3), None, pure_fns={1: lambda x: x > 1})
    assert got == ((2, 3), (1,)) and len(log) == 3
    d = FlowDict([("b", 2), ("a", 1), ("c", 3)])
    got, log = both("i_dict_map_values", d, None, pure_fns={1: lambda v: v * 2})
    assert got == FlowDict([("a", 2), ("b", 4), ("c", 6)]) and [a for _, a in log] == [(1,), (2,), (3,)]
    assert list(got.keys()) == ["a", "b", "c"]


def test_t_versions_on_empty_inputs_are_still_generators():
    """An empty input makes no call but the `_t` version is still a generator to drive."""
    for name, args in [("i_list_map", ((), None)), ("i_list_filter", ((), None)), ("i_list_fold", ((), 7, None)),
                       ("i_list_sort_by", ((), None)), ("i_list_find", ((), None)),
                       ("i_list_partition", ((), None)), ("i_dict_map_values", (V.EMPTY_DICT, None))]:
        gen = INTRINSICS[name + "_t"](*args)
        assert inspect.isgenerator(gen)
        result, log = drive(gen)
        assert log == []
        assert result == INTRINSICS[name](*args)


def test_t_version_passes_tail_and_generator_results_through():
    """`_t` versions call through rt_fcall: a function returning a Tail is bounced."""
    from sandbox.runtime import Tail

    def double(x):
        return x * 2

    def tailing(x):
        return Tail(double, (x,))

    assert drive(I.i_list_map_t((1, 2), tailing)) == ((2, 4), [])


def test_t_version_fault_propagates():
    """A Fault raised inside the function argument ends the generator with that Fault."""
    def boom(x):
        raise Fault("division-by-zero", "x")
        yield  # pragma: no cover

    with pytest.raises(Fault) as info:
        drive(I.i_list_map_t((1,), boom))
    assert info.value.kind == "division-by-zero"


# ---------------------------------------------------------------------------------------------
# list


def test_list_examples():
    """The examples of std@v1/list's doc comments."""
    assert I.i_list_length(()) == 0 and I.i_list_length((1, 2)) == 2
    assert I.i_list_get(("a", "b"), 1) == some("b")
    assert I.i_list_get(("a", "b"), 2) == NONE
    assert I.i_list_get(("a",), -1) == NONE
    assert I.i_list_get((), 0) == NONE
    assert I.i_list_get((1,), 10**30) == NONE and I.i_list_get((1,), -10**30) == NONE
    assert I.i_list_range(0, 3) == (0, 1, 2)
    assert I.i_list_range(2, 2) == () and I.i_list_range(5, 2) == ()
    assert I.i_list_range(-1, 1) == (-1, 0)
    assert I.i_list_range(10**30, 10**30 + 2) == (10**30, 10**30 + 1)
    assert I.i_list_map((1, 2), lambda x: x + 1) == (2, 3)
    assert I.i_list_map((), lambda x: x) == ()
    assert I.i_list_filter((1, 2, 3, 4), lambda x: x % 2 == 0) == (2, 4)
    assert I.i_list_fold(("a", "b"), ">", lambda acc, x: acc + x) == ">ab"
    assert I.i_list_fold((), 5, lambda acc, x: 0) == 5
    assert I.i_list_concat(((1,), (), (2, 3))) == (1, 2, 3)
    assert I.i_list_concat(()) == ()
    assert I.i_list_sort((3, 1, 2)) == (1, 2, 3)
    assert I.i_list_sort(("b", "a")) == ("a", "b")
    assert I.i_list_sort_by(("ccc", "a", "bb"), I.i_text_length) == ("a", "bb", "ccc")
    assert I.i_list_reverse((1, 2, 3)) == (3, 2, 1) and I.i_list_reverse(()) == ()
    assert I.i_list_find((1, 4, 6), lambda x: x > 3) == some(4)
    assert I.i_list_any((1, 2), lambda x: x > 1) is True
    assert I.i_list_all((1, 2), lambda x: x > 1) is False
    assert I.i_list_any((), lambda x: True) is False and I.i_list_all((), lambda x: False) is True
    assert I.i_list_partition((1, 2, 3), lambda x: x > 1) == ((2, 3), (1,))
    assert I.i_list_contains(("a", "b"), "b") is True and I.i_list_contains((), 1) is False
    assert I.i_list_take((1, 2, 3), 2) == (1, 2) and I.i_list_take((1,), 5) == (1,)
    assert I.i_list_take((1, 2), 0) == () and I.i_list_take((1, 2), -3) == ()
    assert I.i_list_take((1, 2), 10**40) == (1, 2)
    assert I.i_list_drop((1, 2, 3), 2) == (3,) and I.i_list_drop((1,), 5) == ()
    assert I.i_list_drop((1, 2), 0) == (1, 2) and I.i_list_drop((1, 2), -1) == (1, 2)
    assert I.i_list_drop((1, 2), 10**40) == ()
    assert I.i_list_chunks((1, 2, 3, 4, 5), 2) == ((1, 2), (3, 4), (5,))
    assert I.i_list_chunks((), 3) == ()
    assert I.i_list_chunks((1, 2), 10**30) == ((1, 2),)
    assert I.i_list_zip((1, 2, 3), ("a", "b")) == ((1, "a"), (2, "b"))
    assert I.i_list_zip((), (1,)) == ()
    assert I.i_list_unique((3, 1, 3, 2, 1)) == (3, 1, 2) and I.i_list_unique(()) == ()


def test_list_structural_equality():
    """contains and unique compare structurally (Decimals by value, records, dicts, options)."""
    assert I.i_list_contains((D("1.50"),), D("1.5"))
    assert I.i_list_unique((D("1.5"), D("1.50"), D("2"))) == (D("1.5"), D("2"))
    assert I.i_list_unique((some(1), NONE, some(1), NONE)) == (some(1), NONE)
    d1, d2 = FlowDict([("a", 1)]), FlowDict([("a", 1)])
    assert I.i_list_unique((d1, d2, V.EMPTY_DICT)) == (d1, V.EMPTY_DICT)
    assert I.i_list_unique(((1, "a"), (1, "a"), (1, "b"))) == ((1, "a"), (1, "b"))


def test_list_sort_uses_flow_order():
    """sort orders by Flow's order: None first, tuples item by item, Durations by nanoseconds."""
    assert I.i_list_sort((some(2), NONE, some(1))) == (NONE, some(1), some(2))
    assert I.i_list_sort(((1, "b"), (1, "a"), (0, "z"))) == ((0, "z"), (1, "a"), (1, "b"))
    assert I.i_list_sort((Duration(5), Duration(-1))) == (Duration(-1), Duration(5))
    assert I.i_list_sort((D("1.5"), D("-2"), D("1.25"))) == (D("-2"), D("1.25"), D("1.5"))
    assert I.i_list_sort(((2,), (1, 5), (1,))) == ((1,), (1, 5), (2,))
    assert I.i_list_sort((True, False)) == (False, True)
    assert I.i_list_sort(("é", "z", "a")) == ("a", "z", "é")


def test_list_faults():
    """chunks with size <= 0 faults (invalid-argument); a range too large to build faults (limit)."""
    for size in (0, -1, -10**30):
        with pytest.raises(Fault) as info:
            I.i_list_chunks((1, 2), size)
        assert info.value.kind == "invalid-argument"
    with pytest.raises(Fault) as info:
        I.i_list_chunks((), 0)
    assert info.value.kind == "invalid-argument"
    with pytest.raises(Fault) as info:
        I.i_list_range(0, 10**20)
    assert info.value.kind == "limit"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 5), st.integers())))
def test_sort_is_a_stable_sorted_permutation(pairs):
    """sort_by on the first item is sorted, a permutation, and stable (sort on whole items too)."""
    xs = tuple(pairs)
    got = I.i_list_sort_by(xs, lambda p: p[0])
    assert sorted(got) == sorted(xs)
    assert all(got[i][0] <= got[i + 1][0] for i in range(len(got) - 1))
    assert got == tuple(sorted(xs, key=lambda p: p[0]))  # Python's sort is stable
    for k in {p[0] for p in xs}:
        assert [p for p in got if p[0] == k] == [p for p in xs if p[0] == k]
    assert I.i_list_sort(xs) == tuple(sorted(xs))
    # tag each item with its position: sort by the value alone keeps equal values in order
    tagged = I.i_list_sort_by(tuple(enumerate(p[0] for p in xs)), lambda t: t[1])
    assert [i for i, _ in tagged] == sorted(range(len(xs)), key=lambda i: xs[i][0])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=3)), st.integers(-3, 6))
def test_list_models(xs, n):
    """take, drop, chunks, reverse, unique, zip and concat agree with Python on lists."""
    t = tuple(xs)
    assert I.i_list_take(t, n) == tuple(xs[:max(n, 0)])
    assert I.i_list_drop(t, n) == tuple(xs[max(n, 0):])
    assert I.i_list_take(t, n) + I.i_list_drop(t, n) == t
    if n > 0:
        chunks = I.i_list_chunks(t, n)
        assert I.i_list_concat(chunks) == t and all(0 < len(c) <= n for c in chunks)
        assert all(len(c) == n for c in chunks[:-1])
    assert I.i_list_reverse(I.i_list_reverse(t)) == t
    assert I.i_list_unique(t) == tuple(dict.fromkeys(xs))
    assert I.i_list_zip(t, I.i_list_range(0, len(t))) == tuple(zip(xs, range(len(xs))))


# ---------------------------------------------------------------------------------------------
# text


def test_text_examples():
    """The examples of std@v1/text's doc comments."""
    assert I.i_text_length("") == 0 and I.i_text_length("héllo") == 5 and I.i_text_length("😀") == 1
    assert I.i_text_join((), ", ") == "" and I.i_text_join(("a",), ", ") == "a"
    assert I.i_text_join(("a", "b"), ", ") == "a, b"
    assert I.i_text_split("a,,b", ",") == ("a", "", "b")
    assert I.i_text_split("", ",") == ("",)
    assert I.i_text_split("abc", "-") == ("abc",)
    assert I.i_text_split("ab", "") == ("a", "b") and I.i_text_split("", "") == ()
    assert I.i_text_split("a😀b", "") == ("a", "😀", "b")
    assert I.i_text_split("a<>b<>", "<>") == ("a", "b", "")
    assert I.i_text_lines("a\nb\n") == ("a", "b")
    assert I.i_text_lines("a\r\n\nb") == ("a", "", "b")
    assert I.i_text_lines("") == ()
    assert I.i_text_lines("\n") == ("",)
    assert I.i_text_lines("a") == ("a",)
    assert I.i_text_lines("a\r\n") == ("a",)
    assert I.i_text_lines("a\rb") == ("a\rb",)  # a lone CR is not a line ending
    assert I.i_text_chars("hé") == ("h", "é") and I.i_text_chars("") == ()
    assert I.i_text_trim("  a b \n") == "a b"
    assert I.i_text_trim_start("  a ") == "a " and I.i_text_trim_end("  a ") == "  a"
    assert I.i_text_trim("\u3000\u00a0x\u2029") == "x"
    assert I.i_text_trim("\x1fx\x1c") == "\x1fx\x1c"  # not Unicode White_Space
    assert I.i_text_trim(" \n\t") == ""
    assert I.i_text_lower("Hello ÄB") == "hello äb"
    assert I.i_text_upper("straße") == "STRASSE"
    assert I.i_text_contains("flow run", "run") is True and I.i_text_contains("", "") is True
    assert I.i_text_contains("abc", "x") is False
    assert I.i_text_starts_with("abc", "") and I.i_text_ends_with("abc", "")
    assert I.i_text_starts_with("abc", "ab") and not I.i_text_starts_with("abc", "bc")
    assert I.i_text_ends_with("abc", "bc") and not I.i_text_ends_with("abc", "ab")
    assert I.i_text_index_of("banana", "na") == some(2)
    assert I.i_text_index_of("abc", "") == some(0) and I.i_text_index_of("", "") == some(0)
    assert I.i_text_index_of("abc", "x") == NONE
    assert I.i_text_index_of("😀é-x", "x") == some(3)  # code points, not bytes or UTF-16 units
    assert I.i_text_replace("a-b-c", "-", "+") == "a+b+c"
    assert I.i_text_replace("abc", "", "+") == "abc"
    assert I.i_text_replace("aaa", "aa", "b") == "ba"
    assert I.i_text_slice("hello", 1, 3) == "el" and I.i_text_slice("hello", 3, 99) == "lo"
    assert I.i_text_slice("hello", 4, 2) == "" and I.i_text_slice("hello", -5, 2) == "he"
    assert I.i_text_slice("hello", -3, -1) == "" and I.i_text_slice("", 0, 1) == ""
    assert I.i_text_slice("hello", 10**30, -10**30) == "" and I.i_text_slice("héllo", 1, 2) == "é"
    assert I.i_text_repeat("ab", 3) == "ababab" and I.i_text_repeat("ab", 0) == ""
    assert I.i_text_repeat("ab", -2) == "" and I.i_text_repeat("", 10**30) == ""
    assert I.i_text_from_int(42) == "42" and I.i_text_from_int(-7) == "-7"
    assert I.i_text_from_int(10**5000) == "1" + "0" * 5000
    assert I.i_text_to_int("-12") == some(-12) and I.i_text_to_int("007") == some(7)
    assert I.i_text_to_int("-0") == some(0)
    for bad in ("1_000", "", " 1", "1 ", "+1", "-", "1.0", "١٢", "0x10", "--1", "1e3"):
        assert I.i_text_to_int(bad) == NONE, bad
    assert I.i_text_to_int("9" * 5000) == some(10**5000 - 1)
    assert I.i_text_to_int("0" * 200_000 + "1") == some(1)
    assert I.i_text_to_bytes("") == b"" and I.i_text_to_bytes("é") == b"\xc3\xa9"
    assert I.i_text_from_bytes(b"\xc3\xa9") == some("é")
    assert I.i_text_from_bytes(b"\xff") == NONE
    assert I.i_text_from_bytes(b"\xed\xa0\x80") == NONE  # an encoded surrogate is not UTF-8
    assert I.i_text_from_bytes(b"\xc0\x80") == NONE  # overlong


def test_text_pad_via_repeat():
    """pad_start/pad_end are written with repeat: negative widths give no padding."""
    assert I.i_text_repeat("0", 3 - I.i_text_length("7")) + "7" == "007"
    assert I.i_text_repeat("0", 3 - I.i_text_length("1234")) + "1234" == "1234"


def test_text_faults():
    """A repeat too long to build and an integer over the digit limit fault (limit)."""
    with pytest.raises(Fault) as info:
        I.i_text_repeat("ab", 10**20)
    assert info.value.kind == "limit"
    with pytest.raises(Fault) as info:
        I.i_text_to_int("1" * (V.MAX_INT_DIGITS + 1))
    assert info.value.kind == "limit"
    assert I.i_text_to_int("-" + "9" * V.MAX_INT_DIGITS) == some(-(10**V.MAX_INT_DIGITS - 1))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab,😀é\n\r ", max_size=5), min_size=1, max_size=6),
       st.text(alphabet="ab,😀", min_size=1, max_size=2))
def test_split_join_round_trip(pieces, sep):
    """join(split(t, sep), sep) == t for a non-empty sep; the pieces never hold sep; split
    into code points with "" and join back with ""."""
    t = I.i_text_join(tuple(pieces), sep)
    parts = I.i_text_split(t, sep)
    assert I.i_text_join(parts, sep) == t
    assert all(sep not in part for part in parts) and len(parts) == t.count(sep) + 1
    assert I.i_text_split(t, "") == tuple(t)
    assert I.i_text_join(I.i_text_chars(t), "") == t


@settings(max_examples=200, deadline=None)
@given(st.text(), st.integers(-5, 30), st.integers(-5, 30))
def test_text_slice_and_index_models(t, a, b):
    """slice clamps; index_of agrees with slice; from_bytes inverts to_bytes; lines drop line ends."""
    s = I.i_text_slice(t, a, b)
    lo, hi = min(max(a, 0), len(t)), min(max(b, 0), len(t))
    assert s == (t[lo:hi] if hi > lo else "")
    needle = I.i_text_slice(t, a, a + 2)
    found = I.i_text_index_of(t, needle)
    assert found[0] == "Some" and I.i_text_slice(t, found[1], found[1] + len(needle)) == needle
    assert I.i_text_from_bytes(I.i_text_to_bytes(t)) == some(t)
    assert all("\n" not in line for line in I.i_text_lines(t))
    assert I.i_text_trim(t) == I.i_text_trim_end(I.i_text_trim_start(t))


# ---------------------------------------------------------------------------------------------
# dict


def test_dict_examples():
    """The examples of std@v1/dict's doc comments."""
    e = I.i_dict_empty()
    assert I.i_dict_size(e) == 0 and I.i_dict_keys(e) == ()
    d = I.i_dict_from_list((("a", 1), ("b", 2), ("a", 3)))
    assert I.i_dict_get(d, "a") == some(3) and I.i_dict_get(d, "b") == some(2)
    assert I.i_dict_size(I.i_dict_from_list(())) == 0
    assert I.i_dict_get(I.i_dict_from_list((("a", 1),)), "z") == NONE
    assert I.i_dict_get(I.i_dict_insert(I.i_dict_insert(I.i_dict_from_list((("a", 1),)), "b", 2), "b", 5), "b") == some(5)
    assert I.i_dict_get(I.i_dict_insert(e, "k", 1), "k") == some(1)
    assert I.i_dict_remove(d, "zz") == d and I.i_dict_keys(I.i_dict_remove(d, "a")) == ("b",)
    assert I.i_dict_contains(d, "a") and not I.i_dict_contains(d, "c")
    assert I.i_dict_keys(I.i_dict_from_list((("b", 1), ("a", 2)))) == ("a", "b")
    assert I.i_dict_values(I.i_dict_from_list((("b", 1), ("a", 2)))) == (2, 1)
    assert I.i_dict_entries(d) == (("a", 3), ("b", 2))
    assert I.i_dict_from_list(I.i_dict_entries(d)) == d
    assert I.i_dict_map_values(d, lambda v: v * 2) == I.i_dict_from_list((("a", 6), ("b", 4)))
    merged = I.i_dict_merge(I.i_dict_from_list((("a", 1), ("b", 2))), I.i_dict_from_list((("b", 9), ("c", 3))))
    assert I.i_dict_entries(merged) == (("a", 1), ("b", 9), ("c", 3))
    assert I.i_dict_merge(d, e) == d and I.i_dict_merge(e, d) == d
    # a value stored under None (Unit) or Option keys: get distinguishes absent from present
    u = I.i_dict_from_list(((NONE, None), (some(1), 2)))
    assert I.i_dict_get(u, NONE) == some(None) and I.i_dict_keys(u) == (NONE, some(1))
    assert I.i_dict_get(I.i_dict_from_list(((D("1.5"), "x"),)), D("1.50")) == some("x")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-20, 20), st.integers())),
       st.lists(st.tuples(st.sampled_from(["insert", "remove", "get"]), st.integers(-20, 20), st.integers())))
def test_dict_agrees_with_python_dict(pairs, ops):
    """from_list/get/insert/remove/contains/size/keys/values/merge agree with a Python dict."""
    model = dict(pairs)
    d = I.i_dict_from_list(tuple(pairs))
    for op, k, v in ops:
        if op == "insert":
            d = I.i_dict_insert(d, k, v)
            model[k] = v
        elif op == "remove":
            d = I.i_dict_remove(d, k)
            model.pop(k, None)
        assert I.i_dict_get(d, k) == (some(model[k]) if k in model else NONE)
        assert I.i_dict_contains(d, k) == (k in model)
    assert I.i_dict_size(d) == len(model)
    assert I.i_dict_keys(d) == tuple(sorted(model))
    assert I.i_dict_values(d) == tuple(model[k] for k in sorted(model))
    assert I.i_dict_entries(d) == tuple(sorted(model.items()))
    other = dict(ops_pair[1:] for ops_pair in ops)
    merged = I.i_dict_merge(d, I.i_dict_from_list(tuple(other.items())))
    assert I.i_dict_entries(merged) == tuple(sorted({**model, **other}.items()))


# ---------------------------------------------------------------------------------------------
# set


def test_set_examples():
    """The examples of std@v1/set's doc comments."""
    assert I.i_set_to_list(I.i_set_from_list((3, 1, 3, 2))) == (1, 2, 3)
    assert I.i_set_size(I.i_set_empty()) == 0 and I.i_set_size(I.i_set_from_list(())) == 0
    assert I.i_set_to_list(I.i_set_from_list(("b", "a", "b"))) == ("a", "b")
    s = I.i_set_from_list((1, 2))
    assert I.i_set_contains(s, 1) and not I.i_set_contains(s, 3)
    assert I.i_set_insert(s, 2) == s and I.i_set_to_list(I.i_set_insert(s, 0)) == (0, 1, 2)
    assert I.i_set_remove(s, 5) == s and I.i_set_to_list(I.i_set_remove(s, 1)) == (2,)
    assert I.i_set_size(I.i_set_from_list((1, 1, 2))) == 2
    b = I.i_set_from_list((2, 3))
    assert I.i_set_to_list(I.i_set_union(s, b)) == (1, 2, 3)
    assert I.i_set_to_list(I.i_set_intersection(s, b)) == (2,)
    assert I.i_set_to_list(I.i_set_difference(s, b)) == (1,)
    assert I.i_set_size(I.i_set_difference(I.i_set_empty(), s)) == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-10, 10)), st.lists(st.integers(-10, 10)), st.integers(-10, 10))
def test_set_agrees_with_python_sets(xs, ys, z):
    """Set operations agree with Python's sets, and every set lists its elements ascending."""
    a, b = I.i_set_from_list(tuple(xs)), I.i_set_from_list(tuple(ys))
    assert I.i_set_to_list(a) == tuple(sorted(set(xs)))
    assert I.i_set_to_list(I.i_set_union(a, b)) == tuple(sorted(set(xs) | set(ys)))
    assert I.i_set_to_list(I.i_set_intersection(a, b)) == tuple(sorted(set(xs) & set(ys)))
    assert I.i_set_to_list(I.i_set_difference(a, b)) == tuple(sorted(set(xs) - set(ys)))
    assert I.i_set_contains(a, z) == (z in xs)
    assert I.i_set_to_list(I.i_set_insert(a, z)) == tuple(sorted(set(xs) | {z}))
    assert I.i_set_to_list(I.i_set_remove(a, z)) == tuple(sorted(set(xs) - {z}))
    assert I.i_set_size(a) == len(set(xs))


# ---------------------------------------------------------------------------------------------
# decimal


def test_decimal_examples():
    """The examples of std@v1/decimal's doc comments."""
    assert I.i_decimal_from_int(3) == D("3.0")
    assert I.i_decimal_to_text(D("1.50")) == "1.5" and I.i_decimal_to_text(D("-0.25")) == "-0.25"
    assert I.i_decimal_to_text(D("100.0")) == "100" and I.i_decimal_to_text(D("0.0")) == "0"
    assert I.i_decimal_to_text(D("-0")) == "0" and I.i_decimal_to_text(D("1E+3")) == "1000"
    third = D(2).divide(D(3))
    assert I.i_decimal_to_text(I.i_decimal_round(third, 2)) == "0.67"
    assert I.i_decimal_parse("12.50") == some(D("12.5")) and I.i_decimal_parse("-3") == some(D("-3.0"))
    assert I.i_decimal_parse("1e-2") == some(D("0.01")) and I.i_decimal_parse("1E+2") == some(D("100"))
    assert I.i_decimal_parse("007.10") == some(D("7.1")) and I.i_decimal_parse("-0") == some(D(0))
    assert I.i_decimal_parse("1e0000000000000000000000000005") == some(D("1e5"))
    assert I.i_decimal_parse("0e99999999999999999999999999") == some(D(0))
    for bad in ("1,5", "", " 1", "1 ", "+1", "1_0", "NaN", "Infinity", "inf", "-", "1.", ".5",
                "1e", "e5", "1e+", "1.2.3", "١", "--1", "0x1", "1e5.0"):
        assert I.i_decimal_parse(bad) == NONE, bad
    assert I.i_decimal_round(D("2.345"), 2) == D("2.34") and I.i_decimal_round(D("2.355"), 2) == D("2.36")
    assert I.i_decimal_round(D("0.5"), 0) == D(0) and I.i_decimal_round(D("1.5"), 0) == D(2)
    assert I.i_decimal_round(D("1250.0"), -2) == D(1200) and I.i_decimal_round(D("1350"), -2) == D(1400)
    assert I.i_decimal_round(D("-2.5"), 0) == D(-2) and I.i_decimal_round(D("2.5"), 10) == D("2.5")
    assert I.i_decimal_round(D("49"), -2) == D(0) and I.i_decimal_round(D("51"), -2) == D(100)
    assert I.i_decimal_round(D("50"), -2) == D(0) and I.i_decimal_round(D("150"), -2) == D(200)
    assert I.i_decimal_round(D("7"), -10**30) == D(0) and I.i_decimal_round(D("7.25"), 10**30) == D("7.25")
    assert I.i_decimal_round(D(0), -5) == D(0)
    assert I.i_decimal_truncate(D("2.9")) == 2 and I.i_decimal_truncate(D("-2.9")) == -2
    assert I.i_decimal_floor(D("2.9")) == 2 and I.i_decimal_floor(D("-2.1")) == -3
    assert I.i_decimal_ceil(D("2.1")) == 3 and I.i_decimal_ceil(D("-2.9")) == -2
    assert I.i_decimal_floor(D("1E+50")) == 10**50 and type(I.i_decimal_floor(D("1E+50"))) is int
    assert I.i_decimal_ceil(D("1E-999999")) == 1 and I.i_decimal_floor(D("-1E-999999")) == -1
    assert I.i_decimal_truncate(D("1E-999999")) == 0
    assert I.i_decimal_from_int(10**5000) == D(10**5000)


def test_decimal_faults():
    """Results beyond the implementation's limits fault (limit)."""
    cases = [
        lambda: I.i_decimal_floor(D("1E+100000")),
        lambda: I.i_decimal_ceil(D("9" * 99_999 + "5E+1")),
        lambda: I.i_decimal_truncate(D("-1E+999999999999999999")),
        lambda: I.i_decimal_parse("1e99999999999999999999999"),
        lambda: I.i_decimal_parse("1e9223372036854775808"),
        lambda: I.i_decimal_parse("1e-99999999999999999999999"),
        lambda: I.i_decimal_round(D("95E+9223372036854775806"), -(2 ** 63 - 1)),
    ]
    for case in cases:
        with pytest.raises(Fault) as info:
            case()
        assert info.value.kind == "limit"
    assert I.i_decimal_floor(D("9" * 99_999 + ".5")) == 10**99_999 - 1
    assert I.i_decimal_round(D("4E+999999999999999999"), -1000000000000000000) == D(0)


@settings(max_examples=300, deadline=None)
@given(st.decimals(allow_nan=False, allow_infinity=False, places=None, min_value=-10**12, max_value=10**12),
       st.integers(-14, 14))
def test_round_matches_quantize_half_even(d, places):
    """round(d, places) == d.quantize(10**-places, ROUND_HALF_EVEN) (as values)."""
    expected = d.quantize(PyD((0, (1,), -places)), rounding="ROUND_HALF_EVEN", context=EXACT)
    assert I.i_decimal_round(D(d), places) == D(expected)


@settings(max_examples=300, deadline=None)
@given(st.decimals(allow_nan=False, allow_infinity=False))
def test_decimal_text_parse_round_trip(d):
    """parse(to_text(d)) == Some(d); truncate/floor/ceil agree with Python's rounding of the value."""
    fd = D(d)
    assert I.i_decimal_parse(I.i_decimal_to_text(fd)) == some(fd)
    if d.is_finite() and abs(d.adjusted()) < 50:
        import math
        f = I.i_decimal_floor(fd)
        assert f <= d < f + 1 and f == math.floor(d)
        assert I.i_decimal_ceil(fd) == math.ceil(d)
        assert I.i_decimal_truncate(fd) == int(d)


# ---------------------------------------------------------------------------------------------
# duration and instant


def test_duration_examples():
    """The examples of std@v1/duration's doc comments."""
    assert I.i_duration_from_nanos(1_000) == Duration(1000)
    assert I.i_duration_from_nanos(-5) == Duration(-5)
    assert I.i_duration_to_nanos(Duration(1_000_000)) == 1_000_000
    assert I.i_duration_to_text(Duration(250_000_000)) == "PT0.25S"
    assert I.i_duration_to_text(Duration(0)) == "PT0S" and I.i_duration_to_text(Duration(-5 * 10**9)) == "-PT5S"
    assert I.i_duration_parse("PT1M30S") == some(Duration(90 * 10**9))
    assert I.i_duration_parse("PT0.25S") == some(Duration(250_000_000))
    assert I.i_duration_parse("PT1H30M") == some(Duration(5400 * 10**9))
    assert I.i_duration_parse("P1D") == some(Duration(86400 * 10**9))
    assert I.i_duration_parse("-PT5S") == some(Duration(-5 * 10**9))
    for bad in ("90s", "P1M", "P1Y", "P1W", "", "P", "PT", "PT1.S", "PT.5S", "PT0.0000000001S", "pt1s", " PT1S"):
        assert I.i_duration_parse(bad) == NONE, bad
    for n in (0, 1, -1, 10**9, 1500 * 10**6, -(10**30) - 7):
        d = Duration(n)
        assert I.i_duration_parse(I.i_duration_to_text(d)) == some(d)


def test_duration_faults():
    """A duration of more nanoseconds than the Int limit faults (limit)."""
    with pytest.raises(Fault) as info:
        I.i_duration_from_nanos(10**V.MAX_INT_DIGITS)
    assert info.value.kind == "limit"
    with pytest.raises(Fault) as info:
        I.i_duration_parse("PT" + "9" * V.MAX_INT_DIGITS + "S")
    assert info.value.kind == "limit"
    assert I.i_duration_from_nanos(10**V.MAX_INT_DIGITS - 1).nanos == 10**V.MAX_INT_DIGITS - 1


def test_instant_examples():
    """The examples of std@v1/instant's doc comments."""
    epoch = I.i_instant_from_unix_nanos(0)
    assert epoch == Instant(0) and I.i_instant_to_unix_nanos(epoch) == 0
    assert I.i_instant_to_text(epoch) == "1970-01-01T00:00:00Z"
    assert I.i_instant_to_text(I.i_instant_from_unix_nanos(1_500_000_000)) == "1970-01-01T00:00:01.5Z"
    assert I.i_instant_to_text(I.i_instant_from_unix_nanos(90 * 10**9)) == "1970-01-01T00:01:30Z"
    assert I.i_instant_to_text(I.i_instant_from_unix_nanos(-1)) == "1969-12-31T23:59:59.999999999Z"
    assert I.i_instant_parse("2026-01-01T01:00:00+01:00") == I.i_instant_parse("2026-01-01T00:00:00Z")
    assert I.i_instant_parse("2026-01-01T00:00:00-05:30") == I.i_instant_parse("2026-01-01T05:30:00Z")
    assert I.i_instant_parse("1970-01-01t00:00:00.5z") == some(Instant(500_000_000))
    assert I.i_instant_parse("1970-01-01T00:00:00.123456789Z") == some(Instant(123_456_789))
    for bad in ("2026-01-01", "2026-01-01T00:00:60Z", "2026-02-30T00:00:00Z", "2026-01-01T00:00:00",
                "2026-01-01T00:00:00.1234567891Z", "2026-01-01 00:00:00Z", "", "0000-12-31T23:59:59Z",
                "0001-01-01T00:00:00+01:00", "２０２６-01-01T00:00:00Z", "2026-01-01T24:00:00Z"):
        assert I.i_instant_parse(bad) == NONE, bad
    lo, hi = V.INSTANT_MIN_NANOS, V.INSTANT_MAX_NANOS
    assert I.i_instant_to_text(I.i_instant_from_unix_nanos(lo)) == "0001-01-01T00:00:00Z"
    assert I.i_instant_to_text(I.i_instant_from_unix_nanos(hi)) == "9999-12-31T23:59:59.999999999Z"
    for n in (lo, hi, 0, -1, 1_767_225_600 * 10**9 + 5):
        i = Instant(n)
        assert I.i_instant_parse(I.i_instant_to_text(i)) == some(i)


def test_instant_faults():
    """Making an instant outside the years 0001 to 9999 faults (limit)."""
    for n in (V.INSTANT_MIN_NANOS - 1, V.INSTANT_MAX_NANOS + 1, 10**40, -10**40):
        with pytest.raises(Fault) as info:
            I.i_instant_from_unix_nanos(n)
        assert info.value.kind == "limit"
    with pytest.raises(Fault) as info:
        I.i_instant_to_text(Instant(V.INSTANT_MAX_NANOS + 1))
    assert info.value.kind == "limit"


# ---------------------------------------------------------------------------------------------
# json

POINT = V.record_type("geo.Point", ("x", "y"))
DEFS = {
    "geo.Point": {"name": "Point", "identity": "geo.Point", "args": [], "doc": None,
                  "kind": {"record": {"fields": [{"name": "x", "type": "Int", "doc": None},
                                                 {"name": "y", "type": "Int", "doc": None}]}}},
}


def T(term, defs=None):
    return TypeArg(term, defs if defs is not None else {})


def test_json_examples():
    """The examples of std@v1/json's doc comments."""
    assert I.i_json_encode((1, 2)) == "[1,2]"
    assert I.i_json_render(J.make("Object", V.EMPTY_DICT)) == "{}"
    assert I.i_json_encode(some("a")) == '"a"'
    assert I.i_json_encode(D("1.50")) == '"1.5"'
    assert I.i_json_encode(Duration(250_000_000)) == '"PT0.25S"'
    assert I.i_json_decode(T({"List": "Int"}), "[1, 2]") == ok((1, 2))
    assert I.i_json_render(jarr(jnum("1.0"), JNULL)) == "[1,null]"
    parsed = I.i_json_parse('{"a": [1, null]}')
    assert parsed == ok(jobj(a=jarr(jnum(1), JNULL)))
    assert I.i_json_parse("")[0] == "Err"
    assert I.i_json_parse('{"a": 1, "a": 2}')[0] == "Err"
    assert I.i_json_to_value(D("1.5")) == jstr("1.5")
    assert I.i_json_to_value(3) == jnum(3)


def test_json_encode_canonical():
    """encode writes canonical JSON: keys sorted, no whitespace, records as objects."""
    p = POINT.of(1, 2)
    assert I.i_json_encode(p) == '{"x":1,"y":2}'
    assert I.i_json_encode(FlowDict([("b", 1), ("a", NONE)])) == '{"a":null,"b":1}'
    assert I.i_json_encode(FlowSet([3, 1])) == "[1,3]"
    assert I.i_json_encode(FlowDict([(2, "x"), (1, "y")])) == '[[1,"y"],[2,"x"]]'
    assert I.i_json_encode(some(some(1))) == '{"Some":1}' and I.i_json_encode(some(NONE)) == '"None"'
    assert I.i_json_encode(None) == "null" and I.i_json_encode(b"hi") == '"aGk="'
    assert I.i_json_encode("é\n\"") == '"é\\n\\""'
    assert I.i_json_encode(Instant(0)) == '"1970-01-01T00:00:00Z"'
    assert I.i_json_encode(ok(1)) == '{"Ok":1}'
    for value, term in [(p, {"Named": "geo.Point"}), (FlowDict([(2, "x")]), {"Dict": ["Int", "Text"]}),
                        ((some(1), NONE), {"List": {"Option": "Int"}}), (10**30, "Int")]:
        assert I.i_json_encode(value) == codec.canonical(value, term, DEFS).decode()
    # with a type argument (json.encode listed among the typed intrinsics) the empty non-Text dict is exact
    assert I.i_json_encode(T({"Dict": ["Int", "Text"]}), V.EMPTY_DICT) == "[]"
    assert I.i_json_encode(V.EMPTY_DICT) == "{}"
    assert I.i_json_to_value(T({"Dict": ["Int", "Text"]}), V.EMPTY_DICT) == jarr()


def test_json_decode_errors_say_where_and_why():
    """decode gives Err with a path and a reason: not JSON, wrong type, missing or extra field."""
    pt = T({"Named": "geo.Point"}, DEFS)
    assert I.i_json_decode(pt, '{ "y": 2,\n "x": 1 }') == ok(POINT.of(1, 2))
    r = I.i_json_decode(pt, '{"x": 1}')
    assert r[0] == "Err" and "missing" in r[1] and '"y"' in r[1]
    r = I.i_json_decode(pt, '{"x": 1, "y": 2, "z": 3}')
    assert r[0] == "Err" and "z" in r[1] and r[1].startswith("$.z")
    r = I.i_json_decode(T({"List": "Int"}), '[1, "2"]')
    assert r[0] == "Err" and r[1].startswith("$[1]")
    r = I.i_json_decode(T("Int"), "not json")
    assert r[0] == "Err" and "not JSON" in r[1]
    assert I.i_json_decode(T("Int"), "")[0] == "Err"
    assert I.i_json_decode(T("Decimal"), '"1.50"') == ok(D("1.5"))
    assert I.i_json_decode(T({"Option": "Text"}), "null") == ok(NONE)
    assert I.i_json_decode(T("Text"), '"\\ud800"')[0] == "Err"
    with pytest.raises(Fault) as info:
        I.i_json_decode(T({"Named": "nowhere"}), "1")
    assert info.value.kind == "internal"


def test_json_values():
    """to_value, from_value, parse and render agree with encode and decode."""
    p = POINT.of(1, -2)
    v = I.i_json_to_value(p)
    assert v == jobj(x=jnum(1), y=jnum(-2))
    assert I.i_json_render(v) == I.i_json_encode(p)
    assert I.i_json_from_value(T({"Named": "geo.Point"}, DEFS), v) == ok(p)
    assert I.i_json_from_value(T("Int"), jnum("1.0")) == ok(1)
    assert I.i_json_from_value(T("Int"), jnum("1.5"))[0] == "Err"
    assert I.i_json_from_value(T("Decimal"), jstr("1.5")) == ok(D("1.5"))
    assert I.i_json_from_value(T("json.Value"), JNULL) == ok(JNULL)
    r = I.i_json_from_value(T({"Named": "geo.Point"}, DEFS), jobj(x=jnum(1)))
    assert r[0] == "Err" and "missing" in r[1]
    assert I.i_json_parse("1e400") == ok(jnum("1e400"))
    assert I.i_json_parse("0.1") == ok(jnum("0.1"))
    assert I.i_json_parse(" [ ] ") == ok(jarr())
    assert I.i_json_parse("[1] x")[0] == "Err"
    assert I.i_json_parse("NaN")[0] == "Err"
    assert I.i_json_parse('"\\ud800"')[0] == "Err"
    big = "9" * 5000
    assert I.i_json_parse(big) == ok(jnum(big))
    assert I.i_json_render(I.i_json_parse('{"b":[true,false,null,"x"],"a":1.50}')[1]) == \
        '{"a":1.5,"b":[true,false,null,"x"]}'
    assert I.i_json_render(jnum("1E+100")) == "1E+100"
    assert I.i_json_render(jstr("\u0001")) == '"\\u0001"'


_SIMPLE = st.recursive(
    st.one_of(st.integers(), st.text(), st.booleans(), st.none(),
              st.decimals(allow_nan=False, allow_infinity=False)),
    lambda inner: st.lists(inner, max_size=4).map(tuple),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers()), st.dictionaries(st.text(), st.lists(st.text(), max_size=3)),
       st.lists(st.one_of(st.none(), st.decimals(allow_nan=False, allow_infinity=False).map(D))),
       st.sets(st.integers()), st.dictionaries(st.integers(), st.booleans(), min_size=1))
def test_json_round_trip(ints, texts, decs, aset, idict):
    """decode(encode(v)) == Ok(v) for simple types, and render(to_value(v)) == encode(v)."""
    cases = [
        (tuple(ints), {"List": "Int"}),
        (FlowDict((k, tuple(v)) for k, v in texts.items()), {"Dict": ["Text", {"List": "Text"}]}),
        (tuple(NONE if d is None else some(d) for d in decs), {"List": {"Option": "Decimal"}}),
        (FlowSet(aset), {"Set": "Int"}),
        (FlowDict(idict.items()), {"Dict": ["Int", "Bool"]}),
        ((tuple(ints), POINT.of(len(ints), -1)), {"Tuple": [{"List": "Int"}, {"Named": "geo.Point"}]}),
    ]
    for value, term in cases:
        text = I.i_json_encode(value)
        assert text == codec.canonical(value, term, DEFS).decode()
        assert I.i_json_decode(T(term, DEFS), text) == ok(value)
        tree = I.i_json_to_value(value)
        assert I.i_json_render(tree) == text
        assert I.i_json_from_value(T(term, DEFS), tree) == ok(value)
        assert I.i_json_parse(text) == ok(tree)


@settings(max_examples=200, deadline=None)
@given(_SIMPLE)
def test_json_parse_render_round_trip(data):
    """parse(render(v)) == Ok(v) for any json.Value; render writes the ABI's canonical text."""
    value = codec.decode(data, "json.Value")
    text = I.i_json_render(value)
    assert text == codec.canonical(value, "json.Value").decode()
    assert I.i_json_parse(text) == ok(value)


# ---------------------------------------------------------------------------------------------
# Through the compiler: generated code calls these names with these arguments

E2E = '''
use "std@v1/list"
use "std@v1/text"
use "std@v1/dict"
use "std@v1/json"
use "std@v1/decimal"

pub type Point { pub x: Int, pub y: Int }

@tool flow fetch(x: Int) -> Int

pub flow pure_main() -> Text = {
    let a = text.join(list.map(text.split("a,b", ","), text.upper), "+")
    let p: Result<Point, Text> = json.decode("{\\"y\\": 2, \\"x\\": 1}")
    let v: Result<List<Int>, Text> = json.from_value(json.to_value([1, 2]))
    let e = decimal.to_text(decimal.round(decimal.from_int(2) / 3.0, 2))
    "${a} ${json.encode(p)} ${json.encode(v)} ${e}"
}

pub flow tool_main() -> (List<Int>, Int, Option<Int>, List<Int>, Dict<Text, Int>) !tool = {
    let a = list.map([1, 2, 3], fetch)
    let b = list.fold([1, 2], 0, flow(acc: Int, x: Int) -> Int !tool = acc + fetch(x))
    let c = list.find([1, 2, 3], flow(x: Int) -> Bool !tool = fetch(x) > 15)
    let d = list.sort_by([3, 1, 2], flow(x: Int) -> Int !tool = 0 - fetch(x))
    let e = dict.map_values(dict.from_list([("b", 2), ("a", 1)]), fetch)
    (a, b, c, d, e)
}
'''


def test_through_the_compiler():
    """A program using pure, `_t` and typed intrinsics compiles, loads in the sandbox loader with
    INTRINSICS injected, and runs; Tool calls inside effectful higher-order calls come in list
    order, and `find` stops at the first match."""
    import decimal

    from sandbox import runtime as R
    from tests.compiled import compile_program

    ns = compile_program({"main.flow": E2E}, "main.flow").load()
    saved = decimal.getcontext()
    try:
        assert R.rt_bounce(ns.pure_main()) == 'A+B {"Ok":{"x":1,"y":2}} {"Ok":[1,2]} 0.67'
        gen = R.rt_run(ns.tool_main())
        calls, reply = [], None
        while True:
            try:
                request = gen.send(reply)
            except StopIteration as done:
                result = done.value
                break
            if request[0] in ("enter", "leave"):  # a call's frame (task ownership)
                reply = request[1] if request[0] == "leave" else None
                continue
            assert request[0] == "call" and request[1].identity.endswith("fetch")
            calls.append(request[2][0])
            reply = request[2][0] * 10
    finally:
        decimal.setcontext(saved)
    assert result == ((10, 20, 30), 30, some(2), (3, 2, 1), FlowDict([("a", 10), ("b", 20)]))
    assert calls == [1, 2, 3, 1, 2, 1, 2, 3, 1, 2, 1, 2]


# ---------------------------------------------------------------------------------------------
# FlowDecimal against Python's decimal, where libmpdec's exponents reach


_FINITE = st.decimals(allow_nan=False, allow_infinity=False, min_value=-10**30, max_value=10**30) | \
    st.builds(lambda c, e: PyD(c).scaleb(e, EXACT), st.integers(-10**40, 10**40), st.integers(-400, 400))


@settings(max_examples=400, deadline=None)
@given(_FINITE, _FINITE)
def test_flowdecimal_arithmetic_matches_python_decimal(a, b):
    """+ - * exact, / to 34 digits half-even, % with the dividend's sign, order and text: the
    same values as Python's decimal gives."""
    fa, fb = D(a), D(b)
    assert fa + fb == D(EXACT.add(a, b)) and fa - fb == D(EXACT.subtract(a, b))
    assert fa * fb == D(EXACT.multiply(a, b)) and -fa == D(EXACT.minus(a))
    assert (fa < fb, fa <= fb, fa == fb, fa > fb) == (a < b, a <= b, a == b, a > b)
    assert hash(fa) == hash(a)  # Python's numeric hash: equal values hash alike
    assert str(fa) == I.i_decimal_to_text(fa) and D(str(a)) == fa
    if b:
        division = decimal.Context(prec=34, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN,
                                   rounding=decimal.ROUND_HALF_EVEN)
        assert fa.divide(fb) == D(division.divide(a, b))
        assert fa.remainder(fb) == D(EXACT.remainder(a, b))


def test_flowdecimal_at_the_64_bit_exponent_ends():
    """Exact at 2^63-1 and -2^63 (the last significant digit's power of ten); one step past is
    a limit error, whatever the operation."""
    top, bottom = D.of(1, 2 ** 63 - 1), D.of(1, -(2 ** 63))
    assert str(top) == "1E+9223372036854775807" and str(bottom) == "1E-9223372036854775808"
    assert top * D(1) == top and (top + top) == D.of(2, 2 ** 63 - 1) and top.divide(D(2)) == D.of(5, 2 ** 63 - 2)
    assert D.of(10, 2 ** 63 - 2) == top and bottom < top and -top < bottom and bottom > D(0)
    assert D("-5E-9223372036854775808").remainder(D("2E-9223372036854775808")) == D("-1E-9223372036854775808")
    assert D("1E+9223372036854775807").remainder(D(7)) == D(10 ** ((2 ** 63 - 1) % 6) % 7)  # 10^6 = 1 (mod 7)
    for make in (lambda: top * D(10), lambda: bottom * D("0.1"), lambda: bottom.divide(D(10)),
                 lambda: top.divide(D("0.1")), lambda: D.of(1, 2 ** 63), lambda: top + D(1)):
        with pytest.raises(V.DecimalOverLimit):
            make()
    with pytest.raises(ValueError):
        V.parse_decimal("1E+9223372036854775808")
    assert I.i_decimal_round(top, 0) == top and I.i_decimal_round(bottom, 0) == D(0)
    with pytest.raises(Fault) as info:
        I.i_decimal_parse("10E+9223372036854775807")
    assert info.value.kind == "limit"
