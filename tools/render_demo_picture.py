"""Regenerate docs/report.png, the README's picture: `specreg demo`'s own report, first screen at
1280 px in Debian's headless chromium (driven as tests/_browser.py drives it).

The demo runs in a fresh folder; its report names every file relative to that folder, so the
picture shows no temporary path. The picture is only replaced when the run ended as the demo
means to end - at least one stratum deployed and at least one refused - since that is what the
README says it shows; otherwise the demo's end is printed and the exit status is 1 (measure again
on a quieter machine: the verdicts are the measured numbers, never edited).

    python tools/render_demo_picture.py [--out docs/report.png] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "report.png")
    ap.add_argument("--keep", type=Path, help="run the demo in this folder and keep it (default: a temp dir)")
    opts = ap.parse_args()
    from _browser import Browser, chromium

    if chromium() is None:
        print("error: chromium is not installed (tools/ensure_chromium.sh)", file=sys.stderr)
        return 2
    work = opts.keep or Path(tempfile.mkdtemp(prefix="specreg-picture-"))
    folder = work / "specreg-demo"
    env = {**os.environ, "COLUMNS": "100"}
    env.pop("SPECREG_DB", None)
    proc = subprocess.run(
        [sys.executable, "-m", "specreg.cli", "demo", "--dir", str(folder)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        print(proc.stdout[-2000:] + proc.stderr[-2000:], file=sys.stderr)
        return 2
    ends = re.findall(r"^(DEPLOY|REFUSED) for (\S+): (.*)$", proc.stdout, re.M)
    for word, stratum, rest in ends:
        print(f"{word} for {stratum}: {rest}")
    load = os.getloadavg()[0]
    words = {w for w, _, _ in ends}
    if words != {"DEPLOY", "REFUSED"}:
        print(f"the run did not end with a deployed and a refused stratum (load {load:.1f}); {opts.out} kept")
        return 1
    report = folder / "report.html"
    with Browser(work) as browser:
        look = browser.look(report, 1280, work / "screenshots", "demo")
    opts.out.write_bytes(look.screenshot.read_bytes())
    print(f"wrote {opts.out} from {report} (1-minute load {load:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
