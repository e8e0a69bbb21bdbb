"""Surface: resealed bundles whose records say something else (issue 36), judged by what they mean.

Byte flips and zip damage (fuzz.bundles) test that a bundle is read safely; these test that an
import cannot lie. A real bundle - the shared benchmark world's export: artifacts with licences,
pairs with their verdicts, a run with its conditions, prompts, request rows and summaries - has
one value changed at one path of one record (every field of every record type, nested ones too)
to a hostile value (NaN, Infinity, a number past any range, the wrong type, a forged "admitted",
a decision of "faster"), then every member digest, run digest and the manifest digest recomputed
(`reseal`), as another specreg would have written it. Each is imported into a copy of the
registry the bundle came from, and the oracle (fuzz.oracle) judges the import as usual, plus:

- no import changes a local verdict: every pair's standing verdict and every verdict made here
  are what they were, whatever the bundle said;
- no imported number is non-finite: no REAL column and no number in a JSON column is NaN or
  infinite after the import;
- what reads the registry afterwards never traces back: `pairs`, `runs`, `runs show` of every
  run, `audit` (text and `--json`) each end in a result or one `error:` line;
- a refused import changed nothing (the registry file byte for byte).

`semantic_import` is the call the child process makes; `mutations` enumerates every (member,
path, value) of a bundle (the long pass samples them); the fixed corpus in
tests/fuzz/corpus/semantic/ holds a regression case for each fix (the default suite's pass).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import random
import shutil
import sqlite3
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fuzz.bundles import members, reseal
from fuzz.oracle import Case

CORPUS = Path(__file__).parent / "corpus" / "semantic"
# named hostile values (corpus recipes name them: JSON itself cannot hold NaN)
VALUES: dict[str, Any] = {
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "huge-int": 10**30,
    "huge-float": 1e308,
    "negative": -1,
    "zero": 0,
    "fraction": 0.5,
    "true": True,
    "false": False,
    "null": None,
    "empty-string": "",
    "zzzz": "zzzz",
    "faster": "faster",
    "list": [1, "x"],
    "object": {"x": [1]},
    "empty-list": [],
    "deep": json.loads("[" * 200 + "]" * 200),
    "long-string": "x" * 100_000,
    "nan-pair": [math.nan, math.inf],
}
Path_ = list[str | int]


def _records(blob: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in blob.splitlines() if line.strip()]


def _dump(recs: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r, sort_keys=True).encode() + b"\n" for r in recs)  # NaN as Python writes it


def _paths(value: Any, prefix: Path_, depth: int) -> Iterator[Path_]:
    """Every path into a record: each key and list index, nested down to `depth`."""
    if depth == 0:
        return
    if isinstance(value, dict):
        for k in sorted(value):
            yield [*prefix, k]
            yield from _paths(value[k], [*prefix, k], depth - 1)
    elif isinstance(value, list):
        for i in range(min(len(value), 3)):  # the first few items stand for the rest
            yield [*prefix, i]
            yield from _paths(value[i], [*prefix, i], depth - 1)


def record_members(data: dict[str, bytes]) -> list[str]:
    """The members that hold records (artifacts, pairs, each run's five parts)."""
    return sorted(n for n in data if n.endswith((".jsonl", "run.json")) and n != "bundle.json")


def mutations(data: dict[str, bytes], *, depth: int = 4) -> Iterator[tuple[str, int, Path_]]:
    """(member, record index, path) for every field of every record type: each member's first
    record, and for the per-request and per-summary members one further record, every path."""
    for name in record_members(data):
        recs = _records(data[name])
        for idx in sorted({0, len(recs) // 2}) if recs else []:
            for path in _paths(recs[idx], [], depth):
                yield name, idx, path


def _set(rec: Any, path: Path_, value: Any) -> bool:
    node = rec
    for key in path[:-1]:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return False
    last = path[-1]
    if isinstance(node, dict) and isinstance(last, str):
        node[last] = value
        return True
    if isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = value
        return True
    return False


def mutate(seed: bytes, member: str, idx: int, path: Path_, value: Any) -> bytes | None:
    """The seed bundle with one value changed, resealed; None when the path is not there."""
    data = members(seed)
    name = _resolve(data, member)
    if name is None:
        return None
    recs = _records(data[name])
    if idx >= len(recs) or not _set(recs[idx], path, value):
        return None
    data[name] = _dump(recs)
    return reseal(data)


def _resolve(data: dict[str, bytes], member: str) -> str | None:
    """A member name, where "runs/*/x" stands for the (first) run's member x."""
    if "*" not in member:
        return member if member in data else None
    head, tail = member.split("*", 1)
    return next((n for n in sorted(data) if n.startswith(head) and n.endswith(tail)), None)


def add_verdict(seed: bytes, verdict: dict[str, Any], *, of: str = "rejected") -> bytes:
    """The seed with one more verdict for a pair: the first one its bundle rejects (`of`), the
    checks of an admitted one when `verdict["checks"]` is "admitted-checks"."""
    data = members(seed)
    recs = _records(data["pairs.jsonl"])
    good = next(v["checks"] for r in recs for v in r["verdicts"] if v["admitted"])
    want = of == "admitted"
    rec = next(r for r in recs if r["verdicts"] and r["verdicts"][-1]["admitted"] is want)
    v = dict(verdict)
    if v.get("checks") == "admitted-checks":
        v["checks"] = good
    rec["verdicts"].append(v)
    data["pairs.jsonl"] = _dump(recs)
    return reseal(data)


def corpus_inputs(seed: bytes) -> list[tuple[str, bytes]]:
    """The fixed regression cases (tests/fuzz/corpus/semantic/*.json)."""
    out = []
    for p in sorted(CORPUS.glob("*.json")):
        r = json.loads(p.read_text())
        if r["kind"] == "field":
            blob = mutate(seed, r["member"], r.get("record", 0), r["path"], VALUES[r["value"]])
        elif r["kind"] == "verdict":
            blob = add_verdict(seed, r["verdict"], of=r.get("of", "rejected"))
        else:
            raise ValueError(r["kind"])
        assert blob is not None, f"semantic corpus entry {p.stem}: the path is not in the seed bundle"
        out.append((p.stem, blob))
    return out


def random_inputs(seed: bytes, rng: random.Random, n: int) -> list[tuple[str, bytes]]:
    """`n` random (field, value) mutations of the seed: every field of every record type can be drawn."""
    pool = list(mutations(members(seed)))
    out = []
    for member, idx, path in rng.sample(pool, min(n, len(pool))):
        kind = rng.choice(sorted(VALUES))
        blob = mutate(seed, member, idx, path, VALUES[kind])
        if blob is not None:
            out.append((f"{member}#{idx}:{'.'.join(map(str, path))}={kind}"[:200], blob))
    return out


def cases(inputs: list[tuple[str, bytes]], work: Path, dest: Path, policy: Path) -> list[Case]:
    work.mkdir(parents=True, exist_ok=True)
    out = []
    for i, (name, blob) in enumerate(inputs):
        path = work / f"{i:04d}.zip"
        path.write_bytes(blob)
        out.append(
            Case(
                id=f"semantic:{name}",
                call="semantic:semantic_import",
                args=[str(path), str(dest), str(work / f"{i:04d}.db"), str(policy)],
            )
        )
    return out


# ---- the call the child process makes ---------------------------------------------------------


def _cli(argv: list[str]) -> tuple[int, str, str]:
    from specreg.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        except BaseException:  # the oracle's "traceback": reported, not raised here
            err.write(traceback.format_exc())
            code = 1
    return code, out.getvalue(), err.getvalue()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def local_verdicts(db: Path) -> tuple[list[tuple], list[tuple]]:
    """Every pair's standing verdict and every verdict made on this machine."""
    conn = sqlite3.connect(db)
    try:
        pairs = conn.execute(
            "SELECT id, admitted, strict, latest_verdict_id, strict_admitted, strict_verdict_id FROM pairs ORDER BY id"
        ).fetchall()
        verdicts = conn.execute("SELECT * FROM verdicts ORDER BY id").fetchall()
    finally:
        conn.close()
    return pairs, verdicts


def _not_number(name: str) -> Any:
    raise ValueError(f"{name} in a stored JSON column")


def non_finite(db: Path) -> list[str]:
    """Where the registry holds a NaN or an infinity: REAL values and numbers inside JSON columns."""
    conn = sqlite3.connect(db)
    found: list[str] = []
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for t in tables:
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({t})")]
            for row in conn.execute(f"SELECT * FROM {t}"):
                for col, v in zip(cols, row, strict=True):
                    if isinstance(v, float) and not math.isfinite(v):
                        found.append(f"{t}.{col} = {v}")
                    elif isinstance(v, str) and col.endswith("_json") and v:
                        try:
                            json.loads(v, parse_constant=_not_number, parse_float=_finite)
                        except ValueError as exc:
                            if "stored JSON" in str(exc) or "non-finite" in str(exc):
                                found.append(f"{t}.{col}: {exc}")
    finally:
        conn.close()
    return found


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"non-finite {text[:20]}")
    return x


def _readers(db: Path, policy: Path) -> list[str]:
    """What reading the registry after the import printed that breaks the oracle."""
    conn = sqlite3.connect(db)
    try:
        runs = [r[0] for r in conn.execute("SELECT run_id FROM bench_runs ORDER BY run_id")]
    finally:
        conn.close()
    bad = []
    argvs = [["pairs"], ["pairs", "--json"], ["runs"], ["runs", "--json"]]
    argvs += [["runs", "show", r] for r in runs[:4]]
    argvs += [["audit", "--policy", str(policy)], ["audit", "--policy", str(policy), "--json"]]
    for argv in argvs:
        code, out, err = _cli(["--db", str(db), *argv])
        errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
        if "Traceback (most recent call last)" in out + err:
            bad.append(f"`{' '.join(argv)}` traced back:\n{err[-1500:]}")
        elif code not in (0, 1, 2) or (code == 2 and len(errors) != 1):
            bad.append(f"`{' '.join(argv)}` exited {code} with {len(errors)} error lines: {err[-300:]}")
        low = out.lower()
        if any(w in low.replace("-", " ").split() for w in ("nan", "inf", "nanx", "infx", "-inf")) or "[nan" in low:
            bad.append(f"`{' '.join(argv)}` printed a non-finite number: {out[:300]}")
    return bad


def prepare(source: Path, work: Path) -> tuple[bytes, Path]:
    """(the bundle of everything in `source`, a registry to import it into: `source` without its
    runs, so an imported run is new there and its summaries are drawn again, with every pair
    already checked on that machine)."""
    work.mkdir(parents=True, exist_ok=True)
    bundle = work / "seed.zip"
    code, _, err = _cli(["--db", str(source), "export", "--all", "-o", str(bundle)])
    assert code == 0, err
    dest = work / "dest.db"
    shutil.copyfile(source, dest)
    conn = sqlite3.connect(dest)
    with conn:
        for table in ("run_digests", "run_origins", "bench_summaries", "bench_requests", "bench_prompts",
                      "bench_conditions", "bench_runs"):  # fmt: skip
            conn.execute(f"DELETE FROM {table}")
    conn.execute("VACUUM")
    conn.close()
    return bundle.read_bytes(), dest


def semantic_import(bundle: str, dest: str, work_db: str, policy: str) -> Any:
    """Import `bundle` into a copy of `dest`; AssertionError (a traceback: the oracle's violation)
    for any semantic rule broken, else the import's outcome for the oracle to judge."""
    from fuzz.remote import CliResult

    db = Path(work_db)
    shutil.copyfile(dest, db)
    before_sha, before = _sha(db), local_verdicts(db)
    code, out, err = _cli(["--db", str(db), "import", bundle])
    problems = []
    if code != 0 and _sha(db) != before_sha:
        problems.append("a refused import changed the registry")
    after = local_verdicts(db)
    kept = {p[0]: p for p in after[0]}
    if any(kept.get(p[0]) != p for p in before[0]) or after[1][: len(before[1])] != before[1]:
        problems.append("the import changed a verdict made on this machine")
    if len(after[1]) > len(before[1]) and code != 0:
        problems.append("a refused import recorded a verdict")
    problems += [f"non-finite number stored: {w}" for w in non_finite(db)[:5]]
    if code == 0:  # what was imported is read back by every reader
        reader_db = db.with_suffix(".read.db")
        shutil.copyfile(db, reader_db)
        problems += _readers(reader_db, Path(policy))
    if problems:
        raise AssertionError("; ".join(problems) + f"\n(import exit {code}: {err[-600:]})")
    return CliResult(code, out, err)
