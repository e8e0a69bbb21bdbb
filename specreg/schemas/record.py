"""Records: the plain dataclasses `check pair` makes, and the functions that take them across
a JSON edge.

Inside the package the records on `check pair`'s path (the rule set, checks and verdicts,
artifacts with their licence and provenance, the memory estimate) are stdlib dataclasses, so
defining them builds no pydantic model. Where they come in from an edge (the registry's rows,
bundles) pydantic validates them, field by field as it would a model (nested records,
Literal, datetime, Annotated validators), through one `TypeAdapter` per type built on first
use: `from_json`, `from_python`. Going out (`to_json`, `to_python`: a registry column,
`--json`) they are written by pydantic-core's serializer from the values themselves, which
needs no validator: a command that only writes records builds none. These are functions, not
methods, so `x.model_dump()` still means that `x` is a pydantic model.

What a dataclass does not do is coerce: `Record(created_at="2026-...")` keeps the string. Code
that builds a record from raw values (an SQLite row) converts them itself (`timestamp`).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pydantic import TypeAdapter

_T = TypeVar("_T")


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def adapter(tp: Any) -> TypeAdapter[Any]:
    """The pydantic validator of a record type (`Record`, `list[Record]`, ...), built once."""
    found = _ADAPTERS.get(tp)
    if found is None:
        from pydantic import TypeAdapter

        found = _ADAPTERS[tp] = TypeAdapter(tp)
    return found


def to_json(obj: Any, *, indent: int | None = None) -> str:
    """`obj` (a record, or lists and dicts of them) as JSON text."""
    return json_bytes(obj, indent=indent).decode()


def json_bytes(obj: Any, *, indent: int | None = None) -> bytes:
    """`to_json` as UTF-8 bytes (what goes straight to a file or stdout).

    Written by pydantic-core's serializer from the values themselves, field by field in
    declaration order as a `TypeAdapter` writes them (datetimes in ISO 8601, tuples as lists,
    infinities and NaN as null), without building a validator: writing needs none."""
    from pydantic_core import to_json as dump

    return dump(obj, indent=indent, inf_nan_mode="null")


def from_json(tp: type[_T], data: str | bytes) -> _T:
    """A `tp` validated from JSON text; raises pydantic's ValidationError (a ValueError)."""
    out: _T = adapter(tp).validate_json(data)
    return out


def to_python(obj: Any, *, include: set[str] | None = None, exclude: set[str] | None = None) -> Any:
    """`obj` as JSON's own types (dicts, lists, str, numbers, bool, None), as `to_json` writes it;
    `include` / `exclude` name the fields kept / left out."""
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(obj, include=include, exclude=exclude, inf_nan_mode="null")


def from_python(tp: type[_T], data: Any) -> _T:
    """A `tp` validated from dicts and lists; raises pydantic's ValidationError (a ValueError)."""
    out: _T = adapter(tp).validate_python(data)
    return out


def timestamp(value: str | datetime | None) -> datetime | None:
    """A stored ISO 8601 timestamp as pydantic would read it into a datetime field."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


def stamp(value: str | datetime) -> datetime:
    """`timestamp` of a column that is never null."""
    out = timestamp(value)
    if out is None:
        raise ValueError("a timestamp that must be there is null")
    return out


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    found = _HINTS.get(cls)
    if found is None:
        found = _HINTS[cls] = typing.get_type_hints(cls)
    return found


def build(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """A record tree from trusted data (a file shipped in the package, already checked against
    `adapter(cls)` by the tests): nested records and tuples made, nothing else validated. An
    unknown or missing key still fails (KeyError, TypeError)."""
    hints = _hints(cls)
    return cls(**{k: _convert(hints[k], v) for k, v in data.items()})


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    if dataclasses.is_dataclass(tp):
        return build(tp, value)  # type: ignore[arg-type]
    origin = typing.get_origin(tp)
    if origin is None or not _needs(tp):
        return value
    args = typing.get_args(tp)
    if origin is list:
        return [_convert(args[0], v) for v in value]
    if origin is dict:
        return {k: _convert(args[1], v) for k, v in value.items()}
    if origin is tuple:
        return tuple(value)
    # a union (X | None): the one member that is a record or a container
    member = next(a for a in args if a is not type(None))
    return _convert(member, value)


@cache
def _needs(tp: Any) -> bool:  # annotations are hashable
    """Whether values of this annotation hold a record or a tuple (JSON gives dicts and lists)."""
    if dataclasses.is_dataclass(tp) or typing.get_origin(tp) is tuple:
        return True
    return any(_needs(a) for a in typing.get_args(tp) if a is not type(None) and not isinstance(a, str))
