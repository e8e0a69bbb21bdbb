"""Workloads: the built-in strata (package data) and user JSONL files, strictly validated.

A bad line is reported as `file:line: field: problem` (extra="forbid": a typo is an error,
not a silently ignored key). Every item gets a content SHA-256 so runs can prove they asked
the same thing.
"""

from __future__ import annotations

import hashlib
import json
import re
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from specreg.benchmark.workloads.expect import unsupported_keywords
from specreg.benchmark.workloads.standard import STANDARD_SETS, load_standard
from specreg.benchmark.workloads.workload import Workload, content_sha256, sample_items
from specreg.errors import PolicyError
from specreg.paths import read_regular
from specreg.schemas.bench import WorkloadItem

STRATA = ("repetitive", "chat", "reasoning", "long_input", "structured")
MAX_WORKLOAD_BYTES = 64 << 20
DEFAULT = "default"
__all__ = ["Workload", "content_sha256", "load_workload", "parse_jsonl", "sample_items"]


def _field(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc)


def parse_jsonl(text: str, source: str) -> list[WorkloadItem]:
    """Parse workload JSONL; raises PolicyError naming `source:line` and the field."""
    items: list[WorkloadItem] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PolicyError(f"{source}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        except (ValueError, RecursionError) as exc:  # nesting too deep, an integer too long, ...
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:100]
            raise PolicyError(f"{source}:{lineno}: not valid JSON ({why})") from None
        if not isinstance(raw, dict):
            raise PolicyError(f"{source}:{lineno}: expected a JSON object, got {type(raw).__name__}")
        try:
            item = WorkloadItem.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            msg = str(err["msg"]).removeprefix("Value error, ")  # pydantic's prefix for our own validators
            where = f"{_field(tuple(err['loc']))}: " if err["loc"] else ""  # a whole-line rule names no field
            raise PolicyError(
                f"{source}:{lineno}: {where}{msg}",
                hint="fields: id, stratum, prompt | messages, max_tokens, expect {exact|regex|json_schema}",
            ) from None
        problem = _expect_problem(item)
        if problem:
            raise PolicyError(f"{source}:{lineno}: expect: {problem}")
        if item.id in seen:
            raise PolicyError(f"{source}:{lineno}: id: duplicate id {item.id!r} (first on line {seen[item.id]})")
        seen[item.id] = lineno
        items.append(item)
    if not items:
        raise PolicyError(f"{source}: workload has no items")
    return items


def _expect_problem(item: WorkloadItem) -> str | None:
    """A regex that does not compile or a schema keyword we cannot check is refused up front."""
    exp = item.expect
    if exp is None:
        return None
    if exp.regex is not None:
        try:
            re.compile(exp.regex)
        except re.error as exc:
            return f"regex does not compile ({exc})"
    if exp.json_schema is not None:
        bad = unsupported_keywords(exp.json_schema)
        if bad:
            return f"json_schema uses unsupported keywords: {', '.join(bad)}"
    return None


def _builtin_text(stratum: str) -> str:
    return (resources.files("specreg.benchmark") / "workloads" / f"{stratum}.jsonl").read_text("utf-8")


def load_workload(
    name_or_path: str | Path = DEFAULT, *, sample: int | None = None, seed: int = 42, ctx_tokens: int = 4096
) -> Workload:
    """A workload by name or path.

    Args:
        name_or_path: `default` (every built-in stratum), one stratum's name, a standard set
            (mt-bench, humaneval, sharegpt: benchmark/workloads/standard.py) or a JSONL file path.
        sample: items per stratum, drawn with `seed` (None: every item).
        seed: the draw's seed; the same seed gives the same items.
        ctx_tokens: the context one server slot has (sharegpt's prompts are filtered by it).

    Raises:
        PolicyError: when the file or a line of it is invalid, naming `file:line` and the field.
        WorkloadUnavailable: when a standard set is not cached and cannot be fetched (offline).
    """
    name = str(name_or_path)
    if name in STANDARD_SETS:
        return load_standard(name, sample=sample, seed=seed, ctx_tokens=ctx_tokens)
    wl = _load_plain(name)
    if sample is None:
        return wl
    items = sample_items(wl.items, sample, seed)
    digest = hashlib.sha256(f"{wl.sha256}:sample={sample}:seed={seed}".encode()).hexdigest()
    return Workload(wl.name, digest, items)


def _load_plain(name: str) -> Workload:
    if name == DEFAULT or name in STRATA:
        parts = STRATA if name == DEFAULT else (name,)
        texts = [(p, _builtin_text(p)) for p in parts]
        items = [it for p, t in texts for it in parse_jsonl(t, f"<builtin>/{p}.jsonl")]
        digest = hashlib.sha256("".join(t for _, t in texts).encode()).hexdigest()
        _check_unique(items, name)
        return Workload(f"builtin:{name}", digest, items)
    path = Path(name).expanduser()
    if not path.is_file():
        raise PolicyError(
            f"workload {name!r} is neither a built-in name nor a file",
            hint=f"built-in: {DEFAULT}, {', '.join(STRATA)}; standard: mt-bench, humaneval, sharegpt; "
            "or a JSONL file path",
        )
    try:
        data = read_regular(path, MAX_WORKLOAD_BYTES)  # is_file() above can race a swap to a FIFO
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise PolicyError(f"{path}: cannot read workload: {why}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return Workload(str(path), hashlib.sha256(data).hexdigest(), parse_jsonl(text, str(path)))


def _check_unique(items: list[WorkloadItem], name: str) -> None:
    ids = [i.id for i in items]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise PolicyError(f"built-in workload {name}: duplicate ids {dupes}")
