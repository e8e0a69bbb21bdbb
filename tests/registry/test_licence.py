"""Licence statements: identifiers normalised once, precedence user > card > GGUF, conflicts kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specreg.registry import licence
from specreg.schemas.gguf import LicenceFields
from specreg.schemas.registry import LicenceSource
from specreg.sources.provenance import card_source, describe_licence


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("apache-2.0", "apache-2.0"),
        ("  Apache-2.0\n", "apache-2.0"),
        ("Apache 2.0", "apache-2.0"),
        ("MIT", "mit"),
        ("llama3.1", "llama3.1"),
        ("CC-BY-NC-4.0", "cc-by-nc-4.0"),
        ("", None),
        ("   ", None),
        (None, None),
        (["MIT", " apache-2.0 "], "mit,apache-2.0"),
    ],
)
def test_normalise_identifiers(raw: object, want: str | None) -> None:
    assert licence.normalise(raw) == want


def test_licence_text_is_not_mangled_into_an_identifier() -> None:
    text = "Permission is hereby granted, free of charge, to any person obtaining a copy..."
    assert licence.normalise(text) == text  # kept as text: unequal to every identifier
    assert len(licence.normalise("x " * 5000) or "") <= licence.MAX_FIELD_CHARS


@given(st.text(max_size=80))
def test_normalise_is_idempotent(raw: str) -> None:
    once = licence.normalise(raw)
    assert licence.normalise(once) == once


def _src(kind: str, value: str | None, name: str | None = None) -> LicenceSource:
    return LicenceSource(source=kind, value=value, name=name)  # type: ignore[arg-type]


def test_precedence_user_over_card_over_gguf() -> None:
    gguf, card, user = _src("gguf", "apache-2.0"), _src("model_card", "llama3.1"), _src("user", "MIT")
    rec = licence.combine([gguf, card])
    assert (rec.effective, rec.effective_source, rec.conflict) == ("llama3.1", "model_card", True)
    rec = licence.combine([gguf, user, card])
    assert (rec.effective, rec.effective_source) == ("mit", "user")
    assert [s.source for s in rec.sources] == ["user", "model_card", "gguf"]  # every source kept
    assert licence.combine([gguf]).effective_source == "gguf"


def test_agreeing_sources_are_no_conflict_and_case_does_not_matter() -> None:
    rec = licence.combine([_src("gguf", "Apache-2.0"), _src("model_card", "apache-2.0")])
    assert rec.effective == "apache-2.0" and not rec.conflict


def test_other_with_different_names_is_a_conflict() -> None:
    same = licence.combine([_src("gguf", "other", "Gemma Terms"), _src("model_card", "other", "gemma terms")])
    diff = licence.combine([_src("gguf", "other", "gemma"), _src("model_card", "other", "llama3")])
    assert not same.conflict and diff.conflict


def test_no_statement_at_all() -> None:
    rec = licence.combine([licence.from_gguf(LicenceFields()), None])
    assert rec.effective is None and rec.sources == [] and not rec.conflict
    assert describe_licence(rec).startswith("unknown")


def test_name_only_source_is_kept_but_does_not_win() -> None:
    rec = licence.combine([_src("model_card", None, "Custom"), _src("gguf", "mit")])
    assert rec.effective == "mit" and len(rec.sources) == 2 and not rec.conflict


def test_with_source_replaces_the_same_kind() -> None:
    rec = licence.combine([_src("gguf", "mit"), _src("user", "apache-2.0")])
    rec = licence.with_source(rec, _src("user", "MIT"))
    assert [(s.source, s.value) for s in rec.sources] == [("user", "mit"), ("gguf", "mit")]
    assert not rec.conflict


def test_describe_shows_every_disagreeing_source() -> None:
    rec = licence.combine([_src("gguf", "apache-2.0"), _src("model_card", "other", "llama3")])
    line = describe_licence(rec)
    assert "other (from model_card)" in line and "gguf: apache-2.0" in line and "[llama3]" in line


def _card(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "README.md"
    p.write_text(text, encoding="utf-8")
    return p


def test_card_licence_fields(tmp_path: Path) -> None:
    p = _card(tmp_path, "---\nlicense: Other\nlicense_name: llama3.1\nlicense_link: LICENSE\ntags: [gguf]\n---\n# Hi\n")
    src = card_source(p)
    assert src == LicenceSource(source="model_card", value="other", name="llama3.1", link="LICENSE")


@pytest.mark.parametrize(
    "text",
    [
        "# no metadata at all\nlicense: mit\n",
        "---\ntags: [gguf]\n---\n",  # metadata without licence
        "---\nlicense: [unclosed\n---\n",  # broken YAML
        "---\n- a\n- b\n---\n",  # metadata that is not a mapping
        "---\n!!python/object/apply:os.system [echo pwned]\n---\n",  # unsafe YAML is not executed
    ],
)
def test_card_without_a_usable_statement(tmp_path: Path, text: str) -> None:
    assert card_source(_card(tmp_path, text)) is None


def test_oversized_card_is_not_parsed(tmp_path: Path) -> None:
    p = _card(tmp_path, "---\nlicense: mit\n---\n" + "x" * (1 << 20))
    assert card_source(p) is None
    assert card_source(tmp_path / "missing.md") is None


def _by_pydantic(raw: object) -> object:
    """What pydantic makes of a stored licence: the record, or the kind of error."""
    from specreg.schemas.record import from_json
    from specreg.schemas.registry import LicenceRecord

    try:
        return from_json(LicenceRecord, raw)  # type: ignore[arg-type]
    except ValueError:
        return ValueError


def _by_from_stored(raw: object) -> object:
    try:
        return licence.from_stored(raw)
    except ValueError:
        return ValueError


_WRITTEN = (
    '{"sources":[{"source":"gguf","value":"mit","name":null,"link":null}],'
    '"effective":"mit","effective_source":"gguf","conflict":false}'
)


@pytest.mark.parametrize(
    "raw",
    [
        _WRITTEN,
        '{"sources":[],"effective":null,"effective_source":null,"conflict":false}',
        _WRITTEN.replace("false", "1"),  # coerced by pydantic: not the written shape
        _WRITTEN.replace("false", '"true"'),
        _WRITTEN.replace('"gguf","value"', '"hub","value"'),  # not a licence source kind
        _WRITTEN.replace('"mit","name"', '"\\ud800","name"'),  # a lone surrogate
        _WRITTEN.replace('"mit","name"', '3,"name"'),
        _WRITTEN.replace(',"conflict":false', ""),  # a field left out: pydantic's default
        _WRITTEN.replace("}", ',"extra":1}', 1),  # a key more
        '{"sources": 1}',
        '{"sources": ',
        "[]",
        "null",
        "",
        _WRITTEN.encode(),  # a BLOB
        None,
    ],
)
def test_a_stored_licence_reads_as_pydantic_reads_it(raw: object) -> None:
    """`from_stored` builds what specreg writes without pydantic, and hands anything else to it:
    either way the record (or the refusal) is pydantic's."""
    assert _by_from_stored(raw) == _by_pydantic(raw)


_text = st.none() | st.text(max_size=8)
_source = st.fixed_dictionaries(
    {"source": st.sampled_from(["user", "model_card", "gguf", "hub"]), "value": _text, "name": _text, "link": _text}
)


@given(
    st.fixed_dictionaries(
        {
            "sources": st.lists(_source, max_size=3),
            "effective": _text,
            "effective_source": st.none() | st.sampled_from(["user", "gguf", "x"]),
            "conflict": st.booleans() | st.integers(0, 2) | st.sampled_from(["yes", "false"]),
        }
    )
)
def test_any_licence_json_reads_as_pydantic_reads_it(data: dict[str, object]) -> None:
    import json

    raw = json.dumps(data)
    assert _by_from_stored(raw) == _by_pydantic(raw)
