"""`dataclass`, without compiling the class's methods when it is defined.

Defining a dataclass costs its process ~0.6 ms (1.1 ms frozen) on this machine's Python 3.11,
nearly all of it `exec` compiling the source of `__init__`, `__repr__`, `__eq__` (and a frozen
class's `__setattr__`, `__delattr__`, `__hash__`); `check pair` defines 51 of them, `inspect`
about 20, and calls few of those methods. Here the class is made by `dataclasses.dataclass`
itself with those methods turned off, so its fields, `fields()`, `replace()`, `asdict()` and
pydantic's validation of it are the standard ones. `__init__` is compiled the first time an
instance is made, as dataclasses writes it (a fleet audit makes 65,000 of some classes: a
generic `__init__` would cost them); `__repr__`, `__eq__`, `__hash__` and the frozen checks
are shared functions over the fields' names, nothing compiled. Options this module does not
handle (`slots`, `order`, `unsafe_hash`, a class with its own `__eq__`, ...) get the standard
decorator. mypy checks the classes as standard dataclasses.

benchmarks/bench_startup.py times `check pair` of two files new to the registry with the
standard decorator beside it ("std dataclasses"): ~20 ms of CPU of the imports and rule set
alone (in-process, median of 12: 99 ms against 118).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

_T = TypeVar("_T")


def lazy_dataclass(
    cls: type[_T] | None = None, /, *, init: bool = True, frozen: bool = False, kw_only: bool = False, **other: Any
) -> Any:
    """`dataclasses.dataclass(cls, init=..., frozen=..., kw_only=...)`, made lazily (see above)."""

    def wrap(cls: Any) -> Any:
        own = cls.__dict__
        if other or any(m in own for m in ("__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")):
            return dataclasses.dataclass(cls, init=init, frozen=frozen, kw_only=kw_only, **other)
        out: Any = dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=kw_only)
        fields = dataclasses.fields(out)
        names = tuple(f.name for f in fields)
        if init and "__init__" not in own:
            out.__init__ = _lazy_init(out, frozen, kw_only)
        out.__repr__ = _repr(tuple(f.name for f in fields if f.repr))
        out.__eq__ = _eq(_getter(tuple(f.name for f in fields if f.compare)))
        if frozen:
            out.__setattr__ = _frozen_setattr(out, names)
            out.__delattr__ = _frozen_delattr(out, names)
            out.__hash__ = _hash(_getter(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))))
        else:
            out.__hash__ = None  # as dataclasses: eq without frozen
        return out

    return wrap if cls is None else wrap(cls)


def _lazy_init(cls: type, frozen: bool, kw_only: bool) -> Callable[..., None]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        made = _compiled_init(cls, frozen, kw_only)
        cls.__init__ = made  # type: ignore[misc]
        made(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _compiled_init(cls: type, frozen: bool, kw_only: bool) -> Callable[..., None]:
    """The `__init__` dataclasses would write for these fields (positional ones first, then
    keyword-only; defaults, factories, `init=False` fields, `__post_init__`), compiled once."""
    fields = dataclasses.fields(cls)
    env: dict[str, Any] = {"_MISSING": dataclasses.MISSING, "_set": object.__setattr__}
    params: list[str] = []
    keywords: list[str] = []
    body: list[str] = []
    for i, f in enumerate(fields):
        if f.default is not dataclasses.MISSING:
            env[f"_d{i}"] = f.default
        if f.default_factory is not dataclasses.MISSING:
            env[f"_f{i}"] = f.default_factory
        if f.init:
            if f.default is not dataclasses.MISSING:
                param, value = f"{f.name}=_d{i}", f.name
            elif f.default_factory is not dataclasses.MISSING:
                param, value = f"{f.name}=_MISSING", f"_f{i}() if {f.name} is _MISSING else {f.name}"
            else:
                param, value = f.name, f.name
            (keywords if f.kw_only else params).append(param)
        elif f.default is not dataclasses.MISSING:
            value = f"_d{i}"
        elif f.default_factory is not dataclasses.MISSING:
            value = f"_f{i}()"
        else:
            continue
        body.append(f"_set(self, {f.name!r}, {value})" if frozen else f"self.{f.name} = {value}")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    signature = ", ".join(["self", *params, *(["*", *keywords] if keywords else [])])
    source = f"def __init__({signature}):\n    " + "\n    ".join(body or ["pass"])
    exec(source, env)
    made: Callable[..., None] = env["__init__"]
    made.__qualname__ = f"{cls.__qualname__}.__init__"
    return made


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of these attributes, as the generated methods build it (attrgetter: in C)."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    if names:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{type(self).__qualname__}({shown})"

    return __repr__


def _eq(values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any, object], bool]:
    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return values(self) == values(other)

    return __eq__


def _hash(values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(values(self))

    return __hash__


def _frozen_setattr(cls: type[Any], names: tuple[str, ...]) -> Callable[[Any, str, Any], None]:
    """A frozen class's `__setattr__`, as dataclasses writes it: its fields cannot be assigned."""

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    return __setattr__


def _frozen_delattr(cls: type[Any], names: tuple[str, ...]) -> Callable[[Any, str], None]:
    """A frozen class's `__delattr__`: its fields cannot be deleted."""

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __delattr__


if TYPE_CHECKING:  # mypy checks the classes with its own dataclass plugin, as for the standard decorator
    from dataclasses import dataclass as dataclass
else:
    dataclass = lazy_dataclass
