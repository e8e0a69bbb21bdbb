"""Records are dataclasses that pydantic validates at the JSON edges; the pydantic-free paths of
`check pair` (licence records read and written, verdicts' checks written) say what pydantic says."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from specreg.registry.licence import read_record
from specreg.schemas.checks import CheckResult
from specreg.schemas.memory import ServeSettings
from specreg.schemas.record import plain_json, plain_list_json
from specreg.schemas.registry import LICENCE_PRECEDENCE, LicenceRecord, LicenceSource

_text = st.none() | st.text(max_size=12)
_source = st.builds(LicenceSource, source=st.sampled_from(LICENCE_PRECEDENCE), value=_text, name=_text, link=_text)
_records = st.builds(
    LicenceRecord,
    sources=st.lists(_source, max_size=3),
    effective=_text,
    effective_source=st.none() | st.sampled_from(LICENCE_PRECEDENCE),
    conflict=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(_records)
def test_a_licence_record_is_written_and_read_as_pydantic_does(rec: LicenceRecord) -> None:
    text = plain_json(rec)
    assert text == rec.model_dump_json()
    assert read_record(text) == LicenceRecord.model_validate_json(text) == rec


_KEYS = st.sampled_from(["sources", "source", "value", "name", "link", "effective", "effective_source", "conflict"])
_JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6) | st.sampled_from(LICENCE_PRECEDENCE),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_JUNK)
def test_what_the_licence_reader_takes_pydantic_takes_alike(junk: object) -> None:
    """On any JSON value the hand reader either refuses it or reads what pydantic reads (it may
    refuse more: pydantic's lax mode takes "true" for a boolean; specreg never writes that)."""
    text = json.dumps(junk)
    try:
        mine = read_record(text)
    except ValueError:
        return
    assert mine == LicenceRecord.model_validate_json(text)


def test_the_licence_reader_refuses_what_the_registry_cannot_hold() -> None:
    for raw in ('{"sources": 1}', '{"sources": [{"source": "elsewhere"}]}',
                '{"effective": "\\udcff"}', "[1", "", '{"effective": 3}'):  # fmt: skip
        with pytest.raises(ValueError):
            read_record(raw)
        with pytest.raises(ValidationError):
            LicenceRecord.model_validate_json(raw)
    with pytest.raises(ValueError):  # stricter than pydantic's lax "yes" -> True: specreg writes booleans
        read_record('{"conflict": "yes"}')


def test_checks_are_stored_as_pydantic_would_write_them() -> None:
    """JSON's own types without pydantic; a NaN (not JSON) or a set goes through pydantic's
    serializer (null, a list), never into the registry as `NaN`."""
    plain = CheckResult(code="a", severity="warn", message="m", evidence={"n": 1, "xs": [1, "b"], "t": (1, 2)})
    odd = CheckResult(code="b", severity="info", message="m", evidence={"r": math.nan, "s": {3}})
    for c in (plain, odd):
        assert plain_list_json([c], list[CheckResult]) == json.dumps([c.model_dump(mode="json")])
        assert plain_json(c) == c.model_dump_json()
    assert json.loads(plain_list_json([plain, odd], list[CheckResult]))[1]["evidence"] == {"r": None, "s": [3]}


def test_a_check_made_in_code_repairs_undecodable_text() -> None:
    c = CheckResult(code="vocab.text", severity="error", message="token '\udcff'", evidence={"t": ["\udcfe"]})
    assert c.message == "token '\\xff'" and c.evidence == {"t": ["\\xfe"]}
    assert CheckResult.model_validate_json(c.model_dump_json()) == c


def test_serve_settings_refuse_what_llama_server_refuses() -> None:
    assert ServeSettings(ctx_size=1, cache_ram_mib=-1, ctx_checkpoints=0).slots == 1
    for bad in ({"ctx_size": 0}, {"slots": 0}, {"cache_ram_mib": -2}, {"http_threads": 0}, {"draft_n_max": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ServeSettings(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        ServeSettings.model_validate({"slots": 0})
    assert ServeSettings().model_copy(update={"slots": 4}).slots == 4
