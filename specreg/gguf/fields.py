"""Typed metadata lookups and llama.cpp's tokenizer preconditions, checked when a file is opened.

A key with the wrong value type or a token array that disagrees with its scores or types is a
`GGUFError` naming the key - never a silent default and never an index into anything. A
special token id past the vocabulary is what llama.cpp only warns about (it uses its default
id): a warning on the file, and the effective values follow llama.cpp.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from specreg.errors import GGUFError
from specreg.gguf import format as F


class _Array(Protocol):
    """What the lookups need of a metadata array (reader.GGUFArray is one)."""

    @property
    def count(self) -> int: ...

    def to_list(self) -> list: ...


class KeyValues(Protocol):
    """What the lookups need of an open file (reader.GGUFFile is one): described here rather than
    imported, so the reader can call `check_tokenizer` at open without the two importing each other."""

    metadata: Mapping[str, object]
    value_types: dict[str, int]
    warnings: list[str]

    def error(self, problem: str, key: str | None = None, offset: int | None = None) -> GGUFError: ...

    def typed_array(self, key: str, allowed: tuple[int, ...]) -> _Array | None: ...


_INT32 = int(F.VT.INT32)
_FLOAT32 = int(F.VT.FLOAT32)
_BOOL = int(F.VT.BOOL)


def _type_name(gf: KeyValues, key: str) -> str:
    return F.VALUE_TYPE_NAMES.get(gf.value_types[key], "?")


def get_str(gf: KeyValues, key: str) -> str | None:
    """A string value, None when absent; any other type is an error naming the key."""
    if key not in gf.metadata:
        return None
    if gf.value_types[key] != F.T_STRING:
        raise gf.error(f"must be a STRING, found {_type_name(gf, key)}", key)
    return gf.metadata[key]  # type: ignore[return-value]


def get_int(gf: KeyValues, key: str) -> int | None:
    """An integer value of any integer width, None when absent."""
    if key not in gf.metadata:
        return None
    if gf.value_types[key] not in F.INTEGER_TYPES:
        raise gf.error(f"must be an integer, found {_type_name(gf, key)}", key)
    return gf.metadata[key]  # type: ignore[return-value]


def get_bool(gf: KeyValues, key: str) -> bool | None:
    if key not in gf.metadata:
        return None
    if gf.value_types[key] != _BOOL:
        raise gf.error(f"must be a BOOL, found {_type_name(gf, key)}", key)
    return bool(gf.metadata[key])


def get_int_or_max(gf: KeyValues, key: str) -> int | None:
    """An integer, or the largest entry of a per-layer integer array (llama.cpp's get_key_or_arr)."""
    if gf.value_types.get(key) == F.T_ARRAY:
        values = get_int_list(gf, key)
        return max(values) if values else None
    return get_int(gf, key)


def get_int_list(gf: KeyValues, key: str) -> list[int] | None:
    """An array of integers (e.g. target layer ids), None when absent."""
    arr = gf.typed_array(key, tuple(sorted(F.INTEGER_TYPES)))
    return None if arr is None else arr.to_list()


def check_tokenizer(gf: KeyValues) -> None:
    """llama.cpp's vocabulary preconditions, checked once at open (cheap: counts and ids only)."""
    tokens = gf.typed_array(F.KEY_TOKENS, (F.T_STRING,))
    n_tokens = 0 if tokens is None else tokens.count
    for key in (F.KEY_TOKENS, F.KEY_MERGES):  # decoded into one Python string each when compared
        arr = gf.metadata.get(key)
        count = getattr(arr, "count", 0)
        if count > F.MAX_TOKENS:
            raise gf.error(f"{count} entries, more than the {F.MAX_TOKENS} specreg reads", key)
    for key, allowed in ((F.KEY_SCORES, (_FLOAT32, _INT32)), (F.KEY_TOKEN_TYPES, (_INT32,))):
        arr = gf.typed_array(key, allowed)
        if arr is not None and arr.count != n_tokens:
            raise gf.error(f"has {arr.count} entries but {F.KEY_TOKENS} has {n_tokens}", key)
    gf.typed_array(F.KEY_MERGES, (F.T_STRING,))
    for key in F.SPECIAL_ID_KEYS.values():
        tid = get_int(gf, key)
        if tid is None or tokens is None:
            continue  # without a token list an id indexes nothing; nothing to check it against
        if tid < 0:  # llama.cpp reads these ids as UINT32: a signed key fails its type check
            raise gf.error(f"special token id {tid} is negative, outside the vocabulary (0..{n_tokens - 1})", key)
        if tid >= n_tokens:
            # llama.cpp's vocab loader warns "bad special token ... using default id" and loads the
            # model; the effective values (validators.effective) use that default id the same way
            gf.warnings.append(
                f"{key} = {tid} is outside the vocabulary (0..{n_tokens - 1}); "
                "llama.cpp ignores it and uses its default id"
            )
    for key in F.ADD_FLAG_KEYS.values():
        get_bool(gf, key)
    get_str(gf, F.KEY_CHAT_TEMPLATE)
