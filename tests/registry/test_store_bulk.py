"""Bulk reads of the registry are the row-by-row reads, faster: same records, same order, same
handling of a damaged row (it stands out for its own pair only)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from _registry_helpers import aged, model
from pydantic import ValidationError

from specreg.registry import artifacts
from specreg.registry import db as db_rows
from specreg.registry import pairs as pair_rows
from specreg.registry.store import Registry
from specreg.schemas.checks import CheckResult, PairVerdict
from specreg.schemas.methods import Method
from specreg.schemas.record import adapter, from_json, from_python, to_json, to_python
from specreg.schemas.registry import ArtifactRecord, PairRecord
from specreg.sources.checking import check_and_record
from specreg.sources.provenance import register
from specreg.validators.ruleset import load_rule_set

RULES = load_rule_set()
VIEWS = [
    (admitted, with_checks, strict)
    for admitted in (None, True, False)
    for with_checks in (True, False)
    for strict in (False, True)
]


def _invalid_utf8_draft(folder: Path) -> Path:
    """A draft whose token text '<0x00>' holds the bytes <0x FF FE>: its evidence is repaired text."""
    path = model(folder, "bad-utf8.gguf", seed=3, name="draft")
    data = path.read_bytes()
    path.write_bytes(data.replace(b"<0x00>", b"<0x\xff\xfe>"))
    return path


@pytest.fixture()
def pairs_reg(reg: Registry, tmp_path: Path) -> Registry:
    """Pairs of every kind: admitted and rejected, with and without a draft, strict beside normal,
    strict only, re-checked, evidence quoting undecodable token text, nested evidence."""
    target = model(tmp_path, "target.gguf", name="target")
    same = model(tmp_path, "same.gguf", name="draft")  # identical weights: admitted
    other_bos = model(tmp_path, "bos.gguf", seed=2, name="draft-bos", bos_id=5)  # rejected
    check_and_record(reg, target, same, "draft-simple", rule_set=RULES)
    check_and_record(reg, target, same, "draft-simple", rule_set=RULES, strict=True)  # beside the normal one
    check_and_record(reg, target, other_bos, "draft-simple", rule_set=RULES)
    check_and_record(reg, target, None, "ngram-mod", rule_set=RULES, strict=True)  # strict only
    check_and_record(reg, target, None, "ngram-simple", rule_set=RULES)
    check_and_record(reg, target, None, "ngram-simple", rule_set=RULES)  # re-checked: two verdicts
    check_and_record(reg, target, _invalid_utf8_draft(tmp_path), "draft-simple", rule_set=RULES)
    sha = reg.pairs()[0].target_sha256
    evidence = {"f": 1.5, "big": 2**70, "s": "é 😀 \\x00", "none": None, "l": [1, {"k": [True, -0.0]}]}
    reg.record_verdict(
        PairVerdict(
            admitted=False,
            method=Method.NGRAM_CACHE,
            target_sha256=sha,
            rule_set="rs-foreign",
            checks=[CheckResult(code="x.nested", severity="error", message="m \udcff", evidence=evidence)],
        )
    )
    return reg


def _by_row(reg: Registry, admitted: bool | None, with_checks: bool, strict: bool) -> list[PairRecord]:
    """The reference: the same query read one row at a time."""
    sql, params = _query(admitted, strict, pair_rows._select(with_checks, strict))
    return pair_rows.pairs_by_row(reg.database.rows(sql, params), with_checks)


def _query(admitted: bool | None, strict: bool, select: str) -> tuple[str, tuple[int, ...]]:
    where = ["p.strict_verdict_id IS NOT NULL"] if strict else []
    if admitted is not None:
        where.append(f"{pair_rows._VIEWS[strict]['admitted']} = {int(admitted)}")
    return select + ("WHERE " + " AND ".join(where) + " " if where else "") + "ORDER BY p.id", ()


def _same(got: list[PairRecord], want: list[PairRecord]) -> None:
    assert got == want
    for g, w in zip(got, want, strict=True):  # == does not compare types (a str is never a datetime)
        assert to_json(g) == to_json(w)
        assert _types(g) == _types(w)
        assert [_types(c) for c in g.checks] == [_types(c) for c in w.checks]


def _types(record: object) -> dict[str, type]:
    return {k: type(v) for k, v in vars(record).items()}


def test_pairs_read_in_batches_are_the_rows_read_one_by_one(
    pairs_reg: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_rows, "JSON_BATCH", 3)  # several batches, the last one short
    everything = pairs_reg.pairs()
    assert len(everything) == 6 and {p.admitted for p in everything} == {True, False}
    assert {p.draft_sha256 is None for p in everything} == {True, False}
    assert any(p.strict_admitted is not None and p.verdict_id != p.strict_verdict_id for p in everything)
    assert any(p.n_verdicts == 2 for p in everything)
    assert any("<0x\\\\xff\\\\xfe>" in repr(c.evidence) for p in everything for c in p.checks)  # repaired text
    for admitted, with_checks, strict in VIEWS:
        sql, params = _query(admitted, strict, pair_rows._select(with_checks, strict, as_json=True))
        batched = db_rows.records_in_batches(pairs_reg.conn, sql, params, adapter(list[PairRecord]))
        assert batched is not None, (admitted, with_checks, strict)  # the fast path was taken
        want = _by_row(pairs_reg, admitted, with_checks, strict)
        _same(batched, want)
        _same(pairs_reg.pairs(admitted, with_checks=with_checks, strict=strict), want)
    nested = next(c for p in everything for c in p.checks if c.code == "x.nested")
    assert nested.message == "m \\xff" and nested.evidence["big"] == 2**70 and nested.evidence["l"][1]["k"][1] == 0.0


@pytest.mark.parametrize(
    "damage",
    [
        '\'[{"code": "\\udcff"\'',  # cut short: not JSON at all
        '\'[{"code": "a", "severity": "pass", "message": "\\udcff"}]\'',  # JSON to SQLite, not to pydantic
        "'[{\"code\": 1}]'",  # JSON of the wrong shape
        "'{\"checks\": []}'",
        "''",  # empty
    ],
)
def test_a_damaged_verdict_sends_the_read_row_by_row(pairs_reg: Registry, damage: str) -> None:
    before = pairs_reg.pairs()
    victim = before[2]
    with sqlite3.connect(pairs_reg.path) as conn:
        conn.execute(f"UPDATE verdicts SET checks_json = {damage} WHERE id = ?", (victim.verdict_id,))
    sql, params = _query(None, False, pair_rows._select(True, False, as_json=True))
    assert db_rows.records_in_batches(pairs_reg.conn, sql, params, adapter(list[PairRecord])) is None
    after = pairs_reg.pairs()
    _same(after, _by_row(pairs_reg, None, True, False))
    assert [c.code for c in after[2].checks] == ["registry.unreadable"] and after[2].admitted is False
    assert after[:2] + after[3:] == before[:2] + before[3:]  # every other pair as it was


def test_a_foreign_value_type_sends_the_read_row_by_row(pairs_reg: Registry) -> None:
    """A BLOB where text belongs (written by another tool): SQLite's JSON functions refuse it,
    the row-by-row read takes it as it always did."""
    before = pairs_reg.pairs()
    with sqlite3.connect(pairs_reg.path) as conn:
        conn.execute("UPDATE artifacts SET name = CAST(name AS BLOB)")
        conn.execute(
            "UPDATE verdicts SET checks_json = CAST(checks_json AS BLOB) WHERE id = ?", (before[0].verdict_id,)
        )
    sql, params = _query(None, False, pair_rows._select(True, False, as_json=True))
    assert db_rows.records_in_batches(pairs_reg.conn, sql, params, adapter(list[PairRecord])) is None
    after = pairs_reg.pairs()
    _same(after, _by_row(pairs_reg, None, True, False))
    assert after == before


@pytest.fixture()
def artifacts_reg(reg: Registry, tmp_path: Path) -> tuple[Registry, list[str]]:
    """Artifacts of every kind: a licence of its own, a conflict of licences, provenance extra
    (nested, unicode, big numbers), two paths in their order, none at all, a bare registration."""
    a = register(reg, model(tmp_path, "a.gguf", name="a"), license="mit", repo="org/a", revision="r" * 40)
    copy = tmp_path / "a-copy.gguf"
    copy.write_bytes((tmp_path / "a.gguf").read_bytes())
    reg.add_artifact(aged(copy))  # a second path, after the first
    extra = {"nested": {"l": [1, 2.5, None, "é 😀"]}, "big": 2**70}
    b = register(reg, model(tmp_path, "b.gguf", name="b", seed=3, license="apache-2.0"), license="mit", extra=extra)
    c = reg.add_artifact(model(tmp_path, "c.gguf", seed=4, license=None))  # nothing but the file
    gone = reg.add_artifact(model(tmp_path, "gone.gguf", seed=5))
    with reg.write() as conn:
        conn.execute("DELETE FROM artifact_paths WHERE sha256 = ?", (gone.sha256,))  # no path left
    return reg, [a.sha256, b.sha256, c.sha256, gone.sha256, "f" * 64]


def _artifacts_by_row(reg: Registry, shas: list[str]) -> dict[str, ArtifactRecord]:
    return artifacts.ArtifactStore(reg.database).get_many_by_row(json.dumps(sorted(set(shas))), with_summary=False)


def _same_artifacts(got: dict[str, ArtifactRecord], want: dict[str, ArtifactRecord]) -> None:
    assert got == want and list(got) == list(want)
    for sha, g in got.items():
        w = want[sha]
        for part_g, part_w in ((g, w), (g.licence, w.licence), (g.provenance, w.provenance)):
            assert _types(part_g) == _types(part_w)
        assert to_json(g) == to_json(w)


def test_artifacts_read_in_batches_are_the_rows_read_one_by_one(
    artifacts_reg: tuple[Registry, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    reg, shas = artifacts_reg
    monkeypatch.setattr(db_rows, "JSON_BATCH", 3)
    sql = f"{artifacts._JSON_ROW} WHERE {artifacts.IN_SHAS}"
    batched = db_rows.records_in_batches(reg.conn, sql, (json.dumps(sorted(shas)),), adapter(list[ArtifactRecord]))
    assert batched is not None and len(batched) == 4  # the fast path was taken; the unknown SHA-256 left out
    want = _artifacts_by_row(reg, shas)
    _same_artifacts({r.sha256: r for r in batched}, want)
    got = reg.get_artifacts(shas)
    _same_artifacts(got, want)
    a, b, c, gone = (got[s] for s in shas[:4])
    assert [Path(p).name for p in a.paths] == ["a.gguf", "a-copy.gguf"]
    assert gone.paths == [] and c.licence.effective is None
    assert b.licence.conflict and b.provenance.extra["nested"]["l"][3] == "é 😀" and b.provenance.extra["big"] == 2**70


@pytest.mark.parametrize(
    ("column", "damage"),
    [
        ("licence_json", "'{\"sources\": '"),  # cut short
        ("licence_json", "'{\"sources\": 1}'"),  # JSON of the wrong shape
        ("provenance_json", "'[1'"),
        ("provenance_json", "'{\"a\": NaN}'"),  # json.loads reads it, SQLite does not: read row by row
        ("provenance_json", "''"),
        ("name", "CAST('x' AS BLOB)"),  # a foreign type: SQLite's JSON functions refuse it
    ],
)
def test_a_damaged_artifact_record_sends_the_read_row_by_row(
    artifacts_reg: tuple[Registry, list[str]], column: str, damage: str
) -> None:
    reg, shas = artifacts_reg
    before = reg.get_artifacts(shas)
    with sqlite3.connect(reg.path) as conn:
        conn.execute(f"UPDATE artifacts SET {column} = {damage} WHERE sha256 = ?", (shas[1],))
    sql = f"{artifacts._JSON_ROW} WHERE {artifacts.IN_SHAS}"
    batched = db_rows.records_in_batches(reg.conn, sql, (json.dumps(sorted(shas)),), adapter(list[ArtifactRecord]))
    after = reg.get_artifacts(shas)
    _same_artifacts(after, _artifacts_by_row(reg, shas))
    assert {s: r for s, r in after.items() if s != shas[1]} == {s: r for s, r in before.items() if s != shas[1]}
    if damage == "''":  # what the row path reads as no extra: the batches read it so too
        assert batched is not None and after[shas[1]].provenance.extra == {}
    else:
        assert batched is None


def test_check_text_is_repaired_where_it_can_be_broken() -> None:
    """CheckResult repairs undecodable token text (lone surrogates) in Python input only: JSON
    input cannot hold it (the parser refuses it), so stored checks are read without the repair."""
    made = CheckResult(code="a", severity="warn", message="m \udcff", evidence={"k": ["\udcfe", {"\udc80": 1}]})
    assert made.message == "m \\xff" and made.evidence == {"k": ["\\xfe", {"\\x80": 1}]}
    assert from_python(CheckResult, to_python(made)) == made
    stored = to_json(made).encode()
    assert from_json(CheckResult, stored) == made
    for bad in (b'"m \\udcff"', b'"m \xed\xb3\xbf"', b'"m \xff"'):  # escaped surrogate, CESU-8 bytes, not UTF-8
        with pytest.raises(ValidationError):
            from_json(CheckResult, b'{"code": "a", "severity": "warn", "message": ' + bad + b"}")
        with pytest.raises(ValidationError):
            from_json(CheckResult, b'{"code": "a", "severity": "warn", "message": "", "evidence": {"k": ' + bad + b"}}")
