"""Batched reads (`get_artifacts`, `verify_artifacts`), plain sqlite3 for reads and writes, savepoints."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from _registry_helpers import aged, model

from specreg.registry import migrations as mig
from specreg.registry.provenance import register
from specreg.registry.store import Registry


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
        assert rec.summary is None and rec == full.model_copy(update={"summary": None})
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


def test_reads_and_writes_need_no_sqlite_utils(tmp_path: Path) -> None:
    """sqlite-utils runs the migrations only (registry/db.py): an up-to-date registry is read and
    written through plain sqlite3."""
    db = tmp_path / "r.db"
    Registry(db).close()  # created (migrations imported sqlite_utils in this process: fine)
    code = (
        "import sys; from specreg.registry.store import Registry\n"
        f"reg = Registry({str(db)!r}, show_progress=False); reg.pairs(); reg.artifacts(with_summary=False)\n"
        "with reg.write() as db: kind = type(db).__module__ + '.' + type(db).__name__\n"
        "print('sqlite_utils' in sys.modules, kind)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "sqlite3.Connection"]


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
