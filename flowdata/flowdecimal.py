"""Flow's Decimal: an exact base-10 number whose exponent is any signed 64-bit integer.

Python's `decimal` (libmpdec) cannot hold every such value: its exponents stop near +-10^18, a
ninth of the 64-bit range the execution seed requires (Limits: "A Decimal's exponent, the power
of ten of its last significant digit, may be any 64-bit signed integer"). So a Flow Decimal is a
pair of Python ints, `coef * 10**exp`, kept normalized: `coef` has no trailing zero digit (zero
is `0 * 10**0`). Normalized, `exp` is exactly the seed's exponent, equality is equality of the
pair, and there is one representation per value (Flow never shows trailing zeros: `1.50` and
`1.5` are one value, written `1.5`).

Arithmetic is exact on the ints (`+ - *`, and `%` as `a - b * trunc(a / b)`); `/` rounds the
quotient to 34 significant digits, half to even (language.md 7.3). A result whose exponent leaves
the signed 64-bit range, or whose coefficient has more than MAX_DECIMAL_DIGITS digits (the
reference implementation's limit, the same as Int's), raises DecimalOverLimit, which the child
reports as a `limit` fault: never a silent rounding to zero or infinity. The check is on the
result's exponent and size as Python ints, before anything that large is built (1E+9e18 + 1
would need 9e18 digits: refused from the exponents alone).

Pure: only the standard library's re, and flowdata.bigint for texts of large coefficients.
"""

from __future__ import annotations

import re

from flowdata.bigint import _digits, _pow10, int_text, text_int

__all__ = ["FlowDecimal", "DecimalOverLimit", "MAX_DECIMAL_DIGITS", "EXP_MIN", "EXP_MAX",
           "DIVISION_DIGITS", "decimal_text", "parse_decimal"]

#: The exponent range the seed requires: any signed 64-bit integer.
EXP_MIN = -(2 ** 63)
EXP_MAX = 2 ** 63 - 1
#: Significant digits of a Decimal in the reference implementation (language.md 13.2).
MAX_DECIMAL_DIGITS = 100_000
#: `/` rounds its quotient to this many significant digits, half to even.
DIVISION_DIGITS = 34
#: Canonical Decimal text switches to scientific notation beyond this many padding zeros.
DECIMAL_PLAIN_LIMIT = 40

_LIMIT = 10 ** MAX_DECIMAL_DIGITS
_NEG_LIMIT = -_LIMIT  # bounds compared by size alone: no big int is built per operation
_LIMIT_BITS = 332_192  # 2^332192 < 10^100000: a coefficient this short is within the limit
_LOG10_2 = 0.30102999566398120
_HASH_MODULUS = 2 ** 61 - 1  # sys.hash_info.modulus on 64-bit CPython; see __hash__
_POW10 = tuple(10 ** k for k in range(80))
_GAP = 64  # exponent gaps the operators align inline, with a power from _POW10
_SMALL = 10 ** 18
_NEG_SMALL = -_SMALL
_DIVIDE_SMALL = 10 ** 40  # below it, divide's inline path (its shift stays in _POW10)
_BIG_QUOTIENT = 10 ** 500


class DecimalOverLimit(ArithmeticError):
    """A Decimal result beyond the implementation's limits (a `limit` fault)."""


def _ndigits(c: int) -> int:
    """The number of decimal digits of `c > 0`."""
    if c < _SMALL:
        return len(str(c))
    k = int((c.bit_length() - 1) * _LOG10_2)  # 10^k <= c, or 10^(k+1) > c at worst one off
    if c >= _pow10(k + 1):
        k += 1
    elif c < _pow10(k):
        k -= 1
    return k + 1


def _strip(c: int, e: int) -> tuple[int, int]:
    """`c * 10**e` with the trailing zeros of `c` moved into the exponent."""
    if c == 0:
        return 0, 0
    if c % 10:
        return c, e
    if c.bit_length() < 64:  # an everyday coefficient has a zero or two: divide them off
        c //= 10
        e += 1
        while not c % 10:
            c //= 10
            e += 1
        return c, e
    if c.bit_length() < 2_000:  # str() is cheaper than a division per zero
        digits = str(abs(c))
        zeros = len(digits) - len(digits.rstrip("0"))
        return c // 10 ** zeros, e + zeros
    # One text conversion instead of a division per zero (quadratic for a long run of zeros).
    # Not int_text: an unnormalized result may be longer than the Int limit (10^100000 itself, a
    # product of two long coefficients) and still be within the Decimal's once its zeros move.
    digits = _digits(abs(c), 0)
    zeros = len(digits) - len(digits.rstrip("0"))
    c //= _pow10(zeros)
    return c, e + zeros


