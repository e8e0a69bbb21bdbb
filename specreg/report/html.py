"""One self-contained HTML file: inline CSS, inline SVG plots, no scripts, no external URLs.

Every string that came from a file, a hub or a user goes through `html.escape`; the SVGs are
matplotlib's own output with text drawn as paths (no text nodes from untrusted input).
"""

from __future__ import annotations

import html
from datetime import datetime

from specreg.audit.deploy import wrap_command
from specreg.benchmark.store.statistics import interval_text
from specreg.report import common
from specreg.report.plots import inline_svg
from specreg.schemas.audit import GATES, AuditReport, PairAudit, RunDigest, named
from specreg.text import escape_control

_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1200px;
color:#222;padding:.5rem 1rem 2rem;line-height:1.4;font-size:16px;overflow-wrap:break-word}
h1{font-size:1.45rem;margin:.6rem 0 .4rem}h2{font-size:1.2rem;margin:1.4rem 0 .4rem}h3{font-size:1.05rem}
.badge{font-size:.8em;padding:.05em .45em;border-radius:.3em;color:#fff;vertical-align:middle}
.pass{background:#e3f4e1}.fail{background:#fbe0de}.warn{background:#fff1c2}.na{color:#666}
.badge.pass{background:#2e7d32}.badge.fail{background:#c62828}.badge.warn{background:#a15c00}
#decision{border-left:.35rem solid #888;padding:.4rem .8rem;margin:.4rem 0 .8rem;background:#fafafa}
#decision.pass{border-color:#2e7d32}#decision.fail{border-color:#c62828}#decision.warn{border-color:#a15c00}
#decision p{margin:.2rem 0}#decision ul{margin:.2rem 0;padding-left:1.1rem}#decision li{margin:.15rem 0}
#decision li.pass,#decision li.fail,#decision li.warn{background:none}
#decision li.fail::marker{content:"✗ ";color:#c62828}#decision li.pass::marker{content:"✓ ";color:#2e7d32}
#decision li.warn::marker{content:"! ";color:#a15c00}#decision li.na::marker{content:"· "}
.scroll{overflow-x:auto;max-width:100%;margin:.4rem 0 1rem}
table{border-collapse:collapse;font-size:.85rem}
th,td{border:1px solid #ccc;padding:.25rem .45rem;text-align:left;vertical-align:top}
th{background:#f3f3f3;white-space:nowrap}
td.key{white-space:nowrap;font-weight:600}
td.why{min-width:18rem}
td.fail,li.fail{background:#fbe0de}td.warn{background:#fff1c2}
pre{background:#f6f6f6;padding:.6rem;overflow-x:auto;white-space:pre;font-size:.75rem;line-height:1.35}
code{overflow-wrap:anywhere}
.notes li{margin:.2rem 0}.notes li.fail,.notes li.warn{padding:.15rem .4rem;list-style:none}
.notes li.fail::before{content:"✗ ";color:#c62828;font-weight:700}
.notes li.warn::before{content:"! ";color:#a15c00;font-weight:700}
.plots{display:flex;flex-wrap:wrap;gap:1rem}.plots figure{margin:0;flex:1 1 30rem;max-width:40rem}
.plots svg{width:100%;height:auto}
figcaption{font-size:.85rem;color:#555}
.muted{color:#555;font-size:.9em}
nav{font-size:.9rem}nav a{margin-right:.6rem}
"""

# Commands are laid out the way the terminal shows them: at most this many columns, broken only
# between words with ` \` continuations (still one shell command when pasted), and never again by
# the browser (`white-space: pre`: a soft wrap would break after any hyphen, `--met|rics`). 44
# columns of .75rem monospace fit a 390 px phone; a longer word scrolls inside its own box.
COMMAND_WIDTH = 44


# Control characters (ESC of an ANSI sequence, NUL, ...) are shown as \\xNN, as on the terminal:
# an HTML file is also `cat`-ed and grepped. Newlines and tabs stay (logs and commands in <pre>).


def e(text: object) -> str:
    return html.escape(escape_control(text, keep="\n\t"))


def _table(
    headers: list[str] | tuple[str, ...],
    rows: list[list[str]],
    raw: bool = False,
    keys: int = 1,
    classes: list[dict[int, str]] | None = None,
) -> str:
    """A table in its own horizontally scrolling box; the first `keys` columns do not wrap. Cells
    are escaped unless `raw` (then the caller escaped them); `classes`: per row, column -> class."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        extra = classes[i] if classes else {}
        cells = []
        for j, c in enumerate(row):
            cls = " ".join(x for x in ("key" if j < keys else "", extra.get(j, "")) if x)
            attr = f' class="{cls}"' if cls else ""
            cells.append(f"<td{attr}>{c if raw else e(c)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    rows_html = "".join(body)
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{rows_html}</tbody></table></div>'


_TITLES = {
    "acceptance": (
        "Acceptance by draft position",
        "Share of drafts whose token at each position was accepted, over the positions some draft "
        "reached (llama.cpp counts drafts, not drafts per position; later positions are left out, never drawn as 0).",
    ),
    "speedup": (
        "Speed-up per stratum and condition",
        "Median with its 95% interval on a log axis centred on 1x; an arrowhead marks a whisker cut at "
        "the frame; ◇ the speed-up predicted from acceptance and the measured step cost.",
    ),
    "concurrency": ("Speed-up by concurrency", "Every stratum together; dotted: predicted."),
    "draft-length": ("Speed-up by draft length", "Every stratum together; dotted: predicted."),
    "tune": (
        "Predicted and measured speed-up by draft length (--tune)",
        "Line: the first pass's prediction for every --spec-draft-n-max; points: the lengths measured, "
        "with their 95% intervals; ringed: the length chosen.",
    ),
    "memory": ("Peak memory per condition", "Peak server RAM, in each method's colour."),
}


def _plots(plots: dict[str, str], prefix: str) -> str:
    figs = "".join(
        f'<figure aria-label="{e(_TITLES.get(n, (n, ""))[0])}">{inline_svg(svg, f"{prefix}{n}")}'
        f"<figcaption>{e(_TITLES.get(n, (n, ''))[1])}</figcaption></figure>"
        for n, svg in plots.items()
    )
    return f'<div class="plots">{figs}</div>' if figs else '<p class="muted">No data to plot.</p>'


def _run_line(run: RunDigest) -> str:
    return f'<p class="muted">{e(common.run_meta(run))}</p>'


def run_plots(run: RunDigest, plots: dict[str, str], prefix: str) -> str:
    """A run's heading, manifest line and plots."""
    return "\n".join([f"<h2>Run {e(run.run_id)} — {e(run.status)}</h2>", _run_line(run), _plots(plots, prefix)])


def _pre(text: str) -> str:
    return f"<pre>{e(text)}</pre>"


def _command(argv: list[str] | None) -> str:
    """A command as the terminal lays it out (` \\` continuations at spaces)."""
    if not argv:
        return _pre("(not recorded)")
    return _pre("\n".join(wrap_command(argv, COMMAND_WIDTH, indent="")))


def _notes(run: RunDigest) -> str:
    """Outputs that differ from the baseline (first differing token) and warnings, marked."""
    items = [f'<li class="fail">{e(n)}</li>' for n in common.comparison_notes(run)]
    items += [f'<li class="warn">{e(n)}</li>' for n in common.warning_notes(run)]
    items += [f'<li class="warn">{e(n)}</li>' for n in common.set_aside_notes(run)]
    items += [f"<li>{e(n)}</li>" for n in common.sampler_notes(run)]
    return f'<ul class="notes">{"".join(items)}</ul>' if items else ""


def run_tables(run: RunDigest, heading: bool = True) -> str:
    """A run's per-stratum table (key columns first), its conditions and exact server commands."""
    parts = [f'<h2 id="m-{e(run.run_id)}">Run {e(run.run_id)}: measurements</h2>'] if heading else []
    marks = []
    for r in run.strata:
        cls: dict[int, str] = {}
        if common.mismatched(r):
            cls[common.EQUIVALENT_COLUMN] = "fail"
        if r.speedup is None and r.speedup_note and r.speedup_note != "reference":
            cls[2] = "fail"
        elif r.unexplained:
            cls[2] = "warn"
        marks.append(cls)
    parts += [
        "<h3>Per stratum</h3>",
        _notes(run),
        _table(common.STRATUM_HEADERS, [common.stratum_cells(r) for r in run.strata], keys=2, classes=marks),
        f'<p class="muted">{e(common.TIMINGS_NOTE)}</p>',
        "<h3>Conditions</h3>",
        _table(
            common.CONDITION_HEADERS[:-1],
            [c[:-1] for c in common.condition_cells(run)],
            classes=[{1: "fail"} if c.status != "ok" else {} for c in run.conditions],
        ),
        "<h3>Server commands</h3>",
    ]
    for c in run.conditions:
        parts.append(f"<p><code>{e(c.label)}</code>:</p>{_command(common.try_server_argv(c.command))}")
    return "\n".join(parts)


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def _li(text: str, ok: bool | None, neutral: str = "warn") -> str:
    cls = neutral if ok is None else ("pass" if ok else "fail")
    return f'<li class="{cls}">{e(text)}</li>'


def run_decision(run: RunDigest) -> str:
    """What the run found, first: each speculative condition's speed-up, or why it has none."""
    summary = common.run_summary(run)
    bad = any(ok is False for _, ok in summary)
    items = "".join(_li(t, ok, "na") for t, ok in summary) or "<li>no speculative condition</li>"
    warning = common.warning_summary(run)
    warn = f'<li class="warn">{e(warning)}</li>' if warning else ""
    cls = "fail" if bad or run.status != "complete" else "pass"
    return (
        f'<section id="decision" class="{cls}"><p><b>{e(run.status)}</b>: speed-up over every stratum '
        f"vs --spec-type none (95% interval; ✓ faster, ✗ slower or failed, beyond doubt)</p>"
        f"<ul>{items}{warn}</ul></section>"
    )


def render_run(run: RunDigest, plots: dict[str, str]) -> str:
    """A single benchmark run (`specreg runs show RUN --report x.html`)."""
    body = "\n".join(
        [
            f"<h1>specreg run {e(run.run_id)}</h1>",
            run_decision(run),
            _run_line(run),
            _plots(plots, "r0"),
            run_tables(run, heading=False),
        ]
    )
    return _page(f"specreg run {run.run_id}", body)


def _cell(text: str, ok: bool | None) -> str:
    cls = "na" if ok is None else ("pass" if ok else "fail")
    return f'<span class="{cls}">{e(text)}</span>'


# The decision's first screen quotes each failed gate this far; the Pairs section has it whole.
DECISION_GATE_CHARS = 110
DECISION_PAIRS = 3  # pairs listed one by one in the decision, failing first (the rest in one line)
DECISION_DEPLOY = 3  # decisions per stratum in the decision (all in their table)


def _ids(what: str, pairs: list[PairAudit]) -> str:
    """'3 more fail (4, 7, 9)' for the decision's summary line ('' for none)."""
    if not pairs:
        return ""
    ids = ", ".join(str(p.pair_id) for p in pairs[:12]) + (", …" if len(pairs) > 12 else "")
    return f"{len(pairs)} {what} ({ids})"


_HEADLINE_CLASS = {"PASS": "pass", "PARTIAL": "warn", "FAIL": "fail"}


def audit_decision(report: AuditReport) -> str:
    """The verdict and its reasons: each pair passing, or the gates it failed with their numbers;
    then what to deploy per stratum."""
    word = common.headline_word(report)
    lead = f"<b>{word}</b>: {e(common.headline(report))}."
    failing = [p for p in report.pairs if not p.passed]
    shown = failing[:DECISION_PAIRS]  # the reasons first: the pairs that fail, then those that pass
    shown += [p for p in report.pairs if p.passed][: max(0, DECISION_PAIRS - len(shown))]
    items = []
    for p in sorted(shown, key=lambda p: report.pairs.index(p)):
        name = f"pair {p.pair_id} {p.method}" + (f" (verdict {p.signed_verdict})" if p.signed_verdict else "")
        if p.passed:
            judged = f" on {p.condition}: {interval_text(p.speedup, p.speedup_ci95)}" if p.condition else ""
            items.append(_li(f"{name}: passes{judged}", True))
        else:
            items.append(_li(f"{name}: {common.failed_text(p, DECISION_GATE_CHARS)}", False))
    rest = [p for p in report.pairs if p not in shown]
    if rest:  # the first screen holds the decision: the others in one line, each in the verdict table
        parts = [_ids("more pass", [p for p in rest if p.passed]), _ids("more fail", [p for p in rest if not p.passed])]
        items.append(_li("; ".join(x for x in parts if x) + ": see the verdict table", all(p.passed for p in rest)))
    deploy = [
        f"{d.stratum} (c{d.concurrency}) → {d.choice}"
        + (f" {d.speedup:.2f}x" if d.speedup is not None else "")
        + (f" [{d.speedup_ci95[0]:.2f}, {d.speedup_ci95[1]:.2f}]" if d.speedup_ci95 else "")
        for d in report.decisions[:DECISION_DEPLOY]
    ]
    if len(report.decisions) > len(deploy):
        deploy.append(f"{len(report.decisions) - len(deploy)} more in the decisions per stratum")
    cls = _HEADLINE_CLASS[word]
    return (
        f'<section id="decision" class="{cls}"><p>{lead}</p><ul>{"".join(items)}</ul>'
        + (f"<p><b>Deploy</b>: {e('; '.join(deploy))}</p>" if deploy else "")
        + "</section>"
    )


def render_audit(report: AuditReport, plots: dict[str, dict[str, str]]) -> str:
    """The audit: decision first, then verdict table, per-stratum decisions, plots, gates with
    evidence, rollback, runs."""
    word = common.headline_word(report)
    cls = _HEADLINE_CLASS[word]
    when = report.created_at.strftime("%Y-%m-%d %H:%M:%S %Z") if isinstance(report.created_at, datetime) else ""
    models = report.models
    parts = [
        f'<h1>specreg audit <span class="badge {cls}">{word}</span></h1>',
        audit_decision(report),
        f'<p class="muted">{e(when)}; policy: {e(report.policy_source)}; rule set '
        f"{e(report.rule_set or '–')}; integrity by "
        f"{'full re-hash' if report.rehash else 'stat cache (--trust-stat-cache)'}.</p>",
        '<nav><a href="#verdict">Verdict</a><a href="#decisions">Decisions</a><a href="#runs">Plots</a>'
        '<a href="#pairs">Pairs</a></nav>',
    ]
    if report.notes:
        parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in report.notes) + "</ul>")
    parts.append('<h2 id="verdict">Verdict</h2>')
    rows = []
    for p in report.pairs:
        draft = named(p.draft_sha256, models, p.draft_name) if p.draft_sha256 else "(self)"
        rows.append(
            [
                e(p.pair_id),
                _cell("PASS" if p.passed else "FAIL", p.passed),
                e(p.method),
                *[_cell(t, ok) for t, ok in common.gate_cells(p)],
                e(named(p.target_sha256, models, p.target_name)),
                e(draft),
            ]
        )
    parts.append(_table(["pair", "result", "method", *GATES, "target", "draft"], rows, raw=True, keys=2))
    hw = common.hardware_labels(report) if len(report.hardware_classes) > 1 else {}
    if hw:
        parts.append("<h2>Per hardware class</h2><ul>")
        parts += [f"<li><b>{e(hw[c])}</b>: {e(c)}</li>" for c in sorted(hw)]
        parts.append("</ul>" + _table(*common.hardware_matrix(report)))
    parts.append('<h2 id="decisions">Decisions per stratum</h2>')
    parts.append(
        _table(
            common.decision_headers(hw),
            [common.decision_cells(d, hw, models) for d in report.decisions],
            keys=3,
            classes=[{len(common.decision_headers(hw)) - 1: "why"} for _ in report.decisions],
        )
    )
    if report.production:
        parts.append('<h2 id="production">In production (specreg watch)</h2><ul>')
        parts += [f"<li>{e(p.where())}: {e(p.line())}</li>" for p in report.production]
        parts.append("</ul>")
    parts.append('<div id="runs"></div>')
    for i, run in enumerate(report.runs):
        parts.append(run_plots(run, plots.get(run.run_id, {}), f"r{i}"))
    parts.append('<h2 id="pairs">Pairs</h2>')
    for p in report.pairs:
        ok = "pass" if p.passed else "fail"
        gates = "".join(
            f'<li class="{"pass" if g.passed else "fail"}"><b>{e(g.gate)}</b>: '
            f"{'pass' if g.passed else 'FAIL'} — {e(g.message)}</li>"
            for g in p.gates
        )
        judged = common.judged_line(p)
        parts.append(
            f'<h3 class="{ok}">{e(common.pair_title(p, models))} — {ok.upper()}</h3>'
            + (f"<p>{e(judged)}</p>" if judged else "")
            + f"<ul>{gates}</ul>"
        )
        parts += [f"<p>{e(caption)}</p>{_pre(text)}" for caption, text in common.pair_commands(p, COMMAND_WIDTH)]
    parts += [run_tables(run) for run in report.runs]
    return _page(f"specreg audit — {word}", "\n".join(parts))
