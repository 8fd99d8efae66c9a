"""The one canonical JSON writer (flowdata/canonical.py) and its readers: the store's chain, the
channel's frames and the ABI's text are all this writer's bytes, so they agree byte for byte."""

from __future__ import annotations

import dataclasses
import datetime
from decimal import Decimal

import orjson
import pytest
from hypothesis import given, strategies as st

from flowdata import canonical, codec, framing
from flowdata.bigint import MAX_INT_DIGITS, IntOverLimit
from flowrt import store

#: JSON data of every kind, integers beyond 64 bits included (orjson refuses those).
big_ints = st.one_of(st.integers(-2**63, 2**64 - 1), st.integers(-10**40, 10**40))
json_data = st.recursive(
    st.one_of(st.none(), st.booleans(), big_ints, st.text(), st.floats(allow_nan=False, allow_infinity=False)),
    lambda sub: st.one_of(st.lists(sub, max_size=4), st.dictionaries(st.text(max_size=5), sub, max_size=4)),
    max_leaves=12,
)
small_data = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.text(),
              st.floats(allow_nan=False, allow_infinity=False)),
    lambda sub: st.one_of(st.lists(sub, max_size=4), st.dictionaries(st.text(max_size=5), sub, max_size=4)),
    max_leaves=12,
)


@given(small_data)
def test_the_exact_writer_writes_what_orjson_writes(obj):
    """What orjson can write, the exact writer (for what it cannot) writes to the same bytes."""
    expected = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    assert canonical.exact_dumps(obj) == expected
    assert canonical.exact_dumps(obj, strict=True) == expected


@given(json_data)
def test_store_channel_and_abi_write_the_same_bytes(obj):
    """The hash chain's text, a frame's body and the ABI's text of the same data are one text,
    and each reader gives the data back (integers of any size exactly)."""
    text = canonical.dumps(obj)
    assert store.canonical_bytes(obj) == text
    frame = framing.encode({"v": obj})
    header, body = frame[:4], frame[4:]
    assert body == canonical.dumps({"v": obj}, strict=True) == canonical.dumps({"v": obj})
    exact = bool(framing.HEADER.unpack(header)[0] & framing.EXACT)
    assert framing.decode_body(body, exact) == {"v": obj}
    assert canonical.loads_canonical(text) == obj
    assert canonical.loads_exact(text) == obj


def test_big_ints_decimals_and_deep_nesting():
    assert canonical.dumps({"b": 2**70, "a": [Decimal("1.50"), -(2**64)]}) == \
        b'{"a":[1.5,-18446744073709551616],"b":1180591620717411303424}'
    deep: list = []
    for _ in range(400):
        deep = [deep]
    assert canonical.dumps(deep) == b"[" * 401 + b"]" * 401  # deeper than orjson's 255
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(canonical.NotJSON, match="nested too deeply"):
        canonical.dumps(deep)
    with pytest.raises(IntOverLimit):
        canonical.dumps(10 ** MAX_INT_DIGITS)


@pytest.mark.parametrize("bad, reason", [
    ({"a": 2**70, "b": object()}, "not JSON data: object"),
    ([2**70, "\ud800"], "lone surrogate"),
    ([2**70, float("nan")], "not finite"),
    ({2**70: 1}, "key is not a string"),
    ([2**70, Decimal("NaN")], "not a finite number"),
])
def test_what_is_not_json_is_refused_with_a_reason(bad, reason):
    with pytest.raises(canonical.NotJSON, match=reason):
        canonical.dumps(bad)
    # NotJSON is both what orjson raises (TypeError) and what the ABI raises (ValueError).
    assert issubclass(canonical.NotJSON, TypeError) and issubclass(canonical.NotJSON, ValueError)


class Text(str):
    pass


@dataclasses.dataclass
class Point:
    x: int


@pytest.mark.parametrize("value", [Text("a"), Decimal("1.5"), Point(1), datetime.datetime(2026, 1, 1)])
def test_strict_takes_json_data_and_nothing_else(value):
    """The channel's mode: a subclass, a Decimal, a dataclass or a datetime is refused rather
    than converted, on the fast path and on the exact one (a message with a big integer)."""
    for message in ({"v": value}, {"v": value, "big": 2**70}):
        with pytest.raises(canonical.NotJSON):
            canonical.dumps(message, strict=True)
        with pytest.raises(framing.ChannelError, match="message is not JSON"):
            framing.encode(message)
    assert canonical.dumps({"v": Text("a"), "big": 2**70}) == b'{"big":1180591620717411303424,"v":"a"}'


def test_the_abi_text_is_the_canonical_text():
    value = codec.decode({"b": 2**70, "a": 1}, {"Dict": ["Text", "Int"]})
    assert codec.canonical(value, {"Dict": ["Text", "Int"]}) == canonical.dumps({"a": 1, "b": 2**70})


@pytest.mark.parametrize("text, error", [
    (b'{"b":1,"a":2}', canonical.NotCanonical),
    (b'{"a": 1}', canonical.NotCanonical),
    (b"NaN", canonical.NotJSONText),
    (b"[1,", canonical.NotJSONText),
    (b"1" * (MAX_INT_DIGITS + 1), canonical.NotCanonical),
])
def test_loads_canonical_refuses_what_is_not_canonical(text, error):
    with pytest.raises(error):
        canonical.loads_canonical(text)


def test_loads_exact_refuses_constants_and_reads_big_ints():
    assert canonical.loads_exact(b"[123456789012345678901234567890]") == [123456789012345678901234567890]
    for bad in (b"NaN", b"[Infinity]", b"-Infinity"):
        with pytest.raises(ValueError):
            canonical.loads_exact(bad)
