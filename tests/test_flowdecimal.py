"""FlowDecimal against references, operation by operation, over random values.

Where libmpdec's exponents reach, Python's C `decimal` with an exact context (`+ - * %`) or a
34-digit half-even one (`/`) is the reference. Beyond that (exponents up to the signed 64-bit
ends), scaling is: both operands of a pair carry the same extra power of ten 10^E, so the exact
sum, difference and remainder carry 10^E, the product 10^2E, and the quotient (rounded to 34
significant digits, which no power of ten changes) none; the reference computes on the small
exponents and the expectation is shifted by E. A result whose exponent leaves the 64-bit range
must raise DecimalOverLimit, and one within it must be exact.

The inline paths of the operators (docs/impl.md, "Decimal arithmetic") are exercised at their
edges by the value strategies: exponent gaps around 64, coefficients around 10^18 and 10^40.
"""

from __future__ import annotations

import decimal
import re
from decimal import Decimal as PyD
from fractions import Fraction

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from flowdata.flowdecimal import EXP_MAX, EXP_MIN, MAX_DECIMAL_DIGITS, DecimalOverLimit, FlowDecimal as D, \
    decimal_text, parse_decimal

EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN,
                        traps=[decimal.InvalidOperation, decimal.Inexact, decimal.Overflow])
DIVISION = decimal.Context(prec=34, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN, rounding=decimal.ROUND_HALF_EVEN,
                           traps=[decimal.InvalidOperation, decimal.Overflow, decimal.Underflow])

# Coefficients of every everyday size and around the operators' switch points (10^18, 10^40).
_COEF = st.one_of(
    st.integers(-10**6, 10**6),
    st.integers(-10**19, 10**19),
    st.integers(-10**45, 10**45),
    st.sampled_from([10**18 - 1, 10**18, 10**18 + 1, 10**40 - 1, 10**40, 10**40 + 1, 25, 5, 2, 1000]).flatmap(
        lambda c: st.sampled_from([c, -c])),
)
# Exponents around the inline alignment's reach (gaps up to 63) and well past it.
_EXP = st.one_of(st.integers(-8, 8), st.integers(-70, 70), st.integers(-400, 400))


def _pyd(coef: int, exp: int) -> PyD:
    return PyD(coef).scaleb(exp, EXACT)


_PAIR = st.tuples(_COEF, _EXP, _COEF, _EXP)
# Shifts from none through libmpdec's reach (about 10^18) to the 64-bit ends.
_SHIFT = st.one_of(st.just(0), st.integers(-10**6, 10**6), st.integers(-10**18, 10**18),
                   st.integers(EXP_MIN + 500, EXP_MAX - 500), st.integers(EXP_MIN, EXP_MAX))


def _shifted(ref: PyD, by: int):
    """The FlowDecimal `ref * 10**by`, or DecimalOverLimit when its exponent leaves 64 bits."""
    r = D(ref)
    e = r.exp + by if r.coef else 0
    if not EXP_MIN <= e <= EXP_MAX:
        return DecimalOverLimit
    return D.of(r.coef, e)


def _outcome(make):
    try:
        return make()
    except DecimalOverLimit:
        return DecimalOverLimit


def _reference_text(ref: PyD, by: int) -> str:
    """The canonical text (language.md, docs/abi.md) of `ref * 10**by`, built from the digits."""
    sign, digits, exp = ref.normalize(EXACT).as_tuple()
    ds = "".join(map(str, digits))
    if ds == "0":
        return "0"
    exp += by
    neg = "-" if sign else ""
    adjusted = exp + len(ds) - 1
    if exp > 40 or adjusted < -40:
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{neg}{mant}E{'+' if adjusted >= 0 else '-'}{abs(adjusted)}"
    if exp >= 0:
        return neg + ds + "0" * exp
    point = len(ds) + exp
    return f"{neg}{ds[:point]}.{ds[point:]}" if point > 0 else f"{neg}0.{'0' * -point}{ds}"


