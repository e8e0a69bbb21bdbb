"""Surfaces: policy TOML (`specreg audit --policy`) and workload JSONL (`specreg bench --workload`).

Structure-aware: every `key = value` line of the shipped example policy, and every field of a
built-in workload's records, gets a hostile value in turn (a negative, zero, a number past 64
bits or past a float, NaN, a wrong type, a megabyte string, nesting deeper than any parser's
recursion limit); then byte-level damage on top (flips, truncation, non-UTF-8, NUL bytes).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from fuzz.oracle import Case

TOML_VALUES = [
    "-1", "0", "1e309", "-1e309", "nan", "inf", "9223372036854775807", "99999999999999999999999",
    '"x"', "[]", "{}", "true", '"' + "a" * 100_000 + '"', "[" * 5000 + "]" * 5000,
    "{a = {b = {c = {d = 1}}}}", '"\\u0000"', "1979-05-27T07:32:00Z",
]  # fmt: skip
JSON_VALUES: list[object] = [
    -1, 0, 10**30, 1e308, -(2**63), "x", "", [], {}, None, True, "a" * 200_000, [[[[]]]],
    {"role": "user", "content": 5}, [{"role": "user"}], "\udcff",
]  # fmt: skip
_LINE = re.compile(r"^(\s*[A-Za-z0-9_.\"-]+\s*=\s*)(.+)$")


def policy_seed() -> str:
    from importlib.resources import files

    return (files("specreg.audit") / "policy.example.toml").read_text()


def workload_text() -> str:
    from importlib.resources import files

    return (files("specreg.benchmark") / "workloads" / "chat.jsonl").read_text()


def workload_seed() -> list[dict]:
    return [json.loads(line) for line in workload_text().splitlines() if line.strip()][:3]


def policy_inputs(seed: str, rng: random.Random, n_random: int, *, every: bool) -> list[tuple[str, bytes]]:
    lines = seed.splitlines()
    value_lines = [i for i, ln in enumerate(lines) if _LINE.match(ln) and not ln.lstrip().startswith("#")]
    out: list[tuple[str, bytes]] = [("pristine", seed.encode())]
    picks = value_lines if every else rng.sample(value_lines, min(6, len(value_lines)))
    for i in picks:
        values = TOML_VALUES if every else rng.sample(TOML_VALUES, 3)
        for j, v in enumerate(values):
            edited = list(lines)
            m = _LINE.match(edited[i])
            assert m is not None
            edited[i] = m.group(1) + v
            out.append((f"line{i}-v{TOML_VALUES.index(v)}", "\n".join(edited).encode()))
            del j
    out += _bytes_damage("policy", seed.encode(), rng, n_random)
    out += [("deep-tables", ("[a]\n" + "b = {" * 3000 + "}" * 3000).encode()), ("nul", b"\0" * 64)]
    return out


def workload_inputs(seed: list[dict], rng: random.Random, n_random: int, *, every: bool) -> list[tuple[str, bytes]]:
    def dump(records: list[object]) -> bytes:
        return b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n" for r in records)

    out: list[tuple[str, bytes]] = [("pristine", dump(list(seed)))]
    fields = sorted({k for r in seed for k in r})
    for f in fields if every else rng.sample(fields, min(3, len(fields))):
        for vi, v in enumerate(JSON_VALUES if every else rng.sample(JSON_VALUES, 4)):
            recs = [dict(r) for r in seed]
            recs[0][f] = v
            out.append((f"field-{f}-{vi}", dump(recs)))
    pristine = dump(list(seed))
    out += [
        ("not-objects", b'[1]\n2\n"x"\n'),
        ("deep", b"[" * 100_000 + b"]" * 100_000 + b"\n"),
        ("duplicate-ids", dump([seed[0], seed[0]])),
        ("many-lines", dump([{**seed[0], "id": f"x{i}"} for i in range(20_000)])),
        ("one-huge-line", b'{"id": "' + b"a" * (8 << 20) + b'"}\n'),
        ("non-utf8", b"\xff\xfe" + pristine),
        ("empty", b""),
    ]
    out += _bytes_damage("workload", pristine, rng, n_random)
    return out


def _bytes_damage(what: str, data: bytes, rng: random.Random, n: int) -> list[tuple[str, bytes]]:
    out = []
    for k in range(n):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(len(buf))
            op = rng.randrange(3)
            if op == 0:
                buf[pos] ^= 1 << rng.randrange(8)
            elif op == 1:
                buf[pos] = rng.choice(b'\0\xff"[]{}=\n\\')
            else:
                del buf[pos:]
                break
        out.append((f"bytes-{k}", bytes(buf)))
    return out


def cases(kind: str, inputs: list[tuple[str, bytes]], work: Path, db: Path) -> list[Case]:
    """`audit --policy F` / `bench admitted --workload F` against a registry with nothing to run."""
    work.mkdir(parents=True, exist_ok=True)
    out = []
    for name, data in inputs:
        path = work / f"{kind}-{name}.{'toml' if kind == 'policy' else 'jsonl'}"
        path.write_bytes(data)
        if kind == "policy":
            argv = ["--db", str(db), "audit", "--policy", str(path), "--json"]
        else:
            argv = ["--db", str(db), "bench", "admitted", "--workload", str(path), "--json"]
        out.append(Case(id=f"{kind}:{name}", argv=argv, db=str(db)))
    return out
