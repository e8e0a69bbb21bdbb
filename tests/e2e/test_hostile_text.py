"""Untrusted names in reports and on the terminal: never a live link, a remote image, or text
that reads differently from what it is (bidi overrides, zero-width characters).

A tiny model named with Markdown links, an image, a bare URL, a right-to-left override and a
zero-width space is registered, benchmarked (fake server: the names travel, not the numbers)
and audited through the real CLI; the Markdown reports are parsed with markdown-it (CommonMark
+ tables) and every link and image in them is listed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _hostile_helpers import fake_world, registry_readable, specreg
from markdown_it import MarkdownIt

HOSTILE = (
    "[click](https://evil.example/x) ![pixel](https://evil.example/p.png) <img src=https://evil.example/h.png> "
    "https://evil.example/bare www.evil.example *em* |pipe| admin\u202egpj.exe zero\u200bwidth"
)
RAW_FORBIDDEN = ("\u202e", "\u200b")


def _links(md_text: str) -> list[str]:
    """Every link target and image source a CommonMark renderer produces from `md_text`."""
    md = MarkdownIt("commonmark").enable("table")
    out = []
    for tok in md.parse(md_text):
        for child in tok.children or []:
            if child.type == "link_open":
                out.append(str(child.attrs.get("href")))
            elif child.type == "image":
                out.append(str(child.attrs.get("src")))
    return out


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[int], Path, Path]:
    monkeypatch.setenv("SPECREG_HOME", str(tmp_path / "home"))
    return fake_world(tmp_path, names=(HOSTILE,))


def test_reports_and_terminal_show_hostile_names_inert(
    world: tuple[Path, list[int], Path, Path], tmp_path: Path
) -> None:
    db, (pair,), exe, wl = world
    os.environ["FAKE_LLAMA_MODE"] = "ok"
    try:
        bench = specreg(
            "bench", "admitted", "--pair", str(pair), "--server", str(exe), "--methods", "none",
            "--workload", str(wl), "--repeat", "1", "--warmup", "0", "--json", db=db,
        )  # fmt: skip
    finally:
        del os.environ["FAKE_LLAMA_MODE"]
    assert bench.returncode == 0, bench.stderr[-2000:]
    run_id = json.loads(bench.stdout)[0]["info"]["run_id"]
    run_md, audit_md = tmp_path / "run.md", tmp_path / "audit.md"
    assert specreg("runs", "show", run_id, "--report", str(run_md), db=db).returncode == 0
    audit = specreg("audit", "--report", str(audit_md), db=db)
    assert audit.returncode in (0, 1), audit.stderr[-2000:]
    for report in (run_md, audit_md):
        text = report.read_text("utf-8")
        assert "evil" in text or report is run_md  # the audit names the model (the run report, its SHA)
        assert [x for x in _links(text) if "evil" in x] == [], report.name
        assert all(x.endswith(".svg") and "://" not in x for x in _links(text)), _links(text)
        assert "https://evil" not in text and "www.evil" not in text  # GitHub would autolink these
        assert not any(ch in text for ch in RAW_FORBIDDEN)
        assert report is run_md or ("\\u202e" in text and "\\u200b" in text)
    html_report = tmp_path / "audit.html"
    assert specreg("audit", "--report", str(html_report), db=db).returncode in (0, 1)
    page = html_report.read_text("utf-8")
    assert "evil.example" in page and 'href="https://evil' not in page and 'src="https://evil' not in page
    assert not any(ch in page for ch in RAW_FORBIDDEN)
    for args in (("artifacts",), ("pairs",), ("runs",), ("runs", "show", run_id), ("audit",)):
        proc = specreg(*args, db=db)
        assert not any(ch in proc.stdout + proc.stderr for ch in RAW_FORBIDDEN), args
    registry_readable(db)
