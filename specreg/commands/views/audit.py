"""Terminal output of `specreg audit`: one line per pair, counts for thousands.

A pair's line names its failing gates; each failure's reason follows, wrapped. A table of
thousands of pairs helps nobody and is slow to lay out: above `DETAIL_LIMIT` pairs the
terminal gets counts per gate and the first failing pairs, and `--json` / `--report` the rest.
"""

from __future__ import annotations

import shlex
from collections import Counter

from specreg.commands.layout import Col, command_lines
from specreg.commands.output import print_listing, safe_plain, say, show_lines, width
from specreg.report.common import hardware_labels, hardware_matrix, headline, headline_word
from specreg.schemas.audit import GATES, AuditReport, PairAudit, StratumDecision
from specreg.schemas.watch import ALERT_STATES, ProductionEvidence

DETAIL_LIMIT = 50
NO_EVIDENCE = "no evidence: "  # how audit.outcomes / audit.run word a gate that could not be judged
FAILURES_SHOWN = 20
_RESULT = {True: ("PASS", "green"), False: ("FAIL", "bold red")}


def _name(name: str | None, sha256: str | None) -> str:
    return name or (sha256 or "")[:12]


_HEADLINE_STYLE = {"PASS": "green", "PARTIAL": "bold yellow", "FAIL": "bold red"}


def _headline(report: AuditReport) -> None:
    """PASS, PARTIAL (no pair passes everywhere, some stratum deploys) or FAIL, and what deploys
    where: the words of the HTML page's headline (report.common.headline)."""
    word = headline_word(report)
    style = _HEADLINE_STYLE[word]
    text = f"{headline(report)} (policy: {report.policy_source})"
    say(text, prefix=f"audit: {word}  ", marks=[(word, style)], indent=2)


def _pairs_listing(report: AuditReport, hw: dict[str, str]) -> None:
    print_listing(
        (
            Col("pair", right=True),
            *([Col("hw")] if hw else []),
            Col("method"),
            Col("target", limit=40, squeeze=12),
            Col("draft", limit=40, squeeze=12),
            Col("result"),
            Col("failing gates", stack=1),  # never cut: beneath its row when the line is full
            Col("judged", stack=2),  # the run and condition the gates judged
        ),
        (
            (
                str(p.pair_id),
                *([hw.get(p.hardware or "", "-")] if hw else []),
                p.method,
                _name(p.target_name, p.target_sha256),
                _name(p.draft_name, p.draft_sha256) if p.draft_sha256 else "(self)",
                _RESULT[p.passed],
                ", ".join(p.failed_gates) or "-",
                _judged(p),
            )
            for p in report.pairs
        ),
    )


def _judged(p: PairAudit) -> str:
    """`run 20260101-120000-ab12cd draft-simple k4 c2`: which run (and condition) the gates judged."""
    if p.run_id is None:
        return "no run"
    return f"run {p.run_id}" + (f" {p.condition}" if p.condition else "")


def _counts(report: AuditReport) -> None:
    failed = Counter(g for p in report.pairs for g in p.failed_gates)
    print_listing((Col("gate"), Col("failing pairs", right=True)), ((g, str(failed.get(g, 0))) for g in GATES))


def _failures(pairs: list[PairAudit], limit: int | None, hw: dict[str, str]) -> None:
    bad = [p for p in pairs if not p.passed]
    for p in bad[:limit]:
        where = f" on {hw[p.hardware]}" if p.hardware in hw else ""
        failed = [g for g in p.gates if not g.passed]
        # gates not judged for want of evidence only repeat the evidence gate's reason: one line for them
        follow = [g.gate for g in failed if g.message.startswith(NO_EVIDENCE)]
        for g in failed:
            if g.gate in follow:
                continue
            say(g.message, prefix=f"pair {p.pair_id}{where} {g.gate}: ", marks=[(f"{g.gate}:", "red")], indent=4)
        if follow:
            say(
                f"{', '.join(follow)}: not judged without evidence",
                prefix=f"pair {p.pair_id}{where} ",
                style="dim",
                indent=4,
            )
    if limit is not None and len(bad) > limit:
        say(f"... and {len(bad) - limit} more failing pairs: see --json or --report")


