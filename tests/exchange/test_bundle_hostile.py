"""Imports that cannot lie (issue 36): each attack on `specreg import` reproduced, as a regression.

A bundle adds evidence, never overrides what this machine decided: a resealed bundle (every
digest recomputed, tests/_bundle_helpers.py) with an extra admitted verdict for a pair this
registry rejected, summaries that say NaN or "faster" against their own rows, a device or a FIFO
where a bundle belongs. The source registry is the shared audit world (one real run on the
bundled llama.cpp server; "near-miss" is a pair its checks rejected).
"""

from __future__ import annotations

import json
import math
import os
import random
import sqlite3
import time
from pathlib import Path

import pytest
from _audit_world import AuditWorld, specreg
from _bundle_helpers import dump, rewrite

from specreg.registry.store import Registry
from specreg.schemas.record import to_python


@pytest.fixture
def source(audit_world: AuditWorld, tmp_path: Path) -> Path:
    return audit_world.copy(tmp_path / "source.db")


@pytest.fixture
def bundle(source: Path, tmp_path: Path) -> Path:
    code, _, err = specreg("export", "--all", "-o", str(tmp_path / "all.zip"), db=source)
    assert code == 0, err
    return tmp_path / "all.zip"


def _jsonl(blob: bytes) -> list[dict]:
    return [json.loads(x) for x in blob.splitlines() if x.strip()]


def _put(data: dict[str, bytes], name: str, recs: list[dict]) -> None:
    data[name] = b"".join(json.dumps(r, sort_keys=True, separators=(",", ":")).encode() + b"\n" for r in recs)


def _pair_row(db: Path, pair_id: int) -> tuple:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT admitted, strict, latest_verdict_id FROM pairs WHERE id = ?", (pair_id,)).fetchone()
    finally:
        conn.close()


def _near_miss_record(world: AuditWorld, db: Path) -> dict:
    with Registry(db, show_progress=False) as reg:
        p = reg.get_pair(world.pairs["near-miss"])
        good = reg.get_pair(world.pairs["draft-simple"])
    return {"target_sha256": p.target_sha256, "draft_sha256": p.draft_sha256, "method": p.method.value,
            "rule_set": p.rule_set, "good_checks": [to_python(c) for c in good.checks]}  # fmt: skip


def _with_verdict(world: AuditWorld, db: Path, verdict: dict):
    near = _near_miss_record(world, db)

    def edit(data: dict[str, bytes], header: dict) -> None:
        recs = _jsonl(data["pairs.jsonl"])
        rec = next(
            r
            for r in recs
            if r["target_sha256"] == near["target_sha256"] and r.get("draft_sha256") == near["draft_sha256"]
        )
        v = dict(verdict)
        if v.get("checks") == "good":  # an admission resting on checks that pass (the admitted pair's)
            v["checks"] = near["good_checks"]
        rec["verdicts"].append(v)
        _put(data, "pairs.jsonl", recs)

    return edit


@pytest.mark.parametrize(
    ("verdict", "needle"),
    [
        ({"admitted": True, "strict": False, "checks": [], "created_at": "2099-01-01T00:00:00+00:00"}, "no checks"),
        ({"admitted": True, "strict": True, "checks": "good", "created_at": "zzzz"}, "not an ISO 8601 time"),
        (
            {
                "admitted": True,
                "strict": False,
                "checks": [{"code": "x", "severity": "error", "message": "no"}],
                "created_at": "2099-01-01T00:00:00+00:00",
            },
            "not what its checks give",
        ),
    ],
)
def test_a_verdict_without_checks_or_time_is_refused(
    audit_world: AuditWorld, source: Path, bundle: Path, tmp_path: Path, verdict: dict, needle: str
) -> None:
    forged = rewrite(bundle, tmp_path / "forged.zip", _with_verdict(audit_world, source, verdict))
    before = dump(source)
    code, _, err = specreg("import", str(forged), db=source)
    assert code == 2 and needle in err and err.count("error:") == 1, err
    assert dump(source) == before


def test_an_imported_admission_never_admits_a_pair_rejected_here(
    audit_world: AuditWorld, source: Path, bundle: Path, tmp_path: Path
) -> None:
    verdict = {"admitted": True, "strict": False, "checks": "good", "created_at": "2099-01-01T00:00:00+00:00"}
    forged = rewrite(bundle, tmp_path / "forged.zip", _with_verdict(audit_world, source, verdict))
    near = audit_world.pairs["near-miss"]
    before = _pair_row(source, near)
    assert before[0] == 0  # rejected here
    code, out, err = specreg("import", str(forged), db=source)
    assert code == 0, err
    assert "1 verdict from elsewhere" in out
    assert _pair_row(source, near) == before  # the standing verdict is this machine's, untouched
    code, out, _ = specreg("pairs", "--admitted", "--json", db=source)
    assert near not in {p["id"] for p in json.loads(out)}
    code, out, _ = specreg("pairs", "--json", db=source)
    row = next(p for p in json.loads(out) if p["id"] == near)
    assert row["admitted"] is False and row["elsewhere"]["admitted"] is True and row["checked_here"] is True
    with Registry(source, show_progress=False) as reg:
        assert near not in {p.id for p in reg.admitted_pairs()}
    code, out, err = specreg("bench", "admitted", "--pair", str(near), db=source)
    assert code != 0 and "rejected, not benchmarked" in err, err
    code, out, _ = specreg(
        "audit", "--pair", str(near), "--policy", str(audit_world.policy_file(tmp_path)), "--json", db=source
    )
    gate = next(g for p in json.loads(out)["pairs"] for g in p["gates"] if g["gate"] == "verdict")
    assert gate["passed"] is False


