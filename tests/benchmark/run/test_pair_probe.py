"""The pair probe (issue 51): the target alone and the target with a draft, on the real server,
generating the same tokens for the same prompts; kept in the registry by both files, method,
draft length and machine key; and the prediction `drafts` makes from it.

The prediction's arithmetic is checked on probes built by hand; the real server's probes are
taken once per module."""

from __future__ import annotations

from pathlib import Path

import pytest

from specreg.audit.acceptance_prior import fit_prior
from specreg.audit.draft_prediction import MODEL_SPREAD, Book, pair_alpha, predict
from specreg.benchmark.run import pair_probe as pp
from specreg.gguf.summary import summarize
from specreg.registry.hashing import sha256_file
from specreg.registry.store import Registry
from specreg.schemas.drafts import ErrorStat
from specreg.schemas.machine_probe import PairProbe, PairProbeRequest
from specreg.servers.launcher import bundled_command
from specreg.servers.machine_key import MachineKey, machine_key
from specreg.servers.pinning import Pinning
from specreg.testing import ModelSpec, write_model

TARGET = ModelSpec(name="Tiny-1B", n_layer=8)
SMALL = TARGET.but(n_layer=1, name="Tiny-100M")
KEY = MachineKey("Some CPU x2; no GPU; cpu", "bundled xllamacpp 0.0.1")


