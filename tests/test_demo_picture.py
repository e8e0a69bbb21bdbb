"""The README's picture is the current report of a demo run, not a stale one (issue 47).

tools/render_demo_picture.py keeps, beside docs/report.png, the page it is a screenshot of
(docs/report.html) and the audit that page was written from (docs/report.json, with the
picture's SHA-256). Here the current report code writes that audit's page again: its headline
(the badge, the verdict sentence, what deploys where) must be the kept page's, so a change of
headline without a new picture fails - run the tool. And the picture must show what the README
says it shows: a stratum deployed and one refused.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import struct
from pathlib import Path

from specreg.report import common
from specreg.report.write import write_audit_report
from specreg.schemas.audit import AuditReport

DOCS = Path(__file__).resolve().parents[1] / "docs"
RENDER = "python tools/render_demo_picture.py"


def _headline(page: str) -> list[str]:
    """What the first screen leads with: the title's badge, the verdict sentence and the Deploy line."""
    title = re.search(r"<h1>(.*?)</h1>", page, re.S)
    decision = re.search(r'<section id="decision"[^>]*>(.*?)</section>', page, re.S)
    assert title and decision, "no headline in the page"
    parts = [title.group(1), *re.findall(r"<p>(.*?)</p>", decision.group(1), re.S)]
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", "", p)).split()) for p in parts]


def _kept() -> tuple[AuditReport, str]:
    kept = json.loads((DOCS / "report.json").read_text("utf-8"))
    picture = (DOCS / "report.png").read_bytes()
    assert hashlib.sha256(picture).hexdigest() == kept["png_sha256"], (
        f"docs/report.png is not the picture docs/report.html was kept with: {RENDER}"
    )
    try:
        audit = AuditReport.model_validate(kept["audit"])
    except ValueError as exc:
        raise AssertionError(f"docs/report.json no longer reads as an audit ({exc}): {RENDER}") from None
    return audit, (DOCS / "report.html").read_text("utf-8")


def test_the_pictures_headline_is_what_the_report_code_writes_now(tmp_path: Path) -> None:
    audit, page = _kept()
    (written,) = write_audit_report(tmp_path / "report.html", audit)
    now = _headline(written.read_text("utf-8"))
    assert now == _headline(page), f"the report's headline changed since docs/report.png was made: {RENDER}"
    assert now[0] == f"specreg audit {common.headline_word(audit)}"
    assert now[1] == f"{common.headline_word(audit)}: {common.headline(audit)}."


def test_the_picture_shows_a_stratum_deployed_and_one_refused() -> None:
    audit, page = _kept()
    per = common.deploying_pairs(audit)
    assert any(per.values()) and not all(per.values()), per
    assert common.headline_word(audit) in ("PASS", "PARTIAL")
    head = _headline(page)
    for stratum, ids in per.items():
        assert (f"deploy for {stratum}" in head[1] or f"deploys for {stratum}" in head[1]) == bool(ids), head
    picture = (DOCS / "report.png").read_bytes()
    assert picture[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", picture[16:24])  # the IHDR chunk: a laptop's first screen
    assert (width, height) == (1280, 800)
