"""What `specreg watch` says about a running server: its identity, each window, production evidence.

A window is the time between two scrapes of the server's counters; everything in it comes from
counter deltas (never the cumulative values), and a number the server did not give is None,
never 0. These are the `--json` lines, the rows the registry keeps (watch/store.py) and what
`audit`, `runs show` and the report show beside the bench evidence.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from pydantic import BaseModel, Field

# The states, declared once (docs/watch.md): the evidence holds, has drifted below the audit,
# speculation does not run, or nothing can be decided (the reason says which and how to fix it).
WatchState = Literal["holds", "drifted", "not speculating", "unknown"]
WATCH_STATES: tuple[WatchState, ...] = get_args(WatchState)
# The states that fail `watch --once` (exit 1), besides a server that is not the audited one.
ALERT_STATES: tuple[WatchState, ...] = ("drifted", "not speculating")


class Mismatch(BaseModel):
    """One way the running server differs from the audited deploy: the field, both values."""

    field: str  # "draft sha256", "build", "--spec-type", "-np", "--temp", ...
    audited: str | None
    live: str | None


class ServerSeen(BaseModel):
    """What the server runs, as identified: through its process (argv and cwd, when it listens
    on this machine) or through `/props` (the model path and sampler; no draft)."""

    url: str
    via: Literal["process", "props"]
    pid: int | None = None
    program: str | None = None  # "specreg-llama-server (bundled xllamacpp)", or the binary's path
    target_path: str | None = None
    target_sha256: str | None = None
    draft_path: str | None = None
    draft_sha256: str | None = None
    build: int | None = None  # the llama.cpp build (None: the server does not say)
    build_text: str | None = None  # how it said so: "b11434-abc1234", "xllamacpp 2026.10.11549"
    spec_type: str | None = None  # None: not shown (`/props` does not say)
    threads: str | None = None  # -t as given ("unset": the build's default); None: not shown
    flags: dict[str, str] = Field(default_factory=dict)  # the compared flags as the server has them
    extra_flags: list[str] = Field(default_factory=list)  # flags the audited command does not know
    slots: int | None = None
    speculative_slots: int | None = None  # slots that can speculate (/slots), None: not shown
    metrics: bool | None = None  # /metrics answered (None: not asked yet)
    notes: list[str] = Field(default_factory=list)  # what could not be identified, and why

    def label(self) -> str:
        """One line: the target's file, the draft's, the build."""
        parts = [self.target_path or "target unknown"]
        if self.draft_path:
            parts.append(f"draft {self.draft_path}")
        if self.build is not None:
            parts.append(f"build {self.build}")
        return ", ".join(parts)


class AuditedEvidence(BaseModel):
    """The audited condition's numbers in the stratum the server was deployed for (bench run)."""

    run_id: str
    condition: str
    stratum: str | None  # None: the whole workload
    hardware: str | None = None
    acceptance: float | None = None
    decode_tps: float | None = None  # generated tokens / generating seconds, as /metrics counts them
    mean_accepted_length: float | None = None  # 1 + accepted / drafting steps (llama.cpp's "mean len")
    per_position: list[float] = Field(default_factory=list)  # accepted at position i / drafting steps
    drafted_per_token: float | None = None  # drafted tokens per generated token
    threads: str | None = None  # the bench server's -t ("unset": the build's default)
    compare_decode: bool = True  # False: measured on other hardware or threads (the note says which)
    note: str | None = None


class WatchWindow(BaseModel):
    """One window: live numbers from counter deltas, the audited ones, and the state."""

    index: int
    url: str
    started_at: datetime
    ended_at: datetime
    seconds: float
    state: WatchState
    reason: str | None = None  # why this state (for `unknown`: what is missing)
    fix: str | None = None  # how to make it decidable (for `unknown`)
    pair_id: int | None = None
    method: str | None = None
    stratum: str | None = None
    server: ServerSeen | None = None
    mismatches: list[Mismatch] = Field(default_factory=list)  # empty: the audited server
    restarted: str | None = None  # a counter went backwards: the server restarted (a new baseline)
    requests: int | None = None  # None: this build's /metrics counts no requests
    generated: int | None = None
    generating_s: float | None = None
    decode_tps: float | None = None
    drafted: int | None = None
    accepted: int | None = None
    drafts: int | None = None
    acceptance: float | None = None  # None when nothing was drafted (never 0)
    mean_accepted_length: float | None = None
    per_position: list[float] = Field(default_factory=list)
    audited: AuditedEvidence | None = None
    tested: int = 0  # windows in the drift test so far (since the last restart)
    decided_after: int | None = None  # the window of the test that decided `drifted`
    acceptance_ratio_ci: tuple[float, float] | None = None  # live / audited, anytime-valid
    decode_ratio_ci: tuple[float, float] | None = None


class ProductionEvidence(BaseModel):
    """What `specreg watch` recorded about a deployed pair, for `audit`, `runs show` and reports:
    the newest server it watched for the pair, since it was first seen with that identity."""

    pair_id: int
    stratum: str | None = None
    url: str
    server: str  # ServerSeen.label()
    first_seen: datetime
    last_seen: datetime
    windows: int
    state: WatchState  # the newest window's
    reason: str | None = None
    acceptance: float | None = None  # pooled over the windows with this identity
    audited_acceptance: float | None = None
    decode_tps: float | None = None
    audited_decode_tps: float | None = None
    run_id: str | None = None
    restarts: int = 0
    mismatches: int = 0  # windows that found a server other than the audited one

    def line(self) -> str:
        """`deployed 3 days (120 windows); acceptance 0.71 live vs 0.74 audited: holds`."""
        parts = [f"deployed {_span(self.first_seen, self.last_seen)} ({self.windows} windows)"]
        if self.acceptance is not None or self.audited_acceptance is not None:
            live = f"{self.acceptance:.2f}" if self.acceptance is not None else "none drafted"
            audited = f"{self.audited_acceptance:.2f}" if self.audited_acceptance is not None else "-"
            parts.append(f"acceptance {live} live vs {audited} audited")
        if self.decode_tps is not None and self.audited_decode_tps is not None:
            parts.append(f"decode {self.decode_tps:.1f} vs {self.audited_decode_tps:.1f} tok/s")
        text = "; ".join(parts) + f": {self.state}"
        if self.mismatches:
            text += f" (not the audited server in {self.mismatches} of them)"
        return text

    def where(self) -> str:
        """`pair 1 (stratum repetitive) at http://127.0.0.1:8080`."""
        return f"pair {self.pair_id}" + (f" (stratum {self.stratum})" if self.stratum else "") + f" at {self.url}"


def _span(first: datetime, last: datetime) -> str:
    s = max(0.0, (last - first).total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if s >= size:
            n = round(s / size)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{s:.0f} s"