def _make(c: int, e: int, what: str) -> "FlowDecimal":
    """The normalized Decimal `c * 10**e`, or DecimalOverLimit."""
    c, e = _strip(c, e)
    if not EXP_MIN <= e <= EXP_MAX:
        raise DecimalOverLimit(f"a Decimal result of `{what}` whose exponent (of its last significant digit) {e} is "
                               "beyond the signed 64-bit range")
    if c.bit_length() > _LIMIT_BITS and abs(c) >= _LIMIT:
        raise DecimalOverLimit(f"a Decimal result of `{what}` with more than {MAX_DECIMAL_DIGITS} significant digits")
    d = _new(FlowDecimal)
    d.coef = c
    d.exp = e
    return d


class FlowDecimal:
    """An exact Decimal `coef * 10**exp`, normalized. Immutable, hashable, totally ordered."""

    __slots__ = ("coef", "exp")

    def __init__(self, value=0) -> None:
        if type(value) is int:
            c, e = _strip(value, 0)
        elif type(value) is str:
            p = parse_decimal(value)
            c, e = p.coef, p.exp
        elif type(value) is FlowDecimal:
            c, e = value.coef, value.exp
        else:  # decimal.Decimal, without importing it: its (sign, digits, exponent) tuple
            try:
                sign, digits, exp = value.as_tuple()
            except AttributeError:
                raise TypeError(f"not a Decimal: {type(value).__name__}") from None
            if type(exp) is not int:
                raise ValueError(f"not a finite Decimal: {value}")
            c = text_int("".join(map(str, digits)) or "0")
            c, e = _strip(-c if sign else c, exp)
            if not EXP_MIN <= e <= EXP_MAX:
                raise ValueError(f"a Decimal whose exponent {e} is beyond the signed 64-bit range")
        self.coef = c
        self.exp = e

    @classmethod
    def of(cls, coef: int, exp: int) -> "FlowDecimal":
        """`coef * 10**exp`, normalized; DecimalOverLimit beyond the limits."""
        return _make(coef, exp, "round")

    # -- arithmetic ----------------------------------------------------------------------------

    # The operators below are what compiled Flow runs for `+ - * < <= > >=`: each inlines the
    # everyday case (exponents at most _GAP apart, a result without a trailing zero, far from the
    # limits) and leaves the rest to _add, _make and _cmp. docs/impl.md, "Decimal arithmetic".

    def __add__(self, other):
        if type(other) is not FlowDecimal:
            return NotImplemented
        gap = self.exp - other.exp
        if not gap:
            c = self.coef + other.coef
            e = self.exp
        elif 0 < gap < _GAP:
            c = self.coef * _POW10[gap] + other.coef
            e = other.exp
        elif -_GAP < gap < 0:
            c = self.coef + other.coef * _POW10[-gap]
            e = self.exp
        else:
            return _add(self, other.coef, other.exp, "+")
        # e is an operand's exponent, already in range; the digit limit is checked by size.
        if c % 10 and _NEG_LIMIT < c < _LIMIT:
            d = _new(FlowDecimal)
            d.coef = c
            d.exp = e
            return d
        return _make(c, e, "+")

    def __sub__(self, other):
        if type(other) is not FlowDecimal:
            return NotImplemented
        gap = self.exp - other.exp
        if not gap:
            c = self.coef - other.coef
            e = self.exp
        elif 0 < gap < _GAP:
            c = self.coef * _POW10[gap] - other.coef
            e = other.exp
        elif -_GAP < gap < 0:
            c = self.coef - other.coef * _POW10[-gap]
            e = self.exp
        else:
            return _add(self, -other.coef, other.exp, "-")
        if c % 10 and _NEG_LIMIT < c < _LIMIT:
            d = _new(FlowDecimal)
            d.coef = c
            d.exp = e
            return d
        return _make(c, e, "-")

    def __mul__(self, other):
        if type(other) is not FlowDecimal:
            return NotImplemented
        c = self.coef * other.coef
        if c % 10:
            e = self.exp + other.exp
            if EXP_MIN <= e <= EXP_MAX and _NEG_LIMIT < c < _LIMIT:
                d = _new(FlowDecimal)
                d.coef = c
                d.exp = e
                return d
        elif not c:
            return ZERO
        return _make(c, self.exp + other.exp, "*")

    def __neg__(self):
        d = _new(FlowDecimal)
        d.coef = -self.coef
        d.exp = self.exp
        return d

    def __abs__(self):
        return self if self.coef >= 0 else -self

    def __bool__(self) -> bool:
        return self.coef != 0

    def divide(self, other: "FlowDecimal") -> "FlowDecimal":
        """`self / other` rounded to DIVISION_DIGITS significant digits, half to even.
        ZeroDivisionError for a zero divisor."""
        a, b = self.coef, other.coef
        if b == 0:
            raise ZeroDivisionError("division by zero")
        if a == 0:
            return ZERO
        negative = (a < 0) != (b < 0)
        if a < 0:
            a = -a
        if b < 0:
            b = -b
        if a < _DIVIDE_SMALL and b < _DIVIDE_SMALL and 0 <= (shift := 35 + len(str(b)) - len(str(a))):
            # The everyday case, the general one below specialized: scaled by 10^shift, the
            # dividend has 35 + digits(b) digits, so the quotient has 35 or 36 (one comparison
            # tells which) and the power comes from the table (shift < 75).
            q, r = divmod(a * _POW10[shift], b)
            if q < _POW10[35]:
                unit = 10
                e = self.exp - other.exp - shift + 1
            else:
                unit = 100
                e = self.exp - other.exp - shift + 2
            q, rest = divmod(q, unit)
            twice = 2 * rest + (1 if r else 0)
            if twice > unit or (twice == unit and q & 1):
                q += 1
            if negative:
                q = -q
            if q % 10 and EXP_MIN <= e <= EXP_MAX:
                d = _new(FlowDecimal)
                d.coef = q
                d.exp = e
                return d
            return _make(q, e, "/")
        # Scale the dividend so the integer quotient has more digits than are kept (at least
        # DIVISION_DIGITS + 1): the digit after the last kept one and the remainder decide the
        # rounding exactly.
        shift = max(0, DIVISION_DIGITS + 1 + _ndigits(b) - _ndigits(a))
        q, r = divmod(a * _pow10(shift), b)
        e = self.exp - other.exp - shift
        drop = (len(str(q)) if q < _BIG_QUOTIENT else _ndigits(q)) - DIVISION_DIGITS
        if drop > 0:
            unit = _pow10(drop)
            q, rest = divmod(q, unit)
            e += drop
            twice = 2 * rest + (1 if r else 0)  # the remainder only breaks a tie, upwards
            if twice > unit or (twice == unit and q % 2 == 1):
                q += 1
        return _make(-q if negative else q, e, "/")

    def remainder(self, other: "FlowDecimal") -> "FlowDecimal":
        """`self - other * q`, `q` the quotient truncated toward zero (exact; the dividend's
        sign). ZeroDivisionError for a zero divisor."""
        b = other.coef
        if b == 0:
            raise ZeroDivisionError("remainder of a division by zero")
        a = self.coef
        if not a:
            return self
        gap = self.exp - other.exp
        if -_GAP < gap < _GAP:  # close scales: align on the smaller exponent, one `%` of ints
            if gap >= 0:
                x, y, e = a * _POW10[gap], b, other.exp
            else:
                x, y, e = a, b * _POW10[-gap], self.exp
            if x < 0:
                x = -x
            if y < 0:
                y = -y
            if x < y:
                return self
            r = x % y if a > 0 else -(x % y)
            if r % 10 and _NEG_LIMIT < r < _LIMIT:  # e is an operand's exponent: in range
                d = _new(FlowDecimal)
                d.coef = r
                d.exp = e
                return d
            return _make(r, e, "%")
        if _cmp_abs(self, other) < 0:
            return self
        e = min(self.exp, other.exp)
        mod = abs(b) * _pow10(other.exp - e)  # |a| >= |b|: this exponent gap is bounded by a's digits
        gap = self.exp - e
        # The dividend's own scale may be enormous (1E+9e18 % 7): reduce it modulo the divisor.
        r = (abs(a) % mod) * pow(10, gap, mod) % mod
        return _make(-r if a < 0 else r, e, "%")

    # -- comparison ----------------------------------------------------------------------------

    def __eq__(self, other):
        if type(other) is FlowDecimal:
            return self.coef == other.coef and self.exp == other.exp
        if type(other) is int:
            c, e = _strip(other, 0)
            return self.coef == c and self.exp == e
        if hasattr(other, "as_tuple") and hasattr(other, "is_finite"):  # decimal.Decimal
            return other.is_finite() and self == FlowDecimal(other)
        return NotImplemented

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __lt__(self, other):
        if type(other) is not FlowDecimal:
            return NotImplemented
        gap = self.exp - other.exp
        if not gap:
            return self.coef < other.coef
        if 0 < gap < _GAP:
            return self.coef * _POW10[gap] < other.coef
        if -_GAP < gap < 0:
            return self.coef < other.coef * _POW10[-gap]
        return _cmp(self, other) < 0

    def __le__(self, other):
        if type(other) is not FlowDecimal:
            return NotImplemented
        gap = self.exp - other.exp
        if not gap:
            return self.coef <= other.coef
        if 0 < gap < _GAP:
            return self.coef * _POW10[gap] <= other.coef
        if -_GAP < gap < 0:
            return self.coef <= other.coef * _POW10[-gap]
        return _cmp(self, other) <= 0

    def __gt__(self, other):
        if type(other) is not FlowDecimal:
            return NotImplemented
        gap = self.exp - other.exp
        if not gap:
            return self.coef > other.coef
        if 0 < gap < _GAP:
            return self.coef * _POW10[gap] > other.coef
        if -_GAP < gap < 0:
            return self.coef > other.coef * _POW10[-gap]
        return _cmp(self, other) > 0

    def __ge__(self, other):
        if type(other) is not FlowDecimal:
            return NotImplemented
        gap = self.exp - other.exp
        if not gap:
            return self.coef >= other.coef
        if 0 < gap < _GAP:
            return self.coef * _POW10[gap] >= other.coef
        if -_GAP < gap < 0:
            return self.coef >= other.coef * _POW10[-gap]
        return _cmp(self, other) >= 0

    def __hash__(self) -> int:
        # Python's numeric hash of the rational coef * 10**exp (as int, Fraction and
        # decimal.Decimal compute it), so equal numbers hash alike across those types. It is a
        # function of the value only: deterministic, with no hash seed.
        m = _HASH_MODULUS
        h = abs(self.coef) % m
        h = h * pow(10, self.exp % (m - 1), m) % m  # 10^(m-1) = 1 (mod m): Fermat
        if self.coef < 0:
            h = -h
        return -2 if h == -1 else h

    # -- conversions ---------------------------------------------------------------------------

    def adjusted(self) -> int:
        """The exponent of the first significant digit (0 for zero)."""
        return self.exp + _ndigits(abs(self.coef)) - 1 if self.coef else 0

    def to_integral(self, mode: str) -> int:
        """The Int `mode` ("down", "floor", "ceiling") rounds this to. May be as large as the
        value: the caller bounds it first."""
        c, e = self.coef, self.exp
        if e >= 0:
            return c * _pow10(e)
        if -e > _ndigits(abs(c)):  # |self| < 1
            q, r = 0, c
        else:
            q, r = divmod(abs(c), _pow10(-e))
            q, r = (-q, -r) if c < 0 else (q, r)
        if r:
            if mode == "floor" and c < 0:
                q -= 1
            elif mode == "ceiling" and c > 0:
                q += 1
        return q

    def __str__(self) -> str:
        return decimal_text(self)

    def __repr__(self) -> str:
        return f"FlowDecimal('{decimal_text(self)}')"

    def __reduce__(self):
        return (FlowDecimal, (decimal_text(self),))


