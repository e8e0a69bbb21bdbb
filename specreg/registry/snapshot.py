"""One open file, parsed and hashed: the SHA-256 a verdict is recorded under names the bytes checked.

Hashing a path and then opening the path again to parse it leaves a window in which an atomic
replace (`mv new old`) swaps the file: the verdict lands under the SHA-256 of bytes nobody
checked. Here the file is opened once; the header is parsed from that descriptor and the
SHA-256 is computed from it (or vouched for by the stat cache for exactly this stat), and
fstat before and after must agree, so parse and hash saw the same inode, size, mtime and ctime.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specreg.errors import ArtifactNotFound, SpecregError
from specreg.gguf.format import MAGIC
from specreg.registry.hashing import StatKey

if TYPE_CHECKING:
    from specreg.gguf.reader import GGUFFile
    from specreg.gguf.source import FileSource
    from specreg.gguf.walk import KnownArray, TwinArray

CacheLookup = Callable[[str, StatKey], "tuple[str, int] | None"]  # (path, key) -> (sha256, hashed_at_ns)
HashFd = Callable[[str, int], "tuple[str, StatKey, int]"]  # (path, fd) -> (sha256, key, hashed_at_ns)
OVERLAP_MAX = 64 << 20  # files up to this size are hashed while their header is parsed (~0.1 s of hashing)
LayoutLookup = Callable[[str], "dict[int, KnownArray] | None"]  # sha256 -> GGUFFile.string_array_layout()


@dataclass(frozen=True)
class Snapshot:
    """A file as it was while we read it: where, its stat, its parsed header, its SHA-256."""

    path: str  # absolute
    key: StatKey
    file: GGUFFile
    sha256: str
    hashed_at_ns: int
    hashed: bool  # False: the stat cache vouched for the SHA-256 of exactly this stat


def take(
    path: str | os.PathLike[str],
    *,
    cached: CacheLookup | None,
    hash_fd: HashFd,
    layout: LayoutLookup | None = None,
    twins: Mapping[str, TwinArray] | None = None,
) -> Snapshot:
    """Open `path` once, parse and hash that descriptor; SpecregError if the file changed meanwhile.

    `layout`: where the long string arrays of the bytes the stat cache vouches for lie
    (statcache.layout_of); the reader jumps over them and proves each jump by its SHA-256.
    `twins`: another file's arrays (GGUFFile.twin_arrays; see read_gguf)."""
    from specreg.gguf.reader import read_gguf
    from specreg.gguf.source import FileSource

    apath = os.path.abspath(os.fspath(path))
    try:
        fd = os.open(apath, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ArtifactNotFound(f"{apath}: no such file") from None
    except OSError as exc:
        raise ArtifactNotFound(f"{apath}: cannot read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ArtifactNotFound(f"{apath}: not a regular file")
        key = StatKey.of(st)
        hit = cached(apath, key) if cached is not None else None
        known = layout(hit[0]) if hit is not None and layout is not None else None
        # A small GGUF file is hashed on a thread while its header is walked (hashlib and preadv
        # release the GIL). A large one is parsed first, and a file that does not even start with
        # the GGUF magic is never hashed: either fails before any hashing.
        overlap = hit is None and st.st_size <= OVERLAP_MAX and os.pread(fd, 4, 0) == MAGIC
        hashing = _Hashing(hash_fd, apath, fd) if overlap else None
        try:
            # tensor data (EAGLE-3's d2t) is read later by reopening: only if it is still this file
            gf = read_gguf(FileSource(apath, fd=fd), reopen=lambda: _same_file(apath, key), known=known, twins=twins)
        finally:
            if hashing is not None:
                hashing.join()  # the descriptor is closed below: never under a running hash
        if hit is not None:
            sha, hashed_at, hashed = hit[0], hit[1], False
        else:
            sha, hashed_key, hashed_at = hashing.result() if hashing is not None else hash_fd(apath, fd)
            hashed = True
            if hashed_key != key:
                raise _changed(apath)
        if StatKey.of(os.fstat(fd)) != key:
            raise _changed(apath)
    finally:
        os.close(fd)
    return Snapshot(apath, key, gf, sha, hashed_at, hashed)


class _Hashing(threading.Thread):
    """`hash_fd(path, fd)` on a thread of its own; `result()` returns it or raises what it raised."""

    def __init__(self, hash_fd: HashFd, path: str, fd: int) -> None:
        super().__init__(name="specreg-hash", daemon=True)
        self._call = (hash_fd, path, fd)
        self._out: tuple[str, StatKey, int] | None = None
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        hash_fd, path, fd = self._call
        try:
            self._out = hash_fd(path, fd)
        except BaseException as exc:  # handed to the caller's thread by result()
            self._error = exc

    def result(self) -> tuple[str, StatKey, int]:
        self.join()
        if self._error is not None:
            raise self._error
        assert self._out is not None
        return self._out


def _same_file(apath: str, key: StatKey) -> FileSource:
    from specreg.errors import GGUFError
    from specreg.gguf.source import FileSource

    source = FileSource(apath)
    if StatKey.of(source.stat) != key:
        source.close()
        raise GGUFError(apath, "file changed since it was checked; nothing was recorded")
    return source


def _changed(apath: str) -> SpecregError:
    return SpecregError(
        f"{apath}: file changed while it was being read; nothing was recorded",
        hint="wait until the file is completely written (or replaced), then run the command again",
    )
