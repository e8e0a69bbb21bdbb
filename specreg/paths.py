"""Default locations, overridable by environment for tests and CI."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    """The user data directory (`SPECREG_HOME`, else XDG data home / specreg)."""
    home = os.environ.get("SPECREG_HOME")
    if home:
        return Path(home)
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "share"
    return base / "specreg"


def default_db_path() -> Path:
    """The registry file used when neither `--db` nor SPECREG_DB is given."""
    return data_dir() / "registry.db"
