"""Where the compiler keeps what it can rebuild (parser tables, parsed std, generated programs):
`$XDG_CACHE_HOME/flow`, by default `~/.cache/flow`."""

from __future__ import annotations

import os


def cache_folder(*parts: str, writable: bool = True) -> str | None:
    """The folder `flow/<parts...>` in the user's cache, made if missing; None when it cannot be
    made or, with `writable`, written (a missing cache only makes the next run slower)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "flow", *parts)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    if writable and not os.access(folder, os.W_OK):
        return None
    return folder
