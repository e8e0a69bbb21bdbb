"""`specreg register`, `artifacts` and `inspect` through the real console entry point."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from _cli_helpers import run_specreg
from _registry_helpers import cli, model, one_line_error, run


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_register_list_and_reregister(tmp_path: Path) -> None:
    db = tmp_path / "reg.db"
    t = model(tmp_path, "t.gguf", name="tiny-target")
    d = model(tmp_path, "d.gguf", seed=7, name="tiny-draft")
    rc, out, err = run(
        "register", str(t), str(d), "--repo", "org/tiny", "--revision", "0123456789abcdef", "--json", db=db
    )
    assert rc == 0, err
    recs = json.loads(out)
    assert [r["sha256"] for r in recs] == [_sha(t), _sha(d)]
    assert recs[0]["summary"]["tokenizer"]["n_tokens"] > 0
    rc, again, _ = run("register", str(t), db=db)
    assert rc == 0
    assert again.split() == [_sha(t)[:12], str(t), "(known,", "not", "re-hashed)"]
    rows = json.loads(run("artifacts", "--json", db=db)[1])
    assert [(r["sha256"], r["paths"], r["provenance"]["repo"]) for r in rows] == [
        (_sha(t), [str(t)], "org/tiny"),
        (_sha(d), [str(d)], "org/tiny"),
    ]
    assert all("summary" not in r for r in rows)
    table = run("artifacts", db=db)[1]
    for text in (_sha(t)[:12], "tiny-target", "tiny-draft", "llama", " F32 ", "org/tiny", "0123456789", str(t)):
        assert text in table


def test_licence_conflict_is_warned_not_fatal(tmp_path: Path) -> None:
    db = tmp_path / "reg.db"
    t = model(tmp_path, "t.gguf", license="apache-2.0")
    out = cli("--db", str(db), "register", str(t), "--license", "llama3.1", db=tmp_path / "unused.db")
    assert out.returncode == 0, out.stderr
    assert "licence sources disagree" in out.stderr and "effective: llama3.1" in out.stderr
    assert db.exists() and not (tmp_path / "unused.db").exists()  # --db beats SPECREG_DB
    assert "llama3.1 (conflict)" in run("artifacts", db=db)[1]


def test_errors_are_one_line_exit_2_and_keep_records(tmp_path: Path) -> None:
    db = tmp_path / "reg.db"
    t = model(tmp_path, "t.gguf")
    assert run("register", str(t), db=db)[0] == 0
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    assert "no such file" in one_line_error(cli("register", str(tmp_path / "missing.gguf"), db=db))
    assert "not a GGUF file" in one_line_error(cli("register", str(bad), db=db))
    assert "no such file" in one_line_error(cli("inspect", str(tmp_path / "missing.gguf"), db=db))
    rows = json.loads(run("artifacts", "--json", db=db)[1])
    assert [r["sha256"] for r in rows] == [_sha(t)]


def test_inspect_shows_sha_only_when_known_or_asked(tmp_path: Path) -> None:
    db = tmp_path / "reg.db"
    t = model(tmp_path, "t.gguf", name="tiny", nextn_predict_layers=1)
    plain = json.loads(run("inspect", str(t), "--json", db=db)[1])
    assert plain["sha256"] is None and plain["name"] == "tiny"
    hashed = json.loads(run("inspect", str(t), "--json", "--hash", db=db)[1])
    assert hashed["sha256"] == _sha(t)
    assert not db.exists()  # inspect never creates or writes a registry
    run("register", str(t), db=db)
    known = json.loads(run("inspect", str(t), "--json", db=db)[1])
    assert known["sha256"] == _sha(t)
    human = run("inspect", str(t), db=db)[1]
    for text in (_sha(t)[:12], "llama", "ALL_F32", "bos 1", "MTP: 1 nextn layer", "apache-2.0"):
        assert text in human, text


def test_untrusted_names_are_printed_inert(tmp_path: Path) -> None:
    db = tmp_path / "reg.db"
    evil = "[bold red]evil[/bold red]\x1b[2J"
    t = model(tmp_path, "t.gguf", name=evil, license="[link=http://x]mit[/link]")
    assert run("register", str(t), db=db)[0] == 0
    for out in (run("artifacts", db=db)[1], run("inspect", str(t), db=db)[1]):
        assert "\x1b" not in out
        assert "[bold red]evil[/bold red]\\x1b[2J" in out


def test_register_reports_every_file_and_names_the_failed_ones(tmp_path: Path) -> None:
    db = tmp_path / "reg.db"
    a, c = model(tmp_path, "a.gguf", name="a"), model(tmp_path, "c.gguf", name="c", seed=3)
    bad = tmp_path / "b.gguf"
    bad.write_bytes(b"not a gguf file at all")
    missing = tmp_path / "missing.gguf"
    out = cli("register", str(a), str(bad), str(missing), str(c), db=db)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()] == [_sha(a)[:12], _sha(c)[:12]]  # each file's result
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 3 and "not a GGUF file" in errors[0] and "no such file" in errors[1]
    assert errors[2] == f"error: 2 of 4 files not registered: {bad}, {missing}"
    rows = json.loads(run("artifacts", "--json", db=db)[1])
    assert [r["sha256"] for r in rows] == [_sha(a), _sha(c)]
    out = cli("register", str(a), str(bad), "--json", db=db)  # JSON: the registered ones, then exit 2
    assert out.returncode == 2 and [r["sha256"] for r in json.loads(out.stdout)] == [_sha(a)]


def test_db_in_a_missing_folder_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    t = model(tmp_path, "t.gguf")
    db = tmp_path / "no" / "such" / "reg.db"
    for args in (("register", str(t)), ("artifacts",), ("pairs",), ("runs",), ("check", "pair", str(t), str(t))):
        line = one_line_error(cli("--db", str(db), *args, db=tmp_path / "unused.db"))
        assert line == f"error: folder {db.parent} does not exist", args
    assert not (tmp_path / "no").exists() and not (tmp_path / "unused.db").exists()


def test_read_only_commands_never_create_a_registry(tmp_path: Path) -> None:
    db = tmp_path / "typo.db"  # the folder exists, the registry does not
    for args in (("artifacts",), ("pairs", "--json"), ("runs",), ("audit",)):
        assert "no registry at" in one_line_error(cli(*args, db=db)), args
    assert list(tmp_path.iterdir()) == []
    home = tmp_path / "home"  # the default location (SPECREG_HOME): an empty registry, still no file
    env = {**os.environ, "SPECREG_HOME": str(home), "COLUMNS": "200"}
    env.pop("SPECREG_DB")

    def default(*args: str) -> subprocess.CompletedProcess[str]:
        return run_specreg(args, env=env, timeout=60)

    out = default("artifacts")
    assert out.returncode == 0 and "no artifacts registered yet" in out.stderr
    assert default("pairs", "--json").stdout.strip() == "[]"
    assert not home.exists()
    assert default("register", str(model(tmp_path, "t.gguf"))).returncode == 0  # a write creates it
    assert (home / "registry.db").is_file()
