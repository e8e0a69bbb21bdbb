"""The README's pipeline with its defaults passes on a pair that really is faster.

`bench admitted` repeats 3 times by default and the default policy asks for 3, so
`check pair && bench admitted && audit` can pass; the speed gate then needs the speed-up's
95% interval to start at or above the minimum. The pair: a 16-layer target and a 1-layer draft
sharing one head (embeddings, output) with near-silent blocks, so the draft predicts the
target's greedy tokens (acceptance ~1) at about a sixteenth of its cost per token.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _bench_helpers import workload
from _registry_helpers import model

from specreg.audit.policy import example_policy_text

SPECREG = [sys.executable, "-m", "specreg.cli"]
FAST_PAIR = dict(n_embd=384, n_ff=1536, n_ctx=1024, block_scale=0.02, head_seed=7)
ITEMS = [  # two prompts per stratum, as the built-in workload has: 6 paired requests per stratum
    {"id": "rep-1", "stratum": "repetitive", "max_tokens": 32, "prompt": "a b c a b c a b c"},
    {"id": "rep-2", "stratum": "repetitive", "max_tokens": 32, "prompt": "key: value\nkey: value\nkey:"},
    {"id": "chat-1", "stratum": "chat", "max_tokens": 32, "prompt": "Why test a server before production?"},
    {"id": "chat-2", "stratum": "chat", "max_tokens": 32, "prompt": "Question: what is a draft model?\nAnswer:"},
]


def _specreg(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECREG_HOME": str(home), "SPECREG_DB": str(home / "r.db"), "COLUMNS": "120"}
    return subprocess.run([*SPECREG, *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_check_bench_audit_with_defaults_passes_on_a_faster_pair(tmp_path: Path) -> None:
    target = model(tmp_path, "target.gguf", n_layer=16, **FAST_PAIR)
    draft = model(tmp_path, "draft.gguf", n_layer=1, name="small-draft", **FAST_PAIR)
    policy = tmp_path / "policy.toml"
    policy.write_text(example_policy_text())  # what README's `--policy examples/policy.toml` uses
    wl = workload(tmp_path, ITEMS)

    checked = _specreg(tmp_path, "check", "pair", str(target), str(draft))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    bench = _specreg(
        tmp_path, "bench", "admitted", "--workload", str(wl), "--methods", "draft-simple", "--threads", "1",
        "--ctx-size", "1024", "--json",
    )  # fmt: skip
    assert bench.returncode == 0, bench.stderr
    (run,) = json.loads(bench.stdout)
    assert run["manifest"]["settings"]["repeat"] == 3  # the default
    whole = next(s for s in run["summaries"] if s["condition"] == "draft-simple" and s["stratum"] == "all")
    assert whole["acceptance"] > 0.9 and whole["speedup_ci95"][0] > 1.05, whole
    audit = _specreg(tmp_path, "audit", "--policy", str(policy), "--json")
    report = json.loads(audit.stdout)
    (pair,) = report["pairs"]
    failed = {g["gate"]: g["message"] for g in pair["gates"] if not g["passed"]}
    assert audit.returncode == 0 and report["passed"], failed
    assert {d["stratum"]: d["choice"] for d in report["decisions"]} == {
        "repetitive": f"draft-simple (pair {pair['pair_id']})",
        "chat": f"draft-simple (pair {pair['pair_id']})",
    }
