"""The 80-column view of `specreg drafts`: the ranking, what it rests on, what was left out."""

from __future__ import annotations

import sys
import time

from specreg.commands.layout import Col
from specreg.commands.output import err_console, print_listing, say
from specreg.schemas.drafts import DraftReport, DraftRow
from specreg.units import mib_text

_EVERY_S = 1.0  # a progress line at most this often when stderr is not a terminal


class Progress:
    """`stage done/total, ETA` on stderr: redrawn on a terminal, a line a second elsewhere, and
    nothing at all for a search that takes under a second."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.stage = ""
        self.started = time.monotonic()
        self.shown = self.started
        self.drawn = False

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        t = time.monotonic()
        if stage != self.stage:
            self.stage, self.started = stage, t
        if t - self.shown < (0.2 if self.tty else _EVERY_S) and done < total:
            return
        if t - self.started < _EVERY_S and not self.drawn:
            return
        self.shown = t
        eta = (t - self.started) / max(done, 1) * (total - done)
        text = f"{stage} {done}/{total}" + (f", ETA {eta:.0f} s" if done < total else "")
        if self.tty:
            sys.stderr.write("\r" + text[:79].ljust(79))
            sys.stderr.flush()
            self.drawn = True
        else:
            say(text, stderr=True)

    def note(self, text: str) -> None:
        """A line of `--bench`'s progress (always shown, unless --json)."""
        self.done()
        if self.enabled:
            say(text, stderr=True, indent=2)

    def done(self) -> None:
        if self.drawn:
            sys.stderr.write("\r" + " " * 79 + "\r")
            sys.stderr.flush()
            self.drawn = False


def _speedup(row: DraftRow) -> str:
    p = row.prediction
    if p is None:
        return "-"
    lo, hi = p.speedup_range
    return f"{p.speedup:.2f}x [{lo:.2f}, {hi:.2f}]"


def _source(row: DraftRow) -> str:
    p = row.prediction
    if p is None:
        return "-"
    alpha = f"a {p.alpha:.2f} " if p.alpha is not None else ""
    return f"{alpha}{p.source}"


def _licence(row: DraftRow) -> tuple[str, str | None]:
    text = row.licence or "unknown"
    if row.licence_allowed is False:
        return f"{text} (denied)", "red"
    return text, None


def _draft(row: DraftRow) -> str:
    if row.draft is None:
        return "(the target alone)"
    return row.draft


def _mib_per_token(row: DraftRow) -> str:
    if row.bytes_per_token is None:
        return "-"
    return mib_text(row.bytes_per_token) if row.bytes_per_token else "0"


def show_report(report: DraftReport, *, show_all: bool) -> None:
    """The ranking first, then what it rests on, then what was left out and why."""
    name = report.target_name or report.target
    say(f"{name} ({report.target_sha256[:12]})", prefix="target  ", indent=8)
    say(f"{report.rule_set} ({report.rule_set_chosen_by}); policy: {report.policy}", prefix="rules   ", indent=8)
    n_rej = len(report.rejected) + report.other_tokenizer
    reasons = ", ".join(f"{k} {v}" for k, v in report.rejected_by_reason.items())
    say(
        f"{len(report.rows)} admitted, {n_rej} rejected" + (f" ({reasons})" if reasons else "")
        + (f"; hub: {report.searched_repos} repos, {mib_text(report.hub_bytes_fetched)} MiB of headers read"
           if report.searched_repos else ""),
        prefix="found   ", indent=8,
    )  # fmt: skip
    for line in report.notes:
        say(line, prefix="note    ", indent=8)
    if report.rows:
        print_listing(
            (
                Col("#", right=True),
                Col("method"),
                Col("draft", limit=48, squeeze=14),
                Col("predicted", limit=24),
                Col("k", right=True, stack=4),
                Col("from", limit=28, stack=3),
                Col("MiB/tok", right=True, stack=5),
                Col("quant", stack=6),
                Col("licence", limit=24, stack=2),
                Col("where", stack=1),
            ),
            (
                (
                    str(i),
                    r.method,
                    _draft(r),
                    _speedup(r),
                    str(r.prediction.draft_length) if r.prediction and r.prediction.draft_length else "-",
                    _source(r),
                    _mib_per_token(r),
                    r.quant or "-",
                    _licence(r),
                    r.where if r.local else f"{r.where} (headers only)",
                )
                for i, r in enumerate(report.rows, 1)
            ),
        )
    else:
        say("no admitted candidate: nothing to rank", prefix="result  ", indent=8)
    p = report.prior
    say(
        f"logit(a) = {p.a:.2f} + {p.b:.2f} log10(draft/target parameters) {p.c:+.2f} if the tokens differ, "
        f"sigma {p.sigma:.2f}: {p.how}; draft cost r = {p.draft_cost_offset:.2f} + weight-bytes ratio",
        prefix="prior   ", indent=8,
    )  # fmt: skip
    e = report.error
    if e.n_pairs:
        say(
            f"measured/predicted over {e.n_pairs} measured pair(s), each predicted without its own runs: "
            f"{e.low:.2f} to {e.high:.2f} (median {e.median:.2f}); family and prior ranges are widened by it",
            prefix="error   ", indent=8,
        )  # fmt: skip
    else:
        say("no measured pair yet: the ranges hold the prior's spread only", prefix="error   ", indent=8)
    for line in report.failures:
        say(line, prefix="skipped ", indent=8, stderr=True)
    if show_all and report.rejected:
        say("rejected:", stderr=False)
        print_listing(
            (Col("method"), Col("draft", limit=40, squeeze=14), Col("why", limit=200, squeeze=20)),
            ((r.method, _draft(r), r.reason or "-") for r in report.rejected),
        )
    elif report.rejected:
        say(f"{len(report.rejected)} rejected candidate(s) not listed: --all lists them with why", prefix="        ")
    if report.bench is not None:
        _show_bench(report)
    elif report.rows:
        top = report.rows[0]
        if top.where == "hub":
            say(f"specreg fetch {top.repo} {(top.draft or '').split('/', 2)[-1]}", prefix="next    ", indent=8)
        else:
            say(f"specreg drafts {report.target_sha256[:12]} --bench 4 --budget 20m", prefix="next    ", indent=8)


def _show_bench(report: DraftReport) -> None:
    b = report.bench
    assert b is not None
    for r in b.rounds:
        measured = ", ".join(f"{k} {v:.2f}x" if v is not None else f"{k} failed" for k, v in r.measured.items())
        say(f"{measured}; kept {', '.join(r.kept) or 'none'}", prefix=f"round {r.round} ", indent=8)
    for line in b.left_out:
        say(line, prefix="not run ", indent=8)
    if b.winner and b.repetitions is not None:
        say(f"{b.repetitions} repetition(s)" + (f"; {b.minimum_met_by}" if b.minimum_met_by else ""),
            prefix="evidence", indent=8)  # fmt: skip
    if b.deploy_command:
        say(f"{b.winner}: {b.verdict}", prefix="winner  ", indent=8)
        say(b.deploy_command, prefix="deploy  ", indent=8)
    else:
        err_console()
        say(b.why_not or "no candidate qualifies", prefix="none    ", indent=8)
