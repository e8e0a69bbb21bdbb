"""Registry API: artifacts, stat cache, licences, provenance, lookup, integrity, verdicts."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from _registry_helpers import aged, model

from specreg.errors import AmbiguousArtifact, ArtifactNotFound, GGUFError, PairNotFound, RegistryError
from specreg.registry.store import Registry
from specreg.schemas.checks import CheckResult, PairVerdict
from specreg.schemas.record import to_python
from specreg.schemas.registry import LicenceSource
from specreg.sources.checking import open_artifact
from specreg.sources.provenance import register


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _count(reg: Registry, table: str) -> int:
    return int(reg.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_register_stores_summary_hash_licence_and_provenance(reg: Registry, tmp_path: Path) -> None:
    p = model(tmp_path, "t.gguf", name="tiny-target", license="apache-2.0", license_link="https://x/y")
    rec = register(reg, p, repo="org/tiny", revision="0123abcd", extra={"note": "n"})
    assert rec.sha256 == _sha(p)
    assert rec.size == p.stat().st_size
    assert rec.paths == [str(p)]
    assert (rec.name, rec.architecture, rec.n_tokens) == ("tiny-target", "llama", rec.summary.tokenizer.n_tokens)
    assert rec.summary is not None and rec.summary.sha256 == rec.sha256
    assert rec.licence.effective == "apache-2.0" and rec.licence.effective_source == "gguf"
    assert rec.licence.sources[0].link == "https://x/y"
    assert not rec.licence.conflict
    assert (rec.provenance.repo, rec.provenance.revision, rec.provenance.source) == ("org/tiny", "0123abcd", "user")
    assert rec.provenance.filename == "t.gguf" and rec.provenance.extra == {"note": "n"}
    assert reg.hash_count == 1


def test_same_file_twice_is_idempotent_and_not_rehashed(reg: Registry, tmp_path: Path) -> None:
    p = model(tmp_path, "t.gguf")
    a = reg.add_artifact(p)
    b = reg.add_artifact(p)
    assert a == b
    assert reg.hash_count == 1
    assert (_count(reg, "artifacts"), _count(reg, "artifact_paths")) == (1, 1)
    reg.add_artifact(p, rehash=True)
    assert reg.hash_count == 2


def test_same_bytes_at_another_path_add_the_path(reg: Registry, tmp_path: Path) -> None:
    p = model(tmp_path, "t.gguf")
    (tmp_path / "copy").mkdir()
    q = Path(shutil.copy2(p, tmp_path / "copy" / "renamed.gguf"))  # copy2 keeps the old mtime
    reg.add_artifact(p)
    rec = reg.add_artifact(q)
    assert rec.paths == [str(p), str(q)]
    assert _count(reg, "artifacts") == 1
    assert reg.hash_count == 2  # a new inode must be hashed: same stat elsewhere proves nothing


def test_hard_link_is_recognised_by_inode_without_hashing(reg: Registry, tmp_path: Path) -> None:
    p = model(tmp_path, "t.gguf")
    link = tmp_path / "link.gguf"
    os.link(p, link)
    reg.add_artifact(p)
    rec = reg.add_artifact(link)  # same inode, same stat: no second hash
    assert reg.hash_count == 1
    assert set(rec.paths) == {str(p), str(link)}


def test_a_changed_ctime_is_hashed_again(reg: Registry, tmp_path: Path) -> None:
    """A new link (or chmod, or a rewrite that restores size and mtime) changes ctime only."""
    p = model(tmp_path, "t.gguf")
    reg.add_artifact(p)
    os.link(p, tmp_path / "link.gguf")
    reg.add_artifact(p)
    assert reg.hash_count == 2


def test_a_just_written_file_is_not_trusted_by_stat(reg: Registry, tmp_path: Path) -> None:
    p = model(tmp_path, "t.gguf", age=False)  # mtime == now: racy
    reg.add_artifact(p)
    reg.add_artifact(p)
    assert reg.hash_count == 2
    aged(p)
    reg.add_artifact(p)  # mtime changed: hashed again, then trusted
    reg.add_artifact(p)
    assert reg.hash_count == 3


def test_replaced_file_at_a_known_path_is_rehashed_and_repointed(reg: Registry, tmp_path: Path) -> None:
    p = model(tmp_path, "t.gguf", seed=1)
    first = reg.add_artifact(p)
    model(tmp_path, "t.gguf", seed=2)
    second = reg.add_artifact(p)
    assert second.sha256 == _sha(p) != first.sha256
    assert reg.get_artifact(first.sha256).paths == []
    assert reg.get_artifact(second.sha256).paths == [str(p)]


def test_licence_precedence_user_over_model_card_over_gguf(reg: Registry, tmp_path: Path) -> None:
    p = model(tmp_path, "t.gguf", license="mit")
    rec = reg.add_artifact(p)
    assert (rec.licence.effective, rec.licence.conflict) == ("mit", False)
    rec = reg.add_licence_source(rec.sha256, LicenceSource(source="model_card", value="llama3.1"))
    assert (rec.licence.effective, rec.licence.effective_source, rec.licence.conflict) == (
        "llama3.1",
        "model_card",
        True,
    )
    rec = reg.add_artifact(p, license="Apache-2.0")
    assert (rec.licence.effective, rec.licence.effective_source) == ("apache-2.0", "user")
    assert [s.source for s in rec.licence.sources] == ["user", "model_card", "gguf"]
    assert reg.hash_count == 1  # new facts about known bytes need no hashing


def test_agreeing_sources_are_no_conflict(reg: Registry, tmp_path: Path) -> None:
    rec = reg.add_artifact(model(tmp_path, "t.gguf", license="apache-2.0"), license=" Apache-2.0 ")
    assert rec.licence.effective == "apache-2.0"
    assert not rec.licence.conflict


def test_no_licence_anywhere(reg: Registry, tmp_path: Path) -> None:
    rec = reg.add_artifact(model(tmp_path, "t.gguf", license=None))
    assert rec.licence.effective is None and rec.licence.sources == [] and not rec.licence.conflict


def test_registering_again_merges_provenance_extra(reg: Registry, tmp_path: Path) -> None:
    p = model(tmp_path, "t.gguf")
    register(reg, p, extra={"a": 1})
    rec = register(reg, p, repo="org/m", revision="f" * 40, extra={"b": 2})
    assert to_python(rec.provenance) == {
        "repo": "org/m",
        "revision": "f" * 40,
        "filename": "t.gguf",
        "source": "user",
        "extra": {"a": 1, "b": 2},
    }


def test_get_artifact_by_prefix_and_errors(reg: Registry, tmp_path: Path) -> None:
    rec = reg.add_artifact(model(tmp_path, "t.gguf"))
    assert reg.get_artifact(rec.sha256[:6].upper()).sha256 == rec.sha256
    with pytest.raises(ArtifactNotFound, match="at least 6 hex"):
        reg.get_artifact(rec.sha256[:5])
    with pytest.raises(ArtifactNotFound, match="at least 6 hex"):
        reg.get_artifact("not-hex-at-all")
    other = "0" * 64 if not rec.sha256.startswith("0") else "f" * 64
    with pytest.raises(ArtifactNotFound, match="no registered artifact"):
        reg.get_artifact(other[:10])


def test_ambiguous_prefix(reg: Registry, tmp_path: Path) -> None:
    rec = reg.add_artifact(model(tmp_path, "t.gguf"))
    row = dict(reg.database.one("SELECT * FROM artifacts WHERE sha256 = ?", (rec.sha256,)))
    cols = ", ".join(row)
    with reg.write() as conn:  # two more artifacts sharing a 7-digit prefix (real rows, real index)
        for tail in ("1", "2"):
            values = {**row, "sha256": "abcdef0" + tail * 57}
            conn.execute(f"INSERT INTO artifacts ({cols}) VALUES ({', '.join('?' * len(row))})", tuple(values.values()))
    with pytest.raises(AmbiguousArtifact, match="matches 2 artifacts"):
        reg.get_artifact("abcdef0")
    assert reg.get_artifact("abcdef02").sha256 == "abcdef0" + "2" * 57


def test_open_artifact_by_path_prefix_or_clear_error(reg: Registry, tmp_path: Path) -> None:
    p = model(tmp_path, "t.gguf")
    rec, opened = open_artifact(reg, str(p))  # registered on the way
    assert _count(reg, "artifacts") == 1 and opened.path == p
    again, located = open_artifact(reg, rec.sha256[:8])
    assert again.sha256 == rec.sha256 and located.path == p
    with pytest.raises(ArtifactNotFound, match="no such file, and not a SHA-256"):
        open_artifact(reg, str(tmp_path / "missing.gguf"))


def test_non_gguf_is_refused_before_hashing_and_leaves_nothing(reg: Registry, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGML" + os.urandom(100))
    with pytest.raises(GGUFError):
        reg.add_artifact(bad)
    assert reg.hash_count == 0
    assert _count(reg, "artifacts") == _count(reg, "artifact_paths") == 0
    with pytest.raises(ArtifactNotFound, match="no such file"):
        reg.add_artifact(tmp_path / "nope.gguf")
    with pytest.raises(ArtifactNotFound, match="not a regular file"):
        reg.add_artifact(tmp_path)


def test_verify_unchanged_file_uses_stat_cache(reg: Registry, tmp_path: Path) -> None:
    rec = reg.add_artifact(model(tmp_path, "t.gguf"))
    assert reg.verify_artifact(rec) == (True, None)
    assert reg.hash_count == 1
    assert reg.verify_artifact(rec, rehash=True) == (True, None)
    assert reg.hash_count == 2


def test_verify_touched_but_same_bytes_rehashes_once(reg: Registry, tmp_path: Path) -> None:
    p = model(tmp_path, "t.gguf")
    rec = reg.add_artifact(p)
    aged(p, seconds=30)  # new mtime, same bytes
    assert reg.verify_artifact(rec) == (True, None)
    assert reg.verify_artifact(rec) == (True, None)
    assert reg.hash_count == 2  # the refreshed stat is trusted the second time


def test_verify_detects_changed_bytes_and_missing_paths(reg: Registry, tmp_path: Path) -> None:
    p = model(tmp_path, "t.gguf")
    q = Path(shutil.copy2(p, tmp_path / "q.gguf"))
    rec = reg.add_artifact(p)
    reg.add_artifact(q)
    data = bytearray(p.read_bytes())
    data[-1] ^= 0xFF  # same size, one byte flipped
    p.write_bytes(bytes(data))
    q.unlink()
    ok, why = reg.verify_artifact(rec)
    assert not ok
    assert f"{p}: sha256 is now {hashlib.sha256(bytes(data)).hexdigest()}" in why
    assert f"{q}: missing" in why


def test_verify_size_change_needs_no_hash(reg: Registry, tmp_path: Path) -> None:
    p = model(tmp_path, "t.gguf")
    rec = reg.add_artifact(p)
    with open(p, "ab") as f:
        f.write(b"tail")
    assert reg.verify_artifact(rec) == (False, f"{p}: size is now {rec.size + 4} bytes, registered {rec.size}")
    assert reg.hash_count == 1


def test_locate_returns_a_verified_path(reg: Registry, tmp_path: Path) -> None:
    p = model(tmp_path, "t.gguf")
    q = Path(shutil.copy2(p, tmp_path / "q.gguf"))
    rec = reg.add_artifact(p)
    reg.add_artifact(q)
    p.unlink()
    assert reg.locate(rec.sha256[:8]) == q
    q.unlink()
    with pytest.raises(ArtifactNotFound, match="no registered path holds its bytes"):
        reg.locate(rec.sha256)


def _verdict(t: str, d: str | None, admitted: bool, method: str = "draft-simple", **kw: object) -> PairVerdict:
    sev = "pass" if admitted else "error"
    return PairVerdict(
        admitted=admitted,
        method=method,
        target_sha256=t,
        draft_sha256=d,
        rule_set="rs-1",
        checks=[CheckResult(code="vocab.type", severity=sev, message="m", evidence={"a": 1})],
        **kw,
    )


def test_verdicts_keep_history_and_pairs_show_latest(reg: Registry, tmp_path: Path) -> None:
    t = reg.add_artifact(model(tmp_path, "t.gguf", name="T")).sha256
    d = reg.add_artifact(model(tmp_path, "d.gguf", seed=5, name="D")).sha256
    pid = reg.record_verdict(_verdict(t, d, False))
    assert reg.record_verdict(_verdict(t, d, True)) == pid  # same pair, stable id
    self_id = reg.record_verdict(_verdict(t, None, True, method="ngram-mod"))
    assert reg.record_verdict(_verdict(t, None, False, method="ngram-mod")) == self_id
    other_rs = reg.record_verdict(replace(_verdict(t, d, True), rule_set="rs-2"))
    assert len({pid, self_id, other_rs}) == 3
    pair = reg.get_pair(pid)
    assert (pair.admitted, pair.n_verdicts, pair.target_name, pair.draft_name) == (True, 2, "T", "D")
    assert pair.checks[0].evidence == {"a": 1}
    assert [p.id for p in reg.pairs(admitted=True)] == [pid, other_rs]
    assert [p.id for p in reg.pairs(admitted=False)] == [self_id]
    assert [p.id for p in reg.admitted_pairs()] == [pid, other_rs]
    assert reg.pairs(with_checks=False)[0].checks == []
    assert [v.admitted for v in reg.pair_history(pid)] == [False, True]
    assert _count(reg, "verdicts") == 5
    with pytest.raises(PairNotFound):
        reg.get_pair(999)


def test_verdict_for_unregistered_artifact_writes_nothing(reg: Registry, tmp_path: Path) -> None:
    t = reg.add_artifact(model(tmp_path, "t.gguf")).sha256
    with pytest.raises(ArtifactNotFound, match=r"draft sha256 .* not registered"):
        reg.record_verdict(_verdict(t, "e" * 64, True))
    assert _count(reg, "pairs") == _count(reg, "verdicts") == 0


def test_failed_write_rolls_back_everything(reg: Registry, tmp_path: Path) -> None:
    rec = reg.add_artifact(model(tmp_path, "t.gguf"))
    with pytest.raises(RegistryError, match="UNIQUE"), reg.write() as db:
        db.execute("UPDATE artifacts SET name = 'half-done' WHERE sha256 = ?", (rec.sha256,))
        db.execute("INSERT INTO artifact_paths SELECT * FROM artifact_paths")  # duplicate path
    assert reg.get_artifact(rec.sha256).name == rec.name
    with pytest.raises(KeyError), reg.write() as db:
        db.execute("DELETE FROM artifact_paths")
        raise KeyError("any exception")
    assert _count(reg, "artifact_paths") == 1


def test_artifacts_list_view(reg: Registry, tmp_path: Path) -> None:
    a = reg.add_artifact(model(tmp_path, "a.gguf", seed=1))
    b = reg.add_artifact(model(tmp_path, "b.gguf", seed=2))
    full = reg.artifacts()
    assert [r.sha256 for r in full] == [a.sha256, b.sha256]
    assert all(r.summary is not None for r in full)
    light = reg.artifacts(with_summary=False)
    assert [r.summary for r in light] == [None, None]
    assert [to_python(r, exclude={"summary"}) for r in light] == [to_python(r, exclude={"summary"}) for r in full]


def test_known_sha256_needs_the_stat_cache(reg: Registry, tmp_path: Path) -> None:
    p = model(tmp_path, "t.gguf")
    assert reg.known_sha256(p) is None
    rec = reg.add_artifact(p)
    assert reg.known_sha256(p) == rec.sha256
    aged(p, seconds=5)
    assert reg.known_sha256(p) is None


def test_a_file_that_is_not_a_registry_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "reg.db"
    bogus.write_bytes(b"this is not an SQLite database, just text" * 100)
    with pytest.raises(RegistryError, match=f"registry {bogus}: file is not a database"):
        Registry(bogus)
    assert bogus.read_bytes().startswith(b"this is not")
