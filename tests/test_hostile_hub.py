"""A hub that lies (or a user typo) must not write outside the Hugging Face cache.

huggingface_hub turns hub answers into cache paths: `refs/<revision>` (the revision asked for,
and the commit a ref names), `snapshots/<X-Repo-Commit>/`, `blobs/<ETag>`. Each test points
one of them at a marker file outside the cache with `../`, runs the real `specreg fetch`,
and asserts: exit 2, one error line, the marker never written, nothing registered.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from _hostile_helpers import files_under, one_error_line, registry_readable, specreg
from hubserver import CARD, REPO, FakeFile, FakeHub, gguf_bytes, hub, online  # noqa: F401

FILE = "tiny-q8.gguf"


@pytest.fixture
def liar(online: FakeHub) -> FakeHub:  # noqa: F811
    """The loopback hub, this process pointed at it; tests make it lie."""
    return online


def _cache_repo() -> Path:
    return Path(os.environ["HF_HOME"]) / "hub" / "models--acme--tiny-GGUF"


def _escape(marker: Path, below: str) -> str:
    """A relative path from `<cache repo>/<below>` to `marker` (the cache folders need not exist)."""
    return os.path.relpath(marker, _cache_repo() / below)


def _fetch_refused(tmp_path: Path, marker: Path, *args: str, needles: tuple[str, ...]) -> None:
    db = Path(os.environ["SPECREG_DB"])
    before = files_under(tmp_path)
    proc = specreg("fetch", REPO, FILE, *args, db=db)
    one_error_line(proc, *needles)
    assert not marker.exists()
    assert files_under(tmp_path) == before  # nothing written next to the marker either
    registry_readable(db)
    assert specreg("artifacts", "--json", db=db).stdout.strip() == "[]"


def test_user_revision_with_dot_dot_is_refused_before_any_request(liar: FakeHub, tmp_path: Path) -> None:
    commit = liar.add_commit(REPO, {FILE: gguf_bytes(), "README.md": CARD})
    marker = tmp_path / "pwned-user-ref"
    evil = _escape(marker, "refs")
    liar.repos[REPO].refs[evil] = commit  # the hub even answers for it
    _fetch_refused(tmp_path, marker, "--revision", evil, needles=("is not a commit hash or a branch/tag name",))
    assert liar.requests == []


@pytest.mark.parametrize("bad", ["refs/../../x", "/etc/passwd", "main\\..\\x", "a\nb", "-rf", "x.lock", ""])
def test_revision_shapes_refused(bad: str) -> None:
    from specreg.errors import UsageError
    from specreg.registry.hub import check_revision

    with pytest.raises(UsageError):
        check_revision(bad)


@pytest.mark.parametrize("good", ["main", "v1.0", "refs/pr/1", "release/2024-01_b", "a" * 40, "0123abc"])
def test_revision_shapes_accepted(good: str) -> None:
    from specreg.registry.hub import check_revision

    check_revision(good)


def test_hub_commit_with_dot_dot_in_model_info(liar: FakeHub, tmp_path: Path) -> None:
    """model_info's `sha` is a path: huggingface_hub would write refs/<sha> outside the cache."""
    liar.add_commit(REPO, {FILE: gguf_bytes(), "README.md": CARD})
    marker = tmp_path / "pwned-sha"
    liar.repos[REPO].info_sha = _escape(marker, "refs")
    _fetch_refused(tmp_path, marker, needles=("not a 40-hex commit hash",))
    assert not (_cache_repo() / "refs" / "main").exists()  # the lie was not cached as main either


def test_hub_commit_header_that_is_not_a_commit(liar: FakeHub, tmp_path: Path) -> None:
    liar.add_commit(REPO, {FILE: gguf_bytes(), "README.md": CARD})
    liar.repos[REPO].header_commit = "not-a-commit"
    _fetch_refused(tmp_path, tmp_path / "unused", needles=("not a 40-hex commit hash",))
    assert not (_cache_repo() / "snapshots" / "not-a-commit").exists()


def test_hub_etag_with_dot_dot_would_place_the_blob_outside(liar: FakeHub, tmp_path: Path) -> None:
    marker = tmp_path / "pwned-blob"
    liar.add_commit(REPO, {FILE: FakeFile(gguf_bytes(), etag=_escape(marker, "blobs")), "README.md": CARD})
    _fetch_refused(tmp_path, marker, needles=("X-Linked-Etag", "not a plain name"))


def test_hub_redirect_loop_is_one_line(liar: FakeHub, tmp_path: Path) -> None:
    liar.add_commit(REPO, {FILE: gguf_bytes(), "README.md": CARD})
    liar.repos[REPO].redirect_loop = True
    t0 = time.monotonic()
    _fetch_refused(tmp_path, tmp_path / "unused", needles=("redirected too many times",))
    assert time.monotonic() - t0 < 60
