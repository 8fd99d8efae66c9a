"""The run directory's files by hash: values/<hex> (value fields over the inline limit) and
sources/<hex> (module sources), each written once, atomically, and checked against its name when
read (docs/trace.md sections 5 and 6)."""

from __future__ import annotations

import os
import threading
from typing import Any

from flowrt.store.canonical import loads_canonical
from flowrt.store.chain import _sha256_hex
from flowrt.store.durable import _fsync_dir, _read_file, _strerror, _write_all
from flowrt.store.errors import StorageError
from flowrt.store.format import _HASH_RE
from flowrt.store.layout import SOURCES, VALUES


def write_blob_file(directory: str, hex_: str, data: bytes, fact_n: int | None, fsync: bool) -> None:
    """Write `data` as `directory/hex_`, through a temporary file renamed into place."""
    tmp = os.path.join(directory, f".tmp-{hex_}-{os.getpid()}")
    fd = None
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        _write_all(fd, data)
        if fsync:
            os.fsync(fd)
        os.close(fd)
        fd = None
        os.replace(tmp, os.path.join(directory, hex_))
    except BaseException as problem:
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(problem, OSError):
            component = f"{os.path.basename(directory)}/{hex_}"
            raise StorageError(f"cannot write: {_strerror(problem)}", fact_n,
                               component=component) from problem
        raise


def write_values(run_path: str, blobs: dict[str, bytes], known: set[str], fact_n: int, fsync: bool) -> None:
    """Store each value of `blobs` (hex -> canonical JSON) not already in values/ intact; `known`
    is the hex of the files written or checked before, and grows."""
    wrote = False
    directory = os.path.join(run_path, VALUES)
    for hex_, data in blobs.items():
        if hex_ in known:
            continue
        path = os.path.join(directory, hex_)
        try:
            if _sha256_hex(_read_file(path)) == hex_:
                known.add(hex_)
                continue
        except OSError:
            pass
        write_blob_file(directory, hex_, data, fact_n, fsync)
        known.add(hex_)
        wrote = True
    if wrote and fsync:
        try:
            _fsync_dir(directory)
        except OSError as problem:
            raise StorageError(f"cannot sync values/: {_strerror(problem)}", fact_n,
                               component=VALUES) from problem


class SourceCopies:
    """Where this process last stored each module source in a run directory, so that the next
    run of the same program in the same runs directory gets that file as a hard link instead of
    a copy of its own: a link writes no data, so with fsync it needs no sync of its own (the
    run directory's sync, which `RunStore.create` makes anyway, makes the new name durable). A
    one-step run made five syncs before its Start, two of them of a source's data (docs/impl.md,
    session 17).

    A copy is linked only when its bytes still match their hash, and with fsync only a copy that
    was written with fsync. Nothing ever changes a stored source in place (a source is written
    to a temporary file and renamed), so runs that share one are as if each held its own; a
    link that cannot be made (a file system without them, a deleted run) falls back to a copy.
    Sharing has one cost: damage to the shared file's blocks is damage to each run's source
    (found by its hash when read, a storage failure as for one run's)."""

    LIMIT = 256  # sources remembered; the oldest is forgotten first

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (runs directory, hex) -> (path, written with fsync)
        self._copies: dict[tuple[str, str], tuple[str, bool]] = {}

    def link(self, root: str, hex_: str, path: str, fsync: bool) -> bool:
        """Make `path` (in a run of `root`) a link to a stored copy of source `hex_`; False when
        there is none to use."""
        key = (root, hex_)
        with self._lock:
            known = self._copies.get(key)
        if known is None or (fsync and not known[1]):
            return False
        try:
            if _sha256_hex(_read_file(known[0])) != hex_:
                raise OSError("changed")
            os.link(known[0], path)
        except FileExistsError:
            return False  # (something else stands there: the caller writes over it)
        except OSError:
            with self._lock:
                if self._copies.get(key) == known:
                    del self._copies[key]
            return False
        return True

    def note(self, root: str, hex_: str, path: str, fsync: bool) -> None:
        """`path` (in a run of `root`) holds source `hex_` now, written with fsync or not."""
        key = (root, hex_)
        with self._lock:
            known = self._copies.pop(key, None)
            if known is not None and known[1] and not fsync:
                self._copies[key] = known  # (keep the durable one)
                return
            self._copies[key] = (path, fsync)
            while len(self._copies) > self.LIMIT:
                del self._copies[next(iter(self._copies))]


SOURCE_COPIES = SourceCopies()


def put_source(run_path: str, text: str, *, fsync: bool, sync_dir: bool) -> str:
    """Store a module source once, by hash; returns `"sha256:<hex>"`. A source this process
    stored for an earlier run is linked rather than written again (`SourceCopies`)."""
    if not isinstance(text, str):
        raise TypeError("a source is text")
    data = text.encode("utf-8")
    hex_ = _sha256_hex(data)
    directory = os.path.join(run_path, SOURCES)
    path = os.path.join(directory, hex_)
    try:
        if _sha256_hex(_read_file(path)) == hex_:
            return "sha256:" + hex_
    except OSError:
        pass
    root = os.path.dirname(os.path.abspath(run_path))
    linked = SOURCE_COPIES.link(root, hex_, path, fsync)
    if not linked:
        write_blob_file(directory, hex_, data, None, fsync)
    if sync_dir and fsync:
        try:
            _fsync_dir(directory)
        except OSError as problem:
            raise StorageError(f"cannot sync sources/: {_strerror(problem)}",
                               component=SOURCES) from problem
    if not linked:
        SOURCE_COPIES.note(root, hex_, path, fsync)
    return "sha256:" + hex_


def read_value(run_path: str, ref: str, field: str, n: int) -> Any:
    """The value `ref` (`"sha256:<hex>"`) of `field` in fact `n`, checked against its hash."""
    hex_ = ref[len("sha256:"):]
    component = f"{VALUES}/{hex_}"
    try:
        data = _read_file(os.path.join(run_path, VALUES, hex_))
    except FileNotFoundError:
        raise StorageError(f"the value of {field} is missing and is not a recorded hole", n,
                           component=component) from None
    except OSError as problem:
        raise StorageError(f"cannot read the value of {field}: {_strerror(problem)}", n,
                           component=component) from problem
    if _sha256_hex(data) != hex_:
        raise StorageError(f"the value of {field} does not match its hash", n, component=component)
    try:
        return loads_canonical(data)
    except ValueError:
        raise StorageError(f"the value of {field} is not canonical JSON", n,
                           component=component) from None


def read_source(run_path: str, hash: str) -> str:
    """A stored module source, checked against its hash."""
    if not isinstance(hash, str) or not _HASH_RE.match(hash):
        raise ValueError(f"not a source hash: {hash!r}")
    hex_ = hash[len("sha256:"):]
    component = f"{SOURCES}/{hex_}"
    try:
        data = _read_file(os.path.join(run_path, SOURCES, hex_))
    except FileNotFoundError:
        raise StorageError("the source is missing", component=component) from None
    except OSError as problem:
        raise StorageError(f"cannot read the source: {_strerror(problem)}",
                           component=component) from problem
    if _sha256_hex(data) != hex_:
        raise StorageError("the source does not match its hash", component=component)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:  # pragma: no cover - the hash matched text we encoded
        raise StorageError("the source is not UTF-8", component=component) from None
