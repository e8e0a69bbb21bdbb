"""Markdown reports: tables people can paste into a review, plots as SVG files beside the .md.

Every untrusted string (model names, paths, licences, messages that quote them) is
HTML-escaped and has Markdown's punctuation backslash-escaped (links, images, emphasis,
pipes), and the two shapes GitHub turns into links on its own (`scheme://`, `www.`) are
broken, so a hostile name can neither inject HTML, nor become a live link or a remote image,
nor break a table. Commands go into code fences longer than any backtick run they contain.
"""

from __future__ import annotations

import html
import re
from datetime import datetime

from specreg.report import common
from specreg.schemas.audit import GATES, AuditReport, RunDigest, named
from specreg.text import escape_control

_MD_PUNCT = re.compile(r"([\\`*_\[\]|~])")  # `[`..`]` kill links and images; the rest, emphasis and cells
_AUTOLINK = re.compile(r"(?<=[A-Za-z0-9])://|(?i:(?<=www))\.")


def esc(text: object) -> str:
    """Inert Markdown text: control characters escaped, Markdown punctuation backslash-escaped,
    bare-URL autolinks broken (`https\\://`, `www\\.`), then HTML-escaped."""
    s = _MD_PUNCT.sub(r"\\\1", escape_control(text))
    s = _AUTOLINK.sub(lambda m: "\\" + m.group(), s)
    return html.escape(s)


def code(text: object) -> str:
    """Untrusted text as a code span (outside tables): nothing inside is markup."""
    s = escape_control(text)
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}" if s else ""


def _table(headers: tuple[str, ...] | list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return out


def _fence(text: str) -> list[str]:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + "sh", escape_control(text, keep="\n"), fence]


def _images(plots: dict[str, str], prefix: str) -> list[str]:
    titles = {
        "acceptance": "Acceptance by draft position",
        "speedup": "Speed-up per stratum",
        "concurrency": "Speed-up by concurrency",
        "draft-length": "Speed-up by draft length",
        "memory": "Peak memory per condition",
        "tune": "Predicted and measured speed-up by draft length (--tune)",
    }
    # <...> keeps a file name with spaces or parentheses one link target (CommonMark)
    return [f"![{titles.get(name, name)}](<{esc(prefix)}{name}.svg>)\n" for name in plots]


def run_plots(run: RunDigest, plot_names: dict[str, str], image_prefix: str) -> list[str]:
    """A run's heading, manifest line and plot images."""
    out = [f"## Run {esc(run.run_id)} — {esc(run.status)}", ""]
    out.append(esc(common.run_meta(run)))
    return [*out, "", *_images(plot_names, image_prefix)]


def run_tables(run: RunDigest, heading: bool = True) -> list[str]:
    """A run's conditions (exact server commands) and its per-stratum table."""
    out = [f"## Run {esc(run.run_id)}: measurements", ""] if heading else []
    out += ["### Conditions", ""]
    out += _table(common.CONDITION_HEADERS[:-1], [c[:-1] for c in common.condition_cells(run)])
    for c in run.conditions:
        out += ["", f"{code(c.label)}:", *_fence(common.server_command(c.command))]
    out += ["", "### Per stratum", ""]
    out += _table(common.STRATUM_HEADERS, [common.stratum_cells(r) for r in run.strata])
    out += ["", esc(common.TIMINGS_NOTE)]
    notes = [f"- **differs**: {esc(n)}" for n in common.comparison_notes(run)]
    notes += [f"- **warning**: {esc(n)}" for n in common.warning_notes(run)]
    notes += [f"- **set aside**: {esc(n)}" for n in common.set_aside_notes(run)]
    notes += [f"- {esc(n)}" for n in common.sampler_notes(run)]
    if notes:
        out += ["", *notes]
    return [*out, ""]


