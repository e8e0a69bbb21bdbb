"""The machine probe (issue 51): each model started alone on the real server for llama.cpp's own
batch and decode timings, kept in the registry by file, hardware, build and flags, and the
predictions priced by it: `drafts` (hardware-blind with --no-probe), `check pair --probe`.

The prices' arithmetic is checked on probes built by hand (a CPU's batch costs a decode per
token, a GPU's about one decode in all); the real server's probes are taken once per module."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
from _cli_helpers import run_specreg

from specreg.audit.acceptance_prior import fit_prior
from specreg.audit.draft_prediction import MODEL_SPREAD, Book, predict, speed_at
from specreg.benchmark.run import machine_probe as mp
from specreg.benchmark.store.stepcost import probe_prices, robust_line
from specreg.gguf.summary import summarize
from specreg.registry.hashing import sha256_file
from specreg.registry.store import Registry
from specreg.schemas.drafts import ErrorStat
from specreg.schemas.machine_probe import MachineProbe, ProbeRound
from specreg.servers.launcher import bundled_command
from specreg.servers.machine_key import MachineKey, machine_key
from specreg.servers.pinning import Pinning
from specreg.testing import ModelSpec, write_model

TARGET = ModelSpec(name="Tiny-1B", n_layer=8)
SMALL = TARGET.but(n_layer=1, name="Tiny-100M")  # a quarter of the target's weight bytes
KEY = MachineKey("Some CPU x2; no GPU; cpu", "bundled xllamacpp 0.0.1")


def _probe(sha: str, decode: list[float], batch: list[dict[int, float]], share: float | None = None) -> MachineProbe:
    rounds = [ProbeRound(decode_ms=d, batch_ms=b) for d, b in zip(decode, batch, strict=True)]
    return MachineProbe(sha256=sha, hardware=KEY.hardware, runtime=KEY.runtime, rounds=rounds,
                        output_share=share, seconds=1.0, probed_at="2026-01-01T00:00:00+00:00")  # fmt: skip


def _linear(a: float, b: float, slow: float = 1.0) -> dict[int, float]:
    return {n: (a + b * n) * slow for n in mp.BATCH_SIZES}


def test_prices_are_the_fastest_rounds_with_every_verified_tokens_logits() -> None:
    """A batch of n tokens costs 5 + 4n ms, a decode 10 ms; one round was slowed tenfold by a
    neighbour and moves nothing but the spread. A verify step of k drafted tokens is a decode
    plus k tokens at the batch's 4 ms each, with their logits (x 1/(1-s)); the 5 ms a prompt
    request pays to start is not a verify step's."""
    t = _probe("t" * 64, [10.0, 100.0, 11.0], [_linear(5, 4), _linear(5, 4, 10), _linear(5, 4, 1.1)], share=0.2)
    d = _probe("d" * 64, [6.0, 6.6, 60.0], [_linear(1, 1)] * 3)
    p = probe_prices(t, d, 32)
    assert p is not None
    per_token = 4 / 0.8
    for k in (1, 5, 16):
        assert p.verify[k - 1] == pytest.approx(1 + k * per_token / 10)
        assert p.verify_low[k - 1] <= p.verify[k - 1] <= p.verify_high[k - 1]
    assert p.verify_high[4] == pytest.approx(1 + 5 * 1.1 * per_token / 10)  # the second fastest round
    assert (
        p.draft == pytest.approx(0.6) and p.draft_low == pytest.approx(6 / 11) and p.draft_high == pytest.approx(0.66)
    )
    assert probe_prices(t, None, 32) is not None and probe_prices(t, None, 32).draft is None  # type: ignore[union-attr]
    # the line shrugs off one slow size (Theil-Sen), where least squares would tilt
    pts = _linear(5, 4) | {17: 500.0}
    a, b = robust_line(pts) or (0, 0)
    assert b == pytest.approx(4) and a == pytest.approx(5)


