"""The registry schema, pinned: every table and its columns, the migrations that built it.

Changing the schema means adding a migration to specreg/registry/migrations.py AND updating
the pin below (each area keeps its own tables' entry current).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlite_utils import Database

from specreg.errors import RegistryError
from specreg.registry import migrations as mig
from specreg.registry.store import Registry

SCHEMA: dict[str, list[str]] = {
    "_sqlite_migrations": ["id", "migration_set", "name", "applied_at"],
    # registry (artifacts, paths + stat cache, pairs, verdicts)
    "artifacts": [
        "sha256",
        "size",
        "name",
        "architecture",
        "file_type",
        "file_type_name",
        "n_tokens",
        "summary_json",
        "effective_license",
        "licence_source",
        "licence_conflict",
        "licence_json",
        "repo",
        "revision",
        "filename",
        "provenance_source",
        "provenance_json",
        "registered_at",
        "updated_at",
        "layout_json",
    ],
    "artifact_paths": [
        "id",
        "sha256",
        "path",
        "device",
        "inode",
        "size",
        "mtime_ns",
        "hashed_at_ns",
        "first_seen_at",
        "last_verified_at",
        "ctime_ns",
    ],
    "pairs": [
        "id",
        "target_sha256",
        "draft_sha256",
        "method",
        "rule_set",
        "admitted",
        "strict",
        "latest_verdict_id",
        "n_verdicts",
        "created_at",
        "updated_at",
        "strict_verdict_id",  # m004
        "strict_admitted",
    ],
    "verdicts": ["id", "pair_id", "admitted", "strict", "checks_json", "created_at"],
    # m016: verdicts that came in a bundle, evidence about another machine (registry/evidence.py)
    "imported_verdicts": [
        "id",
        "pair_id",
        "admitted",
        "strict",
        "checks_json",
        "created_at",
        "host",
        "specreg_version",
        "bundle_digest",
        "imported_at",
    ],
    # benchmark (m003, specreg/benchmark)
    "bench_runs": [
        "run_id",
        "pair_id",
        "status",
        "status_reason",
        "method",
        "target_sha256",
        "draft_sha256",
        "target_licence_json",
        "draft_licence_json",
        "manifest_json",
        "runner_pid",
        "runner_started",
        "run_dir",
        "started_at",
        "finished_at",
    ],
    "bench_conditions": [
        "run_id",
        "idx",
        "name",
        "method",
        "status",
        "failure",
        "failure_lines_json",
        "spec_json",
        "argv_json",
        "port",
        "server_pid",
        "server_started",
        "log_path",
        "log_tail",
        "metrics_before_json",
        "metrics_after_json",
        "counters_json",
        "memory_json",
        "started_at",
        "finished_at",
        "warmup_json",  # m006
        "load_json",  # m014: each slot's load, and whether it was set aside
    ],
    "bench_prompts": [
        "run_id",
        "prompt_id",
        "stratum",
        "kind",
        "content_sha256",
        "input_tokens",
        "max_tokens",
        "expect_json",
    ],
    "bench_requests": [
        "id",
        "run_id",
        "condition_idx",
        "condition",
        "prompt_id",
        "stratum",
        "repeat",
        "started_at",
        "ok",
        "error",
        "timed_out",
        "ttft_ms",
        "total_ms",
        "tpot_ms",
        "output_tokens",
        "finish_reason",
        "prompt_ms",
        "predicted_ms",
        "draft_n",
        "draft_n_accepted",
        "cache_n",
        "output_text",
        "output_ids_json",
        "output_sha256",
        "matches_baseline",
        "first_diff",
        "diff_unit",
        "expect_ok",
        "expect_detail",
        "prompt_n",  # m011
        # m013: where the ids came from, the client's arrivals, the server's per-token time, the diff
        "ids_source",
        "stream_ids_n",
        "arrivals_json",
        "server_tpot_ms",
        "first_diff_char",
        "diff_context",
        # m015: the sampler and seed of each request (m014 is h/busy's condition load)
        "seed",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "triage_json",
    ],
    "bench_summaries": [
        "run_id",
        "condition",
        "stratum",
        "target_sha256",
        "draft_sha256",
        "summary_json",
    ],
    # each finished run's digest as the audit reads it (m012, specreg/benchmark/store/digest_cache.py)
    "run_digests": ["run_id", "spread", "builder", "digest_json"],
    # chat-template scans by the template's SHA-256 (m010, specreg/registry/template_scans.py)
    "template_scans": ["template_sha256", "scanner", "scan_json", "scanned_at"],
    # who vouched for an imported run: one row per verified envelope and run (m021, specreg/signing/attestations.py)
    "run_attestations": [
        "run_id",
        "run_digest",
        "key_id",
        "signer",
        "bundle_digest",
        "envelope_sha256",
        "signed_at",
        "imported_at",
    ],
    # who vouched for an imported verdict: one row per verified envelope and verdict (m022, same module)
    "verdict_attestations": [
        "verdict_id",
        "key_id",
        "signer",
        "bundle_digest",
        "envelope_sha256",
        "signed_at",
        "imported_at",
    ],
    # a serving configuration judged against a memory budget (m023, specreg/registry/memory_fits.py)
    "memory_fits": [
        "id",
        "target_sha256",
        "draft_sha256",
        "method",
        "config",
        "fits",
        "budget_bytes",
        "cache_ram_mib",
        "ctx_checkpoints",
        "fit_json",
        "created_at",
    ],
    # what `specreg watch` saw of a deployed server, one row per window (m024, specreg/watch/windows.py)
    "watch_windows": [
        "id",
        "pair_id",
        "stratum",
        "url",
        "identity_key",
        "server_json",
        "run_id",
        "started_at",
        "ended_at",
        "seconds",
        "state",
        "reason",
        "restarted",
        "mismatches",
        "generated",
        "generating_s",
        "drafted",
        "accepted",
        "audited_acceptance",
        "audited_decode_tps",
        "window_json",
        "counters_json",
    ],
    # what a model costs on one machine, build and flags (m025, specreg/registry/machine_probes.py)
    "machine_probes": ["sha256", "hardware", "runtime", "flags", "probe_json", "probed_at"],
    # a target and a draft run together on one machine (m027, specreg/registry/machine_probes.py)
    "pair_probes": [
        "target_sha256",
        "draft_sha256",
        "method",
        "draft_length",
        "hardware",
        "runtime",
        "flags",
        "probe_json",
        "probed_at",
    ],
    # result bundles (m005, specreg/exchange/bundle.py); runs streamed from Ray nodes (m026)
    "run_origins": [
        "run_id",
        "host",
        "specreg_version",
        "run_digest",
        "bundle_digest",
        "bundle_created_at",
        "imported_at",
        "node_id",
        "node_address",
        "resources_json",
    ],
    # split GGUFs: the shards after the first, pinned (m008, specreg/registry/shards.py)
    "artifact_shards": [
        "id",
        "artifact_sha256",
        "shard_no",
        "sha256",
        "size",
        "path",
        "device",
        "inode",
        "mtime_ns",
        "ctime_ns",
        "hashed_at_ns",
    ],
}

# The indexes list views and joins depend on (registry scale: 10k artifacts, 5k pairs).
REGISTRY_INDEXES = {
    "idx_artifact_paths_sha256",
    "idx_artifact_paths_inode",
    "idx_artifacts_repo",
    "idx_artifacts_registered_at",
    "idx_pairs_identity",
    "idx_pairs_admitted",
    "idx_pairs_draft",
    "idx_verdicts_pair",
    "idx_imported_verdicts_pair",
    "idx_memory_fits_config",
    "idx_watch_windows_pair",
}


def test_final_schema_is_pinned(tmp_path: Path) -> None:
    with Registry(tmp_path / "r.db") as reg:
        view = Database(reg.conn)  # sqlite-utils reads the schema; the registry hands out sqlite3
        actual = {t: [c.name for c in view[t].columns] for t in view.table_names()}
        indexes = {r[0] for r in reg.conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert reg.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert reg.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert actual == SCHEMA
    assert indexes >= REGISTRY_INDEXES


def _all_migration_names() -> list[str]:
    """Every registered migration, in order: all of them are pending on an empty database."""
    return mig.migrations.pending_names(sqlite3.connect(":memory:"))


def _append_migration(monkeypatch: pytest.MonkeyPatch, fn: Callable[[Database], None]) -> None:
    """Register `fn` the way a new migration is added (the decorator), for this test only."""
    monkeypatch.setattr(mig.migrations, "_migrations", list(mig.migrations._migrations))  # restored afterwards
    mig.migrations()(fn)


def test_migrations_are_recorded_once_in_order(tmp_path: Path) -> None:
    db_file = tmp_path / "r.db"
    Registry(db_file).close()
    Registry(db_file).close()  # reopening applies nothing twice
    db = Database(db_file)
    rows = list(db["_sqlite_migrations"].rows_where(order_by="id"))
    names = _all_migration_names()
    assert [r["name"] for r in rows] == names
    assert names[:2] == ["m001_artifacts", "m002_pairs_verdicts"]
    assert all(r["migration_set"] == "specreg" and r["applied_at"] for r in rows)


def test_appending_a_migration_applies_it_to_an_existing_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_file = tmp_path / "r.db"
    Registry(db_file).close()

    def m999_extra(db: Database) -> None:
        db.execute("CREATE TABLE extra (id INTEGER PRIMARY KEY, note TEXT NOT NULL)")

    _append_migration(monkeypatch, m999_extra)
    with Registry(db_file) as reg:
        assert Database(reg.conn)["extra"].exists()
        assert reg.conn.execute("SELECT count(*) FROM _sqlite_migrations WHERE name = 'm999_extra'").fetchone()[0] == 1


def test_a_failing_migration_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db_file = tmp_path / "r.db"
    Registry(db_file).close()

    def m998_broken(db: Database) -> None:
        db.execute("CREATE TABLE half (id INTEGER PRIMARY KEY)")
        db.execute("ALTER TABLE no_such_table ADD COLUMN x TEXT")

    _append_migration(monkeypatch, m998_broken)
    with pytest.raises(RegistryError, match="no such table"):
        Registry(db_file)
    db = Database(db_file)
    assert "half" not in db.table_names()
    assert db.execute("SELECT count(*) FROM _sqlite_migrations WHERE name = 'm998_broken'").fetchone()[0] == 0


def _before(monkeypatch: pytest.MonkeyPatch, name: str) -> list:
    """Only the migrations before `name` run (a registry an older specreg wrote); the shipped list,
    to put back before the registry is opened again."""
    shipped = mig.migrations._migrations
    monkeypatch.setattr(mig.migrations, "_migrations", [m for m in shipped if m.name < name])
    return shipped


def _artifact(conn: sqlite3.Connection) -> None:
    """One bare artifact row (SHA-256 a...a) for the older rows to point at."""
    conn.execute(
        "INSERT INTO artifacts (sha256, size, summary_json, licence_json, registered_at, updated_at) "
        "VALUES (?, 1, '{}', '{}', 't', 't')",
        ("a" * 64,),
    )


def test_m004_keeps_a_strict_check_beside_the_normal_verdict_of_existing_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry written before m004 (a strict verdict recorded over a normal one) is upgraded:
    the pair stands on its normal verdict again and the strict one is kept beside it."""
    db_file = tmp_path / "r.db"
    shipped = _before(monkeypatch, "m004")
    with Registry(db_file) as reg, reg.write() as conn:
        _artifact(conn)
        conn.execute(
            "INSERT INTO pairs (id, target_sha256, method, rule_set, admitted, strict, latest_verdict_id, "
            "n_verdicts, created_at, updated_at) VALUES (1, ?, 'ngram-simple', 'rs', 0, 1, 2, 2, ?, ?)",
            ("a" * 64, "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00"),
        )
        conn.execute(
            "INSERT INTO verdicts (id, pair_id, admitted, strict, checks_json, created_at) VALUES "
            "(1, 1, 1, 0, '[]', '2026-01-01'), (2, 1, 0, 1, '[]', '2026-01-02')"
        )
    monkeypatch.setattr(mig.migrations, "_migrations", shipped)
    with Registry(db_file) as reg:
        pair = reg.get_pair(1)
        assert (pair.admitted, pair.strict, pair.verdict_id) == (True, False, 1)
        assert (pair.strict_admitted, pair.strict_verdict_id, pair.n_verdicts) == (False, 2, 2)
        assert [p.id for p in reg.admitted_pairs()] == [1] and reg.admitted_pairs(strict=True) == []