_new = object.__new__
ZERO = FlowDecimal(0)


def _add(a: FlowDecimal, bc: int, be: int, what: str) -> FlowDecimal:
    ac, ae = a.coef, a.exp
    if ae == be:
        c = ac + bc
        e = ae
    elif not bc:
        return a
    elif not ac:
        return _make(bc, be, what)
    else:
        if ae < be:
            ac, ae, bc, be = bc, be, ac, ae
        gap = ae - be  # the larger-exponent operand is scaled by 10^gap
        if gap < 64:
            c = ac * _POW10[gap] + bc
        else:
            # The exact sum ends at the digit of 10^be (bc has no trailing zero) and its first
            # digit is at least near 10^ae: beyond the digit limit when that gap is.
            if gap > MAX_DECIMAL_DIGITS + _ndigits(abs(bc)) + 1:
                raise DecimalOverLimit(f"a Decimal result of `{what}` with more than {MAX_DECIMAL_DIGITS} significant digits")
            c = ac * _pow10(gap) + bc
        e = be
    if c % 10 and (c.bit_length() <= _LIMIT_BITS or abs(c) < _LIMIT):
        d = _new(FlowDecimal)
        d.coef = c
        d.exp = e  # e is an operand's exponent: already in range
        return d
    return _make(c, e, what)


