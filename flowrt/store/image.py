"""A run directory's record as a `RunImage` and back (`DirectoryStore.read_image` and
`write_image`, for `flow export`): the bytes of its files, which any store keeps unchanged."""

from __future__ import annotations

import os
import re
import shutil

from flowrt.store.canonical import canonical_bytes
from flowrt.store.chain import _sha256_hex
from flowrt.store.durable import _fsync_dir, _read_file, _strerror, _write_durably
from flowrt.store.errors import RunExists, StorageError
from flowrt.store.host_records import read_host
from flowrt.store.interface import RunImage
from flowrt.store.layout import ANCHOR, ARCHIVE, HISTORY, HOST, SOURCES, VALUES

_HEX = re.compile(r"[0-9a-f]{64}\Z")
_ARCHIVED = re.compile(r"facts-(\d+)-(\d+)\.jsonl\Z")


def _blobs(directory: str) -> dict[str, bytes]:
    """The files of values/ or sources/ that hold what their names say (others are left)."""
    found: dict[str, bytes] = {}
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return found
    for name in names:
        if _HEX.match(name):
            data = _read_file(os.path.join(directory, name))
            if _sha256_hex(data) == name:
                found[name] = data
    return found


def read_directory_image(store, run_id: str) -> RunImage:
    """The image of run `run_id` of a DirectoryStore, verified first (facts, host records,
    values and sources, as `open` and `verify_files` check them)."""
    with store.open(run_id, for_append=False) as run:
        run.verify_files()
        facts = [canonical_bytes(fact) for fact in run.facts()]  # verified canonical: the same bytes
        path = run.path
    try:
        host_data, host = read_host(path)
        host_lines = host_data[:host.valid_len].split(b"\n")[:-1]
        archived: list[bytes] = []
        archive_dir = os.path.join(path, ARCHIVE)
        if os.path.isdir(archive_dir):
            files = sorted((int(m.group(1)), name) for name in os.listdir(archive_dir)
                           if (m := _ARCHIVED.match(name)))
            for _, name in files:
                archived += _read_file(os.path.join(archive_dir, name)).split(b"\n")[:-1]
        anchor_path = os.path.join(path, ANCHOR)
        anchor = _read_file(anchor_path).rstrip(b"\n") if os.path.exists(anchor_path) else None
        values = _blobs(os.path.join(path, VALUES))
        sources = _blobs(os.path.join(path, SOURCES))
    except OSError as problem:
        raise StorageError(f"cannot read the run: {_strerror(problem)}", component=path) from problem
    return RunImage(facts, archived, anchor, host_lines, values, sources)


def write_directory_image(store, run_id: str, image: RunImage) -> None:
    """Write `image` as run `run_id` under a DirectoryStore's root, each file durable, then
    verify it by opening it; a copy that does not verify is removed."""
    store._check_run_id(run_id)
    root = store.root
    path = os.path.join(root, run_id)
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        raise RunExists(f"run {run_id} already exists in {root}") from None
    except OSError as problem:
        raise StorageError(f"cannot make the run directory: {_strerror(problem)}", component=path) from problem
    try:
        for sub, blobs in ((VALUES, image.values), (SOURCES, image.sources)):
            os.mkdir(os.path.join(path, sub), 0o700)
            for hex_, data in blobs.items():
                _write_durably(os.path.join(path, sub, hex_), data)
            _fsync_dir(os.path.join(path, sub))
        if image.archived or image.anchor is not None:
            os.mkdir(os.path.join(path, ARCHIVE), 0o700)
            if image.archived:
                first, last = (_number(image.archived[0]), _number(image.archived[-1]))
                _write_durably(os.path.join(path, ARCHIVE, f"facts-{first}-{last}.jsonl"),
                               b"".join(line + b"\n" for line in image.archived))
            if image.anchor is not None:
                _write_durably(os.path.join(path, ANCHOR), image.anchor + b"\n")
            _fsync_dir(os.path.join(path, ARCHIVE))
        if image.host:
            _write_durably(os.path.join(path, HOST), b"".join(line + b"\n" for line in image.host))
        _write_durably(os.path.join(path, HISTORY), b"".join(line + b"\n" for line in image.facts))
        _fsync_dir(path)
        _fsync_dir(root)
        with store.open(run_id, for_append=False) as run:
            run.verify_files()
    except BaseException as problem:
        shutil.rmtree(path, ignore_errors=True)
        if isinstance(problem, OSError):
            raise StorageError(f"cannot write the run: {_strerror(problem)}", component=path) from problem
        raise


def _number(line: bytes) -> int:
    import orjson

    return orjson.loads(line)["n"]
