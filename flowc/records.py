"""Record classes: what `@dataclass(slots=True)` makes, for a fraction of the import cost.

`flow check` on a small file spent about a fifth of its start-up creating the front end's eighty
dataclasses: `dataclasses` compiles five or six methods per class and asks `inspect` for a
signature to write a docstring. `record` compiles only `__init__`; equality, hashing, `repr`, the
frozen guard and pickling are shared closures over each class's field names. The classes behave as
the dataclasses they replace (same `__init__` signature, equality, hash, `repr`, frozen errors,
`__match_args__`) and remain dataclasses to anything that asks: `dataclasses.fields`, `replace`,
`asdict` and `__dataclass_fields__` work on them. One difference nothing relies on: a class
without a docstring keeps none (dataclasses make one from the signature).

Supported: fields declared by annotation, with an optional default value or
`dataclasses.field(default=...)` / `field(default_factory=...)`; `__post_init__`; methods,
properties and class methods in the body (a method the body defines is never replaced).
"""

from __future__ import annotations

import dataclasses
import sys
from operator import attrgetter
from reprlib import recursive_repr
from types import CodeType, FunctionType

#: The interpreters these records are known to work on, [first, last]: they use two private
#: names of `dataclasses` (below), and rename the variables of compiled templates
#: (`CodeType.replace`), which assumes code refers to its variables by position (true of 3.11
#: to 3.13, checked on each). Extend it only after tests/test_records.py passes there.
SUPPORTED_PYTHON = ((3, 11), (3, 13))


class UnsupportedInterpreter(ImportError):
    """flowc's records rely on an interpreter's private parts; this one is not known to have them."""


def check_interpreter(version=sys.version_info, implementation: str = sys.implementation.name,
                      module=dataclasses) -> None:
    """Refuse, at import, an interpreter the private names are not known on (rather than making
    classes that are subtly not what `dataclasses` expects)."""
    first, last = SUPPORTED_PYTHON
    running = f"{implementation} {version[0]}.{version[1]}"
    supported = f"CPython {first[0]}.{first[1]} to {last[0]}.{last[1]}"
    if implementation != "cpython" or not first <= tuple(version[:2]) <= last:
        raise UnsupportedInterpreter(f"flowc runs on {supported}; this is {running} "
                                     "(flowc/records.py: SUPPORTED_PYTHON)")
    missing = [name for name in ("_FIELD", "_HAS_DEFAULT_FACTORY") if not hasattr(module, name)]
    if missing:
        raise UnsupportedInterpreter(f"flowc needs dataclasses.{', dataclasses.'.join(missing)}, "
                                     f"which {running} does not have (flowc/records.py)")


check_interpreter()

_MISSING = dataclasses.MISSING
#: `dataclasses.fields()`, `replace()` and `asdict()` keep only the Field objects marked with this
#: private constant: without it a record would be a dataclass with no fields to them.
_FIELD = dataclasses._FIELD  # type: ignore[attr-defined]
#: The default of a parameter whose field has a default factory (the one dataclasses use, so that
#: signatures compare equal).
_HAS_FACTORY = dataclasses._HAS_DEFAULT_FACTORY  # type: ignore[attr-defined]


def record(cls=None, /, *, frozen: bool = True):
    """Make `cls` a slotted record class; `frozen` (the default) forbids assigning fields."""

    def wrap(cls):
        return _make(cls, frozen)

    return wrap if cls is None else wrap(cls)