def _cmp_abs(a: FlowDecimal, b: FlowDecimal) -> int:
    """-1, 0 or 1 as |a| is below, equal to or above |b|."""
    x, y = abs(a.coef), abs(b.coef)
    if a.exp == b.exp:
        return (x > y) - (x < y)
    if not x or not y:
        return (x > 0) - (y > 0)
    da, db = _ndigits(x), _ndigits(y)
    adj_a, adj_b = a.exp + da, b.exp + db
    if adj_a != adj_b:
        return 1 if adj_a > adj_b else -1
    # Same first-digit position: the exponent gap is below the digit counts, so aligning is cheap.
    if a.exp > b.exp:
        x *= _pow10(a.exp - b.exp)
    else:
        y *= _pow10(b.exp - a.exp)
    return (x > y) - (x < y)


def _cmp(a: FlowDecimal, b: FlowDecimal) -> int:
    x, y = a.coef, b.coef
    gap = a.exp - b.exp
    if -64 < gap < 64:  # close scales (every everyday comparison): align and compare
        if gap > 0:
            x *= _POW10[gap]
        elif gap < 0:
            y *= _POW10[-gap]
        return (x > y) - (x < y)
    sa = (a.coef > 0) - (a.coef < 0)
    sb = (b.coef > 0) - (b.coef < 0)
    if sa != sb:
        return 1 if sa > sb else -1
    return _cmp_abs(a, b) * sa


