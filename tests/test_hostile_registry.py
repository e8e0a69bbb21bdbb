"""Hostile files and damaged records against the registry, through the CLI.

A draft whose token text is not valid UTF-8 must not poison the registry for every pair; a
damaged stored record is reported for its pair, never a crash for all of them.
"""

from __future__ import annotations

import hashlib
import json
import os
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


# -- verdicts must be about the bytes that were checked -------------------------------------------


def _add_bos_offset(data: bytes) -> int:
    """Where the value byte of tokenizer.ggml.add_bos_token (a BOOL) is in the file."""
    key = b"tokenizer.ggml.add_bos_token"
    at = data.index(key) + len(key)
    assert data[at : at + 4] == (7).to_bytes(4, "little") and data[at + 4] == 1
    return at + 4


def test_atomic_replace_while_checking_never_records_a_verdict_under_the_wrong_sha(tmp_path: Path) -> None:
    """A writer keeps swapping the draft between an admissible file and a rejected one (same size:
    add_bos flipped); whatever each check saw, its verdict must be the one for the SHA it recorded."""
    import threading

    db = tmp_path / "r.db"
    target = model(tmp_path, "target.gguf")
    good = model(tmp_path, "good.gguf", seed=3, name="draft").read_bytes()
    bad = bytearray(good)
    bad[_add_bos_offset(good)] = 0
    variants = []
    for name, data in (("a", good), ("b", bytes(bad))):
        p = tmp_path / f"variant-{name}.gguf"
        p.write_bytes(data)
        variants.append(p)
    draft = tmp_path / "draft.gguf"
    draft.write_bytes(good)
    stop = threading.Event()

    def swap() -> None:
        i = 0
        while not stop.is_set():
            tmp = tmp_path / f"swap-{i % 2}.tmp"
            tmp.write_bytes(variants[i % 2].read_bytes())
            os.replace(tmp, draft)  # atomic, like `mv` over the file being checked
            i += 1
            stop.wait(0.003)

    writer = threading.Thread(target=swap, daemon=True)
    writer.start()
    try:
        codes = [
            specreg("check", "pair", str(target), str(draft), "--method", "draft-simple", db=db).returncode
            for _ in range(10)
        ]
    finally:
        stop.set()
        writer.join()
    assert set(codes) <= {0, 1, 2}, codes

    admitted_sha = hashlib.sha256(good).hexdigest()
    rejected_sha = hashlib.sha256(bytes(bad)).hexdigest()
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT p.draft_sha256, v.admitted FROM verdicts v JOIN pairs p ON p.id = v.pair_id"
        ).fetchall()
    assert rows, codes
    wrong = [(sha[:12], admitted) for sha, admitted in rows if admitted != (sha == admitted_sha)]
    assert not wrong and {sha for sha, _ in rows} <= {admitted_sha, rejected_sha}, wrong
    registry_readable(db)


def test_in_place_rewrite_that_keeps_size_and_mtime_fails_the_integrity_gate(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    target = model(tmp_path, "target.gguf")
    draft = model(tmp_path, "draft.gguf", seed=3, name="draft")
    proc = specreg("check", "pair", str(target), str(draft), "--method", "draft-simple", db=db)
    assert proc.returncode == 0, proc.stderr
    st = draft.stat()
    data = bytearray(draft.read_bytes())
    data[_add_bos_offset(bytes(data))] = 0  # the rejected draft's bytes, same size
    with open(draft, "r+b") as f:
        f.write(data)
    os.utime(draft, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back; ctime cannot be
    assert draft.stat().st_size == st.st_size and draft.stat().st_mtime_ns == st.st_mtime_ns
    for flags, how in (("--trust-stat-cache",), "stat cache"), ((), "full re-hash"):
        out = specreg("audit", "--pair", "1", "--json", *flags, db=db)
        assert out.returncode == 1, out.stderr[-2000:]
        (pair,) = json.loads(out.stdout)["pairs"]
        integrity = next(g for g in pair["gates"] if g["gate"] == "integrity")
        assert not integrity["passed"] and "sha256 is now" in integrity["message"], integrity
        assert how in integrity["evidence"]["method"]
    bench = specreg("bench", "admitted", "--pair", "1", db=db)
    assert bench.returncode == 2 and "Traceback" not in bench.stderr, bench.stderr[-2000:]
    registry_readable(db)