@settings(max_examples=600, deadline=None)
@given(_PAIR, _SHIFT)
@example((1, 0, 1, 63), 0)
@example((1, 0, 1, 64), 0)
@example((-7, -64, 3, 0), 0)
@example((10**18 - 1, 5, 7, -3), EXP_MAX - 10)
@example((1, 0, 3, 0), EXP_MIN)
def test_every_operation_against_the_reference(pair, shift):
    ca, ea, cb, eb = pair
    a, b = _pyd(ca, ea), _pyd(cb, eb)
    ra, rb = D(a), D(b)
    assume(ra.exp + shift <= EXP_MAX and rb.exp + shift <= EXP_MAX)
    assume(EXP_MIN <= (ra.exp + shift if ra.coef else 0) and EXP_MIN <= (rb.exp + shift if rb.coef else 0))
    x = D.of(ra.coef, ra.exp + shift) if ra.coef else ra
    y = D.of(rb.coef, rb.exp + shift) if rb.coef else rb
    exact = (not ra.coef) == (not rb.coef)  # a zero operand is 0E0 whatever the shift

    if exact:
        assert _outcome(lambda: x + y) == _shifted(EXACT.add(a, b), shift)
        assert _outcome(lambda: x - y) == _shifted(EXACT.subtract(a, b), shift)
        assert (x < y, x <= y, x == y, x != y, x > y, x >= y) == (a < b, a <= b, a == b, a != b, a > b, a >= b)
    assert _outcome(lambda: x * y) == _shifted(EXACT.multiply(a, b), (shift if ra.coef else 0) + (shift if rb.coef else 0))
    assert -x == _shifted(EXACT.minus(a), shift if ra.coef else 0) and abs(x) == _shifted(EXACT.abs(a), shift if ra.coef else 0)
    if b:
        if exact:
            assert x.divide(y) == D(DIVISION.divide(a, b))  # the same power of ten cancels
            assert x.remainder(y) == _shifted(EXACT.remainder(a, b), shift)
        # Against the unscaled divisor the quotient carries the whole shift.
        assert _outcome(lambda: x.divide(rb)) == _shifted(DIVISION.divide(a, b), shift if ra.coef else 0)

    text = decimal_text(x)
    assert text == _reference_text(a, shift if ra.coef else 0)
    assert parse_decimal(text) == x and str(x) == text
    if shift == 0:
        assert hash(x) == hash(a) == hash(Fraction(a))


# What parse_decimal accepts, written out here from its documentation (not the module's regex):
# an optional sign, digits with an optional point, an optional exponent; ASCII, no spaces.
_ACCEPTED = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)


@st.composite
def _number_texts(draw):
    sign = draw(st.sampled_from(["", "-", "+"]))
    whole = draw(st.text("0123456789", max_size=45))
    point = draw(st.sampled_from(["", "."]))
    frac = draw(st.text("0123456789", max_size=45)) if point else ""
    marker = draw(st.sampled_from(["", "e", "E"]))
    exp = ""
    if marker:
        exp = draw(st.sampled_from(["", "-", "+"])) + draw(
            st.one_of(st.text("0123456789", max_size=4), st.text("0123456789", min_size=17, max_size=21)))
    return sign + whole + point + frac + marker + exp


_ODD_TEXTS = st.text(st.sampled_from("0123456789.eE+-_ \u0661\u00b2x"), max_size=12)


@settings(max_examples=600, deadline=None)
@given(st.one_of(_number_texts(), _ODD_TEXTS))
@example("1_0")
@example(" 1")
@example("\u0661")
@example("1e")
@example(".")
@example("+-1")
@example("1.e5")
@example("-0e999999999999999999999")
@example("1e-000000000000000000000000005")
def test_parse_against_the_reference(text):
    """Every text is either refused (ValueError) or gives the value its digits and exponent
    say, exactly when it has the documented form; the exponent range decides only past 64 bits."""
    if not _ACCEPTED.fullmatch(text):
        with pytest.raises(ValueError):
            parse_decimal(text)
        return
    m = _ACCEPTED.fullmatch(text)
    mantissa = m.group(1)
    whole, _, frac = mantissa.partition(".")
    coef = int(whole + frac or "0")
    exp = int(m.group(2)[1:]) - len(frac) if m.group(2) else -len(frac)
    sign = text.startswith("-")
    if not coef:
        assert parse_decimal(text) == D(0)
        return
    significant = str(coef).rstrip("0")
    last = exp + len(str(coef)) - len(significant)
    if not EXP_MIN <= last <= EXP_MAX or len(significant) > MAX_DECIMAL_DIGITS:
        with pytest.raises(ValueError):
            parse_decimal(text)
        return
    got = parse_decimal(text)
    assert (got.coef, got.exp) == ((-1 if sign else 1) * int(significant), last)


