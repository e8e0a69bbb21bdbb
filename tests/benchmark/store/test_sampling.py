"""The sampled stage (issue 27): a temperature sweep on the real bundled server, what each request
and condition records, the greedy stage before the sampled one, the sampled checks, and the
audit and `deploy` at the policy's `[sampling]`.

One real run on tiny models shared by the module: draft-simple at temperature 0 and 0.7, the
sampled one with greedy and probabilistic draft sampling, three repetitions in blocked order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from _audit_world import specreg
from _bench_helpers import ITEMS, NOISE, admit, workload
from _registry_helpers import model

from specreg.audit.deploy import server_argv
from specreg.audit.policy import parse_policy
from specreg.benchmark.plan.conditions import plan, schedule
from specreg.benchmark.store.sampling import distribution_test, pass_rate_difference, prefixes
from specreg.errors import PolicyError, UsageError
from specreg.registry.store import Registry
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.sampling import Sampler

POLICY = (
    "[evidence]\nmin_repetitions = 3\n"
    "[speed]\nmin_speedup = 0.0\np95_tolerance_pct = 100000\n[memory]\nmax_extra_ram_pct = 90\n"
    "[licence]\nunknown = 'pass'\nrequire_revision = false\n"
)


def _settings(d: Path, **kw: object) -> BenchSettings:
    base: dict[str, object] = {
        "workload": str(workload(d, ITEMS)),
        "methods": ["draft-simple"],
        "repeat": 3,
        "threads": 1,
        "ctx_size": 512,
        "order": "blocked",
        "start_timeout_s": 30,
        "request_timeout_s": 30,
    }
    return BenchSettings(**(base | kw))


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    from specreg.benchmark.run.runner import Runner

    d = tmp_path_factory.mktemp("sampled")
    target, draft = model(d, "t.gguf"), model(d, "d.gguf", noise=NOISE, name="noisy")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECREG_HOME", str(d / "home"))
        with Registry(d / "r.db", show_progress=False) as reg:
            pid = admit(reg, target, draft)
            opts = _settings(d, temperature=[0, 0.7], draft_sampling=["greedy", "probabilistic"])
            run = Runner(reg, opts).bench([pid])[0]
    yield SimpleNamespace(db=d / "r.db", run=run, pid=pid, folder=d, target=target, draft=draft)


def _policy(folder: Path, sampling: str = "") -> Path:
    path = folder / "policy.toml"
    path.write_text(POLICY + sampling)
    return path


# ---- planning ------------------------------------------------------------------------------


def test_a_temperature_list_is_a_sweep_with_a_baseline_per_sampler_and_greedy_first() -> None:
    specs = plan(
        "draft-simple",
        draft_path="d.gguf",
        draft_sha256="ab",
        methods=["draft-simple"],
        samplers=[Sampler(), Sampler(temperature=0.7, top_p=0.9)],
        draft_sampling=["greedy", "probabilistic"],
    )
    names = [s.name for s in specs]
    # draft sampling multiplies only the sampled draft condition: at T=0 both modes verify alike
    assert names == [
        "none T0",
        "none T0.7",
        "draft-simple T0",
        "draft-simple T0.7 greedy",
        "draft-simple T0.7 probabilistic",
    ]
    assert [s.draft_sampling for s in specs] == [None, None, None, "greedy", "probabilistic"]
    assert all(s.top_p == 0.9 for s in specs if s.temperature)
    order = [slot.condition for slot in schedule(specs, 2, "rounds", 7)]
    first_sampled = min(i for i, n in enumerate(order) if "T0.7" in n)
    assert all("T0 " in n + " " for n in order[:first_sampled]) and len(order[:first_sampled]) == 4
    assert order[first_sampled].startswith("none")  # each stage starts with its baseline
    with pytest.raises(UsageError, match="draft methods"):
        plan("ngram-simple", draft_path=None, draft_sha256=None, methods=["ngram-simple"], draft_sampling=["greedy"])


def test_sampling_flags_are_validated_in_one_line() -> None:
    with pytest.raises(UsageError, match="--temperature: every temperature must be between 0 and 5"):
        BenchSettings.from_options(temperature=[0, 9])
    with pytest.raises(UsageError, match="--draft-sampling"):
        BenchSettings.from_options(draft_sampling=["sometimes"])
    with pytest.raises(UsageError, match="--top-p"):
        BenchSettings.from_options(top_p=1.5)
    assert BenchSettings.from_options(temperature=[0.7, 0, 0.7]).temperature == [0.0, 0.7]


# ---- the statistics ------------------------------------------------------------------------


def _aa(rng: np.random.Generator, *, differ: bool) -> tuple[dict, dict]:
    base, cond = {}, {}
    for p in range(6):
        dist = rng.dirichlet([0.5] * 12, size=4)
        draws = np.stack([rng.choice(12, size=16, p=dist[j]) for j in range(4)], axis=1).tolist()
        base[str(p)] = [tuple(x) for x in draws[:8]]
        if differ:  # a sampler built to differ: always each position's most likely token
            cond[str(p)] = [tuple(int(x) for x in dist.argmax(axis=1))] * 8
        else:
            cond[str(p)] = [tuple(x) for x in draws[8:]]
    return base, cond


def test_distribution_check_false_alarm_rate_on_a_a_simulations() -> None:
    """The permutation test's level is exact: on A/A data (both sides from one distribution) it
    flags about alpha of runs (the docstring's 2,000-run figure: 5.5% at 0.05); here 200 runs,
    where 5% +- 3 standard errors is 0.4%..9.6%. A sampler built to differ is flagged every time."""
    rng = np.random.default_rng(2027)
    ps = [distribution_test(*_aa(rng, differ=False), seed=i, permutations=200).p for i in range(200)]
    rate = float(np.mean([p is not None and p < 0.05 for p in ps]))
    assert 0.004 <= rate <= 0.096, rate
    flagged = [distribution_test(*_aa(rng, differ=True), seed=i, permutations=200).p for i in range(10)]
    assert all(p is not None and p < 0.01 for p in flagged)


def test_distribution_check_without_evidence_never_flags() -> None:
    same = {"a": [(1, 2, 3, 4)] * 3}
    assert distribution_test(same, same).p == 1.0
    assert distribution_test({"a": []}, same).p is None  # nothing on one side: not run, not passed
    distinct = {"a": [(1,), (2,), (3,)]}
    assert distribution_test(distinct, {"a": [(4,), (5,), (6,)]}).p == 1.0  # every token once: no power


def test_pass_rate_interval() -> None:
    d, (lo, hi) = pass_rate_difference(20, 20, 20, 20) or (0.0, (0.0, 0.0))
    assert d == 0 and -0.2 < lo < 0 < hi < 0.2  # Newcombe: an interval even at 100% on both sides
    d, (lo, hi) = pass_rate_difference(5, 20, 20, 20) or (0.0, (0.0, 0.0))
    assert d == -0.75 and hi < 0
    assert pass_rate_difference(1, 1, 0, 0) is None


# ---- the real run --------------------------------------------------------------------------


def test_every_request_records_its_sampler_and_repetition_seed(sampled: SimpleNamespace) -> None:
    run = sampled.run
    assert run.info.status == "complete", run.info.status_reason
    by = {c.spec.name: c for c in run.conditions}
    assert set(by) == {"none T0", "none T0.7", "draft-simple T0", "draft-simple T0.7 greedy",
                       "draft-simple T0.7 probabilistic"}  # fmt: skip
    for r in run.requests:
        assert r.seed == 42 + r.repeat
        assert r.temperature == by[r.condition].spec.temperature
    argv = by["draft-simple T0.7 probabilistic"].argv
    assert argv[argv.index("--temp") + 1] == "0.7"
    assert argv[argv.index("--spec-draft-sampling") + 1] == "probabilistic"
    assert "--temp" not in by["draft-simple T0"].argv  # greedy runs keep their old command line
    m = run.manifest
    assert m is not None and m.request.temperatures == [0.0, 0.7] and m.request.seeds
    assert m.request.draft_sampling == ["greedy", "probabilistic"]


def test_rows_read_back_from_the_registry_with_their_sampler(sampled: SimpleNamespace) -> None:
    from specreg.benchmark.store.runstore import RunStore

    with Registry(sampled.db, show_progress=False) as reg:
        again = RunStore(reg).load(sampled.run.info.run_id)
    assert [(r.seed, r.temperature) for r in again.requests] == [(r.seed, r.temperature) for r in sampled.run.requests]


def test_greedy_stage_exact_and_sampled_stage_judged_by_checks(sampled: SimpleNamespace) -> None:
    whole = {s.condition: s for s in sampled.run.summaries if s.stratum == "all"}
    greedy = whole["draft-simple T0"]
    assert greedy.n_compared > 0 and greedy.n_equal == greedy.n_compared
    for name in ("draft-simple T0.7 greedy", "draft-simple T0.7 probabilistic"):
        s = whole[name]
        assert s.temperature == 0.7 and s.n_compared == 0  # no exact match at T > 0
        assert s.speedup is not None  # against the T0.7 baseline
        assert s.n_expect_checked == s.n_base_expect_checked == 3
        assert s.dist_p is not None and not s.dist_flagged, (name, s.dist_p)
    # the same seed with a greedy draft: the target samples and matches, so its random numbers go
    # as the baseline's and the output is the baseline's, token for token
    rows = {(r.condition, r.prompt_id, r.repeat): r.output_ids for r in sampled.run.requests}
    same = [
        rows[("draft-simple T0.7 greedy", p, k)] == rows[("none T0.7", p, k)] for (c, p, k) in rows if c == "none T0.7"
    ]
    assert all(same)


def test_distribution_check_flags_a_condition_built_to_differ(sampled: SimpleNamespace) -> None:
    """The baseline at temperature 0 against the baseline at 0.7: a different sampler, real outputs."""
    rows = sampled.run.requests
    t0 = prefixes(r for r in rows if r.condition == "none T0")
    t07 = prefixes(r for r in rows if r.condition == "none T0.7")
    assert (distribution_test(t0, t07).p or 1.0) < 0.01
    assert (
        distribution_test(t07, prefixes(r for r in rows if r.condition == "draft-simple T0.7 probabilistic")).p or 0
    ) > 0.01


def test_runs_show_gives_acceptance_and_speedup_per_sampler(sampled: SimpleNamespace) -> None:
    code, out, err = specreg("runs", "show", sampled.run.info.run_id, db=sampled.db)
    assert code == 0, err
    text = " ".join(out.split())
    assert "per sampler" in text
    assert "draft-simple T0.7 (T0.7, probabilistic draft): acceptance" in text
    assert "distribution p=" in text and "temperature 0,0.7" in text
    code, out, _ = specreg("runs", "show", sampled.run.info.run_id, "--json", db=sampled.db)
    summaries = json.loads(out)["summaries"]
    assert {(s["temperature"], s["draft_sampling"]) for s in summaries} >= {(0.7, "probabilistic"), (0.0, None)}


# ---- the audit and deploy at the policy's sampler ------------------------------------------


def test_policy_sampling_table() -> None:
    p = parse_policy("[sampling]\ntemperature = 0.7\ntop_p = 0.9\n")
    assert p.sampling.temperature == 0.7 and p.sampling.top_p == 0.9 and p.sampling.top_k is None
    assert parse_policy("").sampling.greedy
    # at temperature 0 the argmax is the argmax: a greedy run with --top-p is greedy evidence
    assert Sampler(top_p=0.9).key == Sampler().key != Sampler(temperature=0.7).key
    assert Sampler(temperature=0.7, top_p=0.9).key != Sampler(temperature=0.7).key
    with pytest.raises(PolicyError, match=r"unknown key 'sampling\.temp'"):
        parse_policy("[sampling]\ntemp = 0.7\n", "p.toml")


def test_deploy_at_the_policy_sampler_pins_it_and_the_winning_draft_mode(
    sampled: SimpleNamespace, tmp_path: Path
) -> None:
    pol = _policy(tmp_path, "[sampling]\ntemperature = 0.7\n")
    code, out, err = specreg("deploy", str(sampled.pid), "--policy", str(pol), "--json", db=sampled.db)
    plan_ = json.loads(out)
    assert code == 0 and plan_["deployable"], (plan_.get("failed_gates"), err)
    argv = plan_["argv"]
    assert argv[argv.index("--temp") + 1] == "0.7"
    assert plan_["sampler"] == "T0.7"
    assert plan_["draft_sampling"] in ("greedy", "probabilistic")
    assert argv[argv.index("--spec-draft-sampling") + 1] == plan_["draft_sampling"]
    assert plan_["condition"].startswith("draft-simple T0.7")
    rollback = plan_["rollback_argv"]
    assert rollback[rollback.index("--temp") + 1] == "0.7"  # the baseline at production's sampler
    code, out, _ = specreg("deploy", str(sampled.pid), "--policy", str(pol), db=sampled.db)
    assert "sampler: T0.7" in out and "--temp 0.7" in out
    # the default (greedy) policy deploys the T0 condition, as before
    code, out, _ = specreg("deploy", str(sampled.pid), "--policy", str(_policy(tmp_path)), "--json", db=sampled.db)
    greedy = json.loads(out)
    assert greedy["condition"] == "draft-simple T0" and greedy["argv"][greedy["argv"].index("--temp") + 1] == "0"


def test_deploy_refuses_without_evidence_at_the_policy_sampler_and_names_the_command(
    sampled: SimpleNamespace, tmp_path: Path
) -> None:
    pol = _policy(tmp_path, "[sampling]\ntemperature = 1.0\n")
    code, out, err = specreg("deploy", str(sampled.pid), "--policy", str(pol), db=sampled.db)
    text = " ".join((out + err).split())
    assert code == 1
    assert "not the policy's T1" in text
    assert f"specreg bench admitted --pair {sampled.pid} --temperature 0,1" in text
    assert "--temp 0 " not in text + " "


def test_sampled_stage_refused_without_a_greedy_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only T0.7 asked, no greedy run stored for the pair: the sampled condition is refused with
    why, and its baseline stops too (issue 32: nothing run for nothing): no server starts for
    either."""
    from specreg.benchmark.run.runner import Runner

    monkeypatch.setenv("SPECREG_HOME", str(tmp_path / "home"))
    target, draft = model(tmp_path, "t.gguf"), model(tmp_path, "d.gguf", noise=NOISE)
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        pid = admit(reg, target, draft)
        run = Runner(reg, _settings(tmp_path, temperature=[0.7], repeat=1, warmup=0)).bench([pid])[0]
    by = {c.spec.name: c for c in run.conditions}
    assert by["draft-simple"].status == "skipped" and not by["draft-simple"].argv
    assert "no greedy stage" in (by["draft-simple"].failure or "")
    base = by["none"]
    assert (
        base.status == "skipped" and not base.argv and "every condition it is the baseline of" in (base.failure or "")
    )
    assert not run.requests
    assert run.info.status == "incomplete"


def test_a_stored_greedy_run_opens_the_sampled_stage(sampled: SimpleNamespace, tmp_path: Path) -> None:
    from specreg.benchmark.store.sampling import stored_greedy

    with Registry(sampled.db, show_progress=False) as reg:
        spec = next(c.spec for c in sampled.run.conditions if c.spec.name == "draft-simple T0.7 greedy")
        m = sampled.run.manifest
        assert m is not None
        args = (reg.conn, spec, sampled.run.info.target_sha256, sampled.run.info.draft_sha256, m.runtime)
        assert stored_greedy(*args, m.request.workload_sha256).run_id == sampled.run.info.run_id
        other = stored_greedy(*args, "another workload")  # other prompts: no greedy stage, and why
        assert other.run_id is None and other.near == sampled.run.info.run_id
        assert other.why is not None and other.why.startswith("it ran other prompts")


def test_deploy_argv_reads_the_condition_sampler_before_the_run_default() -> None:
    cmd = ["llama-server", "-m", "t.gguf", "--spec-type", "draft-simple", "-md", "d.gguf",
           "--spec-draft-sampling", "probabilistic", "--temp", "0.7", "--min-p", "0.05", "-c", "512"]  # fmt: skip
    argv = server_argv(cmd)
    assert argv[argv.index("--temp") + 1] == "0.7" and argv[argv.index("--min-p") + 1] == "0.05"
    assert argv[argv.index("--spec-draft-sampling") + 1] == "probabilistic"


def test_a_bundle_carries_each_request_sampler_and_seed(sampled: SimpleNamespace, tmp_path: Path) -> None:
    from specreg.benchmark.store.runstore import RunStore
    from specreg.exchange.bundle import export_bundle, import_bundles

    rid = sampled.run.info.run_id
    with Registry(sampled.db, show_progress=False) as reg:
        export_bundle(reg, tmp_path / "b.zip", run_ids=[rid])
    with Registry(tmp_path / "other.db", show_progress=False) as reg:
        import_bundles(reg, [tmp_path / "b.zip"])
        again = RunStore(reg).load(rid)
    key = [(r.condition, r.prompt_id, r.repeat, r.seed, r.temperature) for r in sampled.run.requests]
    assert sorted(key) == sorted((r.condition, r.prompt_id, r.repeat, r.seed, r.temperature) for r in again.requests)
    assert {c.spec.name: c.spec.draft_sampling for c in again.conditions}["draft-simple T0.7 probabilistic"]


def test_the_run_report_gives_each_sampled_condition_at_its_sampler(sampled: SimpleNamespace, tmp_path: Path) -> None:
    code, _, err = specreg("runs", "show", sampled.run.info.run_id, "--report", str(tmp_path / "r.md"), db=sampled.db)
    assert code == 0, err
    text = (tmp_path / "r.md").read_text()
    assert "draft-simple T0.7 probabilistic at T0.7, probabilistic draft: acceptance" in text
    assert "distribution check p =" in text


def test_sampled_gate_fails_on_worse_expect_a_flagged_distribution_or_no_check() -> None:
    from specreg.audit.production_sampler import quality_gate
    from specreg.schemas.audit import ConditionDigest, Policy, RunDigest, StratumRow

    cond = ConditionDigest(label="ds", spec_type="draft-simple", temperature=0.7)

    def gate(**row: object) -> tuple[bool, str]:
        base = {"condition": "ds", "stratum": "chat", "temperature": 0.7, "dist_p": 0.5, "dist_n": 3}
        run = RunDigest(run_id="r", status="complete", conditions=[cond], strata=[StratumRow(**(base | row))])
        g = quality_gate(run, cond, Policy(), 1)
        assert g.gate == "equivalence"
        return g.passed, g.message

    assert gate()[0]
    assert gate(expect_diff=-0.05, expect_diff_ci95=(-0.3, 0.2))[0]  # within the tolerance, not beyond chance
    ok, why = gate(expect_diff=-0.3, expect_diff_ci95=(-0.5, -0.1))
    assert not ok and "expect pass rate -30%" in why
    ok, why = gate(expect_diff=-0.08, expect_diff_ci95=(-0.15, -0.01))
    assert not ok and "below 0" in why  # lower beyond chance even inside the tolerance
    ok, why = gate(dist_p=0.001)
    assert not ok and "differ from the baseline's in distribution" in why
    ok, why = gate(dist_p=None, dist_note="no prompt has outputs on both sides")
    assert not ok and "no distribution check" in why
    ok, _ = gate(dist_p=0.02)  # above the policy's alpha (0.01)
    assert ok
    strict = Policy.model_validate({"quality": {"distribution_alpha": 0.05}})
    run = RunDigest(
        run_id="r", status="complete", conditions=[cond],
        strata=[StratumRow(condition="ds", stratum="chat", temperature=0.7, dist_p=0.02)],
    )  # fmt: skip
    assert not quality_gate(run, cond, strict, 1).passed


def test_a_sampler_flag_the_server_lacks_is_refused_in_one_line(tmp_path: Path) -> None:
    from specreg.benchmark.store.sampling import unsupported
    from specreg.servers.launcher import ServerCommand, bundled_command

    wanted = BenchSettings(temperature=[0, 0.7], min_p=0.05, draft_sampling=["probabilistic"])
    assert unsupported(bundled_command(), wanted) is None  # the bundled build takes every one
    old = tmp_path / "llama-server"
    old.write_text("#!/bin/sh\necho '--temp N   temperature'\necho '--top-p N  top-p sampling'\n")
    old.chmod(0o755)
    why = unsupported(ServerCommand("external", (str(old),), str(old)), wanted)
    assert why is not None and "\n" not in why
    assert "does not take --min-p, --spec-draft-sampling" in why
    assert unsupported(ServerCommand("external", (str(old),), str(old)), BenchSettings()) is None  # greedy: no ask


def test_bench_cli_sampling_flags_errors_are_one_line(tmp_path: Path) -> None:
    for args, said in (
        (["--temperature", "0,x"], "--temperature '0,x': expected numbers separated by commas"),
        (["--temperature", "nan"], "--temperature 'nan': expected numbers"),
        (["--temperature", "7"], "--temperature: every temperature must be between 0 and 5"),
        (["--draft-sampling", "maybe"], "--draft-sampling:"),
        (["--min-p", "2"], "--min-p:"),
    ):
        code, _, err = specreg("bench", "admitted", *args, db=tmp_path / "r.db")
        assert code == 2 and said in err and "Traceback" not in err, (args, err)
        assert len(err.strip().splitlines()) <= 2, err
