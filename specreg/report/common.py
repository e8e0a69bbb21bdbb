"""Formatting shared by the Markdown and HTML reports (numbers, commands, table rows)."""

from __future__ import annotations

import shlex

from specreg.benchmark.store.statistics import interval_text
from specreg.schemas.audit import (
    GATES,
    AuditReport,
    ModelName,
    PairAudit,
    RunDigest,
    StratumDecision,
    StratumRow,
    named,
)
from specreg.schemas.request_row import TPOT_TOLERANCE_TEXT
from specreg.servers.identity import runtime_text
from specreg.text import escape_control, plural


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


def decision_cells(
    d: StratumDecision, hw: dict[str, str] | None = None, models: dict[str, ModelName] | None = None
) -> list[str]:
    """A decision row, what decides first: stratum, concurrency, choice, speed-up, draft length,
    then (hardware,) target, run, why."""
    return [
        d.stratum,
        str(d.concurrency),
        d.choice,
        interval_text(d.speedup, d.speedup_ci95) if d.speedup is not None else "–",
        "–" if d.draft_n_max is None else str(d.draft_n_max),
        *([hw.get(d.hardware or "", "–")] if hw else []),
        named(d.target_sha256, models or {}, d.target_name),
        d.run_id or "–",
        "; ".join(f"pair {c.pair_id} {c.condition}: {c.reason}" for c in d.candidates) or "no candidates",
    ]


DECISION_HEADERS = ("stratum", "conc.", "deploy", "speed-up [95% CI]", "draft max", "target", "run", "why")


def decision_headers(hw: dict[str, str] | None = None) -> list[str]:
    """The decision table's headers, with a hardware column when several classes were audited."""
    return [*DECISION_HEADERS[:5], *(["hardware"] if hw else []), *DECISION_HEADERS[5:]]


def command(argv: list[str] | None, width: int | None = None) -> str:
    """A command as one shell line, or laid out in lines of `width` columns with ` \\` continuations."""
    if not argv:
        return "(not recorded)"
    if width is None:
        return shlex.join(argv)
    from specreg.audit.deploy import wrap_command

    return "\n".join(wrap_command(argv, width, indent=""))


def try_server_argv(argv: list[str] | None) -> list[str] | None:
    """A recorded server command as llama-server's own argv (no specreg wrapper, no benchmark port)."""
    from specreg.audit.deploy import try_server_argv as server_argv

    return server_argv(argv, None) or argv


def server_command(argv: list[str] | None) -> str:
    return command(try_server_argv(argv))


def pair_commands(p: PairAudit, width: int | None = None) -> list[tuple[str, str]]:
    """(caption, shell text) for a pair: what `specreg deploy` prints, or the rollback and what was
    measured; laid out at `width` columns when given."""
    from specreg.audit.deploy import pinned_sha256, verify_command, verify_lines

    out: list[tuple[str, str]] = []
    if p.passed and p.speculative_command:
        sha = pinned_sha256(p.speculative_command, p.target_sha256, p.draft_sha256)
        verify = "\n".join(verify_lines(sha, indent="")) if width else verify_command(sha)
        out.append(("Check the model files (SHA-256 pinned by the registry):", verify))
        out.append((f"Deploy (as specreg deploy {p.pair_id} prints it):", command(p.speculative_command, width)))
    out.append(("Rollback (no speculation, the measured baseline):", command(p.rollback_command, width)))
    if not p.passed and p.speculative_command:
        out.append(
            (
                f"Measured speculative condition (not deployable: {failed_text(p)}):",
                command(p.speculative_command, width),
            )
        )
    return out


