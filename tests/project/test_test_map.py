"""Tests are findable: tests/ mirrors the package's rooms, and docs/development.md's map names the
test files of every module the naming rule does not (tools/gen_test_map.py); every test file a
page, a docstring or a tool names exists (a move that missed a mention fails here)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPORA = ("tests/fuzz/corpus", "tests/malformed/corpus")  # data, not prose
MENTION = re.compile(r"\btests/[a-z0-9_/.-]*?test_[a-z0-9_]+\.py")  # not a placeholder: tests/ROOM/test_MOD.py


def test_every_module_has_its_test_file_or_a_row_in_the_map() -> None:
    from tools.gen_test_map import check, named_tests

    assert check() == []
    assert {"tests/gguf/test_reader.py", "tests/gguf/test_reader_differential.py"} <= set(named_tests("gguf/reader.py"))
    assert "tests/test_demo.py" in named_tests("demo.py") and not named_tests("units.py")


def test_the_map_check_finds_a_missing_row_and_a_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tools import gen_test_map

    page = gen_test_map.PAGE.read_text(encoding="utf-8")
    start, end = page.index(gen_test_map.START), page.index(gen_test_map.END)
    rows = [r for r in page[start:end].splitlines() if gen_test_map.ROW.match(r) and "`tests/" in r]
    module = gen_test_map.ROW.match(rows[0]).group(1)  # type: ignore[union-attr]
    kept = "\n".join(rows[1:]).replace("`tests/", "`tests/gone/", 1)  # a row names a file that is gone
    broken = page[:start] + gen_test_map.START + "\n" + kept + "\n" + page[end:]
    (tmp_path / "development.md").write_text(broken, encoding="utf-8")
    monkeypatch.setattr(gen_test_map, "PAGE", tmp_path / "development.md")
    problems = gen_test_map.check()
    assert any(p.startswith(f"specreg/{module}: no tests/") for p in problems), problems
    assert any("tests/gone/" in p and "no such file" in p for p in problems), problems


def test_every_test_file_named_in_the_tree_exists() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    missing = []
    for rel in tracked:
        if not rel.endswith((".py", ".md", ".toml", ".sh", ".cpp")) or rel.startswith(
            ("tests/fuzz/corpus", "tests/malformed/corpus")
        ):
            continue
        path = ROOT / rel
        if not path.is_file():
            continue
        for m in MENTION.finditer(path.read_text(encoding="utf-8", errors="replace")):
            if not (ROOT / m.group(0)).is_file():
                missing.append(f"{rel}: {m.group(0)}")
    assert missing == []
