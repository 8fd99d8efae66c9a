"""The facts a store holds in memory (flowrt/store/fact_list.py): read as a list of dicts, held
as lines once written, so that a long run's history is not walked by the cyclic collector."""

from __future__ import annotations

import gc

from hypothesis import given, settings, strategies as st

from flowrt.store.chain import build_fact
from flowrt.store.directory import DirectoryStore
from flowrt.store.fact_list import FactList

PREV = "sha256:" + "0" * 64


def _written(kind: str, fields: dict, n: int) -> tuple[dict, bytes]:
    return build_fact(kind, fields, n, PREV, False, {}, 1 << 20)


def test_facts_written_read_back_as_the_dicts_built():
    facts = FactList([{"n": 1, "kind": "Start", "hash": "h1"}])
    built = [_written("Call", {"call": f"c{i}", "tool": "t.x", "fingerprint": "f", "arguments": {"i": i}}, i + 2)
             for i in range(5)]
    for fact, line in built:
        facts.add(fact, line)
    expected = [{"n": 1, "kind": "Start", "hash": "h1"}] + [fact for fact, _ in built]
    assert len(facts) == 6 and facts == expected and list(facts) == expected
    assert facts[3] == expected[3] and facts[-1] is built[-1][0] and facts[-2] == expected[-2]
    assert facts[2:4] == expected[2:4] and list(reversed(facts)) == expected[::-1]
    del facts[4:]
    assert facts == expected[:4] and facts[-1] == expected[3]


def test_an_integer_beyond_64_bits_reads_back_exactly():
    big = 2 ** 80 + 1
    fact, line = _written("Reply", {"call": "c1", "outcome": {"Ok": big}}, 2)
    facts = FactList([{"n": 1, "kind": "Start"}])
    facts.add(fact, line)
    facts.add(*_written("Reply", {"call": "c2", "outcome": {"Ok": 1}}, 3))
    assert facts[1]["outcome"]["Ok"] == big and type(facts[1]["outcome"]["Ok"]) is int


def test_the_last_of_a_kind_is_not_fooled_by_a_value_that_looks_like_one():
    facts = FactList([{"n": 1, "kind": "Start"}])
    facts.add(*_written("Checkpoint", {"function": {"module": "m", "name": "f"}, "arguments": {}}, 2))
    facts.add(*_written("Call", {"call": "c", "tool": "t.x", "fingerprint": "f",
                                 "arguments": {"kind": "Checkpoint"}}, 3))
    assert facts.last_of_kind("Checkpoint") == 1 and facts.last_of_kind("Call") == 2
    assert facts.last_of_kind("End") is None


def test_a_shared_list_that_grows_elsewhere_is_read_as_it_is():
    # A store verifying on demand appends the facts it reads to the list it gave the FactList.
    shared = [{"n": 1, "kind": "Start"}]
    facts = FactList(shared)
    facts.add(*_written("Call", {"call": "c", "tool": "t.x", "fingerprint": "f", "arguments": {}}, 2))
    shared.append({"n": 3, "kind": "Reply"})
    assert facts[-1] == {"n": 3, "kind": "Reply"} and len(facts) == 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("read"), st.integers(-2 ** 70, 2 ** 70)),
    st.tuples(st.just("write"), st.integers(-2 ** 70, 2 ** 70)),
    st.tuples(st.just("cut"), st.integers(0, 6)),
), max_size=25))
def test_a_fact_list_reads_as_the_list_of_its_facts(steps):
    model: list[dict] = [{"n": 1, "kind": "Start"}]
    facts = FactList([dict(model[0])])
    for op, value in steps:
        if op == "cut":
            keep = max(1, len(model) - value)
            del model[keep:]
            del facts[keep:]
        elif op == "read":
            fact = {"n": len(model) + 1, "kind": "Reply", "outcome": {"Ok": value}}
            model.append(fact)
            facts.append(dict(fact))
        else:
            fact, line = _written("Reply", {"call": f"c{len(model)}", "outcome": {"Ok": [value, {"v": value}]}},
                                  len(model) + 1)
            model.append(fact)
            facts.add(fact, line)
        assert len(facts) == len(model) and facts[-1] == model[-1] and facts == model
        assert [facts[i] for i in range(len(model))] == model and facts[1:] == model[1:]


def test_a_long_run_holds_no_fact_the_collector_walks(tmp_path):
    log = DirectoryStore(str(tmp_path / "runs")).create("run-1", {"program": "p"}, durability="none")
    gc.collect()
    before = len(gc.get_objects())
    for i in range(2000):
        log.append_many([("Call", {"call": f"c{i}", "tool": "t.x", "fingerprint": "f", "arguments": {"i": i}})])
        log.append("Reply", {"call": f"c{i}", "outcome": {"Ok": {"i": i}}}, sync=False)
    gc.collect()
    assert len(gc.get_objects()) - before < 100
    assert len(log) == 4001 and log.fact(4001)["outcome"] == {"Ok": {"i": 1999}}
    assert log.fact(2)["arguments"] == {"i": 0}
    log.close()
