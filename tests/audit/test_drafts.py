"""`specreg drafts TARGET`: candidates from folders, the registry and a loopback hub, judged by the
real validators, ranked by the prediction; hub failures and hostile headers one line each."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from _cli_helpers import run_specreg
from hubserver import FakeFile, FakeHub, hub, online  # noqa: F401

from specreg.testing import ModelSpec, write_model

# A target whose name carries a family ("Tiny") and a base model on the (loopback) hub
TARGET = ModelSpec(
    name="Tiny-135M-Instruct", base_model="Tiny 135M", base_model_repo_url="https://huggingface.co/acme/Tiny-135M"
)
CLOSE = TARGET.but(noise=0.05, name="Tiny-135M-noisy")
SMALL = TARGET.but(n_layer=1, name="Tiny-60M")
OTHER_VOCAB = TARGET.but(vocab_type="gpt2", name="Other-1B")
OTHER_BOS = TARGET.but(bos_id=5, name="Tiny-bos")


def drafts(*args: str, columns: int = 80, probe: bool = False) -> tuple[int, str, str]:
    """`specreg drafts ARGS`; hardware-blind unless `probe` (the machine probes are
    tests/benchmark/run/test_machine_probe.py's: a server start per model)."""
    extra = [] if probe else ["--no-probe"]
    proc = run_specreg(["drafts", *args, *extra], env=dict(os.environ, COLUMNS=str(columns)))
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def _models(folder: Path, specs: dict[str, ModelSpec]) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return {name: write_model(folder / f"{name}.gguf", spec) for name, spec in specs.items()}


@pytest.fixture
def local(tmp_path: Path) -> tuple[Path, Path]:
    t = write_model(tmp_path / "target.gguf", TARGET)
    _models(tmp_path / "models", {"close": CLOSE, "small": SMALL, "gpt2": OTHER_VOCAB, "bos": OTHER_BOS})
    return t, tmp_path / "models"


def test_folder_candidates_are_judged_by_check_pairs_validators(local: tuple[Path, Path]) -> None:
    target, folder = local
    rc, out, _ = drafts(str(target), "--dir", str(folder), "--json")
    assert rc == 0
    rep = json.loads(out)
    drafted = {Path(r["draft"]).stem: r for r in rep["rows"] if r["draft"]}
    assert set(drafted) == {"close", "small"}
    assert {r["method"] for r in rep["rows"] if r["draft"] is None} == {"ngram-simple", "ngram-mod"}
    assert rep["rejected_by_reason"] == {"vocab.type": 1, "vocab.bos": 1}
    # the same verdict `check pair` gives, for each
    for name, row in [*drafted.items(), *((Path(r["draft"]).stem, r) for r in rep["rejected"])]:
        proc = run_specreg(["check", "pair", str(target), str(folder / f"{name}.gguf"), "--json"])
        assert json.loads(proc.stdout)["admitted"] is row["admitted"], name
    # ranked by the prediction, best first; every admitted row has one, with a range around it
    preds = [r["prediction"]["speedup"] for r in rep["rows"]]
    assert preds == sorted(preds, reverse=True)
    for r in rep["rows"]:
        lo, hi = r["prediction"]["speedup_range"]
        assert lo <= r["prediction"]["speedup"] <= hi
    # the prior is the stated default (nothing measured here) and says so
    assert rep["prior"]["n_pairs"] == 0 and "default" in rep["prior"]["how"]
    assert drafted["small"]["prediction"]["source"] == "prior"
    assert drafted["small"]["bytes_per_token"] < drafted["close"]["bytes_per_token"]
    assert drafted["small"]["licence"] == "apache-2.0" and drafted["small"]["licence_allowed"] is True


def test_the_view_fits_80_columns_and_all_lists_the_rejected(local: tuple[Path, Path]) -> None:
    target, folder = local
    rc, out, _ = drafts(str(target), "--dir", str(folder), "--all")
    assert rc == 0
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "vocab.type" in out and "vocab.bos" in out and "draft-simple" in out and "ngram-mod" in out
    rc, out, _ = drafts(str(target), "--dir", str(folder))
    assert "--all lists them" in out and "vocab types differ" not in out


def test_registry_files_of_another_tokenizer_are_counted_without_being_opened(tmp_path: Path) -> None:
    target = write_model(tmp_path / "target.gguf", TARGET)
    models = _models(tmp_path / "reg", {"close": CLOSE, "gpt2": OTHER_VOCAB, "wide": TARGET.but(extra_tokens=200)})
    for p in models.values():
        assert run_specreg(["register", str(p)]).returncode == 0
    models["gpt2"].unlink()  # not opened: its absence costs nothing, not even a line
    models["wide"].unlink()
    rc, out, _ = drafts(str(target), "--json")
    rep = json.loads(out)
    assert rc == 0 and rep["other_tokenizer"] == 2, rep
    assert rep["rejected_by_reason"] == {"other tokenizer (not opened)": 2}
    assert rep["failures"] == []
    assert [r["where"] for r in rep["rows"] if r["draft"]] == ["registry"]


def test_a_bad_target_is_one_error_line(tmp_path: Path) -> None:
    rc, _, err = drafts(str(tmp_path / "missing.gguf"))
    assert rc == 2 and err.startswith("error:") and len([x for x in err.splitlines() if x.startswith("error:")]) == 1
    rc, _, err = drafts("acme/x-GGUF", "--json")  # offline (conftest): the hub target says so
    assert rc == 2 and "HF_HUB_OFFLINE" in err


def test_offline_hub_search_is_one_line_and_the_rest_still_answers(local: tuple[Path, Path]) -> None:
    target, folder = local
    rc, out, _ = drafts(str(target), "--dir", str(folder), "--hub")
    assert rc == 0
    assert len([ln for ln in out.splitlines() if "offline" in ln]) == 1
    assert "draft-simple" in out


BIG = 256 << 20


def _hub_world(hub: FakeHub, real_vocab_files: dict[str, Path], sparse_dir: Path) -> None:  # noqa: F811
    """Compatible repos (found by name and by base-model tag), incompatible ones (another
    tokenizer, llama.cpp's real vocab files), a hostile header and a gated repo."""
    from hubserver import gguf_bytes

    def spec_bytes(spec: ModelSpec, tmp: Path) -> bytes:
        return write_model(tmp / "m.gguf", spec).read_bytes()

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        hub.add_commit("acme/Tiny-135M-noisy-GGUF", {"tiny-noisy.Q8_0.gguf": spec_bytes(CLOSE, tmp)})
        hub.repos["acme/Tiny-135M-noisy-GGUF"].tags = ["gguf"]
        hub.repos["acme/Tiny-135M-noisy-GGUF"].card_license = "apache-2.0"
        # a big file (a sparse tail after a real header and tensors): only its header may travel
        big = write_model(sparse_dir / "small.gguf", SMALL)
        with open(big, "r+b") as f:
            f.truncate(BIG)
        hub.add_commit("other/renamed-GGUF", {"small.gguf": FakeFile(path=big)})
        hub.repos["other/renamed-GGUF"].tags = ["gguf", "base_model:acme/Tiny-135M"]
        hub.add_commit("acme/Tiny-gpt2-GGUF", {"gpt2.gguf": spec_bytes(OTHER_VOCAB, tmp)})
        hub.repos["acme/Tiny-gpt2-GGUF"].tags = ["gguf"]
    for name, path in real_vocab_files.items():
        repo = f"ggml/Tiny-vocab-{name}-GGUF"
        hub.add_commit(repo, {path.name: FakeFile(path=path)})
        hub.repos[repo].tags = ["gguf"]
    hostile = bytearray(gguf_bytes())
    hostile[8:16] = (2**40).to_bytes(8, "little")  # a tensor count no file of this size can hold
    hub.add_commit("evil/Tiny-hostile-GGUF", {"evil.gguf": bytes(hostile)})
    hub.repos["evil/Tiny-hostile-GGUF"].tags = ["gguf"]
    hub.add_commit("acme/Tiny-gated-GGUF", {"g.gguf": gguf_bytes()}, gated=True)
    hub.repos["acme/Tiny-gated-GGUF"].tags = ["gguf"]
    hub.add_commit("acme/Tiny-notgguf", {"model.safetensors": b"x" * 10})  # no gguf tag: never searched


def test_hub_candidates_judged_from_headers_failures_one_line_each(
    online: FakeHub,  # noqa: F811
    real_vocab: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    vocabs = {n: real_vocab(n) for n in ("llama-spm", "qwen2", "gpt-2")}
    _hub_world(online, vocabs, tmp_path)
    target = write_model(tmp_path / "target.gguf", TARGET)
    rc, out, _ = drafts(str(target), "--hub", "--limit", "20", "--json")
    assert rc == 0, out
    rep = json.loads(out)
    hub_rows = {r["repo"]: r for r in rep["rows"] if r["where"] == "hub"}
    assert set(hub_rows) == {"acme/Tiny-135M-noisy-GGUF", "other/renamed-GGUF"}  # by name and by base-model tag
    assert all(not r["local"] and r["sha256"] for r in hub_rows.values())
    assert hub_rows["acme/Tiny-135M-noisy-GGUF"]["licence"] == "apache-2.0"
    rejected = {r["repo"]: r["reason_code"] for r in rep["rejected"]}
    assert rejected["acme/Tiny-gpt2-GGUF"] == "vocab.type"
    assert {f"ggml/Tiny-vocab-{n}-GGUF" for n in vocabs} <= set(rejected)
    # the hostile header and the gated repo: one line each, naming the repo
    assert len([f for f in rep["failures"] if "evil/Tiny-hostile-GGUF" in f]) == 1
    assert len([f for f in rep["failures"] if "acme/Tiny-gated-GGUF" in f]) == 1
    assert len(rep["failures"]) == 2, rep["failures"]
    assert rep["searched_repos"] == 4 + len(vocabs) + 1  # gguf-tagged ones, nothing else
    # range reads only: everything the CDN sent is less than the big file alone
    assert online.bytes_sent < BIG // 8
    assert hub_rows["other/renamed-GGUF"]["size_bytes"] == BIG
    # the text view: one "skipped" line per failure, 80 columns
    rc, out, err = drafts(str(target), "--hub")
    assert rc == 0 and len([ln for ln in err.splitlines() if ln.startswith("skipped")]) == 2
    assert all(len(line) <= 80 for line in out.splitlines())


def test_limit_bounds_the_repos_read(online: FakeHub, tmp_path: Path) -> None:  # noqa: F811
    from hubserver import gguf_bytes

    for i in range(6):
        online.add_commit(f"acme/Tiny-{i}-GGUF", {"m.gguf": gguf_bytes(seed=0)})
        online.repos[f"acme/Tiny-{i}-GGUF"].tags = ["gguf"]
    target = write_model(tmp_path / "target.gguf", TARGET)
    rc, out, _ = drafts(str(target), "--hub", "--limit", "3", "--json")
    rep = json.loads(out)
    assert rc == 0 and rep["searched_repos"] == 3
    resolved = {p.split("/")[2] for p in online.paths() if "/resolve/" in p}
    assert len({p for p in resolved}) <= 3
    rc, _, err = drafts(str(target), "--hub", "--limit", "100000")
    assert rc == 2 and "--limit" in err


def test_a_hub_target_is_read_by_range_requests(online: FakeHub, tmp_path: Path) -> None:  # noqa: F811
    t = write_model(tmp_path / "t.gguf", TARGET)
    online.add_commit("acme/Tiny-135M-Instruct-GGUF", {"t.gguf": t.read_bytes()})
    _models(tmp_path / "m", {"close": CLOSE})
    rc, out, err = drafts("acme/Tiny-135M-Instruct-GGUF", "--dir", str(tmp_path / "m"), "--json")
    assert rc == 0, err
    rep = json.loads(out)
    assert [Path(r["draft"]).stem for r in rep["rows"] if r["draft"]] == ["close"]


@pytest.mark.slow
def test_bench_halves_the_field_and_the_ranking_then_puts_the_fastest_first(tmp_path: Path) -> None:
    """Real servers on tiny models: a draft that always agrees at an eighth of the target's depth,
    one whose head loops another way (never agrees), and a full-depth copy (agrees, costs as much
    as the target). The n-gram methods find nothing to copy in this short prompt: they fail (no
    drafts is a failure) and lose their places."""
    from _bench_helpers import workload

    from specreg.testing.modelspec import CYCLER

    folder = tmp_path / "m"
    target = write_model(tmp_path / "t.gguf", CYCLER.but(n_layer=8, name="Cyc-1B"))
    _models(folder, {
        "fast": CYCLER.but(n_layer=1, name="Cyc-100M"),
        "other": CYCLER.but(n_layer=1, head_seed=8, name="Cyc-100M-other"),  # another cycle: rejects
        "deep": CYCLER.but(n_layer=8, noise=0.01, name="Cyc-1B-copy"),
    })  # fmt: skip
    wl = workload(tmp_path, [{"id": "r", "stratum": "repetitive", "max_tokens": 48, "prompt": "a b c a b c"}])
    rc, out, err = drafts(str(target), "--dir", str(folder), "--bench", "4", "--budget", "150s", "--workload", str(wl),
                          "--json")  # fmt: skip
    assert rc in (0, 1), err
    rep = json.loads(out)
    b = rep["bench"]
    assert len(b["rounds"][0]["measured"]) == 4 and len(b["rounds"][0]["kept"]) == 2  # halved
    assert b["winner"] in b["rounds"][-1]["kept"]
    assert (b["deploy_command"] is None) == (b["why_not"] is not None)
    # the halving kept the final round's share: the winner's run meets the policy's minimum
    # repetitions, or its anytime-valid decision (a --budget run) meets it in their place
    assert b["repetitions"] is not None, b
    assert b["repetitions"] >= 3 or "anytime-valid" in (b["minimum_met_by"] or ""), b
    assert "policy minimum" not in (b["verdict"] or ""), b["verdict"]
    # every run is stored as `bench admitted` stores it
    listed = run_specreg(["runs", "--json"])
    stored = {r["run_id"] for r in json.loads(listed.stdout)}
    assert {rid for r in b["rounds"] for rid in r["run_ids"]} <= stored
    # now the registry has runs: the ranking's top measured row is the one measured fastest
    rc, out, _ = drafts(str(target), "--dir", str(folder), "--json")
    rows = [r for r in json.loads(out)["rows"] if r["prediction"]["measured_speedup"] is not None]
    assert len(rows) >= 2
    fastest = max(rows, key=lambda r: r["prediction"]["measured_speedup"])
    assert rows[0] is fastest or rows[0]["draft"] == fastest["draft"], [
        (r["draft"], r["prediction"]["speedup"], r["prediction"]["measured_speedup"]) for r in rows
    ]
    assert Path(rows[0]["draft"]).stem == "fast"
    assert json.loads(out)["error"]["n_pairs"] >= 2


@pytest.mark.slow  # SmolLM2 itself: a 98 MB download on a machine that has not fetched it
@pytest.mark.realmodel
def test_the_real_smollm2_pair_and_its_cross_pairs_with_other_real_families(
    real_model: Callable[[str], Path], real_vocab: Callable[[str], Path], tmp_path: Path
) -> None:
    """SmolLM2-135M-Instruct Q8_0 as the target: its Q4_1 is admitted and ranked; llama.cpp's real
    vocab files of other families, and tiny models built on their tokenizers, are rejected by the
    vocab rules; the other way round, SmolLM2 is no draft for a llama-spm target, while a tiny
    llama-spm model is."""
    folder = tmp_path / "m"
    folder.mkdir()
    q8, q4 = real_model("q8_0"), real_model("q4_1")
    (folder / q4.name).symlink_to(q4)
    families = ("llama-spm", "qwen2", "gpt-2")
    for name in families:
        (folder / f"vocab-{name}.gguf").symlink_to(real_vocab(name))
    spm = real_vocab("llama-spm")
    write_model(folder / "tiny-spm.gguf", ModelSpec(tokenizer_from=str(spm), name="TinySpm-10M"))
    rc, out, err = drafts(str(q8), "--dir", str(folder), "--json")
    assert rc == 0, err
    rep = json.loads(out)
    drafted = [r for r in rep["rows"] if r["draft"]]
    assert [Path(r["draft"]).name for r in drafted] == [q4.name]
    assert drafted[0]["quant"] == "MOSTLY_Q4_1" and drafted[0]["prediction"]["source"] == "prior"
    rejected = {Path(r["draft"]).stem: r["reason_code"] for r in rep["rejected"]}
    assert set(rejected) == {*(f"vocab-{n}" for n in families), "tiny-spm"}
    assert all(code.startswith(("vocab.", "file.")) for code in rejected.values()), rejected
    # the other way round: a llama-spm target
    spm_target = write_model(tmp_path / "spm-target.gguf", ModelSpec(tokenizer_from=str(spm), name="TinySpm-1B"))
    rc, out, _ = drafts(str(spm_target), "--dir", str(folder), "--json")
    rep = json.loads(out)
    assert [Path(r["draft"]).stem for r in rep["rows"] if r["draft"]] == ["tiny-spm"]
    why = {Path(r["draft"]).name: r["reason_code"] for r in rep["rejected"]}
    assert why[q4.name].startswith("vocab.")
    assert why["vocab-llama-spm.gguf"] == "admitted, not benchmarkable"  # check pair admits it; nothing to draft with


def test_bench_keeps_the_final_round_and_says_which_budget_would_decide(tmp_path: Path) -> None:
    """Real servers on tiny models, a budget round 1 alone spends: the final round (the policy's
    minimum repetitions for the leader) cannot fit, so it is not run - a winner with fewer
    repetitions would be refused by the audit - and the run says which --budget would hold it."""
    from _bench_helpers import workload

    from specreg.testing.modelspec import CYCLER

    folder = tmp_path / "m"
    target = write_model(tmp_path / "t.gguf", CYCLER.but(n_layer=4, name="Cyc-1B"))
    _models(folder, {"fast": CYCLER.but(n_layer=1, name="Cyc-100M"), "deep": CYCLER.but(n_layer=4, noise=0.01)})
    wl = workload(tmp_path, [{"id": "r", "stratum": "repetitive", "max_tokens": 16, "prompt": "a b c a b c"}])
    rc, out, err = drafts(str(target), "--dir", str(folder), "--bench", "2", "--budget", "1s", "--workload", str(wl),
                          "--json")  # fmt: skip
    assert rc == 1, err
    b = json.loads(out)["bench"]
    assert len(b["rounds"]) == 1 and len(b["rounds"][0]["measured"]) == 2  # round 1 ran, the final did not
    assert b["winner"] is None and b["deploy_command"] is None
    why = b["why_not"]
    assert "the final round of" in why and "repetitions" in why, why
    m = re.search(r"--budget (\d+)m would decide it", why)
    assert m is not None and int(m.group(1)) >= 1, why
    # the run costs it was planned from are the runs' own: each stored, one repetition each
    listed = run_specreg(["runs", "--json"])
    assert {b["rounds"][0]["run_ids"][0], b["rounds"][0]["run_ids"][1]} <= {
        r["run_id"] for r in json.loads(listed.stdout)
    }
