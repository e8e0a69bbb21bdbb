"""Files llama.cpp loads with a warning are read with a warning, not refused.

llama.cpp's vocab loader (src/llama-vocab.cpp, b11434) logs "bad special token: '<key>' = N,
using default id D" for an id past the vocabulary and serves the model; gguf.cpp accepts a
metadata key that is not valid UTF-8. specreg used to exit 2 on both.
"""

from __future__ import annotations

import json
from pathlib import Path

from _registry_helpers import cli, model


def _warnings(stderr: str) -> list[str]:
    """One entry per warning: a line longer than $COLUMNS continues on lines indented by 2 (how
    long the test's folder name is decides whether it wraps)."""
    lines: list[str] = []
    for ln in stderr.splitlines():
        if ln.startswith("  ") and lines and ln.strip():
            lines[-1] += " " + ln.strip()
        elif ln.strip():
            lines.append(ln)
    assert all(ln.startswith("warning: ") for ln in lines), stderr
    return lines


def test_inspect_warns_about_a_padding_id_equal_to_the_token_count(tmp_path: Path) -> None:
    path = model(tmp_path, "pad.gguf", pad_id=392)  # 392 tokens: ids 0..391
    proc = cli("inspect", str(path), db=tmp_path / "r.db")
    assert proc.returncode == 0, proc.stderr
    (line,) = _warnings(proc.stderr)
    assert str(path) in line and "tokenizer.ggml.padding_token_id = 392 is outside the vocabulary (0..391)" in line
    assert "pad 392 (out of range)" in proc.stdout
    assert not (tmp_path / "r.db").exists()  # inspect never creates a registry


def test_check_pair_uses_the_default_id_llama_cpp_uses(tmp_path: Path) -> None:
    """A draft whose bos id is past its vocabulary: llama.cpp (SPM) uses bos 1, as the target does."""
    db = tmp_path / "r.db"
    target = model(tmp_path, "t.gguf")
    draft = model(tmp_path, "d.gguf", bos_id=392, seed=3)
    proc = cli("check", "pair", str(target), str(draft), "--method", "draft-simple", "--json", db=db)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    (line,) = _warnings(proc.stderr)
    assert "tokenizer.ggml.bos_token_id = 392" in line
    checks = {c["code"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["vocab.bos"]["severity"] == "pass" and checks["vocab.bos"]["evidence"]["draft"]["bos"] == 1
    ids = checks["vocab.special_ids"]
    assert ids["severity"] == "warn" and ids["evidence"]["ignored"] == [{"kind": "bos", "id": 392, "used": 1}]
    strict = cli("check", "pair", str(target), str(draft), "--method", "draft-simple", "--strict", db=db)
    assert strict.returncode == 1  # --strict: a warning is an error, as documented
    assert cli("pairs", db=db).returncode == 0


def test_inspect_shows_a_key_that_is_not_utf8_escaped(tmp_path: Path) -> None:
    path = model(tmp_path, "k.gguf")
    data = path.read_bytes()
    assert data.count(b"general.name") == 1
    path.write_bytes(data.replace(b"general.name", b"general.n\xffme"))  # same length: still a valid file
    proc = cli("inspect", str(path), "--json", db=tmp_path / "r.db")
    assert proc.returncode == 0, proc.stderr
    (line,) = _warnings(proc.stderr)
    assert "is not valid UTF-8, shown as 'general.n\\xffme'" in line
    assert json.loads(proc.stdout)["name"] is None  # the escaped key is no key llama.cpp looks up
