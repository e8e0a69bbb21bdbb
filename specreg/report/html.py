"""One self-contained HTML file: inline CSS, inline SVG plots, no scripts, no external URLs.

Every string that came from a file, a hub or a user goes through `html.escape`; the SVGs are
matplotlib's own output with text drawn as paths (no text nodes from untrusted input).
"""

from __future__ import annotations

import html
from datetime import datetime

from specreg.report import common
from specreg.report.plots import inline_svg
from specreg.schemas.audit import GATES, AuditReport, RunDigest
from specreg.text import escape_control

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1200px;
color:#222;padding:0 1rem}
h1 .badge{font-size:.7em;padding:.1em .5em;border-radius:.3em;color:#fff;vertical-align:middle}
.pass{background:#e3f4e1}.fail{background:#fbe0de}.na{color:#888}
.badge.pass{background:#2e7d32}.badge.fail{background:#c62828}
table{border-collapse:collapse;margin:.5rem 0 1rem;font-size:.85rem}
th,td{border:1px solid #ccc;padding:.25rem .45rem;text-align:left;vertical-align:top}
th{background:#f3f3f3}
pre{background:#f6f6f6;padding:.6rem;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
.plots{display:flex;flex-wrap:wrap;gap:1rem}.plots figure{margin:0}
.plots svg{max-width:100%;height:auto}
.muted{color:#666;font-size:.9em}
"""


# Control characters (ESC of an ANSI sequence, NUL, ...) are shown as \\xNN, as on the terminal:
# an HTML file is also `cat`-ed and grepped. Newlines and tabs stay (logs and commands in <pre>).


def e(text: object) -> str:
    return html.escape(escape_control(text, keep="\n\t"))


def _table(headers: list[str] | tuple[str, ...], rows: list[list[str]], raw: bool = False) -> str:
    """A table; cells are escaped unless `raw` (then the caller escaped them)."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c if raw else e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _plots(plots: dict[str, str], prefix: str) -> str:
    titles = {
        "acceptance": "Acceptance by draft position",
        "speedup": "Speed-up per stratum (95% interval)",
        "concurrency": "Speed-up by concurrency",
        "draft-length": "Speed-up by draft length",
        "memory": "Peak memory per condition",
        "tune": "Predicted and measured speed-up by draft length (--tune)",
    }
    figs = "".join(
        f'<figure aria-label="{e(titles.get(n, n))}">{inline_svg(svg, f"{prefix}{n}")}</figure>'
        for n, svg in plots.items()
    )
    return f'<div class="plots">{figs}</div>' if figs else '<p class="muted">No data to plot.</p>'


def _run_line(run: RunDigest) -> str:
    return (
        f'<p class="muted">Target {e(run.target_name or common.short(run.target_sha256))} '
        f"(<code>{e(common.short(run.target_sha256))}</code>), workload {e(run.workload or '–')}, "
        f"runtime {e(run.runtime or '–')}, hardware {e(run.hardware or '–')}, "
        f"{run.repetitions} repetition(s).</p>"
    )


def run_plots(run: RunDigest, plots: dict[str, str], prefix: str) -> str:
    """A run's heading, manifest line and plots (what people look at first)."""
    return "\n".join([f"<h2>Run {e(run.run_id)} — {e(run.status)}</h2>", _run_line(run), _plots(plots, prefix)])


def run_tables(run: RunDigest, heading: bool = True) -> str:
    """A run's conditions (with exact server commands) and its per-stratum table."""
    parts = [f"<h2>Run {e(run.run_id)}: measurements</h2>"] if heading else []
    rows = []
    for cells in common.condition_cells(run):
        rows.append([e(c) for c in cells[:-1]] + [f"<code>{e(cells[-1])}</code>"])
    parts += [
        "<h3>Conditions</h3>",
        _table(common.CONDITION_HEADERS, rows, raw=True),
        "<h3>Per stratum</h3>",
        _table(common.STRATUM_HEADERS, [common.stratum_cells(r) for r in run.strata]),
        f"<p>{e(common.TIMINGS_NOTE)}</p>",
    ]
    notes = common.comparison_notes(run)
    if notes:
        parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    return "\n".join(parts)


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def render_run(run: RunDigest, plots: dict[str, str]) -> str:
    """A single benchmark run (`specreg runs show RUN --report x.html`)."""
    body = run_plots(run, plots, "r0").replace("<h2>Run ", "<h1>specreg run ", 1).replace("</h2>", "</h1>", 1)
    return _page(f"specreg run {run.run_id}", body + "\n" + run_tables(run, heading=False))


def _cell(text: str, ok: bool | None) -> str:
    cls = "na" if ok is None else ("pass" if ok else "fail")
    return f'<span class="{cls}">{e(text)}</span>'


def render_audit(report: AuditReport, plots: dict[str, dict[str, str]]) -> str:
    """The audit: verdict table, per-stratum decisions, gates with evidence, rollback, runs."""
    word = common.verdict_word(report)
    cls = "pass" if report.passed else "fail"
    when = report.created_at.strftime("%Y-%m-%d %H:%M:%S %Z") if isinstance(report.created_at, datetime) else ""
    parts = [
        f'<h1>specreg audit <span class="badge {cls}">{word}</span></h1>',
        f'<p class="muted">{e(when)}; policy: {e(report.policy_source)}; rule set '
        f"{e(report.rule_set or '–')}; integrity by "
        f"{'full re-hash' if report.rehash else 'stat cache (--trust-stat-cache)'}.</p>",
    ]
    if report.notes:
        parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in report.notes) + "</ul>")
    parts.append("<h2>Verdict</h2>")
    rows = []
    for p in report.pairs:
        draft = (p.draft_name or common.short(p.draft_sha256)) if p.draft_sha256 else "(self)"
        rows.append(
            [
                e(p.pair_id),
                e(p.method),
                e(p.target_name or common.short(p.target_sha256)),
                e(draft),
                *[_cell(t, ok) for t, ok in common.gate_cells(p)],
                _cell("PASS" if p.passed else "FAIL", p.passed),
            ]
        )
    parts.append(_table(["pair", "method", "target", "draft", *GATES, "result"], rows, raw=True))
    hw = common.hardware_labels(report) if len(report.hardware_classes) > 1 else {}
    if hw:
        parts.append("<h2>Per hardware class</h2><ul>")
        parts += [f"<li><b>{e(hw[c])}</b>: {e(c)}</li>" for c in sorted(hw)]
        parts.append("</ul>" + _table(*common.hardware_matrix(report)))
    parts.append("<h2>Decisions per stratum</h2>")
    parts.append(_table(common.decision_headers(hw), [common.decision_cells(d, hw) for d in report.decisions]))
    for i, run in enumerate(report.runs):
        parts.append(run_plots(run, plots.get(run.run_id, {}), f"r{i}"))
    parts.append("<h2>Pairs</h2>")
    for p in report.pairs:
        ok = "pass" if p.passed else "fail"
        gates = "".join(
            f'<li class="{"pass" if g.passed else "fail"}"><b>{e(g.gate)}</b>: '
            f"{'pass' if g.passed else 'FAIL'} — {e(g.message)}</li>"
            for g in p.gates
        )
        judged = common.judged_line(p)
        parts.append(
            f'<h3 class="{ok}">{e(common.pair_title(p))} — {ok.upper()}</h3>'
            + (f"<p>{e(judged)}</p>" if judged else "")
            + f"<ul>{gates}</ul>"
        )
        parts += [f"<p>{e(caption)}</p><pre>{e(text)}</pre>" for caption, text in common.pair_commands(p)]
    parts += [run_tables(run) for run in report.runs]
    return _page(f"specreg audit — {word}", "\n".join(parts))
