"""One small real benchmark run shared by the audit and report tests (session-scoped), one
real sweep shared by the sweep and deploy tests (`sweep_world`), and one `specreg demo` shared
by the demo's tests and the help examples (`demo_world`).

A target and a small-noise draft (registered with licences and a pinned revision), their
draft-simple, ngram-simple and ngram-mod pairs, a rejected near-miss, and one run on the
bundled llama.cpp server: none, ngram-simple, ngram-mod, draft-simple; ngram-simple drafts in
every stratum. ngram-mod runs with an
n-gram match length the outputs can never reach, so llama.cpp drafts nothing and the runner
marks that condition failed: a real failed condition, not a doctored row.

Tests that change things (a file byte, a licence, a stale verdict) work on `world.copy()`,
a backup of the registry file, so the shared run is never altered.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from _bench_helpers import admit
from _registry_helpers import model
from _shared import built_once

from specreg.demo import NGRAM as DEMO_NGRAM
from specreg.demo import WORKLOAD
from specreg.registry.store import Registry
from specreg.schemas.audit import Policy
from specreg.sources.provenance import register
from specreg.testing.modelspec import SMALL_NOISE

HOSTILE = "<script>alert(1)</script> | $x$"  # a draft name: must stay inert in tables, HTML and plots
# The demo's workload. ngram-simple looks up 1-grams: with the demo's 3-grams the repetitive prompts'
# outputs repeat none, so that stratum drafts nothing and fails the speed gate (measured: 1-grams
# draft and accept in both strata). ngram-mod: no 500-token match in 512.
NGRAM = {**DEMO_NGRAM, "--spec-ngram-simple-size-n": 1, "--spec-ngram-mod-n-match": 500}
# A policy the run meets on its real numbers: no speed-up demanded, generous tails and memory.
LENIENT = Policy.model_validate(
    {
        "evidence": {"min_repetitions": 2},  # the world runs 2 (the default policy wants 3)
        "speed": {"min_speedup": 0.0, "p95_tolerance_pct": 10_000},
        "memory": {"max_extra_ram_pct": 50},
        "licence": {"allow": ["apache-2.0"], "require_revision": True},
    }
)


@dataclass
class AuditWorld:
    folder: Path
    db: Path
    target: Path
    draft: Path
    near_miss: Path
    pairs: dict[str, int]  # "draft-simple", "ngram-simple", "ngram-mod", "near-miss"
    run_id: str
    seconds: float

    def copy(self, dest: Path) -> Path:
        """A private copy of the registry, for a test that changes it."""
        return _backup(self.db, dest)

    def policy_file(self, folder: Path, **tables: dict[str, object]) -> Path:
        """LENIENT with some tables overridden, written as TOML."""
        data = LENIENT.model_dump(exclude_none=True)
        for table, values in tables.items():
            data[table] = {**data.get(table, {}), **values}
        lines = []
        for table, values in data.items():
            if isinstance(values, dict):
                lines.append(f"[{table}]")
                lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
            else:
                lines.append(f"{table} = {json.dumps(values)}")
        path = folder / "policy.toml"
        path.write_text("\n".join(lines) + "\n")
        return path


def _backup(db: Path, dest: Path) -> Path:
    """A copy of a registry file (sqlite backup API: consistent even with WAL)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    src = sqlite3.connect(db)
    dst = sqlite3.connect(dest)
    with dst:
        src.backup(dst)
    src.close()
    dst.close()
    return dest


def _build_audit_world(folder: Path) -> None:
    from specreg.benchmark.run.runner import Runner
    from specreg.schemas.bench_settings import BenchSettings

    t0 = time.monotonic()
    db = folder / "registry.db"
    target = model(folder, "target.gguf", name="audit-target")
    draft = model(folder, "draft.gguf", name=HOSTILE, noise=SMALL_NOISE, license=None)
    near = model(folder, "near-miss.gguf", name="near-miss", token_edits=((300, "\u2581swapped"),))
    workload = folder / "workload.jsonl"
    workload.write_text(WORKLOAD)
    with pytest.MonkeyPatch.context() as mp, Registry(db, show_progress=False) as reg:
        mp.setenv("SPECREG_HOME", str(folder))  # run logs stay in the fixture's folder
        register(reg, target, repo="specreg/audit-target", revision="0123abc")
        # the draft file carries no licence: the user states it (a test withdraws it again)
        register(reg, draft, license="apache-2.0", repo="specreg/audit-draft", revision="4567def")
        pairs = {
            m: admit(reg, target, draft if m == "draft-simple" else None, m)
            for m in ("draft-simple", "ngram-simple", "ngram-mod")
        }
        pairs["near-miss"] = admit(reg, target, near, "draft-simple")
        opts = BenchSettings(
            workload=str(workload),
            repeat=2,
            ctx_size=512,
            threads=1,
            ngram=NGRAM,
            start_timeout_s=60,
            request_timeout_s=60,
            run_timeout_s=240,
        )
        run = Runner(reg, opts).bench([pairs["draft-simple"]])[0]
    made = {"pairs": pairs, "run_id": run.info.run_id, "seconds": time.monotonic() - t0}
    (folder / "world.json").write_text(json.dumps(made))


