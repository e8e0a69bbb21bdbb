"""Streaming SHA-256 and the stat key behind the registry's no-rehash cache."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from specreg.registry import hashing


@pytest.mark.parametrize("size", [0, 1, hashing.CHUNK - 1, hashing.CHUNK, hashing.CHUNK + 1, 3 * hashing.CHUNK + 17])
def test_digest_matches_hashlib_at_chunk_boundaries(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    seen: list[int] = []
    assert hashing.sha256_file(p, progress=seen.append) == hashlib.sha256(data).hexdigest()
    assert sum(seen) == size
    assert all(0 < n <= hashing.CHUNK for n in seen)


def test_keyed_hash_returns_the_stat_of_the_hashed_bytes(tmp_path: Path) -> None:
    p = tmp_path / "f.bin"
    p.write_bytes(b"x" * 1000)
    sha, key = hashing.sha256_file_keyed(p)
    st = p.stat()
    assert key == hashing.StatKey(st.st_dev, st.st_ino, 1000, st.st_mtime_ns, st.st_ctime_ns)
    assert key == hashing.stat_key(p)
    assert sha == hashlib.sha256(b"x" * 1000).hexdigest()


def test_file_growing_while_hashed_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "f.bin"
    p.write_bytes(os.urandom(2 * hashing.CHUNK))

    def append(_: int) -> None:  # a downloader still writing the file
        with open(p, "ab") as f:
            f.write(b"more")

    with pytest.raises(hashing.FileChangedWhileHashing):
        hashing.sha256_file(p, progress=append)


def test_progress_bar_variant_gives_the_same_digest(tmp_path: Path) -> None:
    data = os.urandom(3 * hashing.CHUNK + 5)
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    sha, key = hashing.sha256_with_bar(p, min_size=0)  # force the bar path on a small file
    assert sha == hashlib.sha256(data).hexdigest()
    assert key.size == len(data)


def test_racy_rule() -> None:
    now = time.time_ns()
    old = hashing.StatKey(1, 2, 3, now - 10 * 1_000_000_000)
    fresh = hashing.StatKey(1, 2, 3, now - 100_000_000)  # modified 0.1 s before hashing
    assert not hashing.is_racy(old, now)
    assert hashing.is_racy(fresh, now)
    assert hashing.is_racy(old, None)
