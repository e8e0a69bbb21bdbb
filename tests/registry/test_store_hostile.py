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
    pause = [0.003]  # between swaps; a check refused because the file changed under it widens it

    def swap() -> None:
        i = 0
        while not stop.is_set():
            tmp = tmp_path / f"swap-{i % 2}.tmp"
            tmp.write_bytes(variants[i % 2].read_bytes())
            os.replace(tmp, draft)  # atomic, like `mv` over the file being checked
            i += 1
            stop.wait(pause[0])

    def recorded() -> int:
        with sqlite3.connect(db) as conn:
            found = conn.execute("SELECT name FROM sqlite_master WHERE name = 'verdicts'").fetchone()
            return conn.execute("SELECT count(*) FROM verdicts").fetchone()[0] if found else 0

    writer = threading.Thread(target=swap, daemon=True)
    writer.start()
    codes: list[int] = []
    try:
        # 10 checks racing the writer; on a loaded machine every one of them may lose the race
        # (refused: exit 2, nothing recorded), so the writer slows down until some get through
        while len(codes) < 10 or (not recorded() and len(codes) < 30):
            code = specreg("check", "pair", str(target), str(draft), "--method", "draft-simple", db=db).returncode
            codes.append(code)
            if code == 2:
                pause[0] = min(pause[0] * 2, 0.2)
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


# -- split GGUFs: every shard is pinned ------------------------------------------------------------


def _split_model(folder: Path, stem: str = "tiny", second: bytes = b"\x01" * 64) -> tuple[Path, Path]:
    """A two-shard model named as gguf-split names them; `second` varies the second shard's tensor."""
    import gguf
    import numpy as np

    first = model(folder, f"{stem}-00001-of-00002.gguf", extra_kv=(("split.no", 0), ("split.count", 2)))
    path = folder / f"{stem}-00002-of-00002.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_key_value("split.no", 1, gguf.GGUFValueType.UINT16)
    w.add_key_value("split.count", 2, gguf.GGUFValueType.UINT16)
    w.add_tensor("extra.weight", np.frombuffer(second, dtype=np.float32).copy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return first, path


def test_every_shard_is_pinned_and_a_swapped_shard_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    first, second = _split_model(tmp_path)
    proc = specreg("check", "pair", str(first), "--method", "ngram-mod", db=db)
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(db) as conn:
        pinned = conn.execute("SELECT shard_no, sha256, path FROM artifact_shards").fetchall()
    assert pinned == [(1, hashlib.sha256(second.read_bytes()).hexdigest(), str(second))]

    _, other = _split_model(tmp_path / "elsewhere", second=b"\x02" * 64)
    os.replace(other, second)  # another model's second shard behind the same first shard
    for flags in (("--trust-stat-cache",), ()):
        out = specreg("audit", "--pair", "1", "--json", *flags, db=db)
        (pair,) = json.loads(out.stdout)["pairs"]
        integrity = next(g for g in pair["gates"] if g["gate"] == "integrity")
        assert not integrity["passed"] and "shard 2 sha256 is now" in integrity["message"], integrity
    one_error_line(specreg("bench", "admitted", "--pair", "1", db=db), "shard 2")
    one_error_line(specreg("register", str(first), "--rehash", db=db), "shard 2", "registered with shard sha256")
    again = specreg("check", "pair", str(first), "--method", "ngram-mod", db=db)
    one_error_line(again, "shard 2")
    registry_readable(db)


def test_a_missing_or_misnamed_shard_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    first, second = _split_model(tmp_path)
    second.unlink()
    line = one_error_line(specreg("check", "pair", str(first), "--method", "ngram-mod", db=db), "shard 2 of 2")
    assert "not readable" in line
    renamed = tmp_path / "tiny.gguf"
    os.replace(first, renamed)
    one_error_line(specreg("register", str(renamed), db=db), "must be named <name>-00001-of-00002.gguf")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM artifacts").fetchone()[0] == 0
    registry_readable(db)


# -- registry files that are not ours to write ------------------------------------------------------


def test_a_registry_from_a_newer_specreg_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    assert specreg("register", str(model(tmp_path, "t.gguf")), db=db).returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
            "VALUES ('specreg', 'm999_from_the_future', '2030-01-01')"
        )
        before = conn.execute("SELECT count(*) FROM artifact_paths").fetchone()[0]
    for args in (("register", str(model(tmp_path, "u.gguf", seed=9))), ("artifacts",), ("pairs", "--json")):
        one_error_line(specreg(*args, db=db), "written by a newer specreg", "m999_from_the_future")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM artifact_paths").fetchone()[0] == before
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


@pytest.mark.parametrize("where", ["/dev/null", "fifo", "folder"])
def test_a_registry_path_that_is_not_a_regular_file_is_refused(tmp_path: Path, where: str) -> None:
    if where == "/dev/null":
        db = Path("/dev/null")
        side = [Path(f"/dev/null{s}") for s in ("-journal", "-wal", "-shm")]
        if any(p.exists() for p in side):
            pytest.skip("a stray /dev/null-* file exists already")
    elif where == "fifo":
        db = tmp_path / "r.db"
        os.mkfifo(db)
        side = [tmp_path / f"r.db{s}" for s in ("-journal", "-wal", "-shm")]
    else:
        db = tmp_path / "r.db"
        db.mkdir()
        side = [tmp_path / f"r.db{s}" for s in ("-journal", "-wal", "-shm")]
    for args in (("register", str(model(tmp_path, "t.gguf"))), ("artifacts",)):
        one_error_line(specreg(*args, db=db), "is not a regular file")
    assert not any(p.exists() for p in side)
