"""Files in a Hugging Face cache are recognised (repo, commit, filename, model-card licence), offline.

The cache is written by the real `hf_hub_download` against the loopback hub, so its layout
(blobs/, snapshots/<commit>/, refs/main, symlinks) is exactly what huggingface_hub produces.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hubserver import CARD, REPO, FakeHub, gguf_bytes, go_offline, run_cli, set_online

from specreg.errors import UsageError
from specreg.registry.store import Registry
from specreg.sources.hub import recognise_cached
from specreg.sources.provenance import register
from specreg.testing import ModelSpec, write_model


def download(hub: FakeHub, monkeypatch: pytest.MonkeyPatch, repo: str, filename: str, revision: str) -> Path:
    """The real client puts one file into the HF cache (HF_HOME from conftest), then we go offline."""
    from huggingface_hub import hf_hub_download

    set_online(monkeypatch, hub.endpoint)
    path = Path(
        hf_hub_download(
            repo, filename, revision=revision, endpoint=hub.endpoint, cache_dir=Path(os.environ["HF_HOME"]) / "hub"
        )
    )
    go_offline(monkeypatch)
    return path


@pytest.fixture
def cached(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """acme/tiny-GGUF@main with a GGUF (apache-2.0 inside) and a card saying other/llama3.1, cached."""
    commit = hub.add_commit(REPO, {"tiny-q8.gguf": gguf_bytes(), "README.md": CARD})
    download(hub, monkeypatch, REPO, "README.md", "main")
    return download(hub, monkeypatch, REPO, "tiny-q8.gguf", "main"), commit


def test_cache_layout_is_huggingface_hubs(cached: tuple[Path, str]) -> None:
    path, commit = cached
    repo_dir = Path(os.environ["HF_HOME"]) / "hub" / "models--acme--tiny-GGUF"
    assert path == repo_dir / "snapshots" / commit / "tiny-q8.gguf" and path.is_symlink()
    assert (repo_dir / "refs" / "main").read_text() == commit
    import hashlib

    assert path.resolve() == repo_dir / "blobs" / hashlib.sha256(gguf_bytes()).hexdigest()


def test_recognise_snapshot_blob_and_outside_symlink(cached: tuple[Path, str], tmp_path: Path) -> None:
    path, commit = cached
    link = tmp_path / "models" / "mine.gguf"
    link.parent.mkdir()
    link.symlink_to(path)
    for p in (path, path.resolve(), link, os.path.relpath(path)):
        got = recognise_cached(p)
        assert got is not None, p
        assert (got.repo_id, got.revision, got.filename, got.refs) == (REPO, commit, "tiny-q8.gguf", ("main",))
        assert got.card_path == path.parent / "README.md"


def test_paths_outside_a_cache_are_not_recognised(tmp_path: Path) -> None:
    plain = write_model(tmp_path / "snapshots" / "abc" / "m.gguf", ModelSpec())  # a folder named like the cache
    assert recognise_cached(plain) is None
    assert recognise_cached(tmp_path / "nowhere.gguf") is None


def test_subfolder_filename_and_corrupt_neighbour(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    commit = hub.add_commit("acme/split", {"Q8_0/part-1.gguf": gguf_bytes(seed=1)})
    path = download(hub, monkeypatch, "acme/split", "Q8_0/part-1.gguf", "main")
    # Another repo in the same cache is broken (a ref to a missing commit): only ours is scanned.
    broken = Path(os.environ["HF_HOME"]) / "hub" / "models--other--broken"
    (broken / "snapshots").mkdir(parents=True)
    (broken / "refs").mkdir()
    (broken / "refs" / "main").write_text("0" * 40)
    got = recognise_cached(path)
    assert got is not None and (got.repo_id, got.revision, got.filename) == ("acme/split", commit, "Q8_0/part-1.gguf")
    assert got.card_path is None


def test_shared_blob_is_attributed_to_the_ref(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    old = hub.add_commit(REPO, {"m.gguf": gguf_bytes(seed=2)})
    download(hub, monkeypatch, REPO, "m.gguf", old)
    new = hub.add_commit(REPO, {"m.gguf": gguf_bytes(seed=2), "README.md": CARD})
    path = download(hub, monkeypatch, REPO, "m.gguf", "main")
    assert path.parent.name == new != old
    got = recognise_cached(path.resolve())  # the blob: both snapshots point at it
    assert got is not None and got.revision == new and got.refs == ("main",)


def test_register_records_cache_provenance_and_card_conflict(cached: tuple[Path, str]) -> None:
    path, commit = cached
    with Registry(os.environ["SPECREG_DB"]) as reg:
        rec = register(reg, path)
    p = rec.provenance
    assert (p.repo, p.revision, p.filename, p.source) == (REPO, commit, "tiny-q8.gguf", "hf_cache")
    assert p.extra["hf_cache"]["refs"] == ["main"]
    lic = rec.licence
    assert [(s.source, s.value, s.name) for s in lic.sources] == [
        ("model_card", "other", "llama3.1"),
        ("gguf", "apache-2.0", None),
    ]
    assert lic.sources[0].link == "https://example.org/LICENSE"
    assert (lic.effective, lic.effective_source, lic.conflict) == ("other", "model_card", True)


def test_user_licence_wins_and_conflict_is_still_recorded(cached: tuple[Path, str]) -> None:
    path, _ = cached
    with Registry(os.environ["SPECREG_DB"]) as reg:
        rec = register(reg, path, license="Llama3.1")
    assert (rec.licence.effective, rec.licence.effective_source, rec.licence.conflict) == ("llama3.1", "user", True)
    assert {s.source for s in rec.licence.sources} == {"user", "model_card", "gguf"}


def test_card_of_another_revision_is_not_borrowed(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    first = hub.add_commit(REPO, {"m.gguf": gguf_bytes(seed=3)})
    path = download(hub, monkeypatch, REPO, "m.gguf", first)
    hub.add_commit(REPO, {"m.gguf": gguf_bytes(seed=3), "README.md": CARD})
    download(hub, monkeypatch, REPO, "README.md", "main")  # the card exists, but at the newer commit
    with Registry(os.environ["SPECREG_DB"]) as reg:
        rec = register(reg, path)
    assert rec.provenance.revision == first
    assert [s.source for s in rec.licence.sources] == ["gguf"] and not rec.licence.conflict


def test_flags_that_contradict_the_cache_are_refused(cached: tuple[Path, str]) -> None:
    path, commit = cached
    with Registry(os.environ["SPECREG_DB"]) as reg:
        with pytest.raises(UsageError, match="acme/tiny-GGUF, not someone/else"):
            register(reg, path, repo="someone/else")
        with pytest.raises(UsageError, match="not revision 'v2'"):
            register(reg, path, revision="v2")
        assert reg.artifacts() == []  # nothing half-registered
        assert register(reg, path, repo=REPO, revision="main").provenance.revision == commit


def test_cli_register_artifacts_and_check_pair_show_provenance(
    cached: tuple[Path, str], hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, commit = cached
    hub.add_commit("acme/draft-GGUF", {"draft.gguf": gguf_bytes(seed=5), "README.md": b"---\nlicense: MIT\n---\n"})
    download(hub, monkeypatch, "acme/draft-GGUF", "README.md", "main")
    draft = download(hub, monkeypatch, "acme/draft-GGUF", "draft.gguf", "main")

    reg = run_cli("register", str(path))
    assert reg.returncode == 0, reg.stderr
    assert "licence sources disagree" in reg.stderr and "model_card: other" in reg.stderr

    check = run_cli("check", "pair", str(path), str(draft), "--method", "draft-simple")
    assert check.returncode in (0, 1), check.stderr  # admitted or rejected: a verdict either way
    assert "Traceback" not in check.stderr

    table = run_cli("artifacts")
    assert table.returncode == 0, table.stderr
    row = next(ln for ln in table.stdout.splitlines() if "acme/tiny-GGUF" in ln)
    cells = [c.strip() for c in row.split("  ") if c.strip()]
    assert f"{REPO}@{commit[:12]}" in cells and "other (conflict)" in cells  # revision shown short
    listed = {r["provenance"]["repo"]: r for r in json.loads(run_cli("artifacts", "--json").stdout)}
    assert set(listed) == {REPO, "acme/draft-GGUF"}  # check pair registered the draft on the way
    d = listed["acme/draft-GGUF"]
    assert d["provenance"]["source"] == "hf_cache" and d["provenance"]["filename"] == "draft.gguf"
    assert d["licence"]["effective"] == "mit" and d["licence"]["conflict"] is True  # card MIT vs GGUF apache
    assert listed[REPO]["provenance"]["revision"] == commit


def test_any_cache_location_is_recognised(hub: FakeHub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from huggingface_hub import hf_hub_download

    commit = hub.add_commit(REPO, {"m.gguf": gguf_bytes(seed=4)})
    set_online(monkeypatch, hub.endpoint)
    path = hf_hub_download(REPO, "m.gguf", cache_dir=tmp_path / "elsewhere", endpoint=hub.endpoint)
    got = recognise_cached(path)
    assert got is not None and (got.repo_id, got.revision, got.cache_dir) == (REPO, commit, tmp_path / "elsewhere")
