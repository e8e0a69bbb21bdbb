"""Formatting shared by the Markdown and HTML reports (numbers, commands, table rows)."""

from __future__ import annotations

import shlex

from specreg.benchmark.statistics import interval_text
from specreg.schemas.audit import GATES, AuditReport, PairAudit, RunDigest, StratumDecision, StratumRow


def num(value: float | None, fmt: str = ".2f", none: str = "–") -> str:
    """A number for a table cell; None stays visibly absent (never 0)."""
    return none if value is None else format(value, fmt)


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def speedup_cell(row: StratumRow) -> str:
    """Speed-up with its 95% interval; "–" with the reason when there is none (a failed condition)."""
    if row.speedup is None:
        return f"– ({row.speedup_note})" if row.speedup_note else "–"
    if row.speedup_note == "reference":
        return "reference"
    return interval_text(row.speedup, row.speedup_ci95) + (" UNEXPLAINED" if row.unexplained else "")


def decision_cells(d: StratumDecision) -> list[str]:
    """A decision row: target, stratum, concurrency, choice, draft length, speed-up, run, why."""
    return [
        d.target_name or short(d.target_sha256),
        d.stratum,
        str(d.concurrency),
        d.choice,
        "–" if d.draft_n_max is None else str(d.draft_n_max),
        interval_text(d.speedup, d.speedup_ci95) if d.speedup is not None else "–",
        d.run_id or "–",
        "; ".join(f"pair {c.pair_id} {c.condition}: {c.reason}" for c in d.candidates) or "no candidates",
    ]


DECISION_HEADERS = ("target", "stratum", "conc.", "deploy", "draft max", "speed-up [95% CI]", "run", "why")


def command(argv: list[str] | None) -> str:
    return shlex.join(argv) if argv else "(not recorded)"


def short(sha: str | None) -> str:
    return sha[:12] if sha else "–"


def pair_title(p: PairAudit) -> str:
    target = p.target_name or short(p.target_sha256)
    draft = p.draft_name or short(p.draft_sha256) if p.draft_sha256 else "(self)"
    return f"pair {p.pair_id}: {p.method} {target} ← {draft}"


def judged_line(p: PairAudit) -> str | None:
    """Which condition the pair's gates judged, with its speed-up and interval (None: no run)."""
    if p.not_benchmarkable:
        return f"admitted, not benchmarkable: {p.not_benchmarkable}"
    if p.condition is None:
        return None
    k = "" if p.draft_n_max is None else f", draft max {p.draft_n_max}"
    return (
        f"judged on {p.condition} (concurrency {p.concurrency}{k}): "
        f"speed-up {interval_text(p.speedup, p.speedup_ci95)} over every stratum"
    )


def gate_cells(p: PairAudit) -> list[tuple[str, bool | None]]:
    """(text, passed) per gate in the fixed order; None when the gate was not evaluated."""
    out: list[tuple[str, bool | None]] = []
    for name in GATES:
        g = p.gate(name)
        out.append(("–", None) if g is None else ("pass" if g.passed else "FAIL", g.passed))
    return out


STRATUM_HEADERS = (
    "condition",
    "stratum",
    "conc.",
    "n",
    "reps",
    "median ms",
    "p95 ms",
    "TTFT ms",
    "TPOT ms",
    "acceptance",
    "E[L]",
    "predicted",
    "speed-up [95% CI]",
    "errors",
    "timeouts",
    "equivalent",
)


def stratum_cells(r: StratumRow) -> list[str]:
    return [
        r.condition,
        r.stratum,
        str(r.concurrency),
        str(r.n_requests),
        str(r.n_repetitions),
        num(r.median_total_ms, ".1f"),
        num(r.p95_total_ms, ".1f"),
        num(r.median_ttft_ms, ".1f"),
        num(r.median_tpot_ms, ".2f"),
        pct(r.acceptance),
        num(r.expected_accepted_length),
        num(r.predicted_speedup),
        speedup_cell(r),
        str(r.errors),
        str(r.timeouts),
        f"{r.equivalent}/{r.compared}",
    ]


CONDITION_HEADERS = (
    "condition",
    "spec type",
    "status",
    "peak RAM MiB",
    "extra RAM MiB",
    "peak VRAM MiB",
    "acceptance",
    "command",
)


def condition_cells(run: RunDigest) -> list[list[str]]:
    rows = []
    for c in run.conditions:
        status = c.status if not c.failure else f"{c.status}: {c.failure}"
        rows.append(
            [
                c.label,
                c.spec_type,
                status,
                num(c.peak_ram_mib, ".0f"),
                num(c.extra_ram_mib, "+.0f"),
                num(c.peak_vram_mib, ".0f"),
                pct(c.acceptance),
                command(c.command),
            ]
        )
    return rows


def verdict_word(report: AuditReport) -> str:
    return "PASS" if report.passed else "FAIL"