def _pair(tmp_path: Path) -> tuple[Book, object, object, str, str]:
    t, d = write_model(tmp_path / "t.gguf", TARGET), write_model(tmp_path / "d.gguf", SMALL)
    ts, ds = summarize(t), summarize(d)
    book = Book({}, {"t" * 64: ts, "d" * 64: ds}, [], fit_prior([]), ErrorStat(n_pairs=0), (0.8, 1.5))
    return book, ts, ds, "t" * 64, "d" * 64


def test_the_machine_decides_the_sign_and_the_blind_range_holds_either_machine(tmp_path: Path) -> None:
    """The same pair, the same acceptance prior: on a CPU (a batch costs ~ a decode per token, the
    draft decodes at 0.7 of the target) it is not faster; on a GPU (a batch of 33 costs about one
    decode, the draft its bytes' share) it is. Without a probe the range is hardware-blind: it
    holds both."""
    book, ts, ds, t_sha, d_sha = _pair(tmp_path)
    blind = predict(book, "draft-simple", ts, ds, t_sha, d_sha)  # type: ignore[arg-type]
    assert blind.costs == "hardware-blind" and blind.verdict is None
    machines = {
        "cpu": (_probe(t_sha, [10.0] * 3, [_linear(2, 9)] * 3), _probe(d_sha, [7.0] * 3, [_linear(1, 6)] * 3)),
        "gpu": (_probe(t_sha, [10.0] * 3, [_linear(9, 0.05)] * 3), _probe(d_sha, [2.6] * 3, [_linear(2, 0)] * 3)),
    }
    got = {}
    for name, (tp, dp) in machines.items():
        book.machine, book.probes = KEY, {t_sha: tp, d_sha: dp}
        got[name] = predict(book, "draft-simple", ts, ds, t_sha, d_sha)  # type: ignore[arg-type]
        assert got[name].costs == "machine probe"
        lo, hi = got[name].speedup_range
        assert lo <= got[name].speedup <= hi
    assert got["cpu"].verdict == "not faster on this machine", got["cpu"]
    # on the GPU the point is faster; the verdict says so only where even the low acceptance (the
    # prior's two sigmas below, ALPHA_Z) stays above 1x: for a 1:4 draft on the prior alone, either way
    assert got["gpu"].speedup > 1 > got["cpu"].speedup, got
    assert got["gpu"].verdict == "either way on this machine", got["gpu"]
    assert (got["cpu"].draft_length or 0) < (got["gpu"].draft_length or 0)  # a costly verify step: short drafts
    lo, hi = blind.speedup_range
    assert lo <= got["cpu"].speedup and got["gpu"].speedup <= hi, (blind.speedup_range, got)
    # the range's low end is the low acceptance at the high prices, times the model's spread
    x = got["cpu"]
    assert x.alpha_range is not None and x.draft_cost is not None
    low_alone = speed_at(x.draft_length or 1, x.alpha_range[0], x.draft_cost, ()) * MODEL_SPREAD[0]
    assert x.speedup_range[0] <= low_alone  # the verify step's price only lowers it further
    # only the target probed: v from it, r from the weights with a range up to a target decode
    book.probes = {t_sha: machines["cpu"][0]}
    partly = predict(book, "draft-simple", ts, ds, t_sha, d_sha)  # type: ignore[arg-type]
    assert partly.costs == "target probe" and partly.speedup_range[0] <= x.speedup


def test_probes_are_kept_by_file_and_machine_key(tmp_path: Path) -> None:
    probe = _probe("a" * 64, [1.0], [_linear(1, 1)])
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        assert reg.record_machine_probe(probe)
        assert reg.machine_probes(["a" * 64], KEY.hardware, KEY.runtime, KEY.flags) == {"a" * 64: probe}
        assert reg.machine_probes(["a" * 64], KEY.hardware, KEY.runtime, ("-t", "1", "-tb", "1")) == {}
        assert reg.machine_probes(["a" * 64], "Other CPU x64; no GPU; cpu", KEY.runtime, ()) == {}
        with reg.write() as conn:  # a damaged row is a miss (probed again), never an error
            conn.execute("UPDATE machine_probes SET probe_json = '{\"rounds\": 3}'")
        assert reg.machine_probes(["a" * 64], KEY.hardware, KEY.runtime, KEY.flags) == {}


