"""Streaming SHA-256 of (multi-GB) GGUF files and the stat key that lets us skip re-hashing.

hashlib's SHA-256 is OpenSSL's (SHA-NI where the CPU has it); the Python loop only has to stay
out of its way: one preallocated buffer filled with `readinto` (no per-chunk allocation) and
large chunks so the per-call overhead vanishes. `update()` and `preadv` release the GIL, so
`sha256_files` hashes large files on several cores at once.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# 1 MiB: measured flat from 128 KiB to 4 MiB on 2 GB (page cache); mmap was ~5% faster but a file
# truncated while mapped kills the process with SIGBUS, so we copy with readinto instead.
CHUNK = 1 << 20
PROGRESS_MIN_SIZE = 1 << 30  # show a progress bar for files of 1 GiB and more
# A file modified within this window before it was hashed may be modified again without its
# mtime changing (coarse filesystem clocks: ext4 ~ms, FAT 2 s). Such a stat is "racy" and is
# not trusted as proof that the bytes are unchanged (git's "racily clean" rule).
RACY_WINDOW_NS = 2_000_000_000
# Files at least this large are hashed on a thread pool by `sha256_files`; smaller ones on the
# calling thread, for which a hand-off costs more than the hash (4,200 files of 4 KiB: 2.7x
# slower on a pool of 2 than in a loop; 4 of 200 MB: 1.9x faster on 2 cores).
POOL_MIN_SIZE = CHUNK
HASH_WORKERS = min(4, os.cpu_count() or 1)

Progress = Callable[[int], None]


@dataclass(frozen=True)
class StatKey:
    """The facts that change when a file's bytes are replaced or rewritten in place.

    ctime is in the key because mtime is not proof: a rewrite in place can put the old size and
    mtime back (`touch -d`), but every such change sets ctime to now, and nobody can set it
    back. A key without ctime (stored by an older specreg) never matches: those files are hashed.
    """

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int | None = None

    @classmethod
    def of(cls, st: os.stat_result) -> StatKey:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


Hashed = tuple[str, StatKey, int]  # (sha256, the stat of the bytes hashed, when: time.time_ns())


def stat_key(path: str | Path) -> StatKey:
    """StatKey of a path (follows symlinks: the bytes are what we key)."""
    return StatKey.of(os.stat(path))


def is_racy(key: StatKey, hashed_at_ns: int | None) -> bool:
    """True when the file was modified so close to hashing that its mtime proves nothing.

    ctime is not tested here: it is in the key, cannot be set back, and a rewrite after the
    hash gets a later ctime than the stored one unless it falls in the same kernel clock tick
    as the file's previous change and the hash; the audit re-hashes by default."""
    if hashed_at_ns is None:
        return True
    return key.mtime_ns >= hashed_at_ns - RACY_WINDOW_NS


class FileChangedWhileHashing(OSError):
    """The file's stat changed between the start and the end of hashing."""


def sha256_file(path: str | Path, progress: Progress | None = None) -> str:
    """Hex SHA-256 of a file's bytes; `progress(n)` is called with the bytes hashed per chunk."""
    digest, _ = sha256_file_keyed(path, progress)
    return digest


def sha256_file_keyed(path: str | Path, progress: Progress | None = None, fd: int | None = None) -> tuple[str, StatKey]:
    """Hash a file and return the StatKey of the very bytes that were hashed.

    The key comes from fstat on the open descriptor before and after reading; if they differ
    the file was being written while we read it and the digest means nothing. With `fd`, that
    descriptor is hashed (by offset: its position is not used) and left open, so a caller can
    parse and hash one and the same open file.
    """
    if fd is None:
        with open(path, "rb", buffering=0) as f:
            return sha256_file_keyed(path, progress, f.fileno())
    h = hashlib.sha256()
    before = StatKey.of(os.fstat(fd))
    chunk = min(CHUNK, before.size) or 1  # re-verifying thousands of small files: not 1 MiB zeroed for each
    buf = bytearray(chunk)
    view = memoryview(buf)
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    update = h.update
    # Read no more than the size we started with: a file that keeps growing (a download in
    # progress) would otherwise keep this loop busy forever; the stat check below catches it.
    offset, remaining = 0, before.size
    while remaining > 0:
        n = os.preadv(fd, [view[:remaining] if remaining < chunk else view], offset)
        if not n:
            break
        update(view[:n] if n < chunk else view)
        offset += n
        remaining -= n
        if progress is not None:
            progress(n)
    after = StatKey.of(os.fstat(fd))
    if before != after or remaining:
        raise FileChangedWhileHashing(f"{path}: file changed while it was being hashed")
    return h.hexdigest(), after


