"""`check pair --probe`: the real server's answer recorded next to the static verdict, disagreement loud."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from _pair_helpers import BASE, RULES
from _registry_helpers import cli, model, run

from specreg.benchmark.run.probe import probe, probe_checks
from specreg.gguf.reader import open_gguf
from specreg.registry.store import Registry
from specreg.testing import write_model
from specreg.validators import ruleset
from specreg.validators.pair import check_pair

EAGLE = BASE.but(architecture="eagle3", n_layer=1, eagle3_target_layers=(0, 1, 2), eagle3_target_hidden_size=64)


def _checks(stdout: str) -> dict[str, dict]:
    return {c["code"]: c for c in json.loads(stdout)["checks"]}


def test_admitted_pair_drafts_and_the_probe_is_recorded(tmp_path: Path) -> None:
    t, d = model(tmp_path, "t.gguf"), model(tmp_path, "d.gguf", noise=0.05)
    db = tmp_path / "r.db"
    proc = cli("check", "pair", str(t), str(d), "-m", "draft-simple", "--probe", "--json", db=db)
    assert proc.returncode == 0, proc.stderr
    c = _checks(proc.stdout)["probe.runtime"]
    assert c["severity"] == "pass" and c["evidence"]["status"] == "drafted" and c["evidence"]["drafted"] > 0
    assert c["evidence"]["runtime"].startswith("bundled xllamacpp ")
    assert "--spec-type" in c["evidence"]["argv"] and str(d) in c["evidence"]["argv"]
    assert "probe.agreement" not in _checks(proc.stdout)
    with Registry(db, show_progress=False) as reg:  # runtime evidence stored with the verdict
        (pair,) = reg.pairs()
        stored = {c.code: c for c in reg.get_pair(pair.id).checks}
    assert stored["probe.runtime"].evidence["drafted"] == c["evidence"]["drafted"]
    assert Path(c["evidence"]["log_path"]).is_file()


def test_rejected_pair_the_runtime_refuses_agrees(tmp_path: Path) -> None:
    t = model(tmp_path, "t.gguf")
    d = model(tmp_path, "d.gguf", token_edits=((300, "\u2581zzz"),))
    proc = cli("check", "pair", str(t), str(d), "-m", "draft-simple", "--probe", "--json", db=tmp_path / "r.db")
    assert proc.returncode == 1
    checks = _checks(proc.stdout)
    assert checks["vocab.tokens"]["severity"] == "error"
    assert checks["probe.runtime"]["evidence"]["status"] == "refused"
    assert any("vocabs are not compatible" in ln for ln in checks["probe.runtime"]["evidence"]["lines"])
    assert "probe.agreement" not in checks
    # llama.cpp's message without its log prefix ("0.00.025.663 E spec common_specu: ")
    assert (
        checks["probe.runtime"]["message"]
        == "the server dropped speculation: the target and draft vocabs are not compatible"
    )


def test_aborts_and_load_failures_are_caught_from_the_log(tmp_path: Path) -> None:
    target = write_model(tmp_path / "t.gguf", BASE)
    far = write_model(tmp_path / "far.gguf", EAGLE.but(eagle3_target_layers=(0, 1, 4)))
    r = probe(target, far, "draft-eagle3", tmp_path / "far.log")
    assert r.status == "crashed"
    assert "EAGLE3: target layer id 4 exceeds target n_layer 2" in r.message
    assert not any(ln.startswith("#") for ln in r.lines)  # the cause, not the backtrace
    broken = write_model(tmp_path / "broken.gguf", BASE.but(drop_tensors=("blk.1.attn_q.weight",)))
    r = probe(target, broken, "draft-simple", tmp_path / "broken.log")
    assert r.status == "load_failed" and any("failed to load draft model" in ln for ln in r.lines)
    static = check_pair(open_gguf(target), open_gguf(broken), "draft-simple", rule_set=RULES)
    out = probe_checks(r, static, RULES.id)
    assert [(c.code, c.severity) for c in out] == [("probe.runtime", "error")]  # static rejected too: agree


def _rule_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_difference: int) -> str:
    """A rule set for a made-up build whose size limit differs from the runtime's 128."""
    data = json.loads((ruleset.RULES_DIR / f"{ruleset.RULE_SET_DEFAULT}.json").read_text())
    data.update(name="llama.cpp-b99999", build=99999)
    data["draft_simple"]["max_size_difference"] = max_difference
    folder = tmp_path / "rules"
    folder.mkdir(exist_ok=True)
    (folder / "llama.cpp-b99999.json").write_text(json.dumps(data))
    monkeypatch.setattr(ruleset, "RULES_DIR", folder)
    ruleset.load_rule_set.cache_clear()
    return "llama.cpp-b99999"


