"""Run digests kept in the registry (benchmark/store/digest_cache.py): read back instead of rebuilt, never
stale (a write to any of a run's rows drops them), damaged or foreign entries rebuilt, same answers."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from _bench_helpers import changed_output
from _registry_helpers import immutable

from benchmarks.bench_registry import fill
from specreg.audit.run import run_audit
from specreg.benchmark.store import digest_cache
from specreg.benchmark.store.digest import build_digests, keep_digests, load_digests
from specreg.benchmark.store.run_index import heads_of
from specreg.registry.store import Registry
from specreg.schemas.audit import AuditReport, Policy

POLICY = Policy.model_validate({"licence": {"require_revision": False}})


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 artifacts, 100 pairs, 20 runs: rows written directly, no digest kept; filled once."""
    folder = tmp_path_factory.mktemp("digest-cache")
    with Registry(folder / "r.db", show_progress=False) as r:
        fill(r, folder, 0.02)
    return folder / "r.db"


@pytest.fixture
def reg(filled: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A copy of `filled` for each test (sqlite backup: the test may change every row)."""
    src, dst = sqlite3.connect(filled), sqlite3.connect(tmp_path / "r.db")
    with dst:
        src.backup(dst)
    src.close()
    dst.close()
    with Registry(tmp_path / "r.db", show_progress=False) as r:
        yield r


def _kept(reg: Registry) -> dict[str, str]:
    return dict(reg.conn.execute("SELECT run_id, builder FROM run_digests WHERE spread = 0"))


def _same(a: AuditReport, b: AuditReport) -> None:
    assert a.model_dump(exclude={"created_at"}) == b.model_dump(exclude={"created_at"})


def test_an_audit_keeps_digests_and_the_next_reads_them_with_the_same_answer(reg: Registry) -> None:
    assert _kept(reg) == {}
    cold = run_audit(reg, POLICY, "test", spread=False)
    kept = _kept(reg)
    assert len(kept) == len(cold.runs) > 5 and set(kept.values()) == {digest_cache.builder_id()}
    warm = run_audit(reg, POLICY, "test", spread=False)
    _same(cold, warm)
    heads = heads_of(reg, kept)
    assert load_digests(reg, heads, spread=False) == build_digests(reg, heads, spread=False)
    # the spread variant (reports) is kept apart: a digest without spread never stands in for one with it
    spread = load_digests(reg, heads, spread=True)
    assert any(r.speedup_p5 is not None for d in spread.values() for r in d.strata)
    assert spread == build_digests(reg, heads, spread=True)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE bench_runs SET status_reason = 'edited' WHERE run_id = :r",
        "UPDATE bench_conditions SET failure = NULL WHERE run_id = :r AND idx = 0",
        "UPDATE bench_summaries SET summary_json = summary_json WHERE run_id = :r AND rowid = "
        "(SELECT min(rowid) FROM bench_summaries WHERE run_id = :r)",
        "DELETE FROM bench_prompts WHERE run_id = :r AND prompt_id = 'chat-1'",
        "UPDATE bench_requests SET ok = ok WHERE run_id = :r AND repeat = 0 AND prompt_id = 'chat-1'",
        "INSERT INTO bench_requests (run_id, condition_idx, condition, stratum, prompt_id, repeat, started_at, ok) "
        "SELECT run_id, condition_idx, condition, stratum, prompt_id, 99, started_at, ok FROM bench_requests "
        "WHERE run_id = :r LIMIT 1",
    ],
)
def test_any_write_to_a_run_drops_its_digest_and_no_other(reg: Registry, sql: str) -> None:
    run_audit(reg, POLICY, "test", spread=False)
    before = _kept(reg)
    assert "bench-000002" in before and len(before) > 5
    with reg.write() as conn:
        assert conn.execute(sql, {"r": "bench-000002"}).rowcount > 0
    after = _kept(reg)
    assert "bench-000002" not in after and after == {k: v for k, v in before.items() if k != "bench-000002"}


def test_a_changed_run_is_audited_on_its_new_rows(reg: Registry) -> None:
    first = run_audit(reg, POLICY, "test", spread=False)
    assert not any(r.failed_prompts for d in first.runs for r in d.strata)
    changed_output(reg, "bench-000002")  # a request now differs from the baseline (and its summaries say so)
    second = run_audit(reg, POLICY, "test", spread=False)
    digest = next(d for d in second.runs if d.run_id == "bench-000002")
    assert any(r.failed_prompts == ["chat-1"] for r in digest.strata)
    assert any("equivalence" in p.failed_gates for p in second.pairs if p.run_id == "bench-000002")


def test_damaged_and_foreign_entries_are_rebuilt(reg: Registry) -> None:
    cold = run_audit(reg, POLICY, "test", spread=False)
    damaged, foreign, swapped, other = sorted(_kept(reg))[:4]
    with reg.write() as conn:
        conn.execute("UPDATE run_digests SET digest_json = '{\"run_id\": 3' WHERE run_id = ?", (damaged,))
        conn.execute("UPDATE run_digests SET builder = 'an older specreg' WHERE run_id = ?", (foreign,))
        text = conn.execute("SELECT digest_json FROM run_digests WHERE run_id = ?", (other,)).fetchone()[0]
        conn.execute("UPDATE run_digests SET digest_json = ? WHERE run_id = ?", (text, swapped))
    _same(cold, run_audit(reg, POLICY, "test", spread=False))
    rows = dict(reg.conn.execute("SELECT run_id, digest_json FROM run_digests WHERE spread = 0"))
    assert all(json.loads(rows[r])["run_id"] == r for r in (damaged, foreign, swapped))
    assert _kept(reg)[foreign] == digest_cache.builder_id()


def test_keep_digests_leaves_a_damaged_run_to_the_audit(reg: Registry) -> None:
    with reg.write() as conn:
        conn.execute(
            "UPDATE bench_summaries SET summary_json = '{' WHERE run_id = 'bench-000001' AND rowid = "
            "(SELECT min(rowid) FROM bench_summaries WHERE run_id = 'bench-000001')"
        )
        assert keep_digests(reg, ["bench-000001"]) == 0  # the caller's transaction goes on
        assert keep_digests(reg, ["bench-000002"]) == 1
    assert set(_kept(reg)) == {"bench-000002"}


def test_a_registry_that_cannot_be_written_still_audits(tmp_path: Path) -> None:
    folder = tmp_path / "regdir"
    folder.mkdir()
    with Registry(folder / "r.db", show_progress=False) as reg:
        fill(reg, tmp_path, 0.01)
        cold = run_audit(reg, POLICY, "test", spread=False)
        with reg.write() as conn:
            conn.execute("DELETE FROM run_digests")
    with immutable(folder), Registry(folder / "r.db", show_progress=False) as reg:
        assert reg.read_only
        _same(cold, run_audit(reg, POLICY, "test", spread=False))
    with Registry(folder / "r.db", show_progress=False) as reg:
        assert _kept(reg) == {}


def test_a_busy_registry_is_audited_at_once_without_keeping(reg: Registry) -> None:
    """Another writer holds the lock (an import, say): the audit does not queue behind it for a cache."""
    import time

    other = sqlite3.connect(reg.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        t0 = time.perf_counter()
        busy = run_audit(reg, POLICY, "test", spread=False)
        assert time.perf_counter() - t0 < 10  # the busy timeout is 60 s
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert _kept(reg) == {}
    assert reg.conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 60_000  # put back
    _same(busy, run_audit(reg, POLICY, "test", spread=False))
    assert len(_kept(reg)) > 5
