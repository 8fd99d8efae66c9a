"""Canonical JSON as the store uses it (docs/trace.md section 2): the one implementation is
`flowdata.canonical`, which the chain's hashes, the channel and the codec share byte for byte.
This module gives it the store's names and the orjson options of the quick checks."""

from __future__ import annotations

import orjson

from flowdata import canonical

_OPT = orjson.OPT_SORT_KEYS
_OPT_LINE = orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE

canonical_bytes = canonical.dumps
loads_canonical = canonical.loads_canonical
_NotJSON = canonical.NotJSONText
_NotCanonical = canonical.NotCanonical
