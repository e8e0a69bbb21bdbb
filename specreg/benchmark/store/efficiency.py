"""The harness's efficiency: the share of a run's wall clock spent in measured requests.

A decision costs paired requests; everything else a run spends (starting and stopping servers,
warming them up, counting the prompts' tokens, reading /metrics, replaying for token ids, writing
rows, waiting for a quieter machine) is the harness's overhead. Each slot records where its time
went (`RoundLoad`: start, warm-up, requests, after), so the share is read from the stored run:
the slots' request time over the run's wall clock. A continued run (`bench continue`) is timed
per session - from each start to its end - so the time between sessions is not counted as the
run's; a session that ended unseen (a `kill -9`) ends at its last stored request.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specreg.schemas.bench import BenchRun


@dataclass(frozen=True)
class Efficiency:
    """Seconds in measured requests, the run's wall seconds (its sessions'), and how many sessions."""

    requests_s: float
    wall_s: float
    sessions: int

    @property
    def share(self) -> float | None:
        return self.requests_s / self.wall_s if self.wall_s > 0 else None

    def text(self) -> str:
        share = self.share
        if share is None:
            return "efficiency unknown (no wall clock recorded)"
        where = f" in {self.sessions} sessions" if self.sessions > 1 else ""
        return f"measured requests {share:.0%} of {_minutes(self.wall_s)}{where}"


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def efficiency(run: BenchRun) -> Efficiency | None:
    """The run's efficiency (None: it measured nothing, or records no slot parts: older runs)."""
    requests_s = sum(x.requests_s or 0.0 for c in run.conditions for x in c.load)
    if not requests_s:
        return None
    m = run.manifest
    continued = m.continued if m is not None else []
    starts = [run.info.started_at, *(c.started_at for c in continued)]
    ends: list[datetime | None] = [*(c.previous_finished_at for c in continued), run.info.finished_at]
    wall = 0.0
    for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
        if end is None:  # ended unseen (or still running): at its last request's end before the next session
            nxt = starts[i + 1] if i + 1 < len(starts) else None
            end = _last_request_end(run, start, nxt)
        if end is not None and start is not None:
            wall += max(0.0, (end - start).total_seconds())
    return Efficiency(requests_s, wall, len(starts))


def _last_request_end(run: BenchRun, start: datetime | None, before: datetime | None) -> datetime | None:
    ends = [
        r.started_at + timedelta(milliseconds=r.total_ms or 0.0)
        for r in run.requests
        if r.started_at is not None
        and (start is None or r.started_at >= start)
        and (before is None or r.started_at < before)
    ]
    return max(ends, default=None)
