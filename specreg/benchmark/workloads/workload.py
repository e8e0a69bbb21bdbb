"""What a workload is once loaded: a named, hashed list of items; the seeded per-stratum sample.

Apart from workloads.py (built-in strata, JSONL files) so that standard.py (the pinned wheels)
builds the same thing without importing the loader that dispatches to it.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

from specreg.schemas.bench import WorkloadItem, WorkloadSource


@dataclass(frozen=True)
class Workload:
    """A named, hashed list of items (ids unique)."""

    name: str
    sha256: str
    items: list[WorkloadItem]
    source: WorkloadSource | None = None  # a standard workload's wheel, data file and prompt ids

    def strata(self) -> list[str]:
        return list(dict.fromkeys(i.stratum for i in self.items))


def content_sha256(item: WorkloadItem) -> str:
    """SHA-256 of what is sent (the prompt text or the messages), canonical JSON."""
    if item.prompt is not None:
        payload: object = {"prompt": item.prompt}
    else:
        payload = {"messages": [m.model_dump() for m in item.messages or []]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def sample_items(items: list[WorkloadItem], n: int | None, seed: int) -> list[WorkloadItem]:
    """`n` items of each stratum (all when it has no more), in their file order. The draw depends
    only on `seed`, the stratum and the ids, so a rerun with the same seed asks the same prompts."""
    if n is None:
        return list(items)
    groups: dict[str, list[WorkloadItem]] = {}
    for it in items:
        groups.setdefault(it.stratum, []).append(it)
    keep: set[str] = set()
    for stratum, group in groups.items():
        ids = [g.id for g in group]
        keep.update(ids if n >= len(ids) else random.Random(f"{seed}:{stratum}").sample(ids, n))
    return [it for it in items if it.id in keep]
