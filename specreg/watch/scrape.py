"""One scrape of a running llama-server: its counters, its `/props` and its `/slots`, bounded.

The server is untrusted: every answer goes through the benchmark's client (a deadline per call,
a byte cap far below a run's: a real `/metrics` is a few KiB), the Prometheus text is counted
before it is parsed, and each counter must be a finite, non-negative number of the declared
type, a count a whole one. Anything else is one `ServerError` whose message says what was wrong
and whose hint says how to fix it: the window is `unknown`, and nothing of it is kept. Which
samples to read is the server build's rule set (`ServerRules`), never a name written here.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from specreg.errors import ServerError

if TYPE_CHECKING:
    from specreg.benchmark.run.client import LlamaClient
    from specreg.validators.ruleset import ServerMetricNames

MAX_REPLY_BYTES = 1 << 20  # per answer: /props carries the chat template; /metrics a few KiB
MAX_LINES = 5000  # Prometheus lines per /metrics: llama.cpp writes ~50, plus one per draft position
MAX_POSITIONS = 256  # draft positions (llama.cpp's --spec-draft-n-max stays far below)
MAX_SLOTS = 4096
_MAX_COUNT = float(1 << 53)  # beyond this a float no longer counts whole tokens
_BUILD = re.compile(r"^b(\d+)-")  # /props build_info: "b11434-abc1234"; "b0-unknown" without git

NO_METRICS_FIX = "start the server with --metrics (the command `specreg deploy` prints has it)"
UNREACHABLE_FIX = "is the server running, and is the URL right (scheme, host, port)?"


@dataclass(frozen=True)
class Counters:
    """The counters a window is made from, validated (None: this build exposes no such counter)."""

    generated: int
    generating_s: float
    drafted: int | None
    accepted: int | None
    drafts: int | None
    per_position: tuple[int, ...] = ()
    processing: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "generated": self.generated,
            "generating_s": self.generating_s,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "drafts": self.drafts,
            "per_position": list(self.per_position),
        }

    def went_back(self, before: Counters) -> str | None:
        """The first counter that is lower than `before` (a restart), in words; None: none is."""
        pairs: list[tuple[str, float | None, float | None]] = [
            ("generated tokens", self.generated, before.generated),
            ("drafted", self.drafted, before.drafted),
        ]
        pairs += [("accepted", self.accepted, before.accepted), ("drafting steps", self.drafts, before.drafts)]
        pairs.append(("generating seconds", self.generating_s, before.generating_s))
        for name, now, then in pairs:
            if now is not None and then is not None and now < then:
                return f"{name} went from {then:g} to {now:g}"
        return None


@dataclass(frozen=True)
class Props:
    """The `/props` fields watch reads, type-checked (the rest, the chat template included, is dropped)."""

    model_path: str | None
    build_info: str | None
    total_slots: int | None
    endpoint_metrics: bool | None
    sampler: dict[str, float | int] = field(default_factory=dict)  # temperature, top_k, top_p, min_p, seed
    speculative_types: str | None = None

    @property
    def build(self) -> int | None:
        m = _BUILD.match(self.build_info or "")
        return int(m.group(1)) if m and int(m.group(1)) > 0 else None


@dataclass(frozen=True)
class Scrape:
    """What one scrape found: the counters (or why there are none), `/props` and `/slots`."""

    at: float  # time.monotonic()
    wall: datetime
    counters: Counters | None
    problem: ServerError | None = None
    props: Props | None = None
    slots: list[bool] | None = None  # per slot: can it speculate (None: /slots not shown)


def _count(name: str, value: float, whole: bool) -> float:
    if not math.isfinite(value):
        raise ServerError(f"/metrics: {name} is {value}, not a number", hint="the server's /metrics is broken")
    if value < 0:
        raise ServerError(f"/metrics: {name} is negative ({value:g})", hint="the server's /metrics is broken")
    if whole and (value != int(value) or value > _MAX_COUNT):
        raise ServerError(f"/metrics: {name} is {value:g}, not a count", hint="the server's /metrics is broken")
    return value


def read_counters(text: str, names: ServerMetricNames) -> Counters:
    """The counters of one `/metrics` answer, checked; ServerError says what is wrong.

    Raises:
        ServerError: too many lines, malformed Prometheus text, a sample twice, a counter of
            another type, a value that is not a finite non-negative count, or no llama.cpp
            counters at all (not llama-server's /metrics).
    """
    from prometheus_client.parser import text_string_to_metric_families

    lines = text.count("\n")
    if lines > MAX_LINES:
        raise ServerError(f"/metrics has {lines:,} lines (llama-server writes under {MAX_LINES:,})")
    wanted = {names.drafted, names.accepted, names.drafts, names.generated, names.generated_seconds}
    gauges = {names.processing}
    found: dict[str, float] = {}
    positions: dict[int, int] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == names.accepted_per_position:
                    label = s.labels.get(names.position_label, "")
                    if not label.isdigit() or int(label) >= MAX_POSITIONS or int(label) in positions:
                        raise ServerError(f"/metrics: unexpected {names.position_label}={label[:20]!r} in {s.name}")
                    positions[int(label)] = int(_count(s.name, float(s.value), True))
                elif s.name in wanted or s.name in gauges:
                    if s.labels or s.name in found:
                        raise ServerError(f"/metrics: {s.name} appears more than once")
                    if s.name in wanted and family.type not in ("counter", "unknown"):
                        raise ServerError(f"/metrics: {s.name} is declared a {family.type}, not a counter")
                    found[s.name] = _count(s.name, float(s.value), s.name not in (names.generated_seconds, *gauges))
    except ServerError:
        raise
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ServerError(f"/metrics: malformed Prometheus text ({str(exc)[:80]})") from None
    if names.generated not in found or names.generated_seconds not in found:
        raise ServerError(
            f"/metrics has no {names.generated}: not llama-server's metrics", hint="point watch at llama-server"
        )
    if positions and sorted(positions) != list(range(len(positions))):
        raise ServerError(f"/metrics: {names.accepted_per_position} skips a position")

    def whole(name: str) -> int | None:
        return int(found[name]) if name in found else None

    return Counters(
        generated=int(found[names.generated]),
        generating_s=found[names.generated_seconds],
        drafted=whole(names.drafted),
        accepted=whole(names.accepted),
        drafts=whole(names.drafts),
        per_position=tuple(positions[i] for i in range(len(positions))),
        processing=found.get(names.processing),
    )


def read_props(data: Any) -> Props:
    """`/props` as watch uses it; ServerError when it is not llama-server's."""
    if not isinstance(data, dict) or not isinstance(data.get("model_path"), str):
        raise ServerError("/props: not llama-server's (no model_path)")

    def typed(value: Any, kind: type | tuple[type, ...]) -> Any:
        return value if isinstance(value, kind) and not isinstance(value, bool) else None

    gen = data.get("default_generation_settings")
    params = gen.get("params") if isinstance(gen, dict) else None
    params = params if isinstance(params, dict) else {}
    sampler: dict[str, float | int] = {}
    for key in ("temperature", "top_k", "top_p", "min_p", "seed"):
        value = typed(params.get(key), (int, float))
        if value is not None and math.isfinite(value):
            sampler[key] = value
    metrics = data.get("endpoint_metrics")
    return Props(
        model_path=data["model_path"][:4096],
        build_info=(typed(data.get("build_info"), str) or "")[:200] or None,
        total_slots=typed(data.get("total_slots"), int),
        endpoint_metrics=metrics if isinstance(metrics, bool) else None,
        sampler=sampler,
        speculative_types=(typed(params.get("speculative.types"), str) or "")[:200] or None,
    )


def read_slots(data: Any, key: str) -> list[bool]:
    """Per slot of `/slots`: can it speculate (the rule set's field); ServerError when malformed."""
    if not isinstance(data, list) or len(data) > MAX_SLOTS:
        raise ServerError("/slots: not a list of slots")
    out = []
    for slot in data:
        value = slot.get(key) if isinstance(slot, dict) else None
        if not isinstance(value, bool):
            raise ServerError(f"/slots: a slot without {key!r}")
        out.append(value)
    return out


def scrape(client: LlamaClient, names: ServerMetricNames, slot_key: str, *, props: bool = True) -> Scrape:
    """Counters first (the window's edge), then `/slots` and `/props`; never raises: a problem
    is the scrape's `problem` (counters None), a missing `/slots` or `/props` is None."""
    at, wall = time.monotonic(), datetime.now(UTC)
    try:
        status, body = client.get("/metrics")
    except ServerError as exc:  # no answer at all: nothing else will answer either
        exc.hint = exc.hint or UNREACHABLE_FIX
        return Scrape(at, wall, None, exc)
    try:
        if status in (404, 501):
            raise ServerError(f"/metrics: HTTP {status}: the server was started without --metrics", hint=NO_METRICS_FIX)
        if status != 200:
            raise ServerError(f"/metrics: HTTP {status}", hint="the server answered, but not with its metrics")
        counters = read_counters(body.decode("utf-8", "replace"), names)
    except ServerError as exc:
        return Scrape(at, wall, None, exc, *_extras(client, slot_key, props))
    return Scrape(at, wall, counters, None, *_extras(client, slot_key, props))


def _extras(client: LlamaClient, slot_key: str, props: bool) -> tuple[Props | None, list[bool] | None]:
    try:
        slots = read_slots(client.get_json("/slots"), slot_key)
    except ServerError:
        slots = None  # --no-slots, or not llama-server: the identity says what is not shown
    if not props:
        return None, slots
    try:
        return read_props(client.get_json("/props")), slots
    except ServerError:
        return None, slots
