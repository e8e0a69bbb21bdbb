"""`specreg check pair` and `specreg pairs` end to end: real files, real registry, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _pair_helpers import BASE

from specreg.cli import main
from specreg.schemas.checks import CheckResult, PairVerdict
from specreg.schemas.record import from_python
from specreg.testing import write_model
from specreg.validators.ruleset import RULE_SET_DEFAULT


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    specs = {
        "target": BASE,
        "same": BASE.but(seed=1),
        "swapped": BASE.but(token_edits=((300, "\u2581zzz"),)),
        "template": BASE.but(chat_template="{{ other }}"),
        "eagle": BASE.but(
            architecture="eagle3", n_layer=1, eagle3_target_layers=(0, 1, 2), eagle3_target_hidden_size=64
        ),
        "hostile": BASE.but(token_edits=((300, "[bold red]boom[/]\x1b[31m"),)),
    }
    return {k: write_model(tmp_path / f"{k}.gguf", s) for k, s in specs.items()}


def test_admitted_pair_exits_0_and_is_listed(capsys, files) -> None:
    code, out, _ = run(capsys, "check", "pair", str(files["target"]), str(files["same"]), "--method", "draft-simple")
    assert code == 0
    assert "ADMITTED" in out and "vocab.tokens" in out and RULE_SET_DEFAULT in out
    code, out, _ = run(capsys, "pairs", "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 1
    assert rows[0]["admitted"] is True and rows[0]["method"] == "draft-simple" and rows[0]["stale"] is False


def test_rejected_pair_exits_1_with_evidence(capsys, files) -> None:
    code, out, _ = run(capsys, "check", "pair", str(files["target"]), str(files["swapped"]))
    assert code == 1
    assert "REJECTED" in out and "fail" in out
    assert "id 300" in out and "zzz" in out  # first differing id with both texts


def test_json_verdict_and_sha_prefixes(capsys, files) -> None:
    code, out, _ = run(capsys, "check", "pair", str(files["target"]), str(files["swapped"]), "--json")
    v = json.loads(out)
    assert code == 1
    assert set(v) >= {"admitted", "method", "target_sha256", "draft_sha256", "rule_set", "checks"}
    assert v["admitted"] is False and v["method"] == "draft-simple"
    from_python(PairVerdict, v)
    tokens = next(from_python(CheckResult, c) for c in v["checks"] if c["code"] == "vocab.tokens")
    assert tokens.severity == "error" and tokens.evidence["first"][0]["id"] == 300
    # registered on the way: SHA-256 prefixes now name the same files
    code, out, _ = run(capsys, "check", "pair", v["target_sha256"][:12], v["draft_sha256"][:12], "--json")
    assert code == 1 and json.loads(out)["draft_sha256"] == v["draft_sha256"]
    code, out, _ = run(capsys, "pairs", "--json")
    assert len(json.loads(out)) == 1  # same pair, a second verdict


def test_strict_makes_warnings_reject(capsys, files) -> None:
    args = ("check", "pair", str(files["template"]), str(files["target"]), "--method", "draft-simple")
    code, out, _ = run(capsys, *args, "--strict")
    assert code == 1 and "vocab.chat_template" in out
    code, out, _ = run(capsys, "pairs", "--rejected")
    assert "rejected (strict)" in out  # checked only strictly: the pair stands on that verdict
    assert json.loads(run(capsys, "pairs", "--admitted", "--json")[1]) == []


def test_strict_check_does_not_overwrite_the_normal_verdict(capsys, files) -> None:
    args = ("check", "pair", str(files["target"]), str(files["template"]), "--method", "draft-simple")
    assert run(capsys, *args)[0] == 0
    assert run(capsys, *args, "--strict")[0] == 1
    rows = json.loads(run(capsys, "pairs", "--admitted", "--json")[1])
    assert [(r["admitted"], r["strict"], r["strict_admitted"], r["n_verdicts"]) for r in rows] == [
        (True, False, False, 2)
    ]
    assert json.loads(run(capsys, "pairs", "--rejected", "--json")[1]) == []
    code, out, _ = run(capsys, "pairs")
    assert code == 0 and "admitted; strict: rejected" in out
    from specreg.commands.options import db_path
    from specreg.registry.store import Registry

    with Registry(db_path()) as reg:  # what `bench admitted` runs: the normal verdict, unless asked
        assert [p.id for p in reg.admitted_pairs()] == [rows[0]["id"]]
        assert reg.admitted_pairs(strict=True) == []
        assert [v.strict for v in reg.pair_history(rows[0]["id"])] == [False, True]
    assert run(capsys, *args)[0] == 0  # a later normal check leaves the strict verdict beside it
    rows = json.loads(run(capsys, "pairs", "--json")[1])
    assert [(r["admitted"], r["strict_admitted"], r["n_verdicts"]) for r in rows] == [(True, False, 3)]


def test_auto_detects_eagle3(capsys, files) -> None:
    code, out, _ = run(capsys, "check", "pair", str(files["target"]), str(files["eagle"]), "--json")
    assert json.loads(out)["method"] == "draft-eagle3" and code == 0


@pytest.mark.parametrize(
    "argv,message",
    [
        (("check", "pair", "{target}", "--runtime", "llama.cpp-b1"), "unknown runtime"),
        (("check", "pair", "{target}"), "needs a DRAFT"),
        (("check", "pair", "{target}", "{same}", "--method", "ngram-simple"), "target alone"),
        (("check", "pair", "{target}", "--method", "draft-simple"), "needs a DRAFT model"),
        (("check", "pair", "{target}", "--method", "draft-bogus"), "'draft-bogus' is not one of"),
        (("check", "pair", "/nonexistent/model.gguf", "{same}"), "no such file"),
        (("check", "pair", "deadbeefdeadbeef", "{same}"), "deadbeef"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, files, argv, message: str) -> None:
    code, _, err = run(capsys, *(a.format(**{k: str(v) for k, v in files.items()}) for a in argv))
    assert code == 2
    assert message in err and "Traceback" not in err
    assert err.splitlines()[0].startswith("error:")


def test_untrusted_token_text_is_printed_inert(capsys, files) -> None:
    code, out, _ = run(capsys, "check", "pair", str(files["target"]), str(files["hostile"]))
    assert code == 1
    assert "[bold red]boom[/]" in out  # markup shown literally, not interpreted
    assert "\x1b" not in out and "\\x1b" in out


def test_older_rule_set_verdicts_are_stale(capsys, files) -> None:
    from specreg.commands.options import db_path
    from specreg.registry.store import Registry

    with Registry(db_path()) as reg:
        t, d = reg.add_artifact(files["target"]), reg.add_artifact(files["same"])
        reg.record_verdict(
            PairVerdict(
                admitted=True,
                method="draft-simple",
                target_sha256=t.sha256,
                draft_sha256=d.sha256,
                rule_set=f"{RULE_SET_DEFAULT}/r0",
                checks=[],
            )
        )
    code, out, _ = run(capsys, "pairs")
    assert code == 0 and "stale" in out
    run(capsys, "check", "pair", str(files["target"]), str(files["same"]))
    rows = json.loads(run(capsys, "pairs", "--json")[1])
    assert sorted(r["stale"] for r in rows) == [False, True]


def test_prefix_of_a_file_changed_since_registration_cannot_decide(capsys, files) -> None:
    code, out, _ = run(capsys, "check", "pair", str(files["target"]), str(files["same"]), "--json")
    draft_sha = json.loads(out)["draft_sha256"]
    write_model(files["same"], BASE.but(seed=7))  # other bytes at the registered path
    code, _, err = run(capsys, "check", "pair", str(files["target"]), draft_sha[:12])
    assert code == 2 and "no registered path holds its bytes" in err
