"""Surface: result bundles handed to `specreg import`, damaged byte by byte and structurally.

A real bundle (exported from a registry holding two registered models and a verdict, or - in
the long pass - the shared benchmark world's runs) is damaged: every single-byte flip and every
truncation (or a fixed sample of them), zip-level edits (a duplicate member, a traversal or
absolute member name, a member the manifest does not list, a compression bomb, a huge or
deeply nested manifest, a future format version, a manifest field of the wrong type), and
resealed edits - records changed and every digest recomputed, as another specreg would have
written them (a record of the wrong shape, an artifact record re-labelling a SHA-256 the
registry already holds). Each is imported into a copy of a registry that already holds
records: the oracle's "nothing lost" is that registry byte for byte, whatever the outcome
besides success.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import warnings
import zipfile
from collections.abc import Callable
from functools import cache
from pathlib import Path

from fuzz.oracle import Case
from specreg.exchange.bundle_format import HEADER, RUN_PARTS, BundleHeader, run_digest, run_member

Members = dict[str, bytes]


def _cli(argv: list[str], quiet: bool = True) -> None:
    import contextlib

    from specreg.cli import main

    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise RuntimeError(f"specreg {' '.join(argv)} exited {exc.code}") from None


def seed_bundle(work: Path) -> tuple[Path, Path]:
    """(a bundle of two artifacts and a verdict, the registry an import goes into: it holds the
    same target already, with facts of its own)."""
    from specreg.testing import ModelSpec, write_model

    work.mkdir(parents=True, exist_ok=True)
    t = write_model(work / "t.gguf", ModelSpec())
    d = write_model(work / "d.gguf", ModelSpec(noise=0.05, name="draft"))
    src, dst = work / "source.db", work / "dest.db"
    _cli(["--db", str(src), "check", "pair", str(t), str(d), "--json"])
    _cli(["--db", str(dst), "register", str(t)])
    bundle = work / "seed.zip"
    _cli(["--db", str(src), "export", "--all", "-o", str(bundle)])
    return bundle, dst


def members(data: bytes) -> Members:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def pack(items: list[tuple[str, bytes]], *, method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w", compression=method) as zf:
        warnings.simplefilter("ignore")  # duplicate names are what some cases are made of
        for name, blob in items:
            zf.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), blob, compress_type=method)
    return buf.getvalue()


def reseal(data: Members) -> bytes:
    """Every member hash, run digest and the manifest digest recomputed, as another specreg writes them."""
    header = json.loads(data[HEADER])
    body = {n: b for n, b in data.items() if n != HEADER}
    header["members"] = [{"name": n, "size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in body.items()]
    for run in header.get("runs", []):
        parts = {p: body.get(run_member(run["run_id"], p), b"") for p in RUN_PARTS}
        run["digest"] = run_digest(parts)
    header["digest"] = BundleHeader.model_validate(header).body_digest()
    return pack([*body.items(), (HEADER, json.dumps(header).encode())])


def _nested(depth: int) -> bytes:
    return b'{"format": "specreg-bundle", "x": ' + b"[" * depth + b"]" * depth + b"}"


@cache
def structural(seed: bytes, *, bombs: bool = False) -> list[tuple[str, bytes]]:
    """Named zip- and manifest-level edits of the seed bundle (`bombs`: an 80 MiB manifest and a
    40 MiB member too, seconds to build: the long pass only)."""
    m = members(seed)
    header = json.loads(m[HEADER])
    items = list(m.items())
    first = next(n for n in m if n != HEADER)
    out: list[tuple[str, bytes]] = [
        ("duplicate-member", pack([*items, (first, m[first])])),
        ("duplicate-manifest", pack([*items, (HEADER, m[HEADER])])),
        ("traversal-name", pack([*items, ("../../escape.txt", b"x")])),
        ("absolute-name", pack([*items, ("/tmp/escape.txt", b"x")])),
        ("unlisted-member", pack([*items, ("runs/x/run.json", b"{}\n")])),
        ("stored-not-deflated", pack(items, method=zipfile.ZIP_STORED)),
        ("no-manifest", pack([i for i in items if i[0] != HEADER])),
        ("empty-zip", pack([])),
        ("not-a-zip", b"PK\x05\x06" + b"\0" * 18),
        ("nested-manifest", pack([*[i for i in items if i[0] != HEADER], (HEADER, _nested(100_000))])),
        ("manifest-not-utf8", pack([*[i for i in items if i[0] != HEADER], (HEADER, b"\xff\xfe{}")])),
    ]
    if bombs:
        out.append(("manifest-bomb", pack([*[i for i in items if i[0] != HEADER], (HEADER, b" " * (80 << 20))])))
        out.append(("member-bomb", reseal({**m, first: b"\n" * (40 << 20)})))
    for name, change in _header_edits().items():
        h = json.loads(json.dumps(header))
        change(h)
        body = [i for i in items if i[0] != HEADER]
        out.append((f"header-{name}", pack([*body, (HEADER, json.dumps(h).encode())])))
    for name, change in _record_edits().items():
        data = dict(m)
        if change(data):
            out.append((f"resealed-{name}", reseal(data)))
    return out


def _header_edits() -> dict[str, Callable[[dict], None]]:
    return {
        "future-version": lambda h: h.update(format_version=99),
        "version-string": lambda h: h.update(format_version="1"),
        "migrations-int": lambda h: h.update(schema_migrations=7),
        "migrations-nested": lambda h: h.update(schema_migrations=[["x"]]),
        "members-dict": lambda h: h.update(members={"a": 1}),
        "member-size-huge": lambda h: h["members"][0].update(size=2**70),
        "member-size-negative": lambda h: h["members"][0].update(size=-1),
        "runs-wrong": lambda h: h.update(runs=[{"run_id": "../x", "digest": "0" * 64, "origin": {}}]),
        "counts-string": lambda h: h.update(counts="many"),
        "digest-int": lambda h: h.update(digest=5),
        "format-other": lambda h: h.update(format="other"),
        "list-not-object": lambda h: h.clear(),
    }


def _edit_jsonl(data: Members, name: str, change: Callable[[dict], None]) -> bool:
    if name not in data or not data[name].strip():
        return False
    recs = [json.loads(line) for line in data[name].splitlines() if line.strip()]
    change(recs[0])
    data[name] = b"".join(json.dumps(r).encode() + b"\n" for r in recs)
    return True


def _record_edits() -> dict[str, Callable[[Members], bool]]:
    other_sha = "ab" * 32

    def relabel(rec: dict) -> None:  # a record claiming another file's SHA-256 (and this one's facts)
        rec["sha256"] = other_sha

    return {
        "artifact-relabelled-sha": lambda d: _edit_jsonl(d, "artifacts.jsonl", relabel),
        "artifact-sha-int": lambda d: _edit_jsonl(d, "artifacts.jsonl", lambda r: r.update(sha256=12)),
        "artifact-size-huge": lambda d: _edit_jsonl(d, "artifacts.jsonl", lambda r: r.update(size_bytes=10**30)),
        "artifact-fields-nested": lambda d: _edit_jsonl(
            d, "artifacts.jsonl", lambda r: r.update({k: {"x": [1]} for k in list(r) if k != "sha256"})
        ),
        "pair-verdicts-string": lambda d: _edit_jsonl(d, "pairs.jsonl", lambda r: r.update(verdicts="yes")),
        "pair-verdict-not-object": lambda d: _edit_jsonl(d, "pairs.jsonl", lambda r: r.update(verdicts=[1, "x"])),
        "pair-checks-deep": lambda d: _edit_jsonl(
            d, "pairs.jsonl", lambda r: [v.update(checks=json.loads("[" * 500 + "]" * 500)) for v in r["verdicts"]]
        ),
        "pair-target-int": lambda d: _edit_jsonl(d, "pairs.jsonl", lambda r: r.update(target_sha256=1)),
        "pair-draft-list": lambda d: _edit_jsonl(d, "pairs.jsonl", lambda r: r.update(draft_sha256=["a"])),
        "pair-created-int": lambda d: _edit_jsonl(
            d, "pairs.jsonl", lambda r: [v.update(created_at=10**20) for v in r["verdicts"]]
        ),
        "pair-unknown-artifact": lambda d: _edit_jsonl(d, "pairs.jsonl", lambda r: r.update(target_sha256="cd" * 32)),
        "artifacts-not-jsonl": lambda d: bool(d.update({"artifacts.jsonl": b"[1,2]\n{\n"})) or True,
    }


def flips(seed: bytes, positions: list[int]) -> list[tuple[str, bytes]]:
    out = []
    for pos in positions:
        buf = bytearray(seed)
        buf[pos] ^= 0xFF
        out.append((f"flip-{pos}", bytes(buf)))
    return out


def truncations(seed: bytes, cuts: list[int]) -> list[tuple[str, bytes]]:
    return [(f"cut-{n}", seed[:n]) for n in cuts]


def cases(inputs: list[tuple[str, bytes]], work: Path, dest: Path) -> list[Case]:
    """One import per damaged bundle, each into its own copy of `dest` (the registry to keep whole)."""
    work.mkdir(parents=True, exist_ok=True)
    out = []
    for name, data in inputs:
        path = work / f"{name}.zip"
        path.write_bytes(data)
        db = work / f"{name}.db"
        out.append(
            Case(
                id=f"bundle:{name}",
                argv=["--db", str(db), "import", str(path)],
                db=str(db),
                copy_db_from=str(dest),
            )
        )
    return out


def sample_positions(size: int, n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return sorted(rng.sample(range(size), min(n, size)))