def test_a_pair_admitted_only_elsewhere_is_shown_so_and_refused(
    audit_world: AuditWorld, bundle: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "dest.db"
    code, out, err = specreg("import", str(bundle), db=dest)
    assert code == 0, err
    assert "not checked here" in out
    code, out, _ = specreg("pairs", db=dest)
    assert "admitted elsewhere, not checked here" in " ".join(out.split())
    code, out, _ = specreg("pairs", "--admitted", "--json", db=dest)
    assert json.loads(out) == []
    with Registry(dest, show_progress=False) as reg:
        pid = next(p.id for p in reg.pairs() if p.method == "draft-simple" and p.elsewhere and p.elsewhere.admitted)
    code, _, err = specreg("bench", "admitted", "--pair", str(pid), db=dest)
    assert code != 0 and "admitted elsewhere" in err and "not checked here" in err, err
    code, out, _ = specreg(
        "audit", "--pair", str(pid), "--policy", str(audit_world.policy_file(tmp_path)), "--json", db=dest
    )
    gate = next(g for p in json.loads(out)["pairs"] for g in p["gates"] if g["gate"] == "verdict")
    assert gate["passed"] is False and "not checked here" in gate["message"]


def test_an_import_checks_pairs_here_when_their_files_are_registered_here(
    audit_world: AuditWorld, bundle: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "dest.db"
    for f in (audit_world.target, audit_world.draft):
        assert specreg("register", str(f), db=dest)[0] == 0
    code, out, err = specreg("import", str(bundle), db=dest)
    assert code == 0, err
    assert "checked here from the registered files" in out
    with Registry(dest, show_progress=False) as reg:
        ds = next(p for p in reg.pairs() if p.method == "draft-simple" and p.draft_sha256 is not None
                  and p.elsewhere is not None and p.elsewhere.admitted)  # fmt: skip
        assert ds.checked_here and ds.admitted  # this machine's own checks admitted it
        near = next(p for p in reg.pairs() if p.elsewhere is not None and not p.elsewhere.admitted)
        assert not near.checked_here and not near.admitted  # its draft is not here


def _edit_summaries(change):
    def edit(data: dict[str, bytes], header: dict) -> None:
        for name in [n for n in data if n.endswith("/summaries.jsonl")]:
            recs = _jsonl(data[name])
            for r in recs:
                if r["condition"] == "draft-simple":
                    change(r["summary"])
            data[name] = b"".join(
                json.dumps(r, sort_keys=True).encode() + b"\n" for r in recs
            )  # NaN as Python writes it

    return edit


def _nan_faster(s: dict) -> None:
    s.update(speedup=math.nan, speedup_ci95=[math.nan, math.inf], decision="faster")


def _claims_faster(s: dict) -> None:
    s.update(speedup=9.5, speedup_ci95=[9.0, 10.0], decision="faster")


@pytest.mark.parametrize(
    ("change", "needle"),
    [(_nan_faster, "NaN is not a JSON number"), (_claims_faster, "not what its request rows give")],
)
def test_summaries_are_drawn_again_from_the_rows(bundle: Path, tmp_path: Path, change, needle: str) -> None:
    forged = rewrite(bundle, tmp_path / "forged.zip", _edit_summaries(change))
    dest = tmp_path / "dest.db"
    Registry(dest, show_progress=False).close()
    before = dump(dest)
    code, _, err = specreg("import", str(forged), db=dest)
    assert code == 2 and needle in err and err.count("error:") == 1, err
    assert dump(dest) == before


def test_the_audit_and_runs_show_survive_a_damaged_stored_summary(
    audit_world: AuditWorld, source: Path, tmp_path: Path
) -> None:
    conn = sqlite3.connect(source)
    with conn:
        for rowid, text in conn.execute(
            "SELECT rowid, summary_json FROM bench_summaries WHERE condition = 'draft-simple'"
        ).fetchall():
            s = json.loads(text)
            _nan_faster(s)
            conn.execute("UPDATE bench_summaries SET summary_json = ? WHERE rowid = ?", (json.dumps(s), rowid))
    conn.close()
    policy = str(audit_world.policy_file(tmp_path))
    code, out, err = specreg("audit", "--policy", policy, "--json", db=source)
    assert "Traceback" not in out + err and code == 1, err
    report = json.loads(out)
    judged = {p["pair_id"] for p in report["pairs"]}
    assert audit_world.pairs["draft-simple"] in judged and len(judged) > 1  # the other pairs still judged
    mine = next(p for p in report["pairs"] if p["pair_id"] == audit_world.pairs["draft-simple"])
    assert not mine["admitted_for_deployment"] if "admitted_for_deployment" in mine else True
    text = json.dumps(mine)
    assert "cannot be read" in text, text[:2000]
    code, out, err = specreg("audit", "--policy", policy, db=source)
    assert "Traceback" not in out + err and code == 1, err
    code, out, err = specreg("runs", "show", audit_world.run_id, db=source)
    assert code == 2 and err.count("error:") == 1 and "cannot be read" in err and "speedup" in err, err
    assert "nan" not in out.lower() and "inf" not in out.lower(), out
    for args in (["runs"], ["runs", "--json"], ["pairs"], ["runs", "--by-hardware"]):
        code, out, err = specreg(*args, db=source)
        assert code == 0 and "Traceback" not in err and "nan" not in out.lower().replace("nanox", ""), (args, out, err)


def test_a_device_or_a_fifo_is_not_a_bundle(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    Registry(db, show_progress=False).close()
    fifo = tmp_path / "b.zip"
    os.mkfifo(fifo)
    link = tmp_path / "zero.zip"
    link.symlink_to("/dev/zero")
    for path in ("/dev/zero", str(fifo), str(link)):
        t0 = time.monotonic()
        code, _, err = specreg("import", path, db=db)
        assert code == 2 and err.startswith("error:") and "not a regular file" in err and err.count("error:") == 1, err
        assert time.monotonic() - t0 < 5


def test_a_bundle_whose_decisions_were_drawn_before_the_slice_is_kept(audit_world: AuditWorld, tmp_path: Path) -> None:
    """Runs are decided by decision/bar.py and record it; a bundle written before records no
    method and was decided by decision/sequential.py's sequence, whose interval, before it was
    cut to its running slice, was the whole grid's hull: where its truth left the interval, that
    collapsed it to a point the slice no longer gives. A bundle written then stores that
    interval; the import draws it again the old way too and keeps the run. A claim no way gives
    stays refused."""
    from specreg.benchmark.store.runstore import RunStore
    from specreg.exchange.rederive import check_summaries, derived_summaries, method_of

    source = audit_world.copy(tmp_path / "source.db")
    conn = sqlite3.connect(source)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(bench_requests)") if r[1] not in ("id", "repeat")]
    with conn:  # 45 rounds of the run's two prompts, then the draft's log speed-up jumps from +0.5 to -0.5
        for rep in range(2, 45):
            conn.execute(
                f"INSERT INTO bench_requests (repeat, {', '.join(cols)}) SELECT ?, {', '.join(cols)} "
                "FROM bench_requests WHERE repeat = ?",
                (rep, rep % 2),
            )
        keys = conn.execute(
            "SELECT DISTINCT repeat, prompt_id FROM bench_requests WHERE condition = 'draft-simple' ORDER BY 1, 2"
        ).fetchall()
        rng = random.Random(1)
        for i, (rep, pid) in enumerate(keys):
            x = rng.gauss(0.5, 0.05) if i < 30 else rng.gauss(-0.5, 0.05)
            for cond, ms in (("none", 100.0), ("draft-simple", 100.0 / math.exp(x))):
                conn.execute(
                    "UPDATE bench_requests SET prompt_ms = 0, predicted_ms = ?, total_ms = ? "
                    "WHERE condition = ? AND repeat = ? AND prompt_id = ?",
                    (ms, ms, cond, rep, pid),
                )
    conn.close()
    with Registry(source, show_progress=False) as reg:
        store = RunStore(reg)
        run = store.load(audit_world.run_id)
        assert method_of(run) == "bar"  # decided by decision/bar.py, and recorded so
        old = derived_summaries(run, "grid")
        whole = next(s for s in old if s.condition == "draft-simple" and s.stratum == "all")
        assert whole.decision_ci is not None and whole.decision_ci[0] == whole.decision_ci[1]  # a point
        now = next(s for s in derived_summaries(run) if s.condition == "draft-simple" and s.stratum == "all")
        assert now.decision_ci != whole.decision_ci and now.decision == whole.decision
        store.set_summaries(audit_world.run_id, run.info.target_sha256, run.info.draft_sha256, old)
        assert method_of(store.load(audit_world.run_id)) == "slice"  # none recorded: the sequence before bar.py
        assert check_summaries(store.load(audit_world.run_id)) is None
    code, _, err = specreg("export", "--all", "-o", str(tmp_path / "old.zip"), db=source)
    assert code == 0, err
    code, out, err = specreg("import", str(tmp_path / "old.zip"), db=tmp_path / "dest.db")
    assert code == 0 and "imported 1 run" in out, err

    def _between(s: dict) -> None:
        if s["stratum"] == "all":
            s["decision_ci"] = [s["decision_ci"][0], s["decision_ci"][0] * 1.001]

    forged = rewrite(tmp_path / "old.zip", tmp_path / "forged.zip", _edit_summaries(_between))
    code, _, err = specreg("import", str(forged), db=tmp_path / "dest2.db")
    assert code == 2 and "not what its request rows give" in err, err