def failed_text(p: PairAudit, limit: int | None = None) -> str:
    """The gates that failed, each with its numbers ('fails speed: chat: speed-up ...x [...]');
    gates that failed only because evidence did are named in one clause, not repeated."""
    failed = [g for g in p.gates if not g.passed]
    if not failed:
        return "passes every gate"
    evidence = p.gate("evidence")
    follow = f"no evidence: {evidence.message}" if evidence and not evidence.passed else None
    own = [g for g in failed if g.message != follow]
    parts = [f"{g.gate}: {escape_control(g.message, limit=limit)}" for g in own]
    derived = [g.gate for g in failed if g.message == follow]
    if derived:
        parts.append(f"{', '.join(derived)} follow from evidence")
    return "fails " + "; ".join(parts)


def short(sha: str | None) -> str:
    return sha[:12] if sha else "–"


def pair_title(p: PairAudit, models: dict[str, ModelName] | None = None) -> str:
    target = named(p.target_sha256, models or {}, p.target_name)
    draft = named(p.draft_sha256, models or {}, p.draft_name) if p.draft_sha256 else "(self)"
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


STRATUM_HEADERS = (  # what decides first: the row's name, its speed-up, whether outputs matched
    "condition",
    "stratum",
    "speed-up [95% CI]",
    "predicted",
    "equivalent",
    "conc.",
    "acceptance",
    "E[L]",
    "n",
    "reps",
    "median ms",
    "p95 ms",
    "TTFT ms",
    "TPOT ms",
    "ITL p50/p95 ms",
    "server ms/tok",
    "errors",
    "timeouts",
)
EQUIVALENT_COLUMN = STRATUM_HEADERS.index("equivalent")


def stratum_cells(r: StratumRow) -> list[str]:
    return [
        r.condition,
        r.stratum,
        speedup_cell(r),
        num(r.predicted_speedup),
        f"{r.equivalent}/{r.compared}" + (f" ({r.compared_text_only} text only)" if r.compared_text_only else ""),
        str(r.concurrency),
        pct(r.acceptance),
        num(r.expected_accepted_length),
        str(r.n_requests),
        str(r.n_repetitions),
        num(r.median_total_ms, ".1f"),
        num(r.p95_total_ms, ".1f"),
        num(r.median_ttft_ms, ".1f"),
        tpot_cell(r),
        f"{num(r.p50_itl_ms)} / {num(r.p95_itl_ms)}",
        num(r.median_server_tpot_ms),
        str(r.errors),
        str(r.timeouts),
    ]


def mismatched(r: StratumRow) -> bool:
    """Greedy outputs that differ from the baseline (what a reader must not miss)."""
    return r.compared > 0 and r.equivalent < r.compared


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
    f"predicted_per_token_ms. A TPOT below it by more than the clocks disagree ({TPOT_TOLERANCE_TEXT}) "
    "is no decode speed: those requests are left out of TPOT and counted as 'below server'. "
    "'text only': outputs compared by text alone, a side's token ids not all on record."
)


def set_aside_notes(run: RunDigest) -> list[str]:
    """The rounds a busy machine set aside (benchmark/store/contention.py), headline first."""
    return list(run.set_aside)


def comparison_notes(run: RunDigest) -> list[str]:
    """Each condition x stratum whose output differs from the baseline: how many, where first (the
    token), with context, and each changed prompt's triage (near tie or divergence, at the
    default margin; the audit judges with its policy's)."""
    return [
        f"{r.condition} / {r.stratum}: {r.compared - r.equivalent} of {plural(r.compared, 'output')} differ "
        f"from the baseline; first: {r.first_mismatch or 'not recorded'}{_triages(r)}"
        for r in run.strata
        if mismatched(r) or r.first_mismatch
    ]


def _triages(r: StratumRow) -> str:
    shown = [f"{p}: {r.triage[p].text() if p in r.triage else 'not triaged'}" for p in r.failed_prompts[:5]]
    return f"; triage: {'; '.join(shown)}" if shown else ""


