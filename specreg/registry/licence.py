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

import json
import re
from collections.abc import Sequence
from typing import Any

from specreg.schemas.gguf import LicenceFields
from specreg.schemas.registry import LICENCE_PRECEDENCE, LicenceRecord, LicenceSource

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
        (s.model_copy(update={"value": normalise(s.value)}) for s in sources if s is not None),
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


def read_record(raw: str | bytes) -> LicenceRecord:
    """A stored licence record (`licence_json`) read without pydantic: it is read on every `check
    pair` and registration, where building pydantic's first validator would cost more than the
    read. It takes what
    `LicenceRecord.model_validate_json` takes of what specreg writes and refuses the shapes it
    refuses (ValueError): wrong types, unknown source kinds, text that is not valid UTF-8
    (tests/test_schemas_record.py checks the two agree on generated records)."""
    if not isinstance(raw, (str, bytes)):
        raise ValueError("no licence record")
    data = json.loads(raw)
    if not isinstance(data, dict) or not isinstance(data.get("sources", []), list):
        raise ValueError("a licence record is an object with a list of sources")
    sources = [
        LicenceSource(
            source=_kind(s.get("source"), required=True) if isinstance(s, dict) else _bad("source"),
            value=_text(s.get("value")),
            name=_text(s.get("name")),
            link=_text(s.get("link")),
        )
        for s in data.get("sources", [])
    ]
    conflict = data.get("conflict", False)
    if not isinstance(conflict, bool):
        raise ValueError("conflict: not a boolean")
    return LicenceRecord(
        sources=sources,
        effective=_text(data.get("effective")),
        effective_source=_kind(data.get("effective_source"), required=False),
        conflict=conflict,
    )


def _bad(what: str) -> Any:
    raise ValueError(f"{what}: malformed")


def _text(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("a licence field is text")
    value.encode("utf-8")  # UnicodeEncodeError (a ValueError) on a lone surrogate, as pydantic's parser
    return value


def _kind(value: object, *, required: bool) -> Any:
    if value is None and not required:
        return None
    if value not in LICENCE_PRECEDENCE:
        raise ValueError(f"licence source kind {value!r}")
    return value
