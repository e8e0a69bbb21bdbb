"""specreg's `dataclass` behaves as the standard decorator: the same class made both ways answers
alike (construction, defaults, errors, equality, hashing, repr, frozen fields, replace, asdict,
pydantic's validation), with its methods made later."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

import pytest
from pydantic import TypeAdapter

from specreg.lazyclass import lazy_dataclass


def _shapes(deco: Any) -> dict[str, type]:
    @deco(frozen=True, kw_only=True)
    class Base:
        a: int
        b: list[int] = field(default_factory=list)
        c: str | None = field(default=None, compare=False)
        z: int = field(default=7, init=False)

    @deco(frozen=True, kw_only=True)
    class Child(Base):
        d: int = 3

        def __post_init__(self) -> None:
            object.__setattr__(self, "d", self.d * 2)

    @deco
    class Plain:
        x: int
        y: str = "q"
        w: list[int] = field(default_factory=lambda: [1], repr=False)

    @deco(frozen=True)
    class Point:
        x: int
        y: int = 0

    return {"Base": Base, "Child": Child, "Plain": Plain, "Point": Point}


LAZY, STD = _shapes(lazy_dataclass), _shapes(dataclasses.dataclass)
CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("Base", (), {"a": 1}),
    ("Base", (), {"a": 1, "b": [2], "c": "x"}),
    ("Base", (1,), {}),
    ("Base", (), {}),
    ("Base", (), {"a": 1, "z": 2}),
    ("Child", (), {"a": 2, "d": 4}),
    ("Plain", (1,), {}),
    ("Plain", (1, "r"), {"w": []}),
    ("Plain", (), {"x": 1, "nope": 2}),
    ("Point", (1, 2), {}),
    ("Point", (), {"y": 1}),
]


def _make(classes: dict[str, type], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return classes[name](*args, **kwargs)
    except TypeError as exc:
        return ("TypeError", str(exc).split("(")[-1])  # the message after the function's name


@pytest.mark.parametrize(("name", "args", "kwargs"), CALLS)
def test_the_lazy_class_answers_as_the_standard_one(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    lazy, std = _make(LAZY, name, args, kwargs), _make(STD, name, args, kwargs)
    if isinstance(std, tuple):
        assert isinstance(lazy, tuple) and lazy[1] == std[1]
        return
    assert repr(lazy) == repr(std)
    assert dataclasses.asdict(lazy) == dataclasses.asdict(std)
    assert lazy == _make(LAZY, name, args, kwargs) and lazy != std  # equal to its own kind only
    assert repr(dataclasses.replace(lazy)) == repr(dataclasses.replace(std))  # __post_init__ again, both
    frozen = type(std).__hash__ is not None
    assert (type(lazy).__hash__ is not None) == frozen
    assert _hashed(lazy) == _hashed(std)
    if frozen:
        for obj in (lazy, std):
            with pytest.raises(dataclasses.FrozenInstanceError):
                obj.x = 5
            with pytest.raises(dataclasses.FrozenInstanceError):
                del obj.x
    data = dataclasses.asdict(std)
    for f in dataclasses.fields(std):
        if not f.init:
            data.pop(f.name)
    validated = [TypeAdapter(type(obj)).validate_python(data) for obj in (lazy, std)]
    assert repr(validated[0]) == repr(validated[1])  # (a __post_init__ runs again in both)


def _hashed(obj: Any) -> int | str:
    """The hash, or why there is none (a list field, or not frozen): the same both ways."""
    try:
        return hash(obj)
    except TypeError as exc:
        return str(exc)


def test_compare_false_fields_and_factories_stay_apart() -> None:
    base, point = LAZY["Base"], LAZY["Point"]
    assert base(a=1, c="x") == base(a=1, c="y")
    assert hash(point(1, 2)) == hash(STD["Point"](1, 2)) == hash((1, 2))
    one, two = base(a=1), base(a=1)
    assert one.b is not two.b  # a list each, as the standard default_factory


def test_options_it_does_not_handle_get_the_standard_decorator() -> None:
    @lazy_dataclass(order=True)
    class Ordered:
        x: int

    assert Ordered(1) < Ordered(2)
