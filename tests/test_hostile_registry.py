"""Hostile files and damaged records against the registry, through the CLI.

A draft whose token text is not valid UTF-8 must not poison the registry for every pair; a
damaged stored record is reported for its pair, never a crash for all of them.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from _hostile_helpers import one_error_line, registry_readable, specreg
from _registry_helpers import model


def _invalid_utf8_draft(folder: Path) -> Path:
    """A draft whose token 3 ('<0x00>', below llama.cpp's compared range) is the bytes <0x FF FE>."""
    path = model(folder, "draft.gguf", seed=3, name="draft")
    data = path.read_bytes()
    assert data.count(b"<0x00>") == 1
    path.write_bytes(data.replace(b"<0x00>", b"<0x\xff\xfe>"))
    return path


@pytest.fixture()
def poisoned(tmp_path: Path) -> tuple[Path, int]:
    """(db, pair id) of an admitted pair whose evidence quotes the undecodable token."""
    db = tmp_path / "r.db"
    target = model(tmp_path, "target.gguf")
    draft = _invalid_utf8_draft(tmp_path)
    proc = specreg("check", "pair", str(target), str(draft), "--method", "draft-simple", "--json", db=db)
    assert proc.returncode == 0, proc.stderr
    checks = {c["code"]: c for c in json.loads(proc.stdout)["checks"]}
    head = checks["vocab.tokens_head"]
    assert head["severity"] == "warn" and head["evidence"]["first"][0]["draft"] == "<0x\\xff\\xfe>"
    return db, 1


def test_undecodable_token_text_is_stored_as_valid_utf8(poisoned: tuple[Path, int]) -> None:
    db, pair = poisoned
    with sqlite3.connect(db) as conn:
        (raw,) = conn.execute("SELECT checks_json FROM verdicts").fetchone()
    raw.encode("utf-8")  # valid UTF-8 text, no lone surrogates
    assert "\\udc" not in raw and "<0x\\\\xff\\\\xfe>" in raw
    for args in (("pairs", "--json"), ("audit", "--pair", str(pair)), ("audit", "--pair", str(pair), "--json")):
        proc = specreg(*args, db=db)
        assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, (args, proc.stderr[-2000:])
    registry_readable(db)


def test_a_damaged_verdict_is_reported_for_its_pair_only(poisoned: tuple[Path, int], tmp_path: Path) -> None:
    db, pair = poisoned
    other = specreg(
        "check", "pair", str(model(tmp_path, "t2.gguf", seed=5)), "--method", "ngram-mod", db=db
    )  # a second, healthy pair
    assert other.returncode == 0, other.stderr
    with sqlite3.connect(db) as conn:  # what an old specreg (or a foreign tool) may have left behind
        conn.execute("UPDATE verdicts SET checks_json = ? WHERE pair_id = ?", ('[{"code": "\\udcff"', pair))
    listed = specreg("pairs", "--json", db=db)
    assert listed.returncode == 0, listed.stderr[-2000:]
    by_id = {p["id"]: p for p in json.loads(listed.stdout)}
    assert by_id[2]["admitted"] is True
    shown = specreg("audit", "--json", db=db)  # every admitted pair: the damaged one is left out or failed
    assert shown.returncode in (0, 1) and "Traceback" not in shown.stderr, shown.stderr[-2000:]
    bench = specreg("bench", "admitted", "--pair", str(pair), db=db)
    line = one_error_line(bench, f"pair {pair}")
    assert "cannot be read" in line
    registry_readable(db)
