"""Int <-> decimal text of any size up to Flow's Int limit, on the host and in the sandbox child.

CPython refuses `str(i)` and `int(s)` beyond 4,300 digits (`sys.set_int_max_str_digits`), a guard
against the quadratic cost of its conversions. Flow's Int goes to `MAX_INT_DIGITS` (100,000)
digits, so every path that turns an Int into text or text into an Int (canonical JSON, the
channel, the store, Text interpolation, `--input`, replies) converts here instead. The guard is
kept, not lifted: raising it is process-wide (it would change other threads and an embedding
application too), and the limit is checked here before any conversion of a large value, so a
longer text or a larger int costs one comparison, not a conversion. Small values (under 2,000
bits, below every limit CPython can be set to) go straight to `str` / `int`.

Large values are split in halves at a power of ten (divide and conquer), each half converted by
CPython below its guard: measured at 100,000 digits, text to int takes ~10 ms and int to text
~40 ms (CPython's own quadratic algorithms, with the guard lifted, take ~30 and ~100 ms).

Pure: only the standard library's functools.
"""

from __future__ import annotations

import functools

__all__ = ["MAX_INT_DIGITS", "IntOverLimit", "over_limit", "checked", "int_text", "text_int"]

#: The reference implementation's Int limit, in decimal digits (language.md 13.2).
MAX_INT_DIGITS = 100_000

# An int of at most this many bits has at most MAX_INT_DIGITS digits (2^332192 < 10^100000).
_SAFE_BITS = 332_192
# Below this many bits (about 600 digits) CPython converts an int under any guard it allows
# (the smallest settable limit is 640 digits).
_DIRECT_BITS = 2_000
_DIRECT_DIGITS = 600
_LOG10_2 = 0.30102999566398120


class IntOverLimit(ValueError):
    """An Int of more than MAX_INT_DIGITS decimal digits."""

    def __init__(self, what: str = "integer") -> None:
        super().__init__(f"{what} over the limit of {MAX_INT_DIGITS} digits")


@functools.lru_cache(maxsize=256)  # ~40 KiB each at most; the limit's own power stays warm
def _pow10(k: int) -> int:
    return 10 ** k


def over_limit(i: int) -> bool:
    """Whether the int `i` has more than MAX_INT_DIGITS decimal digits."""
    return i.bit_length() > _SAFE_BITS and abs(i) >= _pow10(MAX_INT_DIGITS)


def checked(i: int, what: str = "integer") -> int:
    """`i`, or IntOverLimit when it has more than MAX_INT_DIGITS digits."""
    if i.bit_length() > _SAFE_BITS and abs(i) >= _pow10(MAX_INT_DIGITS):
        raise IntOverLimit(what)
    return i


def int_text(i: int) -> str:
    """The decimal text of `i` (`-` for a negative one); IntOverLimit beyond MAX_INT_DIGITS."""
    if i.bit_length() < _DIRECT_BITS:
        return str(i)
    checked(i)
    if i < 0:
        return "-" + _digits(-i, 0)
    return _digits(i, 0)


def _digits(n: int, width: int) -> str:
    """The digits of `n >= 0`, left-padded with zeros to `width`."""
    if n.bit_length() < _DIRECT_BITS:
        text = str(n)
        return text.zfill(width) if width else text
    low = int(n.bit_length() * _LOG10_2) // 2
    high, rest = divmod(n, _pow10(low))
    return _digits(high, width - low if width > low else 0) + _digits(rest, low)


def text_int(s: str) -> int:
    """The int that `s` writes: an optional `-`, then ASCII digits (leading zeros allowed).
    ValueError for any other text; IntOverLimit for more than MAX_INT_DIGITS significant digits
    (checked before anything is converted)."""
    if len(s) <= _DIRECT_DIGITS:
        return int(s)
    negative = s[0] == "-"
    digits = s[1:] if negative else s
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"not an integer: {s[:40]!r}...")
    if len(digits) > MAX_INT_DIGITS:
        digits = digits.lstrip("0")
        if len(digits) > MAX_INT_DIGITS:
            raise IntOverLimit()
    value = _from_digits(digits)
    return -value if negative else value


def _from_digits(digits: str) -> int:
    n = len(digits)
    if n <= _DIRECT_DIGITS:
        return int(digits) if digits else 0
    low = n // 2
    return _from_digits(digits[:n - low]) * _pow10(low) + _from_digits(digits[n - low:])
