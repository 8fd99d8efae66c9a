"""What `build_fact` refuses before any I/O (flowrt/store/chain.py): the fields the store sets
itself (`n`, `kind`, `prev`, `hash`) and a value given by reference (`<field>_ref`: the store
decides on that). Both rules are one set test on the hot path; each refusal still names its rule,
and a refused append writes nothing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from flowrt.store import open_store
from flowrt.store.canonical import canonical_bytes
from flowrt.store.chain import build_fact, fact_hash
from flowrt.store.format import _RESERVED, VALUE_FIELDS

START = {"program": "p", "std": "std@v1", "entry": {"module": "m", "function": "main"}, "input": {},
         "modules": []}
KINDS = sorted(kind for kind in VALUE_FIELDS if kind != "Start")
SET_BY_STORE = [(kind, name) for kind in KINDS for name in _RESERVED]
BY_REFERENCE = [(kind, field) for kind in KINDS for field in VALUE_FIELDS[kind]]


@pytest.mark.parametrize("kind,name", SET_BY_STORE)
def test_a_field_the_store_sets_is_refused(kind, name):
    with pytest.raises(ValueError, match=rf"\['{name}'\] are set by the store"):
        build_fact(kind, {"call": "c", name: 1}, 2, "sha256:" + "0" * 64, False, {}, 1024)


@pytest.mark.parametrize("kind,field", BY_REFERENCE)
def test_a_value_given_by_reference_is_refused(kind, field):
    with pytest.raises(ValueError, match=rf"pass `{field}` itself"):
        build_fact(kind, {field + "_ref": "sha256:" + "0" * 64}, 2, "sha256:" + "0" * 64, False, {}, 1024)


@pytest.mark.parametrize("kind", KINDS)
def test_other_fields_are_taken(kind):
    fact, line = build_fact(kind, {"call": "c", "reference": 1}, 2, "sha256:" + "0" * 64, False, {}, 1024)
    assert fact["kind"] == kind and fact["n"] == 2 and line.endswith(b"\n")


def test_a_refused_append_writes_nothing(tmp_path):
    store = open_store(str(tmp_path)).create("run-refused", START, durability="none")
    try:
        path = tmp_path / "run-refused" / "history.jsonl"
        before = path.read_bytes()
        for fields in ({"call": "c", "hash": "x"}, {"call": "c", "outcome_ref": "sha256:" + "0" * 64}):
            with pytest.raises(ValueError):
                store.append("Reply", fields)
        assert path.read_bytes() == before and len(store.facts()) == 1
        store.append("Reply", {"call": "c", "outcome": {"Ok": 1}})
        assert [f["kind"] for f in store.facts()] == ["Start", "Reply"]
    finally:
        store.close()


def _the_long_way(kind: str, fields: dict, n: int, prev: str) -> tuple[dict, bytes]:
    fact = dict(fields, n=n, kind=kind, prev=prev)
    fact["hash"] = fact_hash(dict(fact))
    return fact, canonical_bytes(fact) + b"\n"


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 90, 2 ** 90) | st.text(max_size=12),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                     max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(KINDS), _JSON, st.sampled_from(["c", "hash", "sha256:" + "0" * 64]))
def test_a_fact_is_the_canonical_line_of_its_fields_and_hash(kind, value, text):
    # Whatever the values hold (the stand-in hash itself included), the fact and its line are
    # those of the definition: the hash of the canonical JSON without `hash`, then that JSON.
    field = VALUE_FIELDS[kind][0] if VALUE_FIELDS[kind] else "note"
    fields = {"call": text, field: value, "arguments" if field != "arguments" else "extra": {"hash": text}}
    prev = "sha256:" + "1" * 64
    assert build_fact(kind, fields, 7, prev, False, {}, 1 << 20) == _the_long_way(kind, fields, 7, prev)


def test_the_stand_in_hash_in_a_value_takes_the_long_way_and_the_same_result():
    stand_in = {"hash": "sha256:" + "0" * 64, "x": 1}
    fields = {"call": "c", "arguments": stand_in}
    prev = "sha256:" + "1" * 64
    assert build_fact("Call", fields, 3, prev, False, {}, 1 << 20) == _the_long_way("Call", fields, 3, prev)