def _hand_probe(ratios: list[float], drafted: int = 40, accepted: int = 30, k: int = 4) -> PairProbe:
    def req(i: int, x: float) -> PairProbeRequest:
        return PairProbeRequest(prompt=f"p{i}", tokens=48, base_ms=100.0, spec_ms=100.0 / x, drafted=drafted,
                                accepted=accepted, steps=drafted // k)  # fmt: skip

    reqs = [req(i, x) for i, x in enumerate(ratios)]
    return PairProbe(target_sha256="t" * 64, draft_sha256="d" * 64, method="draft-simple", draft_length=k,
                     hardware=KEY.hardware, runtime=KEY.runtime, requests=reqs, seconds=1.0,
                     probed_at="2026-01-01T00:00:00+00:00")  # fmt: skip


def _book(tmp_path: Path) -> tuple[Book, object, object]:
    t, d = write_model(tmp_path / "t.gguf", TARGET), write_model(tmp_path / "d.gguf", SMALL)
    ts, ds = summarize(t), summarize(d)
    book = Book({}, {"t" * 64: ts, "d" * 64: ds}, [], fit_prior([]), ErrorStat(n_pairs=0), (0.8, 1.5))
    return book, ts, ds


def test_a_pair_probe_predicts_at_its_length_from_what_it_measured(tmp_path: Path) -> None:
    """With a pair probe the prediction is the probe's median ratio at the probe's draft length,
    its acceptance the probe's counts; the range holds the point and reads the machine."""
    book, ts, ds = _book(tmp_path)
    prior = predict(book, "draft-simple", ts, ds, "t" * 64, "d" * 64)  # type: ignore[arg-type]
    assert prior.source == "prior" and prior.verdict is None  # no probe of any kind: hardware-blind
    book.pair_probes[("t" * 64, "d" * 64, "draft-simple")] = _hand_probe([0.5, 0.6, 0.55])
    got = predict(book, "draft-simple", ts, ds, "t" * 64, "d" * 64)  # type: ignore[arg-type]
    assert got.source == "pair probe" and got.draft_length == 4 and got.speedup == pytest.approx(0.55)
    lo, hi = got.speedup_range
    assert lo <= 0.5 * MODEL_SPREAD[0] + 1e-9 and 0.6 * MODEL_SPREAD[1] - 1e-9 <= hi < 1.0  # every prompt's ratio
    assert got.verdict == "not faster on this machine"  # a measured pair knows the machine
    assert "90 of 120 drafted tokens accepted" in got.evidence
    a = pair_alpha(_hand_probe([1.0]))
    assert a is not None and a[1] < a[0] < a[2]
    # a faster probe reads `faster`; one across 1x `either way`
    book.pair_probes[("t" * 64, "d" * 64, "draft-simple")] = _hand_probe([1.6, 1.7, 1.65], accepted=38)
    assert predict(book, "draft-simple", ts, ds, "t" * 64, "d" * 64).verdict == "faster on this machine"  # type: ignore[arg-type]
    book.pair_probes[("t" * 64, "d" * 64, "draft-simple")] = _hand_probe([0.95, 1.0, 1.05])
    assert predict(book, "draft-simple", ts, ds, "t" * 64, "d" * 64).verdict == "either way on this machine"  # type: ignore[arg-type]


def test_a_probe_that_drafted_nothing_leaves_the_prior(tmp_path: Path) -> None:
    """Acceptance with zero drafts is undefined, not 0: no pair-probe prediction from it."""
    book, ts, ds = _book(tmp_path)
    book.pair_probes[("t" * 64, "d" * 64, "draft-simple")] = _hand_probe([0.9], drafted=0, accepted=0)
    assert pair_alpha(_hand_probe([0.9], drafted=0, accepted=0)) is None
    assert predict(book, "draft-simple", ts, ds, "t" * 64, "d" * 64).source == "prior"  # type: ignore[arg-type]


def test_pair_probes_are_kept_by_files_method_length_and_machine(tmp_path: Path) -> None:
    probe = _hand_probe([0.8])
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        assert reg.record_pair_probe(probe)
        assert reg.pair_probe("t" * 64, "d" * 64, "draft-simple", 4, KEY.hardware, KEY.runtime, KEY.flags) == probe
        assert (
            reg.pair_probe("t" * 64, "d" * 64, "draft-simple", 5, KEY.hardware, KEY.runtime, KEY.flags) is None
        )  # another length
        assert reg.pair_probe("t" * 64, "d" * 64, "draft-simple", 4, "Other", KEY.runtime, ()) is None
        with reg.write() as conn:  # a damaged row is a miss (probed again), never an error
            conn.execute("UPDATE pair_probes SET probe_json = '{\"requests\": 3}'")
        assert reg.pair_probe("t" * 64, "d" * 64, "draft-simple", 4, KEY.hardware, KEY.runtime, KEY.flags) is None


# ---- the real server ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def paired(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("pair")
    t, d = write_model(root / "target.gguf", TARGET), write_model(root / "small.gguf", SMALL)
    cmd = bundled_command()
    key = machine_key(cmd, Pinning(None, None))
    db = root / "registry.db"
    cand = pp.Candidate(sha256_file(d), d, "draft-simple", 3)
    with Registry(db, show_progress=False) as reg:
        got = pp.ensure(reg, sha256_file(t), t, [cand], key, cmd, Pinning(None, None), log_dir=root / "logs")
        for probe in got.probes.values():  # as if taken on a quiet machine: kept whatever the load now
            reg.record_pair_probe(probe.model_copy(update={"load": 0.0}))
    return {"got": got, "db": db, "target": t, "cand": cand, "key": key, "root": root}


def test_the_pair_and_the_target_alone_generate_the_same_tokens(paired: dict[str, object]) -> None:
    got = paired["got"]
    assert isinstance(got, pp.PairProbed) and not got.failures, got.failures
    (probe,) = got.probes.values()
    assert [r.prompt for r in probe.requests] == [p for p, _ in pp.PROMPTS]
    assert probe.name == "small.gguf" and probe.draft_length == 3 and probe.seconds > 0 and got.seconds > 0
    for r in probe.requests:  # greedy, end of text ignored: both made GENERATED, the pair with drafts
        assert r.tokens == pp.GENERATED and r.base_ms > 0 and r.spec_ms > 0
        assert r.base_prompt_ms > 0 and r.spec_prompt_ms > 0 and r.end_to_end > 0
        assert r.drafted > 0 and 0 <= r.accepted <= r.drafted
        assert r.steps is None or r.drafted <= 3 * r.steps  # never more than k per step
    assert pair_alpha(probe) is not None


def test_a_kept_pair_probe_is_read_back_without_a_server(paired: dict[str, object]) -> None:
    cand, key = paired["cand"], paired["key"]
    assert isinstance(cand, pp.Candidate) and isinstance(key, MachineKey)
    t, root = Path(str(paired["target"])), Path(str(paired["root"]))
    with Registry(Path(str(paired["db"])), show_progress=False) as reg:
        again = pp.ensure(reg, sha256_file(t), t, [cand], key, bundled_command(), Pinning(None, None),
                          log_dir=root / "logs")  # fmt: skip
    assert again.measured == [] and again.seconds == 0.0  # kept: no server started
    (kept,) = again.probes.values()
    assert kept.requests == next(iter(paired["got"].probes.values())).requests  # type: ignore[attr-defined]
