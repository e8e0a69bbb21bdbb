"""An audit of many pairs reads in batches (records, integrity, run digests): same answers as
auditing each pair on its own, on a small version of the registry-scale benchmark's data."""

from __future__ import annotations

from pathlib import Path

import pytest
from _bench_helpers import changed_output

from benchmarks.bench_registry import fill
from specreg.audit.run import run_audit
from specreg.benchmark.store.digest import load_digest, load_digests
from specreg.benchmark.store.run_index import RunIndex
from specreg.registry.store import Registry
from specreg.schemas.audit import Policy


@pytest.mark.slow  # ~40 audits of 150 pairs; the default suite runs the same batched reads (test_fleet.py)
def test_batched_audit_equals_pair_by_pair(tmp_path: Path) -> None:
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        fill(reg, tmp_path, 0.03)  # 300 artifacts, 150 pairs, 30 runs
        changed_output(reg, "bench-000002")
        (tmp_path / "files" / "model-00040.gguf").unlink()  # a draft gone: its pair fails integrity
        policy = Policy.model_validate({"licence": {"require_revision": False}})
        full = run_audit(reg, policy, "test")
        assert len(full.pairs) > 20
        failed = {g for p in full.pairs for g in p.failed_gates}
        assert {"integrity", "equivalence"} <= failed
        assert any(p.passed for p in full.pairs)
        runs = {r.run_id: r for r in full.runs}
        for pa in full.pairs[::4]:
            one = run_audit(reg, policy, "test", pair_ids=[pa.pair_id])
            assert one.pairs == [pa]
            assert one.runs == ([runs[pa.run_id]] if pa.run_id else [])
        index = RunIndex(reg)
        heads = {h.info.run_id: h for p in reg.pairs(admitted=True) for h in index(reg, p)}
        digests = load_digests(reg, heads.values(), spread=True)
        assert digests == {rid: load_digest(reg, h, spread=True) for rid, h in heads.items()}
        assert any(r.speedup_p5 is not None for r in digests["bench-000002"].strata)  # spread read
        assert any(r.failed_prompts == ["chat-1"] for r in digests["bench-000002"].strata)