@pytest.fixture(scope="session")
def audit_world(tmp_path_factory: pytest.TempPathFactory) -> AuditWorld:
    """Built once per test run (by one xdist worker; the others wait and read its files)."""
    folder = built_once(tmp_path_factory, "audit-world", _build_audit_world)
    made = json.loads((folder / "world.json").read_text())
    # this process's own copy: commands that only read may still write caches into the file
    db = _backup(folder / "registry.db", tmp_path_factory.mktemp("audit-world-db") / "registry.db")
    return AuditWorld(
        folder,
        db,
        folder / "target.gguf",
        folder / "draft.gguf",
        folder / "near-miss.gguf",
        made["pairs"],
        made["run_id"],
        made["seconds"],
    )


def _build_sweep_world(d: Path) -> None:
    from _bench_helpers import ITEMS, NOISE, workload

    from specreg.benchmark.run.runner import Runner
    from specreg.schemas.bench_settings import BenchSettings

    target, draft = model(d, "t.gguf"), model(d, "d.gguf", noise=NOISE, name="noisy")
    with pytest.MonkeyPatch.context() as mp, Registry(d / "r.db", show_progress=False) as reg:
        mp.setenv("SPECREG_HOME", str(d / "home"))
        pid = admit(reg, target, draft)
        mod = admit(reg, target, None, "ngram-mod")
        opts = BenchSettings(
            workload=str(workload(d, ITEMS[:2])),
            methods=["draft-simple", "ngram-mod"],
            draft_n_max=[2, 4],
            concurrency=[1, 2],
            ngram={"--spec-ngram-mod-n-match": 500},
            repeat=2,
            threads=1,
            ctx_size=512,
            start_timeout_s=30,
            request_timeout_s=30,
        )
        run = Runner(reg, opts).bench([pid])[0]
    (d / "sweep.json").write_text(json.dumps({"pid": pid, "mod": mod, "run_id": run.info.run_id}))


@pytest.fixture(scope="session")
def sweep_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """One real sweep shared by benchmark/test_sweep.py and audit/test_deploy.py (read only): draft-simple at
    draft lengths 2 and 4 and ngram-mod with a match length the outputs never reach (a real
    failed condition), each at concurrency 1 and 2 with a baseline per level; tiny models, two
    prompts, two rounds. Built once per test run, like `audit_world`. `reg` stays open for the
    session; `db` is its file; `run` is the run as the registry holds it."""
    from specreg.benchmark.store.runstore import RunStore

    d = built_once(tmp_path_factory, "sweep", _build_sweep_world)
    made = json.loads((d / "sweep.json").read_text())
    db = _backup(d / "r.db", tmp_path_factory.mktemp("sweep-db") / "r.db")  # this process's own copy
    reg = Registry(db, show_progress=False)
    run = RunStore(reg).load(made["run_id"])
    yield SimpleNamespace(reg=reg, db=db, run=run, pid=made["pid"], mod=made["mod"], folder=d)
    reg.close()


def _build_demo_world(folder: Path) -> None:
    from _cli_helpers import run_specreg

    env = {**os.environ, "COLUMNS": "200"}  # one line per pair (the demo wraps at the width)
    env.pop("SPECREG_DB", None)  # the demo's registry lives in DIR unless --db is given
    t0 = time.monotonic()
    # a space in the path, as users have
    proc = run_specreg(["demo", "--dir", str(folder / "demo dir")], env=env, cwd=folder, timeout=300)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (folder / "demo.json").write_text(json.dumps({"stdout": proc.stdout, "stderr": proc.stderr, "seconds": seconds}))


@pytest.fixture(scope="session")
def demo_world(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """`specreg demo --dir "DIR"` run once per test run (a piped process), read only: `folder`
    is its DIR (models, registry, policy, report, server logs), `stdout` what it printed at 200
    columns, `stderr` its progress, `seconds` how long it took. A test that runs commands
    against it works on a copy of the folder (the registry's paths still name the shared models, which stay)."""
    root = built_once(tmp_path_factory, "demo", _build_demo_world)
    made = json.loads((root / "demo.json").read_text())
    return SimpleNamespace(
        folder=root / "demo dir", stdout=made["stdout"], stderr=made["stderr"], seconds=made["seconds"]
    )


def specreg(*args: str, db: Path) -> tuple[int, str, str]:
    """The CLI in this process (its error mapping included): exit code, stdout, stderr.

    A fresh interpreter costs a second or more per call on a busy 2-core machine; the
    subprocess tests in audit/test_policy.py / audit/test_gates.py keep the console script honest.
    """
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from specreg.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(["--db", str(db), *args])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()
