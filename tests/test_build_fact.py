"""What `build_fact` refuses before any I/O (flowrt/store/chain.py): the fields the store sets
itself (`n`, `kind`, `prev`, `hash`) and a value given by reference (`<field>_ref`: the store
decides on that). Both rules are one set test on the hot path; each refusal still names its rule,
and a refused append writes nothing."""

from __future__ import annotations

import pytest

from flowrt.store import open_store
from flowrt.store.chain import build_fact
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
