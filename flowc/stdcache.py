"""The parsed standard library, kept on disk and in the process.

The std modules are files shipped with the compiler, yet every check parsed them again: the
prelude always, and each module a program uses. Their parse results are kept in the user's cache
folder (`$XDG_CACHE_HOME/flow/std`, by default `~/.cache/flow/std`), one pickle per module, in a
file named by a digest of everything a parse depends on: the std sources and the grammar (by
content), the compiler's Python files (by size and time of change), lark's version and Python's.

A cached parse is used only for the very text it was made from: the file holds that text, and it
is compared whole with the text being checked (`std_read` may supply other std sources, such as a
history's recorded ones). A file that cannot be read, does not unpickle, or holds anything
unexpected is ignored, and replaced by a fresh parse. Nothing here changes what a check says: a
cached parse is equal, node for node, to the parse it stands for.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import threading
from pathlib import Path

from flowc.cachedir import cache_folder
from flowc.parse import Parsed

#: Changes whenever what a cache file holds changes shape.
FORMAT = 1

_HERE = Path(__file__).resolve().parent

_lock = threading.Lock()
_digest: str | None = None
#: Parses already read or made in this process, by (display name, text).
_memo: dict[tuple[str, str], Parsed] = {}


def lookup(display: str, source: str) -> Parsed | None:
    """The cached parse of the std module `display` (`std@v1/list.flow`) with text `source`."""
    found = _memo.get((display, source))
    if found is not None:
        return found
    path = _path(display, source)
    if path is None:
        return None
    try:
        with open(path, "rb") as handle:
            data = pickle.load(handle)
    except Exception:  # noqa: BLE001 - any unreadable or damaged file is a miss
        return None
    if not (isinstance(data, tuple) and len(data) == 5 and data[0] == FORMAT and data[1] == _compiler_digest()
            and data[2] == display and data[3] == source and isinstance(data[4], Parsed)):
        return None
    parsed = data[4]
    if parsed.file != display or parsed.source != source:
        return None
    _memo[(display, source)] = parsed
    return parsed


def store(display: str, source: str, parsed: Parsed) -> None:
    """Keep the parse of a std module for later checks; failing to write it is not an error."""
    _memo[(display, source)] = parsed
    path = _path(display, source)
    if path is None:
        return
    temporary = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        payload = pickle.dumps((FORMAT, _compiler_digest(), display, source, parsed), pickle.HIGHEST_PROTOCOL)
        with open(temporary, "wb") as handle:
            handle.write(payload)
        os.replace(temporary, path)  # atomic: a concurrent reader sees the old file or the new one
    except Exception:  # noqa: BLE001 - a cache that cannot be written is only a slower next check
        try:
            os.unlink(temporary)
        except OSError:
            pass
        return
    _forget_old_compilers(path)


def _path(display: str, source: str) -> str | None:
    """`std-v1-list.<compiler digest>.<text digest>.pickle` in the cache folder."""
    folder = cache_folder("std", writable=False)
    if folder is None or not _compiler_digest():
        return None
    name = display.removesuffix(".flow").replace("/", "-").replace("@", "-")
    text = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return os.path.join(folder, f"{name}.{_compiler_digest()}.{text}.pickle")


#: How many versions of the compiler may keep files side by side (a checkout and an installed
#: copy, say); the files of older ones are removed.
KEEP_COMPILERS = 4


def _forget_old_compilers(path: str) -> None:
    """Each change to the compiler's files makes new files for this module: keep those of the
    few compilers that wrote most recently, remove the rest."""
    folder, written = os.path.split(path)
    module = written.split(".")[0]
    newest: dict[str, float] = {}  # compiler digest -> when one of its files was last written
    files: dict[str, list[str]] = {}
    try:
        for entry in os.scandir(folder):
            parts = entry.name.split(".")
            if len(parts) == 4 and parts[0] == module and parts[3] == "pickle":
                when = entry.stat().st_mtime
                newest[parts[1]] = max(newest.get(parts[1], when), when)
                files.setdefault(parts[1], []).append(entry.path)
    except OSError:
        return
    for digest in sorted(newest, key=lambda d: (newest[d], d), reverse=True)[KEEP_COMPILERS:]:
        for stale in files[digest]:
            try:
                os.unlink(stale)
            except OSError:
                pass


def _compiler_digest() -> str:
    """A digest of every file a parse result depends on, computed once per process ("" when the
    files cannot all be read: then nothing is cached)."""
    global _digest
    if _digest is None:
        with _lock:
            if _digest is None:
                try:
                    _digest = _digest_of_files()
                except OSError:
                    _digest = ""
    return _digest


def _digest_of_files() -> str:
    digest = hashlib.sha256(f"flow-std-cache/{FORMAT} {sys.version}\n".encode())
    files: list[str] = []
    for folder, subfolders, names in os.walk(_HERE):
        subfolders[:] = [d for d in subfolders if d != "__pycache__" and not d.startswith(".")]
        base = os.path.relpath(folder, _HERE).replace(os.sep, "/")
        files.extend(f"{base}/{n}" for n in names if n.endswith((".py", ".lark", ".flow")))
    for name in sorted(files):
        path = _HERE / name
        if name.endswith(".py"):
            # The compiler's code, by size and time of change as Python's own bytecode cache does
            # (reading it all would cost more than the cache saves on a small program).
            status = path.stat()
            digest.update(f"{name} {status.st_size} {status.st_mtime_ns}\n".encode())
        else:
            data = path.read_bytes()  # the grammar and the std sources, by content
            digest.update(f"{name} {len(data)}\n".encode())
            digest.update(data)
    lark = _lark_version_file()
    digest.update(b"lark " + lark)
    return digest.hexdigest()[:20]


def _lark_version_file() -> bytes:
    # The parser may fall back to lark, so its version matters; reading the file that declares it
    # is much cheaper than importing lark.
    try:
        from importlib.util import find_spec

        spec = find_spec("lark")
        if spec is not None and spec.origin:
            return Path(spec.origin).read_bytes()
    except (ImportError, ValueError, OSError):
        pass
    return b"none"