def render_run(run: RunDigest, plots: dict[str, str], image_prefix: str) -> str:
    """A single benchmark run (`specreg runs show RUN --report x.md`)."""
    lines = run_plots(run, plots, image_prefix)
    lines[0] = "# specreg " + lines[0].removeprefix("## ").replace("Run ", "run ", 1)
    marks = {True: "✓ ", False: "✗ ", None: ""}  # faster / slower or failed, beyond doubt
    summary = [f"- {marks[ok]}{esc(t)}" for t, ok in common.run_summary(run)]
    lines[1:1] = ["", "Speed-up over every stratum vs --spec-type none (95% interval):", "", *summary]
    lines += run_tables(run, heading=False)
    return "\n".join(lines) + "\n"


def render_audit(report: AuditReport, plots: dict[str, dict[str, str]], image_prefix: str) -> str:
    """The audit: verdict table, decisions per stratum, gates with evidence, rollback, runs."""
    when = report.created_at.strftime("%Y-%m-%d %H:%M:%S %Z") if isinstance(report.created_at, datetime) else ""
    lines = [
        f"# specreg audit — {common.headline_word(report)}",
        "",
        f"**{esc(common.headline(report))}.**",
        "",
        f"{when}; policy: {esc(report.policy_source)}; rule set {esc(report.rule_set or '–')}; "
        f"integrity by {'full re-hash' if report.rehash else 'stat cache (--trust-stat-cache)'}.",
        "",
    ]
    for p in report.pairs:
        why = "passes every gate" if p.passed else common.failed_text(p)
        why += f" (verdict {p.signed_verdict})" if p.signed_verdict else ""
        lines.append(f"- {'✓' if p.passed else '✗'} pair {p.pair_id} {esc(p.method)}: {esc(why)}")
    lines += [f"- {esc(n)}" for n in report.notes]
    lines += ["", "## Verdict", ""]
    rows = []
    for p in report.pairs:
        rows.append(
            [
                str(p.pair_id),
                p.method,
                named(p.target_sha256, report.models, p.target_name),
                named(p.draft_sha256, report.models, p.draft_name) if p.draft_sha256 else "(self)",
                *[t for t, _ in common.gate_cells(p)],
                "PASS" if p.passed else "FAIL",
            ]
        )
    lines += _table(["pair", "method", "target", "draft", *GATES, "result"], rows)
    if len(report.hardware_classes) > 1:
        labels = common.hardware_labels(report)
        lines += ["", "## Per hardware class", ""]
        lines += [f"- **{labels[c]}**: {esc(c)}" for c in sorted(labels)] + [""]
        lines += _table(*common.hardware_matrix(report))
    hw = common.hardware_labels(report) if len(report.hardware_classes) > 1 else {}
    lines += ["", "## Decisions per stratum", ""]
    lines += _table(
        common.decision_headers(hw), [common.decision_cells(d, hw, report.models) for d in report.decisions]
    )
    lines.append("")
    if report.production:
        lines += ["## In production (specreg watch)", ""]
        lines += [f"- {esc(p.where())}: {esc(p.line())}" for p in report.production] + [""]
    for run in report.runs:
        lines += run_plots(run, plots.get(run.run_id, {}), f"{image_prefix}{slug(run.run_id)}-")
    lines += ["", "## Pairs", ""]
    for p in report.pairs:
        lines += [f"### {esc(common.pair_title(p, report.models))} — {'PASS' if p.passed else 'FAIL'}", ""]
        judged = common.judged_line(p)
        lines += [esc(judged), ""] if judged else []
        lines += [f"- **{g.gate}**: {'pass' if g.passed else 'FAIL'} — {esc(g.message)}" for g in p.gates]
        for caption, text in common.pair_commands(p):
            lines += ["", esc(caption), *_fence(text)]
        lines.append("")
    for run in report.runs:
        lines += run_tables(run)
    return "\n".join(lines) + "\n"


def slug(text: str) -> str:
    """A run id as a safe file-name part."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:40]
