"""Where the header bytes come from: a byte source read by offset, and a bounded, growing window.

The walk never maps the file. `mmap` turned a file truncated during the walk (a `cp` over a
file being checked) into SIGBUS, which kills the process; a short `pread` is an ordinary
error. Reading by offset also lets the same walk run over anything that can serve byte
ranges (an HTTP range source implements `ByteSource` the same way): the window starts small,
grows as the walk needs more (doubling while small, then in fixed steps) and never holds more
than its cap.
"""

from __future__ import annotations

import mmap
import os
import stat
from pathlib import Path
from types import TracebackType
from typing import Protocol

from specreg.errors import GGUFError

FIRST_READ = 1 << 20  # 1 MiB: a whole header for most models in one read (one request for a remote source)
READ_STEP = 4 << 20  # the window grows by doubling up to this, then by this much per read
MAX_HEADER_BYTES = 256 << 20  # the largest real vocabularies (262k tokens + merges) need ~16 MiB


class ByteSource(Protocol):
    """Random-access bytes of one file: `read` returns fewer than `n` bytes only at the end of the data."""

    @property
    def path(self) -> str | Path:
        """Names the source in errors."""

    @property
    def size(self) -> int:
        """Total bytes, fixed when the source was opened."""

    def read(self, offset: int, n: int) -> bytes: ...

    def close(self) -> None: ...


class FileSource:
    """A local regular file read with `pread`; refuses directories, FIFOs and devices up front."""

    def __init__(self, path: str | Path, fd: int | None = None) -> None:
        self.path = Path(path)
        self._own = fd is None
        self.fd = _open(self.path) if fd is None else fd
        st = os.fstat(self.fd)
        if not stat.S_ISREG(st.st_mode):
            self.close()
            problem = "is a directory, not a GGUF file" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise GGUFError(self.path, problem)
        self.stat = st
        self.size = st.st_size

    def read(self, offset: int, n: int) -> bytes:
        """Up to `n` bytes at `offset`; short only where the file now ends."""
        parts: list[bytes] = []
        got = 0
        try:
            while got < n:
                chunk = os.pread(self.fd, n - got, offset + got)
                if not chunk:
                    break
                parts.append(chunk)
                got += len(chunk)
        except OSError as exc:
            raise GGUFError(self.path, f"cannot read: {exc.strerror or exc}", offset=offset + got) from None
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def readinto(self, offset: int, view: memoryview) -> int:
        """Fill `view` from `offset` without an intermediate copy; returns the bytes read."""
        got = 0
        try:
            while got < len(view):
                k = os.preadv(self.fd, [view[got:]], offset + got)
                if not k:
                    break
                got += k
        except OSError as exc:
            raise GGUFError(self.path, f"cannot read: {exc.strerror or exc}", offset=offset + got) from None
        return got

    def close(self) -> None:
        if self._own and self.fd >= 0:
            os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> FileSource:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _open(path: Path) -> int:
    """Open `path` read-only without blocking on a FIFO (the caller refuses anything not regular)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise GGUFError(path, "no such file") from None
    except IsADirectoryError:
        raise GGUFError(path, "is a directory, not a GGUF file") from None
    except OSError as exc:
        raise GGUFError(path, f"cannot open: {exc.strerror or exc}") from None
    return fd


class HeaderWindow:
    """The bytes [0, end) of a source, grown on demand up to `cap` bytes.

    `buf` is anonymous memory (`mmap(-1)`): not backed by the file, so a file that shrinks
    cannot fault it, and `resize` grows it in place (mremap) without copying what was read.
    Sources with `readinto` fill it directly. `struct.unpack_from` over it is as fast as over
    a file mapping; callers slice copies out of it and never keep a view across a growth.
    Once the walk is done the reader keeps `buf` itself (trimmed), so the header is held once.
    """

    def __init__(
        self, source: ByteSource, cap: int = MAX_HEADER_BYTES, first: int = FIRST_READ, step: int = READ_STEP
    ) -> None:
        self.source = source
        self.size = source.size
        self.cap = cap
        self.first = first
        self.step = step
        self.buf = _anonymous(1)
        self.end = 0  # bytes [0, end) of buf hold the source's bytes

    def ensure(self, end: int, field: str | None = None) -> None:
        """Make `buf` cover [0, end), reading whole steps (doubling while small) so the walk
        asks for more rarely; each read is at most `step` bytes, so nothing transient is large."""
        have = self.end
        if end <= have:
            return
        if end > self.size:  # callers bound by the size first; this guards the window itself
            raise GGUFError(self.source.path, f"truncated: needs {end} bytes, file has {self.size}", field=field)
        if end > self.cap:
            raise GGUFError(
                self.source.path,
                f"header needs more than {self.cap >> 20} MiB, the most specreg reads",
                field=field,
                offset=have,
                hint="real GGUF headers (metadata and tensor list) are a few MiB",
            )
        target = min(self.size, self.cap, max(end, have + min(max(have, self.first), self.step)))
        self._resize(target)
        readinto = getattr(self.source, "readinto", None)
        while have < target:
            n = min(self.step, target - have)
            if readinto is not None:
                with memoryview(self.buf) as view:
                    got = readinto(have, view[have : have + n])
            else:
                chunk = self.source.read(have, n)
                got = len(chunk)
                self.buf[have : have + got] = chunk
            have += got
            self.end = have
            if got < n:
                raise GGUFError(
                    self.source.path,
                    f"file changed while being read: it ended at {have} bytes, {self.size} were expected",
                    field=field,
                    offset=have,
                    hint="the file is being written or replaced; check it again once that has finished",
                )

    def grow(self, field: str | None = None) -> bool:
        """Read the next chunk; False when the window already holds all it may (the file or the cap)."""
        if self.end >= min(self.size, self.cap):
            return False
        self.ensure(self.end + 1, field)
        return True

    def trim(self, end: int) -> mmap.mmap:
        """Drop what the walk read past `end`; the buffer to keep."""
        self._resize(max(end, 1))
        self.end = min(self.end, end)
        return self.buf

    def _resize(self, n: int) -> None:
        try:
            self.buf.resize(n)  # Linux: mremap, no copy
        except (OSError, SystemError, ValueError):  # platforms that cannot resize anonymous maps
            new = _anonymous(n)
            keep = min(n, self.end)
            new[:keep] = self.buf[:keep]
            self.buf.close()
            self.buf = new
        if n >= _HUGE and _MADV_HUGEPAGE is not None:
            # fresh anonymous pages fault one 4 KiB page at a time: ~40% of reading a 16 MiB header
            self.buf.madvise(_MADV_HUGEPAGE, 0, n)


_HUGE = 2 << 20
_MADV_HUGEPAGE: int | None = getattr(mmap, "MADV_HUGEPAGE", None)


def _anonymous(n: int) -> mmap.mmap:
    # MAP_PRIVATE: Python's default for fd -1 is a shared mapping, and growing one with
    # mremap leaves pages past the shared object's size that SIGBUS when touched.
    return mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
