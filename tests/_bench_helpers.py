"""Helpers for the benchmark tests (tests/benchmark/): real verdicts, small workloads, raw rows (models:
_registry_helpers)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from specreg.registry.store import Registry
from specreg.schemas.checks import CheckResult, PairVerdict
from specreg.sources.checking import check_and_record
from specreg.testing.modelspec import SMALL_NOISE
from specreg.validators.ruleset import load_rule_set

RULES = load_rule_set()
NOISE = SMALL_NOISE  # measured here: ~50% acceptance on the default workload

# Small on purpose: a completion (SSE /completion) and a chat request (/v1/chat/completions),
# one of them with an expect check; 16 tokens keep a condition well under a second.
ITEMS: list[dict[str, Any]] = [
    {
        "id": "rep",
        "stratum": "repetitive",
        "max_tokens": 16,
        "prompt": "key: value\nname: model\nkey: value\nname: draft\nkey: value\nname:",
    },
    {
        "id": "chat",
        "stratum": "chat",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hello, please answer the question"}],
    },
    {
        "id": "json",
        "stratum": "structured",
        "max_tokens": 16,
        "prompt": "Return JSON:",
        "expect": {"json_schema": {"type": "object"}},
    },
]


def workload(folder: Path, items: list[dict[str, Any]] | None = None, name: str = "wl.jsonl") -> Path:
    path = folder / name
    path.write_text("".join(json.dumps(i) + "\n" for i in (items or ITEMS)))
    return path


def admit(reg: Registry, target: Path, draft: Path | None, method: str = "draft-simple") -> int:
    """Check a pair with the real validators and record the verdict; returns the pair id."""
    return check_and_record(reg, target, draft, method, rule_set=RULES).pair_id


def force_verdict(
    reg: Registry, target: Path, draft: Path | None, method: str, admitted: bool, note: str = "recorded by the test"
) -> int:
    """A verdict the validators would not give: for runtime-vs-verdict disagreements."""
    t = reg.add_artifact(target)
    d = reg.add_artifact(draft) if draft else None
    sev = "pass" if admitted else "error"
    return reg.record_verdict(
        PairVerdict(
            admitted=admitted,
            method=method,
            target_sha256=t.sha256,
            draft_sha256=d.sha256 if d else None,
            rule_set=RULES.id,
            checks=[CheckResult(code="test.forced", severity=sev, message=note)],
        )
    )


def db_rows(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
    conn = sqlite3.connect(str(db))
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def changed_output(reg: Registry, run_id: str) -> None:
    """One draft-simple request whose output differs from the baseline, counted in its summaries."""
    with reg.write() as db:
        db.execute(
            "UPDATE bench_requests SET matches_baseline = 0 WHERE run_id = ? AND condition = 'draft-simple' "
            "AND prompt_id = 'chat-1' AND repeat = 0",
            (run_id,),
        )
        for stratum in ("all", "chat"):
            (text,) = db.execute(
                "SELECT summary_json FROM bench_summaries WHERE run_id = ? AND condition = "
                "'draft-simple' AND stratum = ?",
                (run_id, stratum),
            ).fetchone()
            s = json.loads(text)
            s["n_equal"] -= 1
            db.execute(
                "UPDATE bench_summaries SET summary_json = ? WHERE run_id = ? AND condition = 'draft-simple' "
                "AND stratum = ?",
                (json.dumps(s), run_id, stratum),
            )


def tiny_pair() -> tuple[int, Path]:
    """The tiny target and its one-layer draft, admitted for draft-simple in this test's registry
    (conftest's SPECREG_HOME / SPECREG_DB): (pair id, the home folder)."""
    import os

    from _registry_helpers import model

    home = Path(os.environ["SPECREG_HOME"])  # per test (conftest)
    target = model(home, "t.gguf")
    draft = model(home, "d.gguf", name="tiny-draft")
    with Registry(os.environ["SPECREG_DB"], show_progress=False) as reg:
        return admit(reg, target, draft), home
