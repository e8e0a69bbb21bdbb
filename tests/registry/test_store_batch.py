"""Batched reads (`get_artifacts`, `verify_artifacts`), plain sqlite3 for reads and writes, savepoints."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from _registry_helpers import aged, model

from specreg.registry import migrations as mig
from specreg.registry.store import Registry
from specreg.sources.provenance import register


def test_get_artifacts_matches_get_artifact(reg: Registry, tmp_path: Path) -> None:
    a = register(reg, model(tmp_path, "a.gguf", name="a"), license="mit", repo="org/a", revision="r" * 40)
    b = reg.add_artifact(model(tmp_path, "b.gguf", name="b", seed=3))
    copy = tmp_path / "a-copy.gguf"
    copy.write_bytes((tmp_path / "a.gguf").read_bytes())
    reg.add_artifact(aged(copy))  # a second path of the same bytes
    got = reg.get_artifacts([a.sha256, b.sha256, "f" * 64])  # an unknown SHA-256 is left out
    assert set(got) == {a.sha256, b.sha256}
    for sha, rec in got.items():
        full = reg.get_artifact(sha)
        assert rec.summary is None and rec == replace(full, summary=None)
    assert reg.get_artifacts([a.sha256], with_summary=True)[a.sha256] == reg.get_artifact(a.sha256)
    assert got[a.sha256].paths == [str(tmp_path / "a.gguf"), str(copy)]
    assert reg.get_artifacts([]) == {}


def test_verify_artifacts_matches_verify_artifact(reg: Registry, tmp_path: Path) -> None:
    recs = [reg.add_artifact(model(tmp_path, f"m{i}.gguf", name=f"m{i}", seed=i)) for i in range(4)]
    (tmp_path / "m1.gguf").unlink()  # missing
    with open(tmp_path / "m2.gguf", "ab") as fh:  # other size
        fh.write(b"x")
    aged(tmp_path / "m3.gguf", 30)  # new mtime, same bytes: re-hashed, verified, cache refreshed
    batch = reg.verify_artifacts(recs)
    assert batch == {r.sha256: reg.verify_artifact(r) for r in recs}
    assert [batch[r.sha256][0] for r in recs] == [True, False, False, True]
    assert "missing" in (batch[recs[1].sha256][1] or "") and "size is now" in (batch[recs[2].sha256][1] or "")
    hashed = reg.hash_count
    reg.verify_artifacts(recs)
    assert reg.hash_count == hashed  # the refreshed stat was stored: no second re-hash


def test_creating_reading_and_writing_need_no_sqlite_utils(tmp_path: Path) -> None:
    """A new registry is migrated, read and written through plain sqlite3 (registry/db.py):
    importing sqlite-utils would cost ~0.2 s of a first `check pair`."""
    db = tmp_path / "r.db"
    code = (
        "import sys; from specreg.registry.store import Registry\n"
        f"reg = Registry({str(db)!r}, show_progress=False); reg.pairs(); reg.artifacts(with_summary=False)\n"
        "with reg.write() as db: kind = type(db).__module__ + '.' + type(db).__name__\n"
        "print(sorted(m for m in ('sqlite_utils', 'numpy', 'click') if m in sys.modules), kind)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "sqlite3.Connection"]
    assert db.exists()


def test_nested_write_is_a_savepoint(reg: Registry) -> None:
    with reg.write() as db:
        db.execute("CREATE TABLE t (x INTEGER)")
        db.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(RuntimeError), reg.write() as inner:
            inner.execute("INSERT INTO t VALUES (2)")
            raise RuntimeError("inner fails")
        with reg.write() as conn:
            conn.execute("INSERT INTO t VALUES (3)")
    assert [r[0] for r in reg.conn.execute("SELECT x FROM t ORDER BY x")] == [1, 3]
    assert not reg.conn.in_transaction


def test_pending_migrations_read_the_sqlite_utils_table(tmp_path: Path) -> None:
    names = mig.migrations.pending_names(sqlite3.connect(":memory:"))  # all of them, in order
    conn = sqlite3.connect(tmp_path / "r.db")
    assert mig.migrations.pending_names(conn) == names  # a fresh file: everything pending
    conn.close()
    Registry(tmp_path / "r.db").close()
    conn = sqlite3.connect(tmp_path / "r.db")
    assert mig.migrations.pending_names(conn) == []
    assert [r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations ORDER BY id")] == names
    conn.close()


def test_migration_records_are_sqlite_utils_own(tmp_path: Path) -> None:
    """specreg applies its migrations itself, in sqlite-utils' record format: sqlite-utils sees a
    registry specreg made as fully migrated (same table, primary key, unique index), and specreg
    sees one that sqlite-utils migrated (an older specreg) as up to date."""
    from sqlite_utils import Database, Migrations

    def theirs() -> Migrations:
        real = Migrations("specreg")
        for name in mig.migrations.names():
            real(name=name)(getattr(mig, name))
        return real

    Registry(tmp_path / "ours.db").close()
    ours = Database(tmp_path / "ours.db")
    assert theirs().pending(ours) == []
    table = ours["_sqlite_migrations"]
    assert table.pks == ["id"]  # type: ignore[union-attr]
    assert {tuple(i.columns) for i in table.indexes if i.unique} == {("migration_set", "name")}  # type: ignore[union-attr]
    before = list(table.rows)
    theirs().apply(ours)  # nothing left for sqlite-utils to do
    assert list(table.rows) == before
    ours.close()

    old = Database(tmp_path / "old.db")
    theirs().apply(old)
    old.close()
    with Registry(tmp_path / "old.db") as reg:
        assert mig.migrations.pending_names(reg.conn) == []
        assert reg.conn.execute("SELECT count(*) FROM _sqlite_migrations").fetchone()[0] == len(before)


def test_a_failing_migration_leaves_nothing(tmp_path: Path) -> None:
    """A migration and its record commit together: one that fails leaves no tables and no record."""
    conn = sqlite3.connect(tmp_path / "r.db", isolation_level=None)
    bad = mig.MigrationSet("specreg")
    bad()(mig.m001_artifacts)

    @bad(name="m002_broken")
    def _broken(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE half (x INTEGER)")
        raise sqlite3.OperationalError("disk I/O error")

    conn.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError):
        bad.apply(conn)
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    with pytest.raises(RuntimeError, match="inside the caller"):
        bad.apply(conn)  # never outside a transaction: a half-applied schema could commit
