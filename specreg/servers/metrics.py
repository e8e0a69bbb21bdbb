"""`/metrics` snapshots and their deltas: the speculation counters of one condition.

Counters are read before and after the measured requests (after warm-up) and only the
difference is used, never the cumulative value. Names checked against xllamacpp 2026.10.11549:
the per-position counter only appears once something was drafted.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from specreg.errors import ServerError
from specreg.schemas.bench import SpecCounters

PREFIX = "llamacpp:spec_decode_"
DRAFTED = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
STEPS = "llamacpp:spec_decode_num_drafts_total"
PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"


def _key(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return name
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def parse_metrics(text: str) -> dict[str, float]:
    """Every sample as `name{label="v"}` -> value; malformed text raises ServerError."""
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[_key(s.name, dict(s.labels))] = float(s.value)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ServerError(f"/metrics: malformed Prometheus text ({exc})") from exc
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """after - before for every counter sample present after (missing before counts as 0)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if k.endswith("_total") or "_total{" in k}


def spec_counters(before: dict[str, float], after: dict[str, float]) -> SpecCounters | None:
    """The speculation counters over a condition; None when this build exposes none of them."""
    if DRAFTED not in after:
        return None
    d = delta(before, after)
    per_pos: dict[int, int] = {}
    for key, value in d.items():
        if key.startswith(PER_POS + "{"):
            pos = key.split('position="', 1)[-1].split('"', 1)[0]
            if not pos.isdigit():
                raise ServerError(f"/metrics: unexpected label in {key!r}")
            per_pos[int(pos)] = int(value)
    return SpecCounters(
        drafted=int(d.get(DRAFTED, 0)),
        accepted=int(d.get(ACCEPTED, 0)),
        steps=int(d.get(STEPS, 0)),
        per_position=dict(sorted(per_pos.items())),
    )


def spec_only(snapshot: dict[str, float]) -> dict[str, float]:
    """The part of a snapshot worth storing with the run (speculation and token counters)."""
    return {k: v for k, v in snapshot.items() if k.startswith(PREFIX) or "tokens" in k or "n_decode" in k}


def add_counters(a: SpecCounters | None, b: SpecCounters | None) -> SpecCounters | None:
    """The counters of two server starts of one condition (rounds), summed; None + x is x."""
    if a is None or b is None:
        return b if a is None else a
    pos = dict(a.per_position)
    for k, v in b.per_position.items():
        pos[k] = pos.get(k, 0) + v
    return SpecCounters(
        drafted=a.drafted + b.drafted,
        accepted=a.accepted + b.accepted,
        steps=a.steps + b.steps,
        per_position=dict(sorted(pos.items())),
    )
