"""Every single-byte flip and every truncation of a real bundle, imported (issue 23's claim, whole).

    cd tests && nice python -m fuzz.bundle_scan [--stride 1]

Each damaged copy is imported into a copy of a registry that holds records of its own, under
the oracle (fuzz.oracle). A flip that lands in zip metadata which carries no content (a member's
time, its attributes, "version made by") may import: then the registry must hold exactly what
the pristine bundle's import gives, row for row. Prints how the cases ended; exit 1 if any
broke the oracle or imported something else.
"""

from __future__ import annotations

import argparse
import collections
import re
import sqlite3
import sys
import tempfile
from pathlib import Path

from fuzz import bundles
from fuzz.oracle import failures, run_batch

_STAMP = re.compile(r"\d{4}-\d\d-\d\d[T ][0-9:.]+(?:Z|[+-]\d\d:\d\d)?")


def _rows(db: Path) -> list[str]:
    """Every row, with the times of this import (pairs' updated_at, ...) blanked."""
    conn = sqlite3.connect(db)
    try:
        return sorted(_STAMP.sub("T", line) for line in conn.iterdump())
    finally:
        conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stride", type=int, default=1, help="every Nth byte only")
    ap.add_argument("--batch", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="specreg-bundle-scan-") as tmp:
        work = Path(tmp)
        seed_path, dest = bundles.seed_bundle(work / "seed")
        seed = seed_path.read_bytes()
        positions = list(range(0, len(seed), args.stride))
        inputs = bundles.flips(seed, positions) + bundles.truncations(seed, positions)
        pristine = bundles.cases([("pristine", seed)], work / "pristine", dest)
        assert not failures(run_batch(pristine, work / "run"))
        assert pristine[0].db is not None
        want = _rows(Path(pristine[0].db))
        codes: collections.Counter[int] = collections.Counter()
        bad: list[str] = []
        other = []
        for i in range(0, len(inputs), args.batch):
            cases = bundles.cases(inputs[i : i + args.batch], work / f"b{i}", dest)
            outcomes = run_batch(cases, work / "run")
            codes.update(o.code for o in outcomes)
            bad += failures(outcomes)
            for case, o in zip(cases, outcomes, strict=True):
                if o.code == 0 and case.db is not None and _rows(Path(case.db)) != want:
                    other.append(case.id)
                if case.db is not None:
                    Path(case.db).unlink(missing_ok=True)
        print(
            f"{len(seed)}-byte bundle: {len(inputs)} cases ({len(positions)} flips, {len(positions)} cuts), "
            f"exits {dict(sorted(codes.items()))}, {len(bad)} broke the oracle, "
            f"{len(other)} imported something other than the pristine bundle"
        )
        for text in bad[:10] + other[:10]:
            print("  " + text[:1200])
        return 1 if bad or other else 0


if __name__ == "__main__":
    sys.exit(main())
