"""The history store: the store interface (`interface`) and its first implementation, the run
directory (`directory`), with the parts any store shares (`chain`, `canonical`, `format`,
`errors`, `deferred`) and the run directory's own (`reading`, `durable`, `blobs`, `host_records`,
`archive`, `discovery`, `layout`, `probe`, `image`); and the PostgreSQL store (`postgres`, with
`postgres_schema`, `postgres_lease`, `postgres_read`, `postgres_verify`, `postgres_archive`,
`postgres_scan`, `postgres_image`; imported only when a `postgresql://` location is opened). docs/trace.md is the
format; its section 11 is this API, section 14 the PostgreSQL layout.

Errors:
- `StorageError(message, fact_n)`: the record is damaged or could not be written (CLI exit 5).
- `Hole(fact_n, field, hash)`: a value that was made a hole; its hash is all that is left.
- `RunNotFound`, `RunExists`, `RunBusy`: the caller named a run that is absent, present, or
  already open for appending in another process, or under another host's lease (refusals, CLI
  exit 2).
- `RedactRefused`: redaction asked for a value that is stored inline (see `RunLog.redact`).
"""

from flowrt.store.canonical import canonical_bytes, loads_canonical
from flowrt.store.chain import fact_hash, fact_position
from flowrt.store.directory import DirectoryStore, RunStore
from flowrt.store.discovery import scan_runs
from flowrt.store.errors import Hole, RedactRefused, RunBusy, RunExists, RunNotFound, StorageError, TornTail
from flowrt.store.format import DATA_VERSION, INLINE_LIMIT, KINDS, STORE_RECORDS, VALUE_FIELDS, valid_run_id
from flowrt.store.interface import RunLog, Store
from flowrt.store.locate import is_database_url, open_store
from flowrt.store.layout import HISTORY, HOST

__all__ = [
    "DATA_VERSION",
    "KINDS",
    "VALUE_FIELDS",
    "INLINE_LIMIT",
    "STORE_RECORDS",
    "HISTORY",
    "HOST",
    "StorageError",
    "Hole",
    "RunNotFound",
    "RunExists",
    "RunBusy",
    "RedactRefused",
    "TornTail",
    "Store",
    "RunLog",
    "DirectoryStore",
    "RunStore",
    "canonical_bytes",
    "loads_canonical",
    "fact_hash",
    "fact_position",
    "valid_run_id",
    "scan_runs",
    "open_store",
    "is_database_url",
]