@pytest.mark.parametrize(
    ("limit", "extra", "static_admits"),
    [(256, 150, True), (0, 10, False)],
    ids=["rules too lax: the runtime refuses", "rules too strict: the runtime drafts"],
)
def test_out_of_date_rules_are_reported_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int, extra: int, static_admits: bool
) -> None:
    runtime = _rule_set(tmp_path, monkeypatch, limit)
    t, d = model(tmp_path, "t.gguf"), model(tmp_path, "d.gguf", pad_tokens=extra)
    try:
        args = ["check", "pair", str(t), str(d), "-m", "draft-simple", "--runtime", runtime, "--probe"]
        code, out, _ = run(*args, db=tmp_path / "r.db")
    finally:
        ruleset.load_rule_set.cache_clear()
    with Registry(tmp_path / "r.db", show_progress=False) as reg:  # the verdict as recorded (one probe, not two)
        (pair,) = reg.pairs()
        checks = {c.code: c for c in reg.get_pair(pair.id).checks}
    assert checks["vocab.n_tokens"].severity == ("pass" if static_admits else "error")
    assert checks["probe.runtime"].evidence["status"] == ("refused" if static_admits else "drafted")
    agreement = checks["probe.agreement"]
    assert agreement.severity == "warn"
    assert f"rule set {runtime}/r1 is out of date for runtime bundled xllamacpp" in agreement.message
    assert code == 1  # too lax: the runtime's refusal rejects the pair; too strict: still rejected by the rules
    assert "DISAGREEMENT" in out and "out of date" in out


def test_probe_runs_a_given_server_binary(tmp_path: Path) -> None:
    """--server: any llama-server binary; here a script that execs the bundled one (real llama.cpp)."""
    binary = tmp_path / "llama-server"
    binary.write_text(f'#!/bin/sh\nexec {sys.executable} -m specreg.servers.bundled_server "$@"\n')
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    t, d = model(tmp_path, "t.gguf"), model(tmp_path, "d.gguf", noise=0.05)
    args = ["check", "pair", str(t), str(d), "-m", "draft-simple", "--probe", "--server", str(binary), "--json"]
    proc = cli(*args, db=tmp_path / "r.db")
    assert proc.returncode == 0, proc.stderr
    c = _checks(proc.stdout)["probe.runtime"]
    assert c["evidence"]["runtime"] == f"external {binary.resolve()}" and c["evidence"]["status"] == "drafted"
    # without --probe the binary only chooses the rules: its --version names xllamacpp 2026.10.11549
    judged = cli("check", "pair", str(t), str(d), "--server", str(binary), "--json", db=tmp_path / "r.db")
    assert judged.returncode == 0 and json.loads(judged.stdout)["rule_set"] == "llama.cpp-b11549/r1"


def test_an_unsafe_template_is_never_handed_to_a_server(tmp_path: Path) -> None:
    hostile = "{{ ''.__class__.__mro__ }}"
    t, d = model(tmp_path, "t.gguf", chat_template=hostile), model(tmp_path, "d.gguf", chat_template=hostile)
    proc = cli("check", "pair", str(t), str(d), "-m", "draft-simple", "--probe", "--json", db=tmp_path / "r.db")
    c = _checks(proc.stdout)["probe.runtime"]
    assert c["severity"] == "info" and "not probed" in c["message"] and "log_path" not in c["evidence"]
