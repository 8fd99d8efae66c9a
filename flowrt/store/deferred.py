"""What a RunLog that verifies as it is asked (an open with `defer=True`) does alike on every
store: serve the facts verified so far, verify more when a fact past them is asked for, and raise
what the verification found once it is asked for what lies past the damage (docs/trace.md §10)."""

from __future__ import annotations

from flowrt.store import reading


class VerifiedAsAsked:
    """`verify`, `fact_at`, `facts_from`, `fact` and `is_hole` over what the store gives: `_facts`
    (its FactShelf of verified facts), `_holes` (the recorded holes), `_failure` (the StorageError
    the verification found, or None), `deferred` (whether it goes on) and `_read_more(count)`
    (verify up to `count` more facts, all when None; once it reaches the end it runs the end's
    checks, sets `_failure` if they fail and raises)."""

    def verify(self) -> None:
        """Finish a deferred verification (nothing to do otherwise); raises what `open` would."""
        if self._failure is not None:
            raise self._failure
        if self.deferred:
            self._read_more(None)

    def fact_at(self, index: int) -> dict | None:
        """The fact at `index` of the verified facts (0 is Start), verifying as far as that;
        None past the last fact (then everything has been verified)."""
        facts = self._facts
        while index >= len(facts):
            if not self.deferred:
                if self._failure is not None:
                    raise self._failure
                return None
            self._read_more(max(reading._VERIFY_STEP, index + 1 - len(facts)))
        return facts[index]

    def facts_from(self, index: int, count: int) -> list[dict]:
        """Up to `count` facts from `index` on, verifying as far as that; [] past the end."""
        facts = self._facts
        while len(facts) < index + count and self.deferred:
            self._read_more(max(reading._VERIFY_STEP, index + count - len(facts)))
        if self._failure is not None:
            raise self._failure
        return facts[index:index + count]

    def fact(self, n: int) -> dict:
        position = self._facts.index_of(n)
        if position is None and (self.deferred or self._failure is not None):
            self.verify()
            position = self._facts.index_of(n)
        if position is None:
            raise IndexError(f"no fact {n!r} in the history (it has {len(self._facts)}, some perhaps archived)")
        return self._facts[position]

    def is_hole(self, fact: dict | int, field: str) -> bool:
        """Whether `field` of the fact is a recorded hole. Without verifying on: a deferred open
        knows its holes as recorded from the start (as `value` meets them), and the end of its
        verification checks each against its fact."""
        n = fact if isinstance(fact, int) else fact["n"]
        return (n, field) in self._holes


def let_go(reader: "reading._HistoryReader", kept: list[dict], count: int) -> None:
    """The reader's first `count` facts (`kept[:count]`) are about to be taken off its front by
    their store (`release_before`): counted in `shelved`, and the hash of the durable fact noted
    if it is among them (the reader checks it at the end)."""
    if reader.durable:  # not yet checked: the fact it names may be among these
        for fact in kept[:count]:
            if fact["n"] == reader.durable:
                reader.durable_seen = fact["hash"]
    reader.shelved += count