# ---------------------------------------------------------------------------------------------
# Texts


def decimal_text(d: FlowDecimal) -> str:
    """The canonical text of a Decimal.

    No exponent and no trailing zeros after the point, `-0` written `0`: `1.5`, `100`, `-0.001`.
    When that plain form would need more than 40 zeros of padding (the value has trailing zeros
    beyond 10^40, or its first digit lies beyond 10^-40) it is written in normalized scientific
    form instead: `1E+100`, `1.5E-41`. Every text is also a valid JSON number.
    """
    if type(d) is not FlowDecimal:
        d = FlowDecimal(d)  # a finite decimal.Decimal from a Python caller
    c, exp = d.coef, d.exp
    if _NEG_SMALL < c < _SMALL:  # the everyday coefficient: str() itself, no int_text call
        if not exp:
            return str(c)  # also "0"
        if -19 < exp < 0:
            ds = str(c)  # with its sign: a point within the digits is one slice
            point = len(ds) + exp
            if point > (c < 0):
                return f"{ds[:point]}.{ds[point:]}"
        ds = str(-c if c < 0 else c)
    elif not c:
        return "0"
    else:
        ds = int_text(abs(c))
    n = len(ds)
    adjusted = exp + n - 1
    neg = "-" if c < 0 else ""
    if exp > DECIMAL_PLAIN_LIMIT or adjusted < -DECIMAL_PLAIN_LIMIT:
        mant = ds[0] + ("." + ds[1:] if n > 1 else "")
        return f"{neg}{mant}E{'+' if adjusted >= 0 else '-'}{abs(adjusted)}"
    if exp >= 0:
        return neg + ds + "0" * exp
    point = n + exp
    if point > 0:
        return f"{neg}{ds[:point]}.{ds[point:]}"
    return f"{neg}0.{'0' * -point}{ds}"