def _make(cls, frozen: bool):
    annotations = cls.__dict__.get("__annotations__", {})
    names = tuple(annotations)
    body = dict(cls.__dict__)
    defaults: dict[str, object] = {}
    factories: dict[str, object] = {}
    for name in names:
        if name not in body:
            continue
        value = body.pop(name)  # a default in the class body would clash with the slot
        if isinstance(value, dataclasses.Field):
            if value.default_factory is not _MISSING:
                factories[name] = value.default_factory
            elif value.default is not _MISSING:
                defaults[name] = value.default
        else:
            defaults[name] = value
    seen_default = False
    for name in names:
        if name in defaults or name in factories:
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument {name!r} follows default argument")
    body.pop("__dict__", None)
    body.pop("__weakref__", None)
    body["__slots__"] = names
    body.setdefault("__match_args__", names)
    fields = {}
    for name in names:
        f = dataclasses.field(default=defaults.get(name, _MISSING), default_factory=factories.get(name, _MISSING))
        f.name = name
        f.type = annotations[name]
        f._field_type = _FIELD  # type: ignore[attr-defined]
        f.kw_only = False  # type: ignore[assignment]
        fields[name] = f
    body["__dataclass_fields__"] = fields

    key = _key(names)
    _set_default(body, "__repr__", _repr(names))
    _set_default(body, "__eq__", _eq(key))
    if frozen:
        if "__setattr__" in body or "__delattr__" in body:
            raise TypeError(f"cannot overwrite attribute __setattr__ or __delattr__ in class {cls.__name__}")
        body["__setattr__"] = _frozen_setattr
        body["__delattr__"] = _frozen_delattr
        if body.get("__hash__") is None:
            body["__hash__"] = _hash(key)
        _set_default(body, "__reduce__", _reduce(key))
    elif "__hash__" not in body:
        body["__hash__"] = None  # mutable and compared by value: unhashable, as a dataclass is
    new = type(cls)(cls.__name__, cls.__bases__, body)
    new.__init__ = _init(new, names, defaults, factories, frozen, "__post_init__" in body)
    return new


def maker(cls):
    """A function that makes an instance of the record class `cls` from its fields, as calling
    the class does (same parameters and defaults), at about half the cost.

    A frozen record's `__init__` can only fill its slots through their descriptors' `__set__`,
    a slow call each. The maker makes the instance as a twin class without the frozen guard (same
    slots, so the same layout), fills the slots by plain assignment, then gives the instance its
    class. For the hot paths that make many records (the tree builder makes one or two at every
    reduction); a class with `__post_init__` or a default factory has none."""
    names = tuple(cls.__dataclass_fields__)
    fields = cls.__dataclass_fields__.values()
    if hasattr(cls, "__post_init__") or any(f.default_factory is not _MISSING for f in fields) \
            or "_made" in names:
        raise TypeError(f"{cls.__name__} has no maker")
    count = len(names)
    template = _MAKER_TEMPLATES.get(count)
    if template is None:
        body = "".join(f"    _made.a{i} = a{i}\n" for i in range(count))
        namespace: dict[str, object] = {}
        exec(f"def make({', '.join(f'a{i}' for i in range(count))}):\n    _made = _new(_twin)\n{body}"
             "    _made.__class__ = _cls\n    return _made\n", namespace)
        template = _MAKER_TEMPLATES[count] = namespace["make"].__code__  # type: ignore[attr-defined]
    rename = {f"a{i}": name for i, name in enumerate(names)}
    code = template.replace(co_varnames=(*names, "_made"),
                            co_names=tuple(rename.get(name, name) for name in template.co_names))
    twin = type(cls.__name__, (cls,), {"__slots__": (), "__setattr__": object.__setattr__,
                                       "__delattr__": object.__delattr__, "__module__": cls.__module__})
    given = tuple(f.default for f in fields if f.default is not _MISSING)
    make = FunctionType(code, {"_new": object.__new__, "_twin": twin, "_cls": cls}, "make", given or None)
    make.__qualname__ = f"{cls.__qualname__}.make"
    return make


#: Maker code for each number of fields, with parameters and attributes `a0`, `a1`, ...
_MAKER_TEMPLATES: dict[int, CodeType] = {}


def _set_default(body: dict, name: str, value) -> None:
    if name not in body:
        body[name] = value


def _key(names: tuple[str, ...]):
    """A function from a record to the tuple of its field values (what dataclasses compare)."""
    if len(names) >= 2:
        return attrgetter(*names)
    if len(names) == 1:
        get = attrgetter(names[0])
        return lambda self: (get(self),)
    return lambda self: ()