def _hardware(report: AuditReport, detail: bool, hw: dict[str, str]) -> None:
    """With several hardware classes: the legend, then pairs x classes (few pairs) or counts per class."""
    if not hw:
        return
    show_lines([""])
    for cls in sorted(hw):
        say(cls, prefix=f"{hw[cls]} ", indent=len(hw[cls]) + 1)
    if detail:
        headers, rows = hardware_matrix(report)
        cols = [Col(h, right=h == "pair", limit=24 if h in ("target", "draft") else None, squeeze=12) for h in headers]
        print_listing(cols, rows)
        return
    counts = []
    for cls in sorted(hw):
        mine = [p for p in report.pairs if p.hardware == cls]
        n_pass = sum(p.passed for p in mine)
        counts.append((hw[cls], str(len(mine)), str(n_pass), str(len(mine) - n_pass)))
    say("pairs per hardware class")
    print_listing((Col("hw"), Col("pairs", right=True), Col("pass", right=True), Col("fail", right=True)), counts)


def _decisions(report: AuditReport, detail: bool, hw: dict[str, str]) -> None:
    if not report.decisions:
        return
    show_lines([""])
    if detail:
        from specreg.benchmark.store.statistics import interval_text

        say("deploy per stratum and concurrency (the best condition that passes every gate, else none):")
        print_listing(
            (
                Col("target", limit=40, squeeze=12),
                *([Col("hw")] if hw else []),
                Col("stratum"),
                Col("conc", right=True),
                Col("deploy", squeeze=12),
                Col("draft", right=True, stack=1),
                Col("speed-up [95% CI]", right=True),
            ),
            (
                (
                    _name(d.target_name, d.target_sha256),
                    *([hw.get(d.hardware or "", "-")] if hw else []),
                    d.stratum,
                    str(d.concurrency),
                    d.choice,
                    "-" if d.draft_n_max is None else str(d.draft_n_max),
                    interval_text(d.speedup, d.speedup_ci95, short=True),
                )
                for d in report.decisions
            ),
        )
        if any(
            d.speedup is not None and "~" in interval_text(d.speedup, d.speedup_ci95, short=True)
            for d in report.decisions
        ):
            from specreg.benchmark.store.statistics import NO_DIFFERENCE_LEGEND

            say(NO_DIFFERENCE_LEGEND, style="dim")
        return
    per: Counter[tuple[str, str, int, str]] = Counter(
        (hw.get(d.hardware or "", "-"), d.stratum, d.concurrency, d.choice.split(" (pair")[0]) for d in report.decisions
    )
    say("deploy per stratum and concurrency: number of targets per choice")
    print_listing(
        (
            *([Col("hw")] if hw else []),
            Col("stratum"),
            Col("conc", right=True),
            Col("deploy", squeeze=12),
            Col("targets", right=True),
        ),
        (
            (*([label] if hw else []), stratum, str(conc), choice, str(n))
            for (label, stratum, conc, choice), n in sorted(per.items())
        ),
    )


def _unchecked(report: AuditReport) -> None:
    """Faster conditions of a method the target was not checked for, one block per target and
    method: where it would win, and what to run to deploy it."""
    from specreg.benchmark.store.statistics import interval_text

    groups: dict[tuple[str, str], list[StratumDecision]] = {}
    for d in report.decisions:
        if d.unchecked is not None and d.unchecked.method:
            groups.setdefault((d.target_sha256, d.unchecked.method), []).append(d)
    for (_, method), ds in list(groups.items())[:FAILURES_SHOWN]:
        u = ds[0].unchecked
        assert u is not None and u.check_command is not None
        where = ", ".join(
            f"{d.stratum}" + (f" c{d.concurrency}" if d.concurrency != 1 else "") + " "
            f"({interval_text(d.unchecked.speedup, d.unchecked.speedup_ci95, short=True)})"
            for d in ds
            if d.unchecked is not None
        )
        say(
            f"{_name(ds[0].target_name, ds[0].target_sha256)}: {method} passes every gate its run shows "
            f"in {where}, but it is not checked for this target; to deploy it, run",
            prefix="candidate: ",
            marks=[("candidate:", "yellow")],
            indent=4,
        )
        words = [safe_plain(shlex.quote(w)) for w in u.check_command]
        show_lines(["  " + ln for ln in command_lines(words, width() - 2, indent=4)])
        say("then specreg audit, and specreg deploy PAIR --stratum STRATUM", prefix="  ", indent=4)
    if len(groups) > FAILURES_SHOWN:
        say(f"... and {len(groups) - FAILURES_SHOWN} more such candidates (--json has them all)", indent=4)


