"""Server logs live beside the registry that recorded the run, not under $SPECREG_HOME (issue 13)."""

from __future__ import annotations

import os
from pathlib import Path

from _bench_helpers import admit, workload
from _registry_helpers import model

from specreg.benchmark.run.runner import Runner
from specreg.registry.store import Registry
from specreg.schemas.bench_settings import BenchSettings


def test_run_directory_is_beside_the_registry_file(tmp_path: Path) -> None:
    home = Path(os.environ["SPECREG_HOME"])  # the autouse fixture's home: must stay empty of runs
    db = tmp_path / "elsewhere" / "team.db"
    db.parent.mkdir()
    target = model(tmp_path, "t.gguf")
    with Registry(db) as reg:
        pair = admit(reg, target, None, "ngram-simple")
        opts = BenchSettings(
            methods=["none"], workload=str(workload(tmp_path, name="w.jsonl")), threads=1, ctx_size=256
        )
        (run,) = Runner(reg, opts).bench([pair])
    run_dir = Path(run.info.run_dir or "")
    assert run_dir.parent == db.parent / "runs" and run_dir.name == run.info.run_id
    logs = sorted(p.name for p in run_dir.glob("*.log"))
    assert logs and all(Path(c.log_path or "").parent == run_dir for c in run.conditions)
    assert not (home / "runs").exists()
