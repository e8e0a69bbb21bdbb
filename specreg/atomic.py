"""Write a file so that readers see the old content or the new one, never half of either."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, data: bytes | str, *, mode: int = 0o644) -> Path:
    """Write `data` to `path` via a temp file in the same folder, fsync, then os.replace.

    A crash (or a full disk) leaves either the previous file or the complete new one; the
    temp file is removed on failure. Text is written as UTF-8.
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    folder = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    # The rename itself must reach the disk too, or a power cut can bring the old name back.
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return target


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