def _repr(names: tuple[str, ...]):
    getters = tuple((f"{name}=", attrgetter(name)) for name in names)

    @recursive_repr()
    def __repr__(self) -> str:
        return f"{self.__class__.__qualname__}(" + ", ".join(label + repr(get(self)) for label, get in getters) + ")"

    return __repr__


def _eq(key):
    # A record is equal to itself without comparing its fields (the checker compares shared type
    # values often); a dataclass's field tuples would compare equal item by item all the same.
    def __eq__(self, other):
        if other is self:
            return True
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented

    return __eq__


def _hash(key):
    def __hash__(self) -> int:
        return hash(key(self))

    return __hash__


def _reduce(key):
    # Rebuilt through `__init__` (a frozen record cannot be filled in after `__new__`).
    def __reduce__(self):
        return (self.__class__, key(self))

    return __reduce__


def _frozen_setattr(self, name, value):
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self, name):
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _init(cls, names, defaults, factories, frozen: bool, post_init: bool):
    if factories or post_init:
        init = _compiled_init(cls, names, defaults, factories, frozen, post_init)
    else:
        init = _init_from_template(cls, names, defaults, frozen)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = {**{name: cls.__dataclass_fields__[name].type for name in names}, "return": None}
    return init


#: `__init__` code for each (number of fields, frozen), with parameters `a0`, `a1`, ...
_TEMPLATES: dict[tuple[int, bool], CodeType] = {}


def _init_from_template(cls, names: tuple[str, ...], defaults: dict, frozen: bool):
    """`__init__` without compiling: compiling was most of the time a record took to make, so the
    code is compiled once per number of fields and given each class's field names. Compiling each
    class's own took `flow check` 5% more instructions at start-up, and compiling each maker 4.5%
    more (docs/impl.md, "Speed machinery")."""
    key = (len(names), frozen)
    template = _TEMPLATES.get(key)
    if template is None:
        count = len(names)
        if frozen:
            # The slot's own setter: a frozen record's `__setattr__` refuses, and this is also
            # quicker than `object.__setattr__(self, name, value)`.
            body = [f"    _set_{i}(self, a{i})" for i in range(count)]
        else:
            body = [f"    self.a{i} = a{i}" for i in range(count)]
        namespace: dict[str, object] = {}
        params = "".join(f", a{i}" for i in range(count))
        exec(f"def __init__(self{params}):\n" + ("\n".join(body) or "    pass") + "\n", namespace)
        template = _TEMPLATES[key] = namespace["__init__"].__code__  # type: ignore[attr-defined]
    if frozen:
        code = template.replace(co_varnames=("self", *names))
        namespace = {f"_set_{i}": getattr(cls, name).__set__ for i, name in enumerate(names)}
    else:
        code = template.replace(co_varnames=("self", *names), co_names=names)
        namespace = {}
    given = tuple(defaults[name] for name in names if name in defaults)
    return FunctionType(code, namespace, "__init__", given or None)


def _compiled_init(cls, names, defaults, factories, frozen: bool, post_init: bool):
    namespace: dict[str, object] = {"_HAS_FACTORY": _HAS_FACTORY}
    params = ["self"]
    lines = []
    for index, name in enumerate(names):
        if name in defaults:
            namespace[f"_dflt_{index}"] = defaults[name]
            params.append(f"{name}=_dflt_{index}")
        elif name in factories:
            namespace[f"_make_{index}"] = factories[name]
            params.append(f"{name}=_HAS_FACTORY")
            lines.append(f"    if {name} is _HAS_FACTORY: {name} = _make_{index}()")
        else:
            params.append(name)
        if frozen:
            namespace[f"_set_{index}"] = getattr(cls, name).__set__
            lines.append(f"    _set_{index}(self, {name})")
        else:
            lines.append(f"    self.{name} = {name}")
    if post_init:
        lines.append("    self.__post_init__()")
    if not lines:
        lines.append("    pass")
    source = f"def __init__({', '.join(params)}):\n" + "\n".join(lines) + "\n"
    exec(source, namespace)
    return namespace["__init__"]