class _Stopped(Exception):
    """Raised inside a hashing thread when the caller has given up (an interrupt)."""


def sha256_files(
    paths: Sequence[str], sizes: Sequence[int], progress: Progress | None = None
) -> list[Hashed | OSError]:
    """Hash many files (`sizes`: as stat saw them), in the order given: each result, or the
    OSError (FileChangedWhileHashing included) that stopped it. Files of POOL_MIN_SIZE and more
    are hashed HASH_WORKERS at a time on a thread pool while this thread hashes the small ones.
    `progress` may be called from several threads at once."""
    stop = threading.Event()

    def step(n: int) -> None:  # per chunk: an interrupted caller does not wait for 20 GB files
        if stop.is_set():
            raise _Stopped
        if progress is not None:
            progress(n)

    def one(i: int, on_chunk: Progress | None) -> Hashed | OSError:
        try:
            sha, key = sha256_file_keyed(paths[i], on_chunk)
        except OSError as exc:
            return exc
        return sha, key, time.time_ns()

    big = [i for i, size in enumerate(sizes) if size >= POOL_MIN_SIZE]
    if len(big) < 2 or HASH_WORKERS < 2:
        return [one(i, progress) for i in range(len(paths))]
    from concurrent.futures import ThreadPoolExecutor  # (and logging): only for two or more large files

    done: dict[int, Hashed | OSError] = {}
    pool = ThreadPoolExecutor(min(HASH_WORKERS, len(big)), thread_name_prefix="sha256")
    try:
        futures = {i: pool.submit(one, i, step) for i in big}
        for i, size in enumerate(sizes):
            if size < POOL_MIN_SIZE:
                done[i] = one(i, progress)
        done |= {i: future.result() for i, future in futures.items()}
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
    return [done[i] for i in range(len(paths))]


@contextmanager
def progress_bar(description: str, total: int) -> Iterator[Progress]:
    """A rich progress bar on stderr (transient) for `total` bytes; yields the callback to
    advance it, which several hashing threads may call at once."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )
    from rich.progress import (
        Progress as RichProgress,
    )

    console = Console(stderr=True)
    with RichProgress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        # Updating rich on every 1 MiB chunk costs ~1% at 1.5 GB/s; throttle to ~10 updates/s.
        lock = threading.Lock()
        pending = 0
        last = time.monotonic()

        def advance(n: int) -> None:
            nonlocal pending, last
            with lock:
                pending += n
                now = time.monotonic()
                if now - last < 0.1:
                    return
                done, pending, last = pending, 0, now
            bar.update(task, advance=done)

        yield advance
        bar.update(task, advance=pending)


def sha256_with_bar(
    path: str | Path, *, min_size: int = PROGRESS_MIN_SIZE, fd: int | None = None
) -> tuple[str, StatKey]:
    """sha256_file_keyed with a rich progress bar on stderr for files of `min_size` or more."""
    size = os.fstat(fd).st_size if fd is not None else os.stat(path).st_size
    if size < min_size:
        return sha256_file_keyed(path, fd=fd)
    from rich.markup import escape

    with progress_bar(f"sha256 {escape(Path(path).name)}", size) as advance:
        return sha256_file_keyed(path, advance, fd)