# An optional sign, digits with an optional point (`1`, `1.5`, `1.`, `.5`), an optional exponent.
_DECIMAL_FORM = re.compile(r"([+-]?)(?:([0-9]+)\.?([0-9]*)|\.([0-9]+))(?:[eE]([+-]?[0-9]+))?")
# An exponent text longer than this (leading zeros aside) is beyond 64 bits whatever the digits.
_EXP_TEXT_MAX = 40


def parse_decimal(text: str) -> FlowDecimal:
    """The Decimal that `text` writes, or ValueError.

    Accepted: an optional sign, digits with an optional point (`1`, `1.5`, `1.`, `.5`) and an
    optional exponent (`1e5`, `1.5E-3`), in ASCII, without spaces. Non-canonical texts (`1.50`,
    `+1`, `1e2`) are accepted; NaN, infinities and anything else are not. A text whose value's
    exponent (of its last significant digit) is beyond the signed 64-bit range, or that has more
    than MAX_DECIMAL_DIGITS significant digits, is refused naming the limit.
    """
    # The everyday text first (`12.50`, `-3`, `.5`, `1.25E-7`): ASCII digits around at most one
    # point, under 41 of them, and an exponent of under 19 digits (so within 64 bits, and the
    # digit limit far off). Anything else takes the full form below, the one authority on what
    # is accepted.
    first = text[:1]
    body = text[1:] if first == "-" or first == "+" else text
    if "e" in body or "E" in body:
        mantissa, _, exp_text = body.replace("E", "e").partition("e")
    else:
        mantissa, exp_text = body, None
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    if len(digits) < 41 and digits.isdigit() and digits.isascii():
        e = -len(frac)
        if exp_text is not None:
            exp_sign = exp_text[:1]
            exp_digits = exp_text[1:] if exp_sign == "-" or exp_sign == "+" else exp_text
            if not (len(exp_digits) < 19 and exp_digits.isdigit() and exp_digits.isascii()):
                e = None  # the full form decides
            elif exp_sign == "-":
                e -= int(exp_digits)
            else:
                e += int(exp_digits)
        if e is not None:
            c = int(digits)
            if not c:
                return ZERO
            if not c % 10:
                c, e = _strip(c, e)
            d = _new(FlowDecimal)
            d.coef = -c if first == "-" else c
            d.exp = e
            return d
    m = _DECIMAL_FORM.fullmatch(text) if text.isascii() else None
    shown = repr(text) if len(text) <= 60 else repr(text[:60]) + "..."
    if m is None:
        raise ValueError(f"not a decimal number: {shown}")
    sign, whole, frac, only_frac, exp_text = m.groups()
    if only_frac is not None:
        whole, frac = "", only_frac
    digits = (whole + frac).lstrip("0")
    if not digits:
        return ZERO  # zero, whatever its exponent says
    significant = digits.rstrip("0")
    e = len(digits) - len(significant) - len(frac)
    if exp_text:
        body = exp_text.lstrip("+-").lstrip("0")
        if len(body) > _EXP_TEXT_MAX:
            raise ValueError(f"a Decimal whose exponent is beyond the signed 64-bit range: {shown}")
        e += -int(body or "0") if exp_text[0] == "-" else int(body or "0")
    if not EXP_MIN <= e <= EXP_MAX:
        raise ValueError(f"a Decimal whose exponent is beyond the signed 64-bit range (its last significant "
                         f"digit at 10^{e}): {shown}")
    if len(significant) > MAX_DECIMAL_DIGITS:
        raise ValueError(f"a Decimal of more than {MAX_DECIMAL_DIGITS} significant digits: {shown}")
    c = text_int(significant)
    d = _new(FlowDecimal)
    d.coef = -c if sign == "-" else c
    d.exp = e
    return d
