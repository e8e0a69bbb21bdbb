"""Licence statements (GGUF, model card, user) combined into one record with a winner.

Every statement is kept with where it came from; the effective licence follows
`LICENCE_PRECEDENCE` (user > model card > GGUF): what a person states on the command line beats
the hub's model card, which beats `general.license` inside the file (often copied from a base
model and stale). Sources that disagree are a conflict, recorded and shown, never resolved
silently. Values are hub licence identifiers (`apache-2.0`, `llama3.1`, `other`, ...) so that
the audit's allow/deny lists can compare them: case and whitespace are normalised here, once.

API used by store.py (`from_gguf`, `combine`, `with_source`) and gates.py (`normalise`);
reading the model card lives in `provenance.py`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import get_args

from specreg.schemas.gguf import LicenceFields
from specreg.schemas.registry import LICENCE_PRECEDENCE, LicenceRecord, LicenceSource, LicenceSourceKind

MAX_FIELD_CHARS = 2048  # licence fields are identifiers, names and links, not the licence text
MAX_LIST_ITEMS = 16  # `license: [mit, apache-2.0]`; a longer list is not a licence statement
_IDENT = re.compile(r"[a-z0-9][a-z0-9._+-]{0,63}")
_SPACES = re.compile(r"\s+")


def normalise(value: object) -> str | None:
    """A hub licence identifier as the hub writes it: stripped, lower case, inner spaces as '-'.

    `" Apache 2.0 "` -> `"apache-2.0"`. A value that does not look like an identifier (a licence
    text pasted into `general.license`) is kept as stripped text, bounded in length, so that it
    still compares unequal to every identifier instead of being mangled into one.
    """
    if value is None:
        return None
    if isinstance(value, (list, tuple)):  # YAML `license: [mit, apache-2.0]`: flat, short, strings only
        if len(value) > MAX_LIST_ITEMS or not all(isinstance(v, str) for v in value):
            return None
        parts = [p for p in (normalise(v) for v in value) if p]
        return ",".join(parts)[:MAX_FIELD_CHARS] or None
    if not isinstance(value, (str, int, float)):  # a mapping or other structure says nothing usable
        return None
    text = str(value)[: 4 * MAX_FIELD_CHARS].strip()  # bounded before any regex or join
    if not text:
        return None
    ident = _SPACES.sub("-", text.lower())
    return ident if _IDENT.fullmatch(ident) else text[:MAX_FIELD_CHARS]


def text_field(value: object) -> str | None:
    """A licence name or link: stripped, bounded, None when empty."""
    if value is None or not isinstance(value, (str, int, float)):
        return None
    text = str(value)[: 4 * MAX_FIELD_CHARS].strip()
    return text[:MAX_FIELD_CHARS] if text else None


def from_gguf(fields: LicenceFields | None) -> LicenceSource | None:
    """The GGUF's `general.license`, `.name`, `.link` as a source (None when all are absent)."""
    if fields is None or not (fields.license or fields.name or fields.link):
        return None
    return LicenceSource(
        source="gguf", value=normalise(fields.license), name=text_field(fields.name), link=text_field(fields.link)
    )


def _identity(s: LicenceSource) -> tuple[str | None, str | None]:
    # `other` says "see the name": two `other`s with different names are different licences.
    name = s.name.strip().lower() if s.value == "other" and s.name else None
    return (s.value, name)


def combine(sources: Sequence[LicenceSource | None]) -> LicenceRecord:
    """Keep every source (in precedence order), pick the effective one, flag disagreement."""
    rank = {kind: i for i, kind in enumerate(LICENCE_PRECEDENCE)}
    kept = sorted(
        (replace(s, value=normalise(s.value)) for s in sources if s is not None),
        key=lambda s: rank[s.source],
    )
    stated = [s for s in kept if s.value]
    winner = stated[0] if stated else None
    return LicenceRecord(
        sources=kept,
        effective=winner.value if winner else None,
        effective_source=winner.source if winner else None,
        conflict=len({_identity(s) for s in stated}) > 1,
    )


def with_source(rec: LicenceRecord, source: LicenceSource) -> LicenceRecord:
    """The record with `source` added, replacing an earlier statement of the same kind."""
    return combine([s for s in rec.sources if s.source != source.source] + [source])


_SOURCE_KEYS = frozenset(("source", "value", "name", "link"))
_RECORD_KEYS = frozenset(("sources", "effective", "effective_source", "conflict"))
_KINDS = frozenset(get_args(LicenceSourceKind))


def from_stored(raw: object) -> LicenceRecord:
    """A registry row's licence record (its `licence_json`).

    A row as specreg writes it (`to_json` of a LicenceRecord: every field, each of its own JSON
    type, UTF-8 text) is made from `json.loads` as it stands: pydantic would return exactly these
    values, and reading back what specreg wrote builds no validator (`check pair` of registered
    files imports no pydantic). Anything else (a damaged or foreign row) is validated by pydantic
    (`from_json`) as every record from the registry is: coerced where pydantic coerces, a
    ValueError where it refuses."""
    import json

    if isinstance(raw, str):
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if _written(data):
            return LicenceRecord(
                sources=[LicenceSource(**s) for s in data["sources"]],
                effective=data["effective"],
                effective_source=data["effective_source"],
                conflict=data["conflict"],
            )
    from specreg.schemas.record import from_json

    return from_json(LicenceRecord, raw)  # type: ignore[arg-type]  # pydantic says what is wrong


def _text(value: object) -> bool:
    """None, or a str that is UTF-8 text (JSON's \\ud800 escapes give lone surrogates)."""
    if value is None:
        return True
    if type(value) is not str:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _written(data: object) -> bool:
    """Whether `data` has exactly the shape and JSON types `to_json(LicenceRecord)` writes."""
    if type(data) is not dict or data.keys() != _RECORD_KEYS:
        return False
    sources = data["sources"]
    return (
        type(sources) is list
        and all(
            type(s) is dict
            and s.keys() == _SOURCE_KEYS
            and s["source"] in _KINDS
            and all(_text(s[k]) for k in ("value", "name", "link"))
            for s in sources
        )
        and _text(data["effective"])
        and (data["effective_source"] is None or data["effective_source"] in _KINDS)
        and type(data["conflict"]) is bool
    )
