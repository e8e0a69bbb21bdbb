"""A hub that lies (or a user typo) must not write outside the Hugging Face cache.

huggingface_hub turns hub answers into cache paths: `refs/<revision>` (the revision asked for,
and the commit a ref names), `snapshots/<X-Repo-Commit>/`, `blobs/<ETag>`. Each test points
one of them at a marker file outside the cache with `../`, runs the real `specreg fetch`,
and asserts: exit 2, one error line, the marker never written, nothing registered.
"""

from __future__ import annotations

import json
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
    from specreg.sources.hub import check_revision

    with pytest.raises(UsageError):
        check_revision(bad)


@pytest.mark.parametrize("good", ["main", "v1.0", "refs/pr/1", "release/2024-01_b", "a" * 40, "0123abc"])
def test_revision_shapes_accepted(good: str) -> None:
    from specreg.sources.hub import check_revision

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


def alias_bomb(levels: int = 9, width: int = 10) -> bytes:
    """A model card whose `license:` expands to width**levels strings (10^9 here) through aliases."""
    lines = ["---", f"a0: &a0 [{', '.join(['mit'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    lines += [f"license: [{', '.join([f'*a{levels - 1}'] * width)}]", "---", "# bomb", ""]
    return "\n".join(lines).encode()


def test_yaml_alias_bomb_card_is_no_licence_statement(liar: FakeHub, tmp_path: Path) -> None:
    """fetch and register both read the card: bounded time and memory, and the card says nothing."""
    from _hostile_helpers import measured

    card = alias_bomb()
    assert len(card) < 1000
    liar.add_commit(REPO, {FILE: gguf_bytes(), "README.md": card})
    db = Path(os.environ["SPECREG_DB"])
    rc, out, err, wall, rss = measured("fetch", REPO, FILE, "--json", db=db, timeout=60)
    assert rc == 0, err[-2000:]
    assert wall < 30 and rss < 400 << 20, (wall, rss >> 20)
    rec = json.loads(out)
    assert [s["source"] for s in rec["licence"]["sources"]] == ["gguf"]  # the card made no statement
    cached = rec["paths"][0]
    rc, out, err, wall, rss = measured("register", cached, "--rehash", db=db, timeout=60)
    assert rc == 0 and wall < 30 and rss < 400 << 20, (rc, err[-2000:], wall, rss >> 20)
    registry_readable(db)


@pytest.mark.parametrize(
    "yaml_text",
    [
        "license: {text: mit}",  # a mapping
        "license: [[mit]]",  # nested
        "license: [" + ", ".join(["mit"] * 100) + "]",  # long list
        "license: " + "[" * 5000 + "]" * 5000,  # deep nesting
        "license: !!python/object:os.system [echo]",  # not a safe tag
    ],
)
def test_hostile_card_values_say_nothing(tmp_path: Path, yaml_text: str) -> None:
    from specreg.sources.provenance import card_source

    readme = tmp_path / "README.md"
    readme.write_text(f"---\n{yaml_text}\n---\n# card\n")
    assert card_source(readme) is None
