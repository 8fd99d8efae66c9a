"""The run directory's file names (docs/trace.md section 1)."""

HISTORY = "history.jsonl"
ARCHIVE = "archive"
ANCHOR = "archive/anchor.json"
HOST_MARK = "archive/host-mark.json"
HOST = "host.jsonl"
VALUES = "values"
SOURCES = "sources"