def test_m026_keeps_the_origins_of_imported_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry written before m026 (a run imported from a bundle) keeps that run's origin when
    the table is made again to take runs streamed from Ray nodes (no bundle, a node)."""
    db_file = tmp_path / "r.db"
    shipped = _before(monkeypatch, "m026")
    with Registry(db_file) as reg, reg.write() as conn:
        _artifact(conn)
        conn.execute(
            "INSERT INTO bench_runs (run_id, status, method, target_sha256, started_at) "
            "VALUES ('r1', 'complete', 'ngram-simple', ?, '2026-01-01')",
            ("a" * 64,),
        )
        conn.execute(
            "INSERT INTO run_origins (run_id, host, specreg_version, run_digest, bundle_digest, imported_at) "
            "VALUES ('r1', 'other-box', '0.1.0', ?, ?, '2026-01-02')",
            ("b" * 64, "c" * 64),
        )
    monkeypatch.setattr(mig.migrations, "_migrations", shipped)
    with Registry(db_file) as reg:
        row = reg.conn.execute("SELECT host, run_digest, bundle_digest, node_id FROM run_origins").fetchone()
        assert tuple(row) == ("other-box", "b" * 64, "c" * 64, None)
        with reg.write() as conn:  # a streamed run: no bundle, no digest until it ends
            conn.execute(
                "INSERT INTO bench_runs (run_id, status, method, target_sha256, started_at) "
                "VALUES ('r2', 'running', 'ngram-simple', ?, '2026-01-03')",
                ("a" * 64,),
            )
            conn.execute(
                "INSERT INTO run_origins (run_id, host, specreg_version, imported_at, node_id) "
                "VALUES ('r2', 'node-b', '0.1.0', '2026-01-03', 'n1')"
            )