@pytest.mark.parametrize("make, expected", [
    # The inline add/subtract at the digit limit: exactly 100,000 digits is allowed, one more is not.
    (lambda: D(10**MAX_DECIMAL_DIGITS - 2) + D(1), D(10**MAX_DECIMAL_DIGITS - 1)),
    (lambda: D(10**MAX_DECIMAL_DIGITS - 1) + D(1), D.of(1, MAX_DECIMAL_DIGITS)),  # its zeros move to the exponent
    (lambda: D(10**MAX_DECIMAL_DIGITS - 1) + D(2), DecimalOverLimit),
    (lambda: D(-(10**MAX_DECIMAL_DIGITS - 1)) - D(2), DecimalOverLimit),
    (lambda: D.of(10**(MAX_DECIMAL_DIGITS - 2) + 1, 1) + D("0.1"), DecimalOverLimit),  # gap 2, inline
    (lambda: D.of(10**(MAX_DECIMAL_DIGITS - 2) + 1, 1) - D(1), D(10**(MAX_DECIMAL_DIGITS - 1) + 9)),
    (lambda: D.of(3, 10**6) * D.of(7, -(10**6)), D(21)),
    # A product whose zeros bring a 200,000-digit coefficient back to one digit.
    (lambda: D(5**143_000) * D(2**143_000), D.of(1, 143_000)),
    (lambda: D.of(5, EXP_MAX) * D(2), DecimalOverLimit),  # 10 * 10^max: the zero moves past the range
    (lambda: D.of(5, EXP_MAX - 1) * D(2), D.of(1, EXP_MAX)),
    (lambda: D.of(10**MAX_DECIMAL_DIGITS - 1, 0).remainder(D(10**MAX_DECIMAL_DIGITS - 1)), D(0)),
    (lambda: D("-7.5").remainder(D(2)), D("-1.5")),
    (lambda: D("7.5").remainder(D("-2")), D("1.5")),
    (lambda: D(7).remainder(D("0.0003")), D("0.0001")),
    (lambda: D.of(1, 70).remainder(D(7)), D(10**70 % 7)),  # past the inline gap
    (lambda: D(1).divide(D(4)), D("0.25")),
    (lambda: D(2).divide(D(3)), D("0.6666666666666666666666666666666667")),
    (lambda: D(-2).divide(D(3)), D("-0.6666666666666666666666666666666667")),
    (lambda: D(10**40 - 1).divide(D(3)), D(3333333333333333333333333333333333) * D.of(1, 6)),
    (lambda: D.of(1, EXP_MIN).divide(D(2)), DecimalOverLimit),
])
def test_at_the_edges_of_the_inline_paths(make, expected):
    assert _outcome(make) == expected


def test_division_by_zero_faults_from_the_runtime():
    """Compiled `/` and `%` (sandbox/runtime.py) turn a zero divisor into the Flow fault, with
    the same words as an Int's."""
    from sandbox.runtime import Fault, rt_ddiv, rt_dmod

    for op, words in ((rt_ddiv, "division by zero"), (rt_dmod, "remainder of a division by zero")):
        for dividend in (D(0), D("1.5"), D.of(7, EXP_MAX)):
            with pytest.raises(Fault) as info:
                op(dividend, D(0))
            assert (info.value.kind, info.value.message) == ("division-by-zero", words)
    assert rt_ddiv(D(1), D(8)) == D("0.125") and rt_dmod(D("7.5"), D(2)) == D("1.5")
