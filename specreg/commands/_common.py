"""What every command shares: options, the console, JSON output and safe printing."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)  # one error = one line, never wrapped

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def safe(text: object) -> str:
    """Untrusted text (names, templates, licences) as inert rich text: markup and control codes escaped."""
    s = "" if text is None else str(text)
    s = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", s)
    return escape(s)


def db_path() -> Path:
    """Where the registry lives: `--db`, else SPECREG_DB, else the user data directory."""
    from specreg.registry.paths import default_db_path

    override = os.environ.get("SPECREG_DB")
    return Path(override) if override else default_db_path()


def emit_json(data: Any) -> None:
    """Print a pydantic model (or plain data) as JSON on stdout, nothing else."""
    if isinstance(data, BaseModel):
        text = data.model_dump_json(indent=2)
    elif isinstance(data, list) and data and isinstance(data[0], BaseModel):
        text = json.dumps([d.model_dump(mode="json") for d in data], indent=2)
    else:
        text = json.dumps(data, indent=2, default=str)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
