"""GGUF text is data: printed literally, never rendered, never executed, always bound in SQL."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
from pathlib import Path

from _cli_helpers import run_specreg

from specreg.commands.output import safe
from specreg.testing import ModelSpec, write_model

MARKUP_NAME = "[bold red]x[/] \x1b[2J"
SQL_NAME = "x'); DROP TABLE artifacts;--"
# A template-injection payload in the style of CVE-2024-34359: rendering it would create the file.
PAYLOAD = "{{ cycler.__init__.__globals__.os.popen('touch %s').read() }}"


def _specreg(*args: str) -> subprocess.CompletedProcess[str]:
    return run_specreg(args, timeout=60, env={**os.environ, "COLUMNS": "200"})


def test_safe_escapes_markup_and_control_sequences() -> None:
    out = safe(MARKUP_NAME)
    assert "\x1b" not in out
    assert "\\x1b[2J" in out
    assert out.startswith("\\[bold red]")  # rich markup escaped, shown as text


def test_inspect_prints_hostile_name_literally_and_never_renders_template(tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    template = PAYLOAD % canary
    model = write_model(
        tmp_path / "evil.gguf",
        ModelSpec(name=MARKUP_NAME, license="[link=http://x]mit[/link]", chat_template=template),
    )
    human = _specreg("inspect", str(model))
    assert human.returncode == 0, human.stderr
    assert "[bold red]x[/]" in human.stdout
    assert "\x1b" not in human.stdout
    assert "[link=http://x]mit[/link]" in human.stdout
    as_json = _specreg("inspect", "--json", str(model))
    data = json.loads(as_json.stdout)
    assert data["tokenizer"]["chat_template_sha256"] == hashlib.sha256(template.encode()).hexdigest()
    assert not canary.exists()


def test_sql_payloads_are_bound_as_parameters(tmp_path: Path) -> None:
    model = write_model(tmp_path / "sqli.gguf", ModelSpec(name=SQL_NAME, license="mit'--"))
    db = tmp_path / "r.db"
    reg = _specreg("--db", str(db), "register", "--license", "x' OR '1'='1", str(model))
    assert reg.returncode == 0, reg.stderr
    listed = json.loads(_specreg("--db", str(db), "artifacts", "--json").stdout)
    assert [a["summary"]["name"] if "summary" in a else a["name"] for a in listed] == [SQL_NAME]
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
    assert "artifacts" in tables
