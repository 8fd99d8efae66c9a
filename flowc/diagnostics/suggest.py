"""The one "did you mean" helper.

`did_you_mean(name, candidates)` picks the candidate closest to `name` by Damerau-Levenshtein
distance (optimal string alignment: insertions, deletions, substitutions and transpositions of
neighbours each cost 1), and returns it only when it is close enough:

    distance <= max(1, len(name) // 3)   and   distance < len(name)

The second bound stops a one-letter name from "matching" every other one-letter name. A candidate
that differs from `name` only in case wins outright; a candidate equal to `name` is never suggested. The candidates are deduplicated and sorted first and ties are
broken by that order, so the answer never depends on the iteration order of a set (which changes
between processes and would make golden files flaky).
"""

from __future__ import annotations

from collections.abc import Iterable


def distance(a: str, b: str, limit: int | None = None) -> int:
    """Optimal-string-alignment distance between `a` and `b`.

    With `limit`, any result above `limit` may be reported as `limit + 1` (the search gives up early).
    """
    if a == b:
        return 0
    la, lb = len(a), len(b)
    if limit is not None and abs(la - lb) > limit:
        return limit + 1
    if la == 0 or lb == 0:
        return max(la, lb)
    prev2: list[int] = []
    prev = list(range(lb + 1))
    for i in range(1, la + 1):
        cur = [i] + [0] * lb
        ca = a[i - 1]
        row_min = cur[0]
        for j in range(1, lb + 1):
            cb = b[j - 1]
            cost = 0 if ca == cb else 1
            value = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                value = min(value, prev2[j - 2] + 1)
            cur[j] = value
            if value < row_min:
                row_min = value
        if limit is not None and row_min > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[lb]


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to `name` if it is reasonably close, else None (see the module doc)."""
    if not name:
        return None
    pool = sorted(set(candidates) - {name})
    folded = name.casefold()
    for candidate in pool:  # a difference of case alone is the likeliest slip
        if candidate.casefold() == folded:
            return candidate
    limit = min(max(1, len(name) // 3), len(name) - 1)
    if limit < 1:
        return None
    best: str | None = None
    best_distance = limit + 1
    for candidate in pool:
        d = distance(name, candidate, limit)
        if d < best_distance:  # strict: the first in sorted order wins a tie
            best, best_distance = candidate, d
    return best
