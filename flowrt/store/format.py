"""What a record is, for any store: the data version, the fact kinds and their value fields, the
forms of hashes and run ids, and the host records only a store writes (docs/trace.md)."""

from __future__ import annotations

import datetime
import re
from typing import Any

DATA_VERSION = "flow-data/1"
KINDS = ("Start", "Call", "Reply", "Choice", "Stop", "Checkpoint", "End")
# The fields of each kind that hold Flow values: the only fields the store may move to values/.
VALUE_FIELDS: dict[str, tuple[str, ...]] = {
    "Start": ("input",),
    "Call": ("arguments",),
    "Reply": ("outcome",),
    "Choice": (),
    "Stop": ("found",),
    "Checkpoint": ("arguments",),
    "End": ("outcome",),
}
_VALUE_REFS = {kind: tuple((f, f + "_ref") for f in fields) for kind, fields in VALUE_FIELDS.items()}
INLINE_LIMIT = 1024  # a value whose canonical JSON is longer than this many bytes goes to values/
_HASH_RE = re.compile(r"sha256:[0-9a-f]{64}\Z")
_RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_RESERVED = ("n", "kind", "prev", "hash")
_RESERVED_SET = frozenset(_RESERVED)
#: a `halted` decision with this reason was written by a worker that stopped (flowrt.worker)
WORKER_STOP = "worker-stop"
#: ... by a host whose child template ended under the run (flowrt/child_template.py)
TEMPLATE_LOST = "template"
#: ... by a host whose child serving the run beside others died (flowrt/lane_child.py)
SHARED_CHILD_LOST = "shared-child"
#: the halts a host made, not a person: any worker takes the run up again
HOST_HALTS = frozenset({WORKER_STOP, TEMPLATE_LOST, SHARED_CHILD_LOST})

STORE_RECORDS = frozenset({"hole", "truncated", "store", "durable", "times"})  # host records only the store writes
_ENDINGS = {"Completed": "completed", "Faulted": "faulted"}


def valid_run_id(run_id: object) -> bool:
    """A run id: 1 to 128 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit."""
    return isinstance(run_id, str) and _RUN_ID_RE.match(run_id) is not None


def _ending_of(outcome: Any) -> str | None:
    if isinstance(outcome, dict) and len(outcome) == 1:
        (key,) = outcome
        return _ENDINGS.get(key)
    return None


def rfc3339_ms(ms: int) -> str:
    """Unix milliseconds as RFC 3339 UTC, to the millisecond: `2026-12-01T14:20:41.123Z`."""
    moment = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

#: Durable facts have their times recorded at most this often by the appends themselves, and
#: always by `sync()`, which a host calls before it waits on anything (so a fact after which the
#: run waits has its time recorded at once): one `times` record per call cost several percent of
#: a recorded call without fsync (docs/impl.md).
TIMES_EVERY_MS = 50