def sampler_notes(run: RunDigest) -> list[str]:
    """Acceptance and speed-up per sampler, with the sampled checks at temperature > 0 (none for
    a greedy-only run): speed-ups compare only at the same sampler."""
    if all(c.temperature == 0 for c in run.conditions):
        return []
    out = []
    for r in run.strata:
        if r.stratum != "all" or r.temperature == 0 or r.speedup_note == "reference":
            continue
        mode = f", {r.draft_sampling} draft" if r.draft_sampling else ""
        text = f"{r.condition} at T{r.temperature:g}{mode}: acceptance {pct(r.acceptance)}, speed-up {speedup_cell(r)}"
        if r.expect_checked:
            base = f"{r.base_expect_checked - r.base_expect_failed}/{r.base_expect_checked}"
            text += f", expect {r.expect_checked - r.expect_failed}/{r.expect_checked} vs baseline {base}"
        if r.dist_p is not None:
            text += f", distribution check p = {r.dist_p:.2g} over {r.dist_n} prompts"
        out.append(text)
    return out


def warning_summary(run: RunDigest) -> str | None:
    """The warnings in one line for the decision (the measurements list each)."""
    unsteady = [c.label for c in run.conditions if c.warmup_notes]
    unexplained = sorted({r.condition for r in run.strata if r.unexplained})
    parts = []
    if unsteady:
        parts.append(f"warm-up not steady: {', '.join(unsteady)}")
    if unexplained:
        parts.append(f"unexplained speed-up: {', '.join(unexplained)}")
    return "; ".join(parts) + " (see the measurements)" if parts else None


def warning_notes(run: RunDigest) -> list[str]:
    """What may have skewed the numbers: warm-ups that never settled, unexplained speed-ups."""
    out = [f"warm-up not steady: {c.label} {n}" for c in run.conditions for n in c.warmup_notes]
    out += [
        f"unexplained {r.condition} / {r.stratum}: {r.unexplained_reason or 'faster than acceptance allows'}"
        for r in run.strata
        if r.unexplained
    ]
    return out


def run_summary(run: RunDigest) -> list[tuple[str, bool | None]]:
    """A run's result in a few lines (text, good?): each speculative condition over every
    stratum with its speed-up, or why it has none."""
    out: list[tuple[str, bool | None]] = []
    for c in run.conditions:
        if c.is_baseline:
            continue
        whole = next((r for r in run.strata if r.condition == c.label and r.stratum == "all"), None)
        if c.status != "ok" or whole is None or whole.speedup is None:
            why = c.failure or (whole.speedup_note if whole else None) or c.status
            out.append((f"{c.label}: {c.status} — {why}", False))
            continue
        diff = [r for r in run.strata if r.condition == c.label and mismatched(r)]
        eq = f"; outputs differ in {', '.join(r.stratum for r in diff)}" if diff else ""
        ci = whole.speedup_ci95
        # good: faster beyond doubt; bad: outputs differ, or slower beyond doubt; else no mark
        good = False if diff or (ci and ci[1] < 1) else (True if ci and ci[0] > 1 else None)
        more = ""
        if whole.decision == "undecided" and whole.decision_budget:  # what would decide it, as a command
            from specreg.benchmark.store.ending import continue_text

            more = f"; undecided, to measure on: {continue_text(run.run_id, whole.decision_budget)}"
        out.append((f"{c.label}: {interval_text(whole.speedup, ci)}{eq}{more}", good))
    return out


def run_meta(run: RunDigest) -> str:
    """The run's target, workload, runtime and hardware in one sentence."""
    target = named(run.target_sha256, run.models, run.target_name)
    return (
        f"Target {target}, workload {run.workload or '–'}, runtime {runtime_text(run.runtime)}, "
        f"hardware {run.hardware or '–'}, {plural(run.repetitions, 'repetition')}."
        + (f" Evidence: {run.attested_by}." if run.attested_by else "")
    )


CONDITION_HEADERS = (
    "condition",
    "status",
    "spec type",
    "draft",
    "peak RAM MiB",
    "predicted RAM MiB (error)",
    "extra RAM MiB",
    "peak VRAM MiB",
    "acceptance",
    "command",
)


