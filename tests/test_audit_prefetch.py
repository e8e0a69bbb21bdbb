"""The integrity checks of `audit --all` run in a forked child (audit/prefetch.py): the same answers
as verifying in the audit's own process, a changed file caught either way, and no answer (the
parent verifies itself) whenever the child cannot give one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.bench_registry import fill
from specreg.audit.fleet import audit_by_hardware
from specreg.audit.prefetch import IntegrityPrefetch
from specreg.registry.store import Registry
from specreg.schemas.audit import Policy

POLICY = Policy.model_validate({"licence": {"require_revision": False}})


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        fill(reg, tmp_path, 0.02)
    return tmp_path / "r.db"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("rehash", [True, False])
def test_the_child_answers_what_the_parent_would(fleet: Path, tmp_path: Path, rehash: bool) -> None:
    changed = tmp_path / "files" / "model-00007.gguf"
    changed.write_bytes(changed.read_bytes()[:-1] + b"\x01")  # same size, other bytes
    (tmp_path / "files" / "model-00040.gguf").unlink()
    prefetch = IntegrityPrefetch.start(fleet, rehash=rehash)
    assert prefetch is not None
    got = prefetch.result()
    assert prefetch.result() is got  # read once
    with Registry(fleet, show_progress=False) as reg:
        recs = reg.get_artifacts(reg.admitted_artifacts())
        want = reg.verify_artifacts(recs.values(), rehash=rehash)  # what the audit itself would do
        assert reg.verify_artifacts(reg.artifact_sizes(recs), rehash=rehash) == want
    assert got == want and len(got) > 50
    bad = {sha: why for sha, (ok, why) in got.items() if not ok}
    assert any("missing" in (why or "") for why in bad.values())
    assert any("sha256 is now" in (why or "") for why in bad.values())  # rewritten: its ctime moved too


def test_an_audit_with_the_child_equals_one_without(fleet: Path, tmp_path: Path) -> None:
    (tmp_path / "files" / "model-00040.gguf").unlink()
    with Registry(fleet, show_progress=False) as reg:
        alone = audit_by_hardware(reg, POLICY, "test", rehash=True, spread=False)
    prefetch = IntegrityPrefetch.start(fleet, rehash=True)
    try:
        with Registry(fleet, show_progress=False) as reg:
            helped = audit_by_hardware(reg, POLICY, "test", rehash=True, spread=False, prefetch=prefetch)
    finally:
        assert prefetch is not None
        prefetch.close()
    assert "integrity" in {g for p in alone.pairs for g in p.failed_gates}
    assert alone.model_dump(exclude={"created_at"}) == helped.model_dump(exclude={"created_at"})


def test_no_answer_means_the_parent_verifies(tmp_path: Path) -> None:
    assert IntegrityPrefetch.start(tmp_path / "absent.db", rehash=True) is None
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database" * 100)
    prefetch = IntegrityPrefetch.start(garbage, rehash=True)
    assert prefetch is not None and prefetch.result() is None  # the child failed: no answer, no hang
    assert not _alive(prefetch.pid)


def test_close_stops_and_reaps_a_child_still_working(fleet: Path) -> None:
    prefetch = IntegrityPrefetch.start(fleet, rehash=True)
    assert prefetch is not None
    prefetch.close()
    assert not _alive(prefetch.pid)  # killed and reaped: no zombie left behind
    prefetch.close()  # twice is harmless
    with Registry(fleet, show_progress=False) as reg:  # a child killed mid-write leaves the registry whole
        assert reg.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
