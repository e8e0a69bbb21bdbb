"""Every measured condition is a candidate: the n-gram conditions of a draft pair's run count for
its target even when nobody checked the target for those methods (issue: "ngram-mod for
repetitive, none for chat"). The shared world's run (tests/_audit_world.py) measured ngram-simple
(drafting in every stratum) and ngram-mod (drafting nothing) beside draft-simple."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from _audit_world import AuditWorld, specreg

from specreg.registry.store import Registry


def _without_self_pairs(world: AuditWorld, tmp_path: Path) -> Path:
    """The world as it would be had only the draft pair been checked: its n-gram pairs removed."""
    db = world.copy(tmp_path / "registry.db")
    conn = sqlite3.connect(db)
    with conn:
        ids = [world.pairs["ngram-simple"], world.pairs["ngram-mod"]]
        conn.execute(f"DELETE FROM verdicts WHERE pair_id IN ({','.join('?' * len(ids))})", ids)
        conn.execute(f"DELETE FROM pairs WHERE id IN ({','.join('?' * len(ids))})", ids)
    conn.close()
    return db


def _withdraw_draft_licence(world: AuditWorld, db: Path) -> None:
    """The draft pair fails its licence gate (the draft file carries none): only n-gram can win."""
    from specreg.schemas.registry import LicenceSource

    with Registry(db, show_progress=False) as reg:
        draft = reg.add_artifact(world.draft)  # already registered: its record
        reg.add_licence_source(draft.sha256, LicenceSource(source="user", value=None))


def test_ngram_conditions_of_a_draft_run_are_judged_for_the_unchecked_target(
    audit_world: AuditWorld, tmp_path: Path
) -> None:
    db = _without_self_pairs(audit_world, tmp_path)
    policy = audit_world.policy_file(tmp_path)
    code, out, err = specreg("audit", "--pair", str(audit_world.pairs["draft-simple"]), "--policy", str(policy),
                         "--json", db=db)  # fmt: skip
    assert code in (0, 1), err
    (pair,) = json.loads(out)["pairs"]
    by = {u["method"]: u for u in pair["unchecked"]}
    # ngram-mod drafted nothing (the runner failed it): no interval reaches any minimum, so it is
    # not judged at all; ngram-simple drafts and passes the lenient gates
    assert set(by) == {"ngram-simple"}
    target12 = pair["target_sha256"][:12]
    assert by["ngram-simple"]["check_command"] == ["specreg", "check", "pair", target12, "--method", "ngram-simple"]
    assert by["ngram-simple"]["outcome"]["failed"] == {}
    # with the n-gram pairs checked (the world as made), nothing is left unchecked
    code, out, _ = specreg("audit", "--pair", str(audit_world.pairs["draft-simple"]), "--policy", str(policy),
                       "--json", db=audit_world.copy(tmp_path / "whole.db"))  # fmt: skip
    assert json.loads(out)["pairs"][0]["unchecked"] == []


def test_the_only_faster_condition_is_named_with_the_command_that_deploys_it(
    audit_world: AuditWorld, tmp_path: Path
) -> None:
    db = _without_self_pairs(audit_world, tmp_path)
    _withdraw_draft_licence(audit_world, db)
    policy = audit_world.policy_file(tmp_path)
    pair_id = str(audit_world.pairs["draft-simple"])
    code, out, err = specreg("audit", "--pair", pair_id, "--policy", str(policy), "--json", db=db)
    assert code == 1, err  # the draft pair fails licence
    decisions = json.loads(out)["decisions"]
    named = [d for d in decisions if d["unchecked"] is not None]
    assert named and all(d["choice"] == "none" for d in named)
    assert {d["unchecked"]["method"] for d in named} == {"ngram-simple"}
    command = named[0]["unchecked"]["check_command"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "80")
        code, text, _ = specreg("audit", "--pair", pair_id, "--policy", str(policy), db=db)
    assert "candidate: " in text and "ngram-simple passes every gate its run shows" in text
    assert " ".join(command) in " ".join(text.split()), text
    assert all(len(line) <= 80 for line in text.splitlines())
    # following the hint: check the method, audit again, and the decision deploys it
    code, _, err = specreg(*command[1:], db=db)
    assert code == 0, err
    code, out, err = specreg("audit", "--policy", str(policy), "--json", "--all", db=db)
    chosen = {d["stratum"]: d["choice"] for d in json.loads(out)["decisions"]}
    assert any(c.startswith("ngram-simple") for c in chosen.values()), chosen