def predicted(pred: float | None, measured: float | None) -> str:
    """The metadata estimate with its error against the measured peak: '36 (+2%)'; a measured
    peak over the prediction by more than its margin is marked: '636 (-8%) UNDER'."""
    from specreg.validators.memory_budget import prediction_exceeded

    if pred is None:
        return "–"
    if not measured:
        return f"{pred:.0f}"
    flag = " UNDER" if prediction_exceeded(measured, pred) is not None else ""
    return f"{pred:.0f} ({(pred - measured) / measured:+.0%}){flag}"


def condition_cells(run: RunDigest) -> list[list[str]]:
    rows = []
    for c in run.conditions:
        status = c.status if not c.failure else f"{c.status}: {c.failure}"
        rows.append(
            [
                c.label,
                status,
                c.spec_type,
                named(c.draft_sha256, run.models) if c.draft_sha256 else "–",
                num(c.peak_ram_mib, ".0f"),
                predicted(c.predicted_ram_mib, c.peak_ram_mib),
                num(c.extra_ram_mib, "+.0f"),
                num(c.peak_vram_mib, ".0f"),
                pct(c.acceptance),
                server_command(c.command),
            ]
        )
    return rows


def deploying_pairs(report: AuditReport) -> dict[str, set[int]]:
    """Per measured stratum, the pairs `deploy PAIR --stratum S` would pin: those with a condition
    passing every gate there (an eligible candidate of that stratum's decision, any concurrency).

    A pair that fails the whole workload (one stratum too slow) still deploys where it wins, so
    the overall verdict alone would tell a reader that nothing works when one stratum does."""
    out: dict[str, set[int]] = {}
    for d in report.decisions:
        mine = out.setdefault(d.stratum, set())
        mine.update(c.pair_id for c in d.candidates if c.eligible)
    return out


def headline_word(report: AuditReport) -> str:
    """PASS (some pair passes every gate), PARTIAL (none does, but a stratum deploys) or FAIL."""
    if report.passed:
        return "PASS"
    return "PARTIAL" if any(deploying_pairs(report).values()) else "FAIL"


def strata_headline(report: AuditReport) -> str:
    """'1 of 3 pairs deploys for repetitive; chat refused': what deploys per stratum ('' if no
    stratum was measured). Strata deploying come first, most pairs first; refused ones after."""
    per = deploying_pairs(report)
    total = len(report.pairs)
    wins = sorted(((s, len(ids)) for s, ids in per.items() if ids), key=lambda x: (-x[1], x[0]))
    refused = sorted(s for s, ids in per.items() if not ids)
    parts = [f"{n:,} of {plural(total, 'pair')} {'deploys' if n == 1 else 'deploy'} for {s}" for s, n in wins]
    if refused:
        parts.append(f"{', '.join(refused)} refused")
    return "; ".join(parts)


def headline(report: AuditReport) -> str:
    """The audit in one sentence, true per stratum: the whole-workload count, then what deploys
    where ('FAIL overall, 0 of 3 pairs pass every gate; 1 of 3 pairs deploys for repetitive; chat
    refused'). Shared by the HTML page, the Markdown report and the terminal."""
    n_pass = sum(p.passed for p in report.pairs)
    overall = f"{n_pass:,} of {plural(len(report.pairs), 'pair')} {'passes' if n_pass == 1 else 'pass'} every gate"
    strata = strata_headline(report)
    return overall + (f"; {strata}" if strata else "")


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
        draft = named(p.draft_sha256, report.models, p.draft_name) if p.draft_sha256 else "(self)"
        target = named(p.target_sha256, report.models, p.target_name)
        by = cells.get(pid, {})
        rows.append([str(pid), p.method, target, draft, *(by.get(c, "–") for c in classes)])
    return headers, rows
