"""Form a program: read the root module, follow every `use`, parse each module once.

`load(root, read)` reads through the caller's `read(path) -> str` (the CLI passes a file reader;
tests pass a dict). Module identity is the path from the program root's directory without `.flow`
(`planner`, `sub/util`), `std@v1/<name>` for std, and `<repo>@<version>/<path>` for a repository
module resolved through `[pins]` in `flow.toml`.

The program root is the directory holding the root module; a repository's modules stay in its
pinned directory. A relative `use` that leaves its root or repository is refused from its text
alone. When the files are real (`disk`, by default `flowc.disk.DISK`), each module is also
checked with its links followed before it is read, and each pinned directory is verified to hold
its pinned commit, the first time a module of it is needed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from pathlib import Path

from flowc import stdcache
from flowc.disk import DISK, DiskChecks
from flowc import syntax as S
from flowc.diagnostics import Diagnostic, Location
from flowc.diagnostics import M
from flowc.parse import Parsed, parse
from flowc.records import record

STD_VERSION = "v1"
STD_DIR = Path(__file__).with_name("std") / STD_VERSION
PRELUDE = f"std@{STD_VERSION}/prelude"

Reader = Callable[[str], str]


@record
class Import:
    alias: str
    identity: str
    span: S.Span


@record
class LoadedModule:
    identity: str
    file: str  # display path
    source: str
    parsed: Parsed
    imports: tuple[Import, ...]
    #: names of `use`s that failed (already reported): references through them stay quiet
    failed_aliases: frozenset[str] = frozenset()

    @property
    def is_std(self) -> bool:
        return self.identity.startswith("std@")


@record
class Pin:
    repo: str  # "acme@1.2"
    path: str
    commit: str | None


@record
class Program:
    root: str  # identity of the root module
    modules: tuple[LoadedModule, ...]  # sorted by identity
    pins: tuple[Pin, ...]
    diagnostics: tuple[Diagnostic, ...]  # loading diagnostics (parse diagnostics stay in modules)

    def module(self, identity: str) -> LoadedModule | None:
        for m in self.modules:
            if m.identity == identity:
                return m
        return None


def std_reader(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def load(root_file: str, read: Reader, *, std_read: Reader = std_reader,
         parse_cache: dict[tuple[str, str], Parsed] | None = None,
         disk: DiskChecks | None = DISK) -> Program:
    """Form the program rooted at `root_file`. `parse_cache` lets a caller that checks several
    programs sharing modules parse each module text once. `disk=None` when `read` reads no real
    files (there are no links to follow and no pinned directories to verify)."""
    loader = _Loader(root_file, read, std_read, parse_cache if parse_cache is not None else {}, disk)
    return loader.run()


class _Loader:
    def __init__(self, root_file: str, read: Reader, std_read: Reader,
                 parse_cache: dict[tuple[str, str], Parsed], disk: DiskChecks | None) -> None:
        self.parse_cache = parse_cache
        self.disk = disk
        self.root_file = root_file
        self.root_dir = posixpath.dirname(root_file.replace("\\", "/"))
        #: pins whose directory was verified (None) or refused (the diagnostic's message and help)
        self.verified: dict[str, tuple[str, str | None] | None] = {}
        self.read = read
        self.std_read = std_read
        self.diagnostics: list[Diagnostic] = []
        self.modules: dict[str, LoadedModule] = {}
        self.failed: set[str] = set()
        self.pins = self._read_pins()

    def run(self) -> Program:
        root_identity = _strip_flow(posixpath.basename(self.root_file))
        self._load(root_identity, self.root_file, None, None)
        self._load(PRELUDE, str(STD_DIR / "prelude.flow"), None, None, std=True)
        self._report_cycles()
        modules = tuple(sorted(self.modules.values(), key=lambda m: m.identity))
        return Program(root_identity, modules, tuple(sorted(self.pins.values(), key=lambda p: p.repo)),
                       tuple(self.diagnostics))

    # -- reading

    def _read_pins(self) -> dict[str, Pin]:
        manifest = posixpath.join(self.root_dir, "flow.toml") if self.root_dir else "flow.toml"
        if self.disk is not None and self.disk.confine(manifest, self.root_dir or ".") is not None:
            self.diagnostics.append(M.module_outside_root_manifest().at(Location(manifest, 1, 1, 1, 2)))
            return {}
        try:
            text = self.read(manifest)
        except (OSError, UnicodeDecodeError):
            return {}
        import tomllib  # only a program with a flow.toml needs it, and every import is start-up time

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as problem:
            from flowc.diagnostics.places import toml_error_location

            where = toml_error_location(manifest, problem, text) or Location(manifest, 1, 1, 1, 2)
            self.diagnostics.append(M.file_unreadable_manifest_toml(problem=problem).at(where))
            return {}
        pins: dict[str, Pin] = {}
        table = data.get("pins", {})
        if isinstance(table, dict):
            for repo, spec in sorted(table.items()):
                if isinstance(spec, dict) and isinstance(spec.get("path"), str):
                    base = posixpath.normpath(posixpath.join(self.root_dir, spec["path"]))
                    commit = spec.get("commit") if isinstance(spec.get("commit"), str) else None
                    pins[repo] = Pin(repo, base, commit)
        return pins

    def _load(self, identity: str, path: str, via: Location | None, importer: str | None,
              *, std: bool = False, boundary: str | None = None) -> bool:
        if identity in self.modules:
            return True
        if identity in self.failed:
            return False
        display = f"{identity}.flow" if std else path
        if boundary is not None and self.disk is not None:
            problem = self.disk.confine(path, boundary)
            if problem is not None:
                self.failed.add(identity)
                repo = identity.split("/", 1)[0] if _is_repo(identity) else None
                if problem == "leaves":
                    self.diagnostics.append(M.module_outside_root_link(display=display, repo=repo).at(
                        via or Location(display, 1, 1, 1, 2)))
                else:
                    self.diagnostics.append(M.file_unreadable_not_regular(display=display).at(via or Location(display, 1, 1, 1, 2)))
                return False
        try:
            source = (self.std_read if std else self.read)(path)
        except UnicodeDecodeError as problem:
            self.failed.add(identity)
            self.diagnostics.append(M.file_not_utf8(display=display,
                                                    start=problem.start).at(via or Location(display, 1, 1, 1, 2)))
            return False
        except ValueError as problem:  # e.g. a NUL in the path: no file can have that name
            self.failed.add(identity)
            self.diagnostics.append(M.file_unreadable(display=display,
                                                      problem=problem).at(via or Location(display, 1, 1, 1, 2)))
            return False
        except OSError as problem:
            self.failed.add(identity)
            reason = problem.strerror or type(problem).__name__
            if via is not None and isinstance(problem, FileNotFoundError):
                self.diagnostics.append(M.module_not_found(identity=identity, display=display).at(via))
            else:
                self.diagnostics.append(M.file_unreadable(display=display,
                                                          problem=reason).at(via or Location(display, 1, 1, 1, 2)))
            return False
        parsed = self.parse_cache.get((display, source))
        if parsed is None:
            parsed = stdcache.lookup(display, source) if std else None
            if parsed is None:
                parsed = parse(source, display)
                if std:
                    stdcache.store(display, source, parsed)
            self.parse_cache[(display, source)] = parsed
        failed: set[str] = set()
        imports = self._resolve_uses(identity, path, display, parsed, std, failed)
        self.modules[identity] = LoadedModule(identity, display, source, parsed, tuple(imports), frozenset(failed))
        for imp in imports:
            self._load_import(imp, display)
        return True

    def _resolve_uses(self, identity: str, path: str, display: str, parsed: Parsed, std: bool,
                      failed: set[str]) -> list[Import]:
        imports: list[Import] = []
        bound: dict[str, S.Use] = {}
        for item in parsed.module.items:
            if not isinstance(item, S.Use):
                continue
            location = _loc(display, item.span)
            target = self._target_identity(item.path, identity, location)
            if target is None:
                failed.add(item.alias or item.path.rstrip("/").rsplit("/", 1)[-1])
                continue
            alias = item.alias or target.rsplit("/", 1)[-1]
            if alias in bound:
                self.diagnostics.append(M.import_duplicate(alias=alias, path=item.path).at(location))
                continue
            bound[alias] = item
            imports.append(Import(alias, target, item.span))
        return imports

    def _target_identity(self, text: str, importer: str, location: Location) -> str | None:
        if "\x00" in text:
            self.diagnostics.append(M.module_not_found_nul().at(location))
            return None
        if text.startswith("./") or text.startswith("../"):
            # Relative to the importer's directory, inside its own tree: the program root, or the
            # repository (std modules are one tree too).
            in_tree = _is_repo(importer) or importer.startswith("std@")
            head, _, inner = importer.partition("/") if in_tree else ("", "", importer)
            joined = posixpath.normpath(posixpath.join(posixpath.dirname(inner), text))
            if text.endswith("/") or posixpath.basename(joined) in (".", ".."):
                self.diagnostics.append(M.module_not_found_directory(text=text).at(location))
                return None
            if not _stays_inside(joined):
                self.diagnostics.append(M.module_outside_root_path(text=text, repo=head or None).at(location))
                return None
            if "@" in joined.split("/", 1)[0]:
                # It would read as a repository module: a directory of the program may not be named so.
                self.diagnostics.append(M.module_not_found_at_sign(text=text).at(location))
                return None
            return f"{head}/{joined}" if head else joined
        if "@" in text.split("/", 1)[0]:
            head, _, rest = text.partition("/")
            inner = posixpath.normpath(rest) if rest else ""
            if not _stays_inside(inner) or rest != inner:
                leaves = rest and not _stays_inside(inner)
                said = M.module_outside_root_repo_path if leaves else M.module_not_found_repo_path
                self.diagnostics.append(said(text=text, head=head).at(location))
                return None
            name, _, version = head.partition("@")
            if name == "std":
                if version != STD_VERSION:
                    self.diagnostics.append(M.std_version_unknown(version=version,
                                                                  std_version=STD_VERSION).at(location))
                    return None
                if not rest or not (STD_DIR / f"{rest}.flow").is_file() or rest == "prelude":
                    known = sorted(p.stem for p in STD_DIR.glob("*.flow") if p.stem != "prelude")
                    from flowc.diagnostics.suggest import did_you_mean
                    guess = did_you_mean(rest, known)
                    self.diagnostics.append(M.std_module_unknown(std_version=STD_VERSION, rest=rest, guess=guess,
                                                                 known=known).at(location))
                    return None
                return f"std@{STD_VERSION}/{rest}"
            if head not in self.pins:
                self.diagnostics.append(M.repo_unpinned(head=head).at(location))
                return None
            return f"{head}/{rest}"
        self.diagnostics.append(M.module_not_found_path_syntax(text=text).at(location))
        return None

    def _load_import(self, imp: Import, importer_display: str) -> None:
        location = _loc(importer_display, imp.span)
        identity = imp.identity
        if identity.startswith("std@"):
            self._load(identity, str(STD_DIR / f"{identity.split('/', 1)[1]}.flow"), location, None, std=True)
            return
        head = identity.split("/", 1)[0]
        if "@" in head and head in self.pins:
            pin = self.pins[head]
            if not self._pin_verified(pin, location):
                self.failed.add(identity)
                return
            path = posixpath.join(pin.path, identity.split("/", 1)[1] + ".flow")
            boundary = pin.path
        else:
            path = posixpath.join(self.root_dir, identity + ".flow") if self.root_dir else identity + ".flow"
            boundary = self.root_dir or "."
        self._load(identity, path, location, None, boundary=boundary)

    def _pin_verified(self, pin: Pin, location: Location) -> bool:
        """Whether the pinned directory holds the pinned commit; reported once per pin, at the
        first `use` that needs it."""
        if self.disk is None:
            return True
        if pin.repo not in self.verified:
            self.verified[pin.repo] = problem = self.disk.verify_pin(pin.path, pin.commit)
            if problem is not None:
                message, actual = problem
                self.diagnostics.append(M.pin_unverified(repo=pin.repo, message=message, actual=actual).at(location))
        return self.verified[pin.repo] is None

    # -- cycles

    def _report_cycles(self) -> None:
        graph = {m.identity: [i.identity for i in m.imports] for m in self.modules.values()}
        state: dict[str, int] = {}
        stack: list[str] = []
        reported: set[frozenset[str]] = set()

        def visit(node: str) -> None:
            # Iterative depth-first search; a module graph can be deep.
            work = [(node, iter(sorted(graph.get(node, ()))))]
            state[node] = 1
            stack.append(node)
            while work:
                current, children = work[-1]
                advanced = False
                for child in children:
                    if state.get(child) == 1:
                        cycle = stack[stack.index(child):]
                        key = frozenset(cycle)
                        if key not in reported:
                            reported.add(key)
                            self._cycle_diagnostic(cycle + [child])
                    elif child not in state and child in graph:
                        state[child] = 1
                        stack.append(child)
                        work.append((child, iter(sorted(graph.get(child, ())))))
                        advanced = True
                        break
                if not advanced:
                    work.pop()
                    stack.pop()
                    state[current] = 2

        for node in sorted(graph):
            if node not in state:
                visit(node)

    def _cycle_diagnostic(self, cycle: list[str]) -> None:
        first, second = cycle[0], cycle[1]
        module = self.modules[first]
        use = next(i for i in module.imports if i.identity == second)
        self.diagnostics.append(M.import_cycle(cycle=cycle).at(_loc(module.file, use.span)))


def _is_repo(identity: str) -> bool:
    head = identity.split("/", 1)[0]
    return "@" in head and not head.startswith("std@")


def _stays_inside(relative: str) -> bool:
    """Whether a normalized relative path names something below its directory."""
    return relative not in ("", ".", "..") and not relative.startswith(("../", "/"))


def _strip_flow(name: str) -> str:
    return name[:-5] if name.endswith(".flow") else name


def _loc(file: str, span: S.Span) -> Location:
    return Location(file, span.line, span.column, span.end_line, span.end_column)
