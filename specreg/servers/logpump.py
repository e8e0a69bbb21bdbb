"""A server's output into its log file, bounded: the first MiB, the last MiB or two, and a count.

A server (or a hostile binary passed as `--server`) can write hundreds of MB a second; written
straight to the log file that fills the disk. The child writes into a pipe instead, and one
thread per server copies it: the head is kept as written, then everything else goes after a
fixed-width marker line, and whenever that tail grows past twice its size the file is
compacted in place to the last `tail` bytes, the marker counting what was dropped. So the
file is always readable (head, marker, recent lines), never larger than head + 2 x tail, and
the copy costs one extra write per dropped byte at most.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

HEAD_BYTES = 1 << 20
TAIL_BYTES = 1 << 20
_CHUNK = 64 << 10


def _marker(dropped: int, head: int, tail: int) -> bytes:
    # fixed width: rewritten in place as the count grows
    return (
        f"\n# specreg: log kept to its first {head >> 10} KiB and its last {tail >> 10}-{2 * tail >> 10} KiB; "
        f"{dropped:>16} bytes dropped here\n"
    ).encode()


class LogPump:
    """Copy `read_fd` (the read end of the child's stdout/stderr pipe) into `log_path`."""

    def __init__(self, read_fd: int, log_path: Path, *, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> None:
        self._src = read_fd
        self._head, self._tail = head, tail
        self._fd = os.open(log_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        self._pos = os.fstat(self._fd).st_size  # a log may hold earlier attempts: append after them
        self._head_left = head
        self._marker_at: int | None = None
        self._tail_start = 0
        self.total = 0  # bytes the child wrote
        self.dropped = 0  # bytes not kept
        self._thread = threading.Thread(target=self._run, name="specreg-log", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        writing = True
        try:
            while True:
                chunk = os.read(self._src, _CHUNK)
                if not chunk:
                    return
                self.total += len(chunk)
                if not writing:
                    self.dropped += len(chunk)
                    continue
                try:
                    self._write(chunk)
                except OSError:  # disk full: keep draining, or the child blocks on a full pipe
                    writing = False
        except OSError:
            return
        finally:
            os.close(self._src)

    def _write(self, chunk: bytes) -> None:
        if self._head_left:
            k = min(len(chunk), self._head_left)
            self._put(chunk[:k])
            self._head_left -= k
            chunk = chunk[k:]
            if not chunk:
                return
        if self._marker_at is None:
            self._marker_at = self._pos
            self._put(_marker(0, self._head, self._tail))
            self._tail_start = self._pos
        self._put(chunk)
        if self._pos - self._tail_start > 2 * self._tail:
            keep = os.pread(self._fd, self._tail, self._pos - self._tail)
            self.dropped += self._pos - self._tail - self._tail_start
            os.pwrite(self._fd, keep, self._tail_start)
            self._pos = self._tail_start + len(keep)
            os.ftruncate(self._fd, self._pos)
            os.pwrite(self._fd, _marker(self.dropped, self._head, self._tail), self._marker_at)

    def _put(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(self._fd, view, self._pos)
            self._pos += n
            view = view[n:]

    def wait(self, timeout: float) -> bool:
        """Wait until the child's side of the pipe is closed by every holder; False on timeout."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def close(self, timeout: float = 2.0) -> None:
        """Finish copying (bounded wait) and close the log file."""
        self.wait(timeout)
        if not self._thread.is_alive():
            os.close(self._fd)
        # else: a descendant still holds the pipe; the daemon thread keeps the fd until it ends
