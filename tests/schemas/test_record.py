"""Records are plain dataclasses; pydantic validates and writes them at the JSON edges through
`schemas.record`'s functions (one adapter per type), never through methods of their own."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import pkgutil
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import specreg
from specreg.schemas.checks import CheckResult
from specreg.schemas.memory import ServeSettings
from specreg.schemas.record import from_json, from_python, to_json, to_python
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
def test_a_licence_record_is_written_and_read_back_as_it_was(rec: LicenceRecord) -> None:
    """The registry's `licence_json` text is what it always was (compact JSON, text as UTF-8),
    and reads back to the same record."""
    text = to_json(rec)
    assert text == json.dumps(dataclasses.asdict(rec), ensure_ascii=False, separators=(",", ":"))
    assert from_json(LicenceRecord, text) == rec
    assert from_python(LicenceRecord, to_python(rec)) == rec


def test_a_licence_record_the_registry_cannot_hold_is_refused() -> None:
    for raw in ('{"sources": 1}', '{"sources": [{"source": "elsewhere"}]}',
                '{"effective": "\\udcff"}', "[1", "", '{"effective": 3}'):  # fmt: skip
        with pytest.raises(ValueError):  # pydantic's ValidationError is one
            from_json(LicenceRecord, raw)


def test_checks_are_stored_as_json_even_when_their_evidence_is_not() -> None:
    """A NaN (not JSON) or a set goes through pydantic's serializer (null, a list), never into the
    registry as `NaN`."""
    plain = CheckResult(code="a", severity="warn", message="m", evidence={"n": 1, "xs": [1, "b"], "t": (1, 2)})
    odd = CheckResult(code="b", severity="info", message="m", evidence={"r": math.nan, "s": {3}})
    stored = json.loads(to_json([plain, odd]))
    assert stored[0]["evidence"] == {"n": 1, "xs": [1, "b"], "t": [1, 2]}
    assert stored[1]["evidence"] == {"r": None, "s": [3]}
    assert from_json(list[CheckResult], to_json([plain])) == [replace(plain, evidence=stored[0]["evidence"])]


def test_a_check_made_in_code_repairs_undecodable_text() -> None:
    c = CheckResult(code="vocab.text", severity="error", message="token '\udcff'", evidence={"t": ["\udcfe"]})
    assert c.message == "token '\\xff'" and c.evidence == {"t": ["\\xfe"]}
    assert from_json(CheckResult, to_json(c)) == c


def test_serve_settings_refuse_what_llama_server_refuses() -> None:
    assert ServeSettings(ctx_size=1, cache_ram_mib=-1, ctx_checkpoints=0).slots == 1
    for bad in ({"ctx_size": 0}, {"slots": 0}, {"cache_ram_mib": -2}, {"http_threads": 0}, {"draft_n_max": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ServeSettings(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        from_python(ServeSettings, {"slots": 0})
    assert replace(ServeSettings(), slots=4).slots == 4
    with pytest.raises(ValueError, match="slots"):
        replace(ServeSettings(), slots=0)  # a copy is checked as a new record is


def test_no_dataclass_wears_pydantic_method_names() -> None:
    """`x.model_dump()` means that `x` is a pydantic model: no dataclass of the package answers it."""
    dressed = []
    for info in pkgutil.walk_packages(specreg.__path__, "specreg."):
        if info.name.startswith(("specreg.testing", "specreg.exchange.ray")) or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == info.name:
                dressed += [
                    f"{info.name}.{obj.__name__}" for name in ("model_dump", "model_validate") if hasattr(obj, name)
                ]
    assert dressed == []
