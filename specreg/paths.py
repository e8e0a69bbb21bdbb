"""Default locations, overridable by environment for tests and CI."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO


def data_dir() -> Path:
    """The user data directory (`SPECREG_HOME`, else XDG data home / specreg)."""
    home = os.environ.get("SPECREG_HOME")
    if home:
        return Path(home)
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "share"
    return base / "specreg"


def cache_dir() -> Path:
    """Downloads worth keeping across registries (`SPECREG_CACHE`, else XDG cache home / specreg):
    the standard workloads' wheels, and the tests' real vocab files and model."""
    override = os.environ.get("SPECREG_CACHE")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "specreg"


def default_db_path() -> Path:
    """The registry file used when neither `--db` nor SPECREG_DB is given."""
    return data_dir() / "registry.db"


def registry_path(explicit: str | Path | None = None) -> Path:
    """The one rule for where the registry lives: the path given (`--db`), else $SPECREG_DB,
    else the user data directory. Commands pass `--db` in; nothing writes it to the environment."""
    if explicit is not None:
        return Path(explicit)
    override = os.environ.get("SPECREG_DB")
    return Path(override) if override else default_db_path()


def _too_large(limit: int) -> str:
    return f"larger than {limit >> 20} MiB" if limit >= 1 << 20 else f"larger than {limit} bytes"


def open_regular(path: str | Path, limit: int) -> BinaryIO:
    """A regular file of at most `limit` bytes, opened for reading: the one check every path from
    outside passes before it is read (bundles, workloads, policies, cached wheels and indexes).
    A FIFO is opened without blocking and refused, a device (/dev/zero) or a folder is refused
    before any read, a symlink is judged by what it points at, and a file over the limit by its
    size. Raises OSError, or ValueError saying why."""
    import stat

    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("is a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file")
        if st.st_size > limit:
            raise ValueError(_too_large(limit))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (`open_regular`), reading at most
    `limit` + 1 bytes whatever its size says (a file growing meanwhile). Raises OSError, or
    ValueError saying why."""
    with open_regular(path, limit) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(_too_large(limit))
    return data
