"""Formatting shared by the Markdown and HTML reports (numbers, commands, table rows)."""

from __future__ import annotations

import shlex

from specreg.schemas.audit import GATES, AuditReport, PairAudit, RunDigest, StratumRow


def num(value: float | None, fmt: str = ".2f", none: str = "–") -> str:
    """A number for a table cell; None stays visibly absent (never 0)."""
    return none if value is None else format(value, fmt)


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def spread(row: StratumRow) -> str:
    if row.speedup is None:
        return "–"
    if row.speedup_p5 is None or row.speedup_p95 is None:
        return f"{row.speedup:.2f}"
    return f"{row.speedup:.2f} ({row.speedup_p5:.2f}–{row.speedup_p95:.2f})"


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
    "speed-up (p5–p95)",
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
        spread(r),
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