# ---- the real server ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny target and its one-layer draft, each probed once on the bundled server into a
    registry the tests below share (what a user's second command finds)."""
    root = tmp_path_factory.mktemp("probe")
    t = write_model(root / "target.gguf", TARGET)
    (root / "m").mkdir()
    d = write_model(root / "m" / "small.gguf", SMALL)
    db = root / "registry.db"
    cmd = bundled_command()
    key = machine_key(cmd, Pinning(None, None))
    with Registry(db, show_progress=False) as reg:
        got = mp.ensure(reg, [(sha256_file(t), t), (sha256_file(d), d)], key, cmd, Pinning(None, None),
                        log_dir=root / "logs")  # fmt: skip
        assert not got.failures, got.failures
        for probe in got.probes.values():  # as if taken on a quiet machine: kept whatever the load now
            reg.record_machine_probe(probe.model_copy(update={"load": 0.0}))
    return {"target": t, "draft": d, "folder": root / "m", "db": db, "home": root}


def _env(probed: dict[str, Path], columns: int = 80) -> dict[str, str]:
    return dict(os.environ, SPECREG_DB=str(probed["db"]), SPECREG_HOME=str(probed["home"]), COLUMNS=str(columns))


def test_a_probe_times_every_batch_size_and_is_found_again(probed: dict[str, Path]) -> None:
    t = probed["target"]
    key = machine_key(bundled_command(), Pinning(None, None))
    with Registry(probed["db"], show_progress=False) as reg:
        kept = reg.machine_probes([sha256_file(t)], key.hardware, key.runtime, key.flags)
        again = mp.ensure(reg, [(sha256_file(t), t)], key, bundled_command(), Pinning(None, None),
                          log_dir=probed["home"] / "logs")  # fmt: skip
    (probe,) = kept.values()
    assert again.measured == [] and again.probes == kept  # kept: no second server start
    assert len(probe.rounds) == mp.REPEATS and probe.name == "target.gguf" and probe.seconds > 0
    for rnd in probe.rounds:  # llama.cpp evaluated each batch whole (no cached prefix)
        assert sorted(rnd.batch_ms) == list(mp.BATCH_SIZES) and rnd.decode_ms > 0
    assert probe.runtime.startswith("bundled xllamacpp ") and probe.hardware == key.hardware
    assert probe.output_share is not None and 0 < probe.output_share < 1
    prices = probe_prices(probe, None, 32)
    assert prices is not None and all(v >= 1 for v in prices.verify)


def test_drafts_prices_the_ranking_on_this_machine_and_no_probe_is_blind(probed: dict[str, Path]) -> None:
    args = ["drafts", str(probed["target"]), "--dir", str(probed["folder"])]
    proc = run_specreg([*args, "--json"], env=_env(probed))
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    m = rep["machine"]
    assert m["key"] and m["blind"] is None and m["measured"] == []  # both kept from the fixture's probes
    assert [p["name"] for p in m["probes"]] == ["target.gguf", "small.gguf"]
    (row,) = [r for r in rep["rows"] if r["method"] == "draft-simple"]
    pred = row["prediction"]
    assert pred["costs"] == "machine probe" and pred["verdict"].endswith("on this machine")
    # the best local draft also ran with the target (benchmark/run/pair_probe.py): its acceptance
    # and its ratio at the length the probes' pricing named
    (pair,) = m["pairs"]
    assert pair["name"] == "small.gguf" and pair["draft_length"] == pred["draft_length"]
    assert pred["source"] == "pair probe" and "drafted tokens accepted" in pred["evidence"]
    assert pred["speedup_range"][0] <= pred["speedup"] <= pred["speedup_range"][1]
    assert pred["verify_cost"] >= 1 and pred["draft_cost"] > 0
    blind = json.loads(run_specreg([*args, "--json", "--no-probe"], env=_env(probed)).stdout)
    (brow,) = [r for r in blind["rows"] if r["method"] == "draft-simple"]
    assert brow["prediction"]["costs"] == "hardware-blind" and brow["prediction"]["verdict"] is None
    assert blind["machine"]["blind"].startswith("--no-probe") and blind["machine"]["probes"] == []
    lo, hi = brow["prediction"]["speedup_range"]
    assert lo <= brow["prediction"]["speedup"] <= hi and brow["prediction"]["verify_cost"] == 1.0
    text = run_specreg(args, env=_env(probed)).stdout
    assert all(len(line) <= 80 for line in text.splitlines()), text
    flat = " ".join(text.split())
    assert "machine " in text and "probe target.gguf: " in flat and "kept from" in flat
    assert "small.gguf: " in flat and "of the target's" in flat
    assert re.search(r"pair small\.gguf at k\d+: \d+ of \d+ drafted tokens accepted, [\d.]+x over 3 prompts", flat)
    text = run_specreg([*args, "--no-probe"], env=_env(probed)).stdout
    assert "hardware-blind (--no-probe" in " ".join(text.split()) and re.search(r"\]  +blind\b", text), text


def test_check_pair_probe_prices_the_pair_beside_did_it_draft(probed: dict[str, Path]) -> None:
    proc = run_specreg(["check", "pair", str(probed["target"]), str(probed["draft"]), "-m", "draft-simple",
                        "--probe", "--json"], env=_env(probed))  # fmt: skip
    checks = {c["code"]: c for c in json.loads(proc.stdout)["checks"]}
    runtime, cost = checks["probe.runtime"], checks["probe.cost"]
    if runtime["evidence"]["status"] != "drafted":  # this pair drafts on the bundled server
        pytest.fail(runtime["message"])
    assert re.search(r"\d+ accepted \(\d+%\), in one request", runtime["message"]), runtime["message"]
    assert cost["severity"] == "info" and cost["message"].startswith("on this machine: target ")
    assert "probe(s)" not in cost["message"]  # both kept: nothing probed again
    ev = cost["evidence"]
    assert len(ev["probes"]) == 2 and ev["draft_length"] >= 1 and math.isfinite(ev["predicted_speedup"])
    assert 0 <= ev["alpha"] <= 1 and "on this machine" in cost["message"]


def test_a_busy_probe_is_taken_again_on_a_quiet_machine(
    probed: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe taken while other work held every core may be far off: kept, but measured again
    as soon as a later command finds the machine quiet (and said so in `drafts`)."""
    t = probed["draft"]
    key = machine_key(bundled_command(), Pinning(None, None))
    with Registry(probed["db"], show_progress=False) as reg:
        (probe,) = reg.machine_probes([sha256_file(t)], key.hardware, key.runtime, key.flags).values()
        reg.record_machine_probe(probe.model_copy(update={"load": 1000.0}))
        monkeypatch.setattr(mp, "load_average", lambda: 1000.0)  # still busy: kept
        assert mp.ensure(reg, [(probe.sha256, t)], key, bundled_command(), Pinning(None, None),
                         log_dir=probed["home"] / "logs").measured == []  # fmt: skip
        monkeypatch.setattr(mp, "load_average", lambda: 0.0)  # quiet now: taken again, and kept
        again = mp.ensure(reg, [(probe.sha256, t)], key, bundled_command(), Pinning(None, None),
                          log_dir=probed["home"] / "logs")  # fmt: skip
    assert again.measured == [probe.sha256] and again.probes[probe.sha256].load == 0.0


def test_the_verdict_reads_the_range_against_one() -> None:
    """A probed range wholly above 1x is `faster on this machine`, wholly below `not faster`, across
    it `either way`; a hardware-blind range says nothing about this machine."""
    from specreg.audit.draft_prediction import verdict

    assert verdict("machine probe", 1.05, 1.8) == "faster on this machine"
    assert verdict("machine probe", 0.4, 0.95) == "not faster on this machine"
    assert verdict("machine probe", 0.9, 1.2) == "either way on this machine"
    assert verdict("hardware-blind", 1.05, 1.8) is None
