"""`specreg fetch` and `register --verify`: the real huggingface_hub client against the loopback hub.

Failures (tampered bytes, missing revision, gated repo, a server hanging up mid-download,
offline) run the real CLI in a subprocess: exit 2, one line, no traceback, no artifact row.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
from pathlib import Path

import pytest
from hubserver import CARD, REPO, FakeFile, FakeHub, assert_one_line_error, gguf_bytes, go_offline, run_cli

from specreg.errors import HubError, UsageError
from specreg.registry.store import Registry
from specreg.sources.provenance import fetch, register, verify

FILE = "tiny-q8.gguf"


def _registry() -> Registry:
    return Registry(os.environ["SPECREG_DB"])


def _artifact_count() -> int:
    with _registry() as reg:
        return len(reg.artifacts())


def _cache_blobs() -> list[str]:
    root = Path(os.environ["HF_HOME"]) / "hub"
    return sorted(p.name for p in root.glob("models--*/blobs/*"))


@pytest.fixture
def repo(online: FakeHub) -> str:
    """acme/tiny-GGUF: a GGUF saying apache-2.0 and a card saying other/llama3.1, at main."""
    return online.add_commit(REPO, {FILE: gguf_bytes(), "README.md": CARD})


def test_fetch_pins_commit_verifies_and_registers(online: FakeHub, repo: str) -> None:
    with _registry() as reg:
        rec, path = fetch(reg, REPO, FILE, revision="main")
    assert rec.sha256 == hashlib.sha256(gguf_bytes()).hexdigest()
    p = rec.provenance
    assert (p.repo, p.revision, p.filename, p.source) == (REPO, repo, FILE, "hub")
    verified = p.extra["hub_verified"]
    assert verified["sha256"] == rec.sha256 and verified["requested_revision"] == "main"
    assert verified["endpoint"] == online.endpoint
    assert (rec.licence.effective, rec.licence.conflict) == ("other", True)
    assert [s.source for s in rec.licence.sources] == ["model_card", "gguf"]
    assert path.parent.name == repo and str(path) in rec.paths
    # Pinned: the file and the card were asked for at the commit, never at the moving branch.
    resolves = [x for x in online.paths() if "/resolve/" in x]
    assert resolves and all(f"/resolve/{repo}/" in x for x in resolves)
    # The cache is huggingface_hub's own: refs/main written, blob named by the LFS SHA-256.
    assert (Path(os.environ["HF_HOME"]) / "hub" / "models--acme--tiny-GGUF" / "refs" / "main").read_text() == repo
    assert rec.sha256 in _cache_blobs()


def test_fetch_again_reuses_the_cache_and_still_checks(online: FakeHub, repo: str) -> None:
    with _registry() as reg:
        first, _ = fetch(reg, REPO, FILE)
        before = len(online.paths("GET"))
        again, _ = fetch(reg, REPO, FILE)
    cdn_gets = [r for r in online.requests[before:] if r.host == "cdn"]
    assert again.sha256 == first.sha256 and cdn_gets == []
    assert _artifact_count() == 1


def test_fetch_adds_provenance_to_an_artifact_registered_locally(online: FakeHub, repo: str, tmp_path: Path) -> None:
    local = tmp_path / "copy.gguf"
    local.write_bytes(gguf_bytes())
    with _registry() as reg:
        assert register(reg, local).provenance.repo is None
        rec, _ = fetch(reg, REPO, FILE, license="Apache-2.0")
    assert (rec.provenance.repo, rec.provenance.revision, rec.provenance.source) == (REPO, repo, "hub")
    assert {s.source for s in rec.licence.sources} == {"user", "model_card", "gguf"}
    assert rec.licence.effective == "apache-2.0" and len(rec.paths) == 2


def test_fetch_tampered_file_is_removed_and_not_registered(online: FakeHub) -> None:
    evil = bytearray(gguf_bytes())
    evil[-1] ^= 0xFF  # same size, other bytes: only the SHA-256 can tell
    online.add_commit(REPO, {FILE: FakeFile(gguf_bytes(), serve=bytes(evil))})
    err = assert_one_line_error(run_cli("fetch", REPO, FILE), "SHA-256", "nothing registered")
    assert hashlib.sha256(gguf_bytes()).hexdigest()[:16] in err
    assert _artifact_count() == 0
    assert _cache_blobs() == []
    assert not list((Path(os.environ["HF_HOME"]) / "hub").glob("models--*/snapshots/*/*"))


def test_fetch_missing_revision(online: FakeHub, repo: str) -> None:
    assert_one_line_error(
        run_cli("fetch", REPO, FILE, "--revision", "no-such-branch"), "revision 'no-such-branch' not found"
    )
    assert _artifact_count() == 0


def test_fetch_gated_repo(online: FakeHub) -> None:
    online.add_commit("meta/gated-GGUF", {FILE: gguf_bytes()}, gated=True)
    assert_one_line_error(run_cli("fetch", "meta/gated-GGUF", FILE), "gated", "HTTP 401")
    assert _artifact_count() == 0 and _cache_blobs() == []


def test_fetch_connection_dropped_mid_download(online: FakeHub) -> None:
    online.add_commit(REPO, {FILE: gguf_bytes(), "README.md": CARD})
    online.repos[REPO].drop_downloads = True
    # huggingface_hub retries a broken download 5 times, a second apart, before giving up.
    err = assert_one_line_error(run_cli("fetch", REPO, FILE, timeout=90), "connection to the hub was lost")
    assert REPO in err
    assert _artifact_count() == 0
    root = Path(os.environ["HF_HOME"]) / "hub"
    assert _cache_blobs() == [] and not list(root.rglob("*.incomplete"))


def test_offline_says_so_and_local_register_still_works(
    online: FakeHub, repo: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    go_offline(monkeypatch)
    assert_one_line_error(run_cli("fetch", REPO, FILE), "HF_HUB_OFFLINE")
    local = tmp_path / "m.gguf"
    local.write_bytes(gguf_bytes())
    with _registry() as reg:
        with pytest.raises(HubError, match="HF_HUB_OFFLINE"):
            verify(reg, local, repo=REPO)
        rec = register(reg, local, repo=REPO, revision=repo)
    assert (rec.provenance.repo, rec.provenance.revision, rec.provenance.source) == (REPO, repo, "user")
    assert online.requests == []  # nothing went to the hub


def test_unreachable_hub_is_one_hub_error(monkeypatch: pytest.MonkeyPatch, online: FakeHub) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connection refused
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with _registry() as reg, pytest.raises(HubError, match="cannot reach the hub") as exc:
        fetch(reg, REPO, FILE)
    assert exc.value.hint and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("repo_id", "filename", "message"),
    [
        ("acme/missing", FILE, "repository not found"),
        (REPO, "nope.gguf", "no file nope.gguf"),
        (REPO, "README.md", "no LFS SHA-256"),
    ],
)
def test_fetch_other_refusals(online: FakeHub, repo: str, repo_id: str, filename: str, message: str) -> None:
    with _registry() as reg, pytest.raises(HubError, match=message):
        fetch(reg, repo_id, filename)
    assert _artifact_count() == 0


def test_malformed_repo_id_is_a_usage_error(online: FakeHub) -> None:
    with _registry() as reg, pytest.raises(UsageError, match="not a hub repo id"):
        fetch(reg, "a/b/c", FILE)
    assert online.requests == []


def test_register_verify_file_on_disk_found_by_hash(online: FakeHub, repo: str, tmp_path: Path) -> None:
    local = tmp_path / "renamed-locally.gguf"
    local.write_bytes(gguf_bytes())
    with _registry() as reg:
        rec = verify(reg, local, repo=REPO)
        assert [r.sha256 for r in reg.artifacts()] == [rec.sha256]
    p = rec.provenance
    assert (p.repo, p.revision, p.filename, p.source) == (REPO, repo, FILE, "hub")
    assert rec.licence.effective == "other" and rec.licence.conflict  # the card came from the hub
    assert re.fullmatch(r"[0-9a-f]{40}", p.revision)


def test_register_verify_cached_file_uses_its_snapshot(online: FakeHub, repo: str) -> None:
    from huggingface_hub import hf_hub_download

    path = hf_hub_download(REPO, FILE, cache_dir=Path(os.environ["HF_HOME"]) / "hub", endpoint=online.endpoint)
    with _registry() as reg:
        rec = verify(reg, path)
    assert (rec.provenance.repo, rec.provenance.revision, rec.provenance.source) == (REPO, repo, "hub")


def test_register_verify_mismatch_registers_nothing(online: FakeHub, repo: str, tmp_path: Path) -> None:
    local = tmp_path / FILE
    local.write_bytes(gguf_bytes(seed=9))  # same name, other bytes
    err = assert_one_line_error(
        run_cli("register", str(local), "--repo", REPO, "--revision", "main", "--verify"), "does not match", FILE
    )
    assert repo[:12] in err
    assert _artifact_count() == 0 and local.exists()  # the user's own file is never deleted


def test_register_verify_needs_a_repo(online: FakeHub, tmp_path: Path) -> None:
    local = tmp_path / "m.gguf"
    shutil.copyfile(__file__, local)
    with _registry() as reg, pytest.raises(UsageError, match="--verify needs --repo"):
        verify(reg, local)


def test_corrupted_cache_blob_is_caught_removed_and_fetched_again(online: FakeHub, repo: str) -> None:
    from huggingface_hub import hf_hub_download

    cache = Path(os.environ["HF_HOME"]) / "hub"
    old = hf_hub_download(REPO, FILE, cache_dir=cache, endpoint=online.endpoint)
    online.add_commit(REPO, {FILE: gguf_bytes(), "README.md": b"---\nlicense: mit\n---\n"})  # same blob, new commit
    blob = Path(old).resolve()
    data = bytearray(blob.read_bytes())
    data[100] ^= 0xFF  # bit rot in the shared blob
    blob.write_bytes(bytes(data))
    with _registry() as reg:
        with pytest.raises(HubError, match="removed from the cache"):
            fetch(reg, REPO, FILE)  # main now points at the new commit; its entry shares the blob
        assert reg.artifacts() == [] and not Path(old).exists() and not blob.exists()
        rec, path = fetch(reg, REPO, FILE)
    assert rec.licence.effective == "mit" and path.read_bytes() == gguf_bytes()


def test_cli_fetch_prints_provenance_and_hostile_card_text_literally(online: FakeHub) -> None:
    card = b'---\nlicense: other\nlicense_name: "[bold red]evil[/bold red]\\x1b[31m"\n---\n'
    commit = online.add_commit(REPO, {FILE: gguf_bytes(), "README.md": card})
    proc = run_cli("fetch", REPO, FILE, "--revision", "main")
    assert proc.returncode == 0, proc.stderr
    assert f"{REPO}@{commit}" in proc.stdout and "(source: hub)" in proc.stdout
    assert "[bold red]evil[/bold red]\\x1b[31m" in proc.stdout and "\x1b[31m" not in proc.stdout
    assert "licence sources disagree" in proc.stderr and "effective: other (model_card)" in proc.stderr
