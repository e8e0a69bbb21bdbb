"""The registry schema, pinned: every table and its columns, the migrations that built it.

Changing the schema means adding a migration to specreg/registry/migrations.py AND updating
the pin below (each area keeps its own tables' entry current).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlite_utils import Database, Migrations

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
    ],
    "verdicts": ["id", "pair_id", "admitted", "strict", "checks_json", "created_at"],
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
        "warmup_json",  # m004
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
    ],
    "bench_summaries": [
        "run_id",
        "condition",
        "stratum",
        "target_sha256",
        "draft_sha256",
        "summary_json",
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
}


def test_final_schema_is_pinned(tmp_path: Path) -> None:
    with Registry(tmp_path / "r.db") as reg:
        actual = {t: [c.name for c in reg.db[t].columns] for t in reg.db.table_names()}
        indexes = {r[0] for r in reg.db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert reg.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert reg.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert actual == SCHEMA
    assert indexes >= REGISTRY_INDEXES


def test_migrations_are_recorded_once_in_order(tmp_path: Path) -> None:
    db_file = tmp_path / "r.db"
    Registry(db_file).close()
    Registry(db_file).close()  # reopening applies nothing twice
    db = Database(db_file)
    rows = list(db["_sqlite_migrations"].rows_where(order_by="id"))
    names = [m.name for m in mig.migrations._migrations]
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

    monkeypatch.setattr(
        mig.migrations,
        "_migrations",
        [*mig.migrations._migrations, Migrations._Migration("m999_extra", m999_extra)],
    )
    with Registry(db_file) as reg:
        assert reg.db["extra"].exists()
        assert reg.db.execute("SELECT count(*) FROM _sqlite_migrations WHERE name = 'm999_extra'").fetchone()[0] == 1


def test_a_failing_migration_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db_file = tmp_path / "r.db"
    Registry(db_file).close()

    def m998_broken(db: Database) -> None:
        db.execute("CREATE TABLE half (id INTEGER PRIMARY KEY)")
        db.execute("ALTER TABLE no_such_table ADD COLUMN x TEXT")

    monkeypatch.setattr(
        mig.migrations,
        "_migrations",
        [*mig.migrations._migrations, Migrations._Migration("m998_broken", m998_broken)],
    )
    with pytest.raises(RegistryError, match="no such table"):
        Registry(db_file)
    db = Database(db_file)
    assert "half" not in db.table_names()
    assert db.execute("SELECT count(*) FROM _sqlite_migrations WHERE name = 'm998_broken'").fetchone()[0] == 0
