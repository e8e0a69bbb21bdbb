"""The fleet audit (one audit per hardware class, read in batches) gives the same answers as the
simplest path: each pair audited on its own, with only that class's runs found by one query per
pair. On a small version of the fleet benchmark's data: runs spread over three hardware classes,
one target measured in two of them, pairs measured nowhere."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

from benchmarks.bench_registry import fill
from specreg.audit.decisions import decide
from specreg.audit.fleet import audit_by_hardware
from specreg.audit.run import RunsFor, run_audit
from specreg.benchmark.store.digest import hardware_identity
from specreg.benchmark.store.run_index import RunHead, RunIndex, runs_for_pair
from specreg.registry.store import Registry
from specreg.schemas.audit import Policy
from specreg.schemas.registry import PairRecord


def _spread(db: Path, classes: int) -> None:
    """Run i is measured on host i % classes: its own CPU model, so its own hardware class."""
    with sqlite3.connect(db) as conn:
        ids = [rid for (rid,) in conn.execute("SELECT run_id FROM bench_runs ORDER BY run_id")]
        for i, rid in enumerate(ids):
            conn.execute(
                "UPDATE bench_runs SET manifest_json = json_set(manifest_json, '$.hardware.cpu_model', ?) "
                "WHERE run_id = ?",
                (f"host CPU {i % classes}", rid),
            )


def _only(cls: str) -> RunsFor:
    def runs_for(reg: Registry, pair: PairRecord) -> list[RunHead]:
        return [h for h in runs_for_pair(reg, pair) if hardware_identity(h.manifest) == cls]

    return runs_for


def test_fleet_audit_equals_each_pair_audited_alone_per_class(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    with Registry(db, show_progress=False) as reg:
        fill(reg, tmp_path, 0.03)  # 300 artifacts, 150 pairs, 30 runs
    _spread(db, 3)
    policy = Policy.model_validate({"licence": {"require_revision": False}})
    with Registry(db, show_progress=False) as reg:
        fleet = audit_by_hardware(reg, policy, "test")
        assert len(fleet.hardware_classes) == 3
        assert {p.hardware for p in fleet.pairs} == {*fleet.hardware_classes, None}  # and pairs measured nowhere
        # a target measured on two classes (runs 3 and 4 share pair 4's target) is audited on both
        twice = [p for p in fleet.pairs if p.pair_id == 4]
        assert len({p.hardware for p in twice}) == 2 and all(p.run_id for p in twice)
        assert any(p.passed for p in fleet.pairs)
        runs = {r.run_id: r for r in fleet.runs}
        for cls in [*fleet.hardware_classes, None]:
            mine = [p for p in fleet.pairs if p.hardware == cls]
            alone = []
            for p in mine:
                one = run_audit(
                    reg, policy, "test", pair_ids=[p.pair_id], runs_for=_only(cls) if cls else runs_for_pair
                )
                assert len(one.pairs) == 1 and one.runs == ([runs[p.run_id]] if p.run_id else [])
                alone.append(replace(one.pairs[0], hardware=cls))
            assert alone == mine
            # the per-stratum decisions of the class, from those audits alone (none where nothing was measured)
            decided = [replace(d, hardware=cls) for d in decide(alone, runs)]
            assert decided == [d for d in fleet.decisions if d.hardware == cls]
            assert bool(decided) == (cls is not None)


def test_run_index_partition_and_measured_keep_the_pairs_order(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    with Registry(db, show_progress=False) as reg:
        fill(reg, tmp_path, 0.01)  # 100 artifacts, 50 pairs, 10 runs
    _spread(db, 2)
    with Registry(db, show_progress=False) as reg:
        pairs = reg.pairs(admitted=True)
        index = RunIndex(reg)
        classes = {h.info.run_id: hardware_identity(h.manifest) for p in pairs for h in index(reg, p)}
        views = index.partition({rid: c for rid, c in classes.items() if c})
        assert len(views) == 2
        slots: dict[tuple[str, str], list[tuple[int, PairRecord]]] = {}
        for i, p in enumerate(reversed(pairs)):  # any order the caller chose is kept
            slots.setdefault((p.target_sha256, p.method), []).append((i, p))
        for cls, view in views.items():
            got = view.measured(slots)
            want = [p for p in reversed(pairs) if any(hardware_identity(h.manifest) == cls for h in index(reg, p))]
            assert got == want and got
            assert all(hardware_identity(h.manifest) == cls for p in got for h in view(reg, p))
