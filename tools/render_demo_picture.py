"""Regenerate docs/report.png, the README's picture: `specreg demo`'s own report, first screen at
1280 px in Debian's headless chromium (driven as tests/_browser.py drives it).

The demo runs with this checkout's code in a fresh folder; its report names every file relative
to that folder, so the picture shows no temporary path. Beside the picture the tool keeps what
it was made from: docs/report.html (the page itself) and docs/report.json (the audit the page was
written from, and the picture's SHA-256). tests/test_demo_picture.py writes that audit's page
again with the current report code and compares its headline with the kept page's, so a change
of headline without a new picture fails the tests; run this tool then.

The rendering run measures with the busy-machine check off (SPECREG_BUSY_SHARE=off): on a
shared machine the check may set every round aside, and the picture would show nothing measured
(issue 47). Run it at a quiet moment all the same: the numbers on the page are measured, never
edited. The picture is only replaced when the run ended as the demo means to end - at least one
stratum deployed and at least one refused - since that is what the README says it shows;
otherwise the demo's end is printed and the exit status is 1 (measure again).

    python tools/render_demo_picture.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PICTURE = DOCS / "report.png"
PAGE = DOCS / "report.html"  # the page the picture is a screenshot of
AUDIT = DOCS / "report.json"  # {"png_sha256": ..., "audit": the AuditReport the page was written from}
WIDTH = 1280  # a laptop's first screen (tests/_browser.py SCREENS)
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--keep", type=Path, help="run the demo in this folder and keep it (default: a temp dir)")
    opts = ap.parse_args()
    from _browser import Browser, chromium

    if chromium() is None:
        print("error: chromium is not installed (tools/ensure_chromium.sh)", file=sys.stderr)
        return 2
    os.environ["SPECREG_BUSY_SHARE"] = "off"  # see the module docstring
    os.environ.pop("SPECREG_DB", None)
    from specreg.demo import relative_report, run_demo
    from specreg.report.common import deploying_pairs

    work = opts.keep or Path(tempfile.mkdtemp(prefix="specreg-picture-"))
    os.environ["SPECREG_HOME"] = str(work / "home")
    folder = work / "specreg-demo"
    result = run_demo(folder, say=print)
    assert result.audit is not None
    shown = relative_report(result.audit, folder.resolve())  # as the demo's report.html shows it
    per = deploying_pairs(shown)
    load = os.getloadavg()[0]
    for stratum, ids in sorted(per.items()):
        print(f"{'DEPLOY' if ids else 'REFUSED'} for {stratum}")
    if not any(per.values()) or all(per.values()):
        print(f"the run did not end with a deployed and a refused stratum (load {load:.1f}); {PICTURE} kept")
        return 1
    with Browser(work) as browser:
        look = browser.look(result.report, WIDTH, work / "screenshots", "demo")
    picture = look.screenshot.read_bytes()
    PICTURE.write_bytes(picture)
    shutil.copyfile(result.report, PAGE)
    kept = {"png_sha256": hashlib.sha256(picture).hexdigest(), "audit": json.loads(shown.model_dump_json())}
    AUDIT.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n", "utf-8")
    print(f"wrote {PICTURE}, {PAGE} and {AUDIT} from {result.report} (1-minute load {load:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
