"""Records: the plain dataclasses `check pair` makes, validated by pydantic only at the JSON edges.

A pydantic model costs its process pydantic's model machinery the moment its class is defined
(`pydantic.main` and the schema generator: ~45 ms of imports) and ~40 ms more for the first
validator it builds; `check pair` of two files new to the registry made eight of them to build
and print one verdict (benchmarks/bench_startup.py). The records on that path - the rule set,
checks and verdicts, artifacts with their licence and provenance, the memory estimate - are
stdlib dataclasses instead. Pydantic validates stdlib dataclasses field by field exactly as it
validates models (nested records, Literal, datetime, Annotated validators), so the edges that
read or write JSON (the registry's rows, bundles, `--json`) keep their checks: `model_validate`,
`model_validate_json`, `model_dump`, `model_dump_json` below build a `TypeAdapter` for the
class on first use, and pydantic is imported then, not before.

What a dataclass does not do is coerce: `Record(created_at="2026-...")` keeps the string. Code
that builds a record from raw values (an SQLite row) converts them itself (`timestamp`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import typing
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, Self

if TYPE_CHECKING:
    from pydantic import TypeAdapter


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def adapter(tp: Any) -> TypeAdapter[Any]:
    """The pydantic validator and serializer of a record class (or `list[Record]`), built once."""
    found = _ADAPTERS.get(tp)
    if found is None:
        from pydantic import TypeAdapter

        found = _ADAPTERS[tp] = TypeAdapter(tp)
    return found


class Record:
    """The part of pydantic's model API the records' users call, through `adapter`."""

    __slots__ = ()

    @classmethod
    def model_validate(cls, obj: Any) -> Self:
        out: Self = adapter(cls).validate_python(obj)
        return out

    @classmethod
    def model_validate_json(cls, data: str | bytes) -> Self:
        out: Self = adapter(cls).validate_json(data)
        return out

    def model_dump(self, *, mode: Literal["json", "python"] = "python", **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = adapter(type(self)).dump_python(self, mode=mode, **kwargs)
        return out

    def model_dump_json(self, *, indent: int | None = None, **kwargs: Any) -> str:
        return adapter(type(self)).dump_json(self, indent=indent, **kwargs).decode()

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        obj = copy.deepcopy(self) if deep else self
        return dataclasses.replace(obj, **(update or {}))  # type: ignore[type-var]


def plain_json(obj: Any) -> str:
    """`obj.model_dump_json()` without pydantic where the record holds only JSON's own types (the
    common case: a verdict's checks, a licence record); anything else (a NaN, a set, bytes) goes
    through pydantic's serializer, so the text is pydantic's either way."""
    try:
        return json.dumps(dataclasses.asdict(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return adapter(type(obj)).dump_json(obj).decode()


def plain_list_json(items: list[Any], tp: Any) -> str:
    """`json.dumps([x.model_dump(mode="json") for x in items])` (`tp`: `list[TheRecord]`) without
    pydantic where the records hold only JSON's own types, as `plain_json` (a verdict's checks:
    the registry's `checks_json` text as it always was)."""
    try:
        return json.dumps([dataclasses.asdict(x) for x in items], allow_nan=False)
    except (TypeError, ValueError):
        return json.dumps(adapter(tp).dump_python(items, mode="json"))


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
