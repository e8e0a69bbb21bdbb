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


def decision_cells(d: StratumDecision, hw: dict[str, str] | None = None) -> list[str]:
    """A decision row: target, (hardware,) stratum, concurrency, choice, draft length, speed-up, run, why."""
    return [
        d.target_name or short(d.target_sha256),
        *([hw.get(d.hardware or "", "–")] if hw else []),
        d.stratum,
        str(d.concurrency),
        d.choice,
        "–" if d.draft_n_max is None else str(d.draft_n_max),
        interval_text(d.speedup, d.speedup_ci95) if d.speedup is not None else "–",
        d.run_id or "–",
        "; ".join(f"pair {c.pair_id} {c.condition}: {c.reason}" for c in d.candidates) or "no candidates",
    ]


DECISION_HEADERS = ("target", "stratum", "conc.", "deploy", "draft max", "speed-up [95% CI]", "run", "why")


def decision_headers(hw: dict[str, str] | None = None) -> list[str]:
    """The decision table's headers, with a hardware column when several classes were audited."""
    return [DECISION_HEADERS[0], *(["hardware"] if hw else []), *DECISION_HEADERS[1:]]


def command(argv: list[str] | None) -> str:
    return shlex.join(argv) if argv else "(not recorded)"


def server_command(argv: list[str] | None) -> str:
    """A recorded server command as llama-server's own argv (no specreg wrapper, no benchmark port)."""
    from specreg.audit.deploy import try_server_argv

    return command(try_server_argv(argv, None) or argv)


def pair_commands(p: PairAudit) -> list[tuple[str, str]]:
    """(caption, shell text) for a pair: what `specreg deploy` prints, or the rollback and what was measured."""
    from specreg.audit.deploy import pinned_sha256, verify_command

    out: list[tuple[str, str]] = []
    if p.passed and p.speculative_command:
        sha = pinned_sha256(p.speculative_command, p.target_sha256, p.draft_sha256)
        out.append(("Check the model files (SHA-256 pinned by the registry):", verify_command(sha)))
        out.append((f"Deploy (as specreg deploy {p.pair_id} prints it):", command(p.speculative_command)))
    out.append(("Rollback (no speculation, the measured baseline):", command(p.rollback_command)))
    if not p.passed and p.speculative_command:
        failed = ", ".join(p.failed_gates)
        out.append(
            (f"Measured speculative condition (not deployable: fails {failed}):", command(p.speculative_command))
        )
    return out


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
    "ITL p50/p95 ms",
    "server ms/tok",
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
        tpot_cell(r),
        f"{num(r.p50_itl_ms)} / {num(r.p95_itl_ms)}",
        num(r.median_server_tpot_ms),
        pct(r.acceptance),
        num(r.expected_accepted_length),
        num(r.predicted_speedup),
        speedup_cell(r),
        str(r.errors),
        str(r.timeouts),
        f"{r.equivalent}/{r.compared}" + (f" ({r.compared_text_only} text only)" if r.compared_text_only else ""),
    ]


def tpot_cell(r: StratumRow) -> str:
    """The client TPOT median, with how many requests were left out for being below the server's time."""
    below = f"{r.tpot_below_server} below server" if r.tpot_below_server else ""
    if r.median_tpot_ms is None:
        return below or "–"
    return num(r.median_tpot_ms) + (f" ({below})" if below else "")


TIMINGS_NOTE = (
    "Client timings are medians over requests: TTFT to the first generated text the client saw; "
    "ITL per token from when each token arrived (tokens that came in one event: 0 after the "
    "first); TPOT (last token − first text) / tokens after it. Server ms/tok is the server's own "
    "predicted_per_token_ms. A TPOT below it is no decode speed: those requests are left out of "
    "TPOT and counted as 'below server'. 'text only': outputs compared by text alone, a side's "
    "token ids not all on record."
)


def set_aside_notes(run: RunDigest) -> list[str]:
    """The rounds a busy machine set aside (benchmark/contention.py), headline first."""
    return list(run.set_aside)


def comparison_notes(run: RunDigest) -> list[str]:
    """Each condition x stratum whose output differs from the baseline: where, with context."""
    return [
        f"{r.condition} / {r.stratum}: first output that differs from the baseline: {r.first_mismatch}"
        for r in run.strata
        if r.first_mismatch
    ]


CONDITION_HEADERS = (
    "condition",
    "spec type",
    "status",
    "peak RAM MiB",
    "predicted RAM MiB (error)",
    "extra RAM MiB",
    "peak VRAM MiB",
    "acceptance",
    "command",
)


def predicted(pred: float | None, measured: float | None) -> str:
    """The metadata estimate with its error against the measured peak: '36 (+2%)'."""
    if pred is None:
        return "–"
    if not measured:
        return f"{pred:.0f}"
    return f"{pred:.0f} ({(pred - measured) / measured:+.0%})"


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
                predicted(c.predicted_ram_mib, c.peak_ram_mib),
                num(c.extra_ram_mib, "+.0f"),
                num(c.peak_vram_mib, ".0f"),
                pct(c.acceptance),
                server_command(c.command),
            ]
        )
    return rows


def verdict_word(report: AuditReport) -> str:
    return "PASS" if report.passed else "FAIL"


def hardware_labels(report: AuditReport) -> dict[str, str]:
    """H1, H2, ... for the audit's hardware classes (sorted), the same in every view."""
    return {c: f"H{i}" for i, c in enumerate(sorted(report.hardware_classes), start=1)}


def _speedup(report: AuditReport, p: PairAudit) -> float | None:
    run = next((r for r in report.runs if r.run_id == p.run_id), None)
    rows = [r for r in run.rows(p.condition) if r.stratum == "all"] if run and p.condition else []
    return rows[0].speedup if rows else None


def hardware_matrix(report: AuditReport) -> tuple[list[str], list[list[str]]]:
    """Pairs down, hardware classes across: PASS with the speed-up, or FAIL with the first failed gate."""
    labels = hardware_labels(report)
    classes = sorted(labels)
    cells: dict[int, dict[str, str]] = {}
    first: dict[int, PairAudit] = {}
    for p in report.pairs:
        first.setdefault(p.pair_id, p)
        if p.hardware not in labels:
            continue
        sp = _speedup(report, p)
        text = ("PASS" if p.passed else f"FAIL {p.failed_gates[0]}") + ("" if sp is None else f" {sp:.2f}x")
        cells.setdefault(p.pair_id, {})[p.hardware] = text
    headers = ["pair", "method", "target", "draft", *(labels[c] for c in classes)]
    rows = []
    for pid, p in first.items():
        draft = (p.draft_name or short(p.draft_sha256)) if p.draft_sha256 else "(self)"
        by = cells.get(pid, {})
        rows.append(
            [str(pid), p.method, p.target_name or short(p.target_sha256), draft, *(by.get(c, "–") for c in classes)]
        )
    return headers, rows
