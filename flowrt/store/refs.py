"""The values a run's facts keep by reference, as every store tracks them: an index from each
value's hash to the (fact n, field) pairs that refer to it, and the check that every referred
value and every module source Start names is present and sound."""

from __future__ import annotations

from flowrt.store.errors import StorageError
from flowrt.store.format import _HASH_RE, _VALUE_REFS


def index_refs(refs: dict[str, set[tuple[int, str]]], fact: dict) -> None:
    """Add the value references of `fact` to `refs` (value hex -> {(fact n, field)})."""
    for field, ref_name in _VALUE_REFS[fact["kind"]]:
        ref = fact.get(ref_name)
        if ref is not None:
            refs.setdefault(ref[len("sha256:"):], set()).add((fact["n"], field))


def verify_referenced(log, refs: dict[str, set[tuple[int, str]]], holes: dict, facts: list[dict],
                      history: str) -> None:
    """`RunLog.verify_files` for any store: read each referred value once (through a fact that
    is not a hole) and each module source Start names, through `log`, which checks them against
    their hashes; `history` names the facts' component in the error for a malformed Start."""
    for hex_, users in sorted(refs.items()):
        live = sorted(user for user in users if user not in holes)
        if live:
            log.value(*live[0])
    modules = facts[0].get("modules") if facts and facts[0]["n"] == 1 else None
    for module in modules if isinstance(modules, list) else ():
        hash_ = module.get("hash") if isinstance(module, dict) else None
        if not isinstance(hash_, str) or not _HASH_RE.match(hash_):
            raise StorageError("Start names a module source that is not sha256:<hex>", 1, component=history)
        log.source(hash_)