def _rollbacks(report: AuditReport) -> None:
    """Each target's rollback command, as `deploy` prints it for each pair: pairs measured in
    different runs (another -c, another -np) have different baselines, and each is named with
    the pairs it is the rollback of."""
    by_target: dict[str, dict[tuple[str, ...], list[PairAudit]]] = {}
    for p in report.pairs:
        if p.rollback_command:
            by_target.setdefault(p.target_sha256, {}).setdefault(tuple(p.rollback_command), []).append(p)
    for commands in by_target.values():
        for command, pairs in commands.items():
            first = pairs[0]
            name = _name(first.target_name, first.target_sha256)
            if len(commands) > 1:  # say which pairs each is the rollback of
                name += f"; {'pair' if len(pairs) == 1 else 'pairs'} {', '.join(str(p.pair_id) for p in pairs)}"
            say("", prefix=f"rollback ({name}):")
            words = [safe_plain(shlex.quote(w)) for w in command]
            show_lines(["  " + ln for ln in command_lines(words, width() - 2, indent=4)])


def _vouched(report: AuditReport) -> None:
    """The pairs whose verdict is a trusted signer's, not this machine's (audit/trust.py)."""
    signed = [p for p in report.pairs if p.signed_verdict]
    for p in signed[:FAILURES_SHOWN]:
        say(p.signed_verdict or "", prefix=f"pair {p.pair_id} verdict: ", indent=6)
    if len(signed) > FAILURES_SHOWN:
        say(f"... and {len(signed) - FAILURES_SHOWN} more pairs on signed verdicts (--json names every signer)")


def _attested(report: AuditReport) -> None:
    """Who vouches for each run the audit rests on, once any came from another machine."""
    from specreg.audit.trust import LOCAL

    if all(r.attested_by in (None, LOCAL) for r in report.runs):
        return
    for r in report.runs[:FAILURES_SHOWN]:
        say(r.attested_by or "-", prefix=f"evidence run {r.run_id}: ", indent=6)
    if len(report.runs) > FAILURES_SHOWN:
        say(f"... and {len(report.runs) - FAILURES_SHOWN} more runs (--json names every signer)", indent=4)


def production(items: list[ProductionEvidence]) -> None:
    """What `specreg watch` kept of each pair in production, beside what the bench measured."""
    for item in items[:FAILURES_SHOWN]:
        style = "green" if item.state == "holds" else "red" if item.state in ALERT_STATES else "yellow"
        say(item.line(), prefix=f"production: {item.where()}: ", marks=[("production:", style)], indent=4)
    if len(items) > FAILURES_SHOWN:
        say(f"... and {len(items) - FAILURES_SHOWN} more watched pairs (--json has them all)", indent=4)


def print_audit(report: AuditReport) -> None:
    """The verdict (one line per pair, or counts), each failure's reason, the decisions, the rollback commands."""
    detail = len(report.pairs) <= DETAIL_LIMIT
    hw = hardware_labels(report) if len(report.hardware_classes) > 1 else {}
    _headline(report)
    if detail:
        _pairs_listing(report, hw)
    else:
        _counts(report)
    for note in report.notes[:FAILURES_SHOWN]:
        say(note, prefix="note: ", marks=[("note:", "dim")], indent=6)
    _failures(report.pairs, None if detail else FAILURES_SHOWN, hw)
    _vouched(report)
    _attested(report)
    _hardware(report, detail, hw)
    _decisions(report, detail, hw)
    production(report.production)
    _unchecked(report)
    if detail:
        _rollbacks(report)
