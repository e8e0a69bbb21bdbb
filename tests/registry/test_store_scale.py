"""Registry scale: 10,000 artifacts and 5,000 pairs list in well under 2 s (indexes, no summaries)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest
from _registry_helpers import model
from sqlite_utils import Database

from specreg.registry.store import Registry
from specreg.schemas.checks import CheckResult, PairVerdict
from specreg.sources.provenance import register

N_ARTIFACTS = 10_000
N_PAIRS = 5_000


def _fill(reg: Registry, tmp_path: Path) -> list[str]:
    """Clone one real registered artifact's rows (real summary/licence JSON) N times."""
    real = register(reg, model(tmp_path, "t.gguf"), license="mit", repo="org/m", revision="r" * 40)
    art = dict(reg.database.one("SELECT * FROM artifacts WHERE sha256 = ?", (real.sha256,)))
    path = dict(reg.database.one("SELECT * FROM artifact_paths WHERE sha256 = ?", (real.sha256,)))
    shas = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(N_ARTIFACTS - 1)]
    checks = [CheckResult(code=f"check.{k}", severity="pass", message="ok " * 10, evidence={"k": k}) for k in range(12)]
    with reg.write() as conn:
        db = Database(conn)  # sqlite-utils' bulk insert, on the registry's own transaction
        db["artifacts"].insert_all(({**art, "sha256": s, "name": f"m{i}"} for i, s in enumerate(shas)), batch_size=500)
        db["artifact_paths"].insert_all(
            ({**path, "id": None, "sha256": s, "path": f"/models/{s}.gguf", "inode": i} for i, s in enumerate(shas)),
            batch_size=500,
        )
    with reg.write():  # one outer transaction: 5,000 fsyncs would only measure the disk
        for i in range(N_PAIRS):
            reg.record_verdict(
                PairVerdict(
                    admitted=i % 3 != 0,
                    method="draft-simple",
                    target_sha256=shas[i],
                    draft_sha256=shas[i + N_PAIRS - 1],
                    rule_set="rs",
                    checks=checks,
                )
            )
    return shas


# Thousands of artifacts and pairs: the scale variant of the list views that tests/registry/test_store.py
# runs on a few (the same queries); benchmarks/bench_registry.py measures their speed.
@pytest.mark.slow
def test_list_views_at_scale(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "reg.db", show_progress=False)
    shas = _fill(reg, tmp_path)
    # The bound is on this process's CPU time: on a shared 2-core CI box wall time mostly measures
    # the other test processes. Wall time is printed next to it.
    timings: dict[str, tuple[float, float]] = {}
    for label, fn in {
        "artifacts(list view)": lambda: reg.artifacts(with_summary=False),
        "pairs()": lambda: reg.pairs(),
        "pairs(admitted, no checks)": lambda: reg.pairs(admitted=True, with_checks=False),
        "get_artifact(prefix)": lambda: reg.get_artifact(shas[1234][:8]),
    }.items():
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        timings[label] = (time.process_time() - c, time.perf_counter() - t)
        assert out
    print({k: f"cpu {c * 1000:.0f} ms / wall {w * 1000:.0f} ms" for k, (c, w) in timings.items()})
    assert len(reg.artifacts(with_summary=False)) == N_ARTIFACTS
    assert len(reg.pairs()) == N_PAIRS
    # A guard against quadratic work (seconds per thousand pairs), not a speed claim: the numbers
    # users read come from benchmarks/bench_registry.py, measured against a named reference.
    assert max(c for c, _ in timings.values()) < 2.0, timings
    assert timings["get_artifact(prefix)"][0] < 0.05, timings
    reg.close()
