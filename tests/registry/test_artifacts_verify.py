"""Re-verifying many artifacts hashes their files together (large ones on a thread pool): the
same outcomes, problem messages and refreshed stats as one file after another, SQLite used on
the calling thread only, and stat-cache hits still hash nothing."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from _registry_helpers import aged, model

from specreg.registry import hashing
from specreg.registry.store import Registry
from specreg.schemas.registry import ArtifactRecord


def _damaged_world(reg: Registry, tmp_path: Path) -> list[ArtifactRecord]:
    """Artifacts whose paths are fine, missing, resized, rewritten in place (same size), or two
    paths of one artifact that both went bad (their problems joined in path order)."""
    recs = [reg.add_artifact(model(tmp_path, f"m{i}.gguf", name=f"m{i}", seed=i)) for i in range(6)]
    copy = tmp_path / "m5-copy.gguf"
    copy.write_bytes((tmp_path / "m5.gguf").read_bytes())
    reg.add_artifact(aged(copy))
    (tmp_path / "m1.gguf").unlink()
    with open(tmp_path / "m2.gguf", "ab") as fh:
        fh.write(b"x")
    for victim in (tmp_path / "m3.gguf", tmp_path / "m5.gguf", copy):
        data = bytearray(victim.read_bytes())
        data[-1] ^= 0xFF
        victim.write_bytes(bytes(data))
        aged(victim, 30)
    return [replace(r) for r in recs]


def test_hashing_together_is_hashing_one_by_one(reg: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs = _damaged_world(reg, tmp_path)
    statements: set[str] = set()
    reg.conn.set_trace_callback(lambda _sql: statements.add(threading.current_thread().name))
    hashed_on: set[str] = set()
    real = hashing.sha256_file_keyed

    def spy(*args: object, **kw: object) -> tuple[str, hashing.StatKey]:
        hashed_on.add(threading.current_thread().name)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(hashing, "sha256_file_keyed", spy)
    monkeypatch.setattr(hashing, "HASH_WORKERS", 1)  # the reference: one file after another
    registered = reg.hash_count
    one_by_one = reg.verify_artifacts(recs, rehash=True)
    assert reg.hash_count == registered + 5  # every present file of the registered size
    assert hashed_on == {threading.current_thread().name}
    monkeypatch.setattr(hashing, "HASH_WORKERS", 4)
    monkeypatch.setattr(hashing, "POOL_MIN_SIZE", 0)  # every file on the pool, however small
    together = reg.verify_artifacts(recs, rehash=True)
    assert together == one_by_one and list(together) == list(one_by_one)
    assert reg.hash_count == registered + 10
    # the pool's threads did hash (how many of the 4 get a file is the scheduler's: on a loaded
    # machine one fast thread can take all 5)
    assert hashed_on - {threading.current_thread().name}
    assert statements == {threading.current_thread().name}  # SQLite never left this thread
    assert [ok for ok, _ in together.values()] == [True, False, False, False, True, False]
    problems = [p or "" for _, p in together.values()]
    assert problems[1].endswith("m1.gguf: missing") and "size is now" in problems[2]
    assert "m3.gguf: sha256 is now" in problems[3]
    first, second = problems[5].split("; ")
    assert "m5.gguf: sha256 is now" in first and "m5-copy.gguf: sha256 is now" in second
    assert together == {r.sha256: reg.verify_artifact(r, rehash=True) for r in recs}


def test_stat_cache_hits_hash_nothing_and_refreshed_stats_are_kept(
    reg: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hashing, "HASH_WORKERS", 4)
    monkeypatch.setattr(hashing, "POOL_MIN_SIZE", 0)
    recs = [reg.add_artifact(model(tmp_path, f"m{i}.gguf", seed=i)) for i in range(4)]
    before = reg.hash_count
    assert all(ok for ok, _ in reg.verify_artifacts(recs).values()) and reg.hash_count == before
    for i in (0, 2):
        aged(tmp_path / f"m{i}.gguf", 30)  # new mtime, same bytes: hashed once, then trusted
    assert all(ok for ok, _ in reg.verify_artifacts(recs).values()) and reg.hash_count == before + 2
    assert all(ok for ok, _ in reg.verify_artifacts(recs).values()) and reg.hash_count == before + 2
    assert all(ok for ok, _ in reg.verify_artifacts(recs, rehash=True).values()) and reg.hash_count == before + 6


def test_an_interrupted_batch_leaves_no_hashing_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while this thread hashes a small file: the pool's files stop at their next chunk."""
    monkeypatch.setattr(hashing, "HASH_WORKERS", 2)
    paths = [str(model(tmp_path, f"m{i}.gguf", seed=i)) for i in range(3)]
    me = threading.current_thread()
    started = threading.Event()

    def progress(n: int) -> None:
        if threading.current_thread() is not me:
            started.set()
        elif started.wait(10):
            raise KeyboardInterrupt

    # as if the first two were large: they go to the pool, the third is hashed here
    with pytest.raises(KeyboardInterrupt):
        hashing.sha256_files(paths, [1 << 40, 1 << 40, os.path.getsize(paths[2])], progress)
    assert not [t for t in threading.enumerate() if t.name.startswith("sha256")]
    done = hashing.sha256_files(paths, [os.path.getsize(p) for p in paths])
    assert [d[0] for d in done if not isinstance(d, OSError)] == [hashing.sha256_file(p) for p in paths]


def test_one_progress_bar_for_files_hashed_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads advancing one rich bar (as for multi-GB models) change nothing but the bar."""
    monkeypatch.setattr(hashing, "HASH_WORKERS", 4)
    monkeypatch.setattr(hashing, "POOL_MIN_SIZE", 0)
    monkeypatch.setattr(hashing, "PROGRESS_MIN_SIZE", 0)
    with Registry(tmp_path / "r.db", show_progress=True) as reg:
        recs = [reg.add_artifact(model(tmp_path, f"m{i}.gguf", seed=i)) for i in range(4)]
        before = reg.hash_count
        assert all(ok for ok, _ in reg.verify_artifacts(recs, rehash=True).values())
        assert reg.hash_count == before + 4
