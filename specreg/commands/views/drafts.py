"""The 80-column view of `specreg drafts`: the ranking, what it rests on, what was left out."""

from __future__ import annotations

import sys
import time

from specreg.commands.layout import Col
from specreg.commands.output import err_console, print_listing, say
from specreg.schemas.drafts import DraftReport, DraftRow
from specreg.schemas.machine_probe import MachineProbe, PairProbe
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


_VERDICT = {
    "not faster on this machine": "not faster",
    "faster on this machine": "faster",
    "either way on this machine": "either way",
}


def _here(row: DraftRow) -> tuple[str, str | None]:
    """What the range says about this machine, in a word (blind: it does not know the machine)."""
    p = row.prediction
    if p is None or p.costs is None:
        return "-", None
    if p.costs == "hardware-blind":
        return "blind", "dim"
    if p.costs == "measured runs":
        return "measured", None
    word = _VERDICT.get(p.verdict or "", p.verdict or "-")
    return word, "red" if word == "not faster" else "green" if word == "faster" else None


def _probe_line(probe: MachineProbe, target: MachineProbe | None, new: bool) -> str:
    """A model's probe in one line: its decode price per token, the verify step it was priced at in
    decodes, what the probe took and whether it was taken now."""
    from specreg.benchmark.run.machine_probe import busy
    from specreg.benchmark.store.stepcost import probe_prices

    t_d = _median(probe.decode_ms())
    parts = [f"{probe.name or probe.sha256[:12]}: {t_d:.1f} ms/token"]
    if target is None:  # the target: what a verify step of 5 drafted tokens costs
        prices = probe_prices(probe, None, 5)
        if prices is not None:
            parts[0] += f", a verify step of 6 tokens {prices.verify[4]:.1f} decodes"
    elif target.rounds:
        parts[0] += f" (r {t_d / _median(target.decode_ms()):.2f} of the target's)"
    cpu = f" ({probe.cpu_seconds:.1f} CPU-s)" if probe.cpu_seconds else ""
    when = f"{probe.seconds:.1f} s{cpu}, probed now" if new else f"kept from {probe.probed_at[:16].replace('T', ' ')}"
    if busy(probe.load):
        when += f"; the machine was busy (load {probe.load:.1f}): its prices may be far off"
    return f"{parts[0]}; {when}"


def _median(xs: list[float]) -> float:
    ys = sorted(xs)
    n = len(ys)
    return 0.0 if not n else ys[n // 2] if n % 2 else (ys[n // 2 - 1] + ys[n // 2]) / 2


def _pair_line(probe: PairProbe) -> str:
    """A pair probe in one line: the draft counts and the speed-up it measured at its length."""
    from specreg.benchmark.run.machine_probe import busy

    drafted, accepted, _ = probe.counts()
    xs = sorted(r.speedup for r in probe.requests)
    line = (f"{probe.name or probe.draft_sha256[:12]} at k{probe.draft_length}: {accepted} of {drafted} drafted "
            f"tokens accepted, {xs[len(xs) // 2]:.2f}x over {len(xs)} prompts ({probe.seconds:.1f} s)")  # fmt: skip
    if busy(probe.load):
        line += f"; the machine was busy (load {probe.load:.1f})"
    return line


def _machine(report: DraftReport) -> None:
    """Which machine the prices are from (each probe, new or kept), or that they are blind."""
    m = report.machine
    if m.key:
        say(m.key, prefix="machine ", indent=8)
    target = m.probes[0] if m.probes and m.probes[0].sha256 == report.target_sha256 else None
    for p in m.probes:
        say(_probe_line(p, None if p is target else target, p.sha256 in m.measured), prefix="probe   ", indent=8)
    for pp in m.pairs:
        say(_pair_line(pp), prefix="pair    ", indent=8)
    if m.measured or m.pairs_measured:
        n = len(m.measured) + m.pairs_measured
        say(f"{n} probe(s) took {m.seconds:.1f} s; kept in the registry for this machine and build",
            prefix="        ", indent=8)  # fmt: skip
    if m.not_probed:
        say(f"{m.not_probed} more local draft(s) not probed (the best {len(m.probes) - 1} were): their r is "
            "from their weights, its range up to a target decode", prefix="        ", indent=8)  # fmt: skip
    for line in m.failures:
        say(line, prefix="probe   ", indent=8, stderr=True)
    if m.blind:
        say(f"hardware-blind ({m.blind}): a verify step from 1 decode (a GPU's) to k+1 (a CPU's), a draft "
            "decode from its bytes ratio to 1; `drafts` without --no-probe prices them here",
            prefix="machine ", indent=8)  # fmt: skip


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
                Col("here", limit=10),
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
                    _here(r),
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
            f"measured/predicted over {e.n_pairs} measured pair(s), each predicted without its own runs"
            f"{' and priced by their probes' if e.costs == 'machine probes' else ''}: {e.low:.2f} to {e.high:.2f} "
            f"(median {e.median:.2f}); the step model's spread in every family and prior range",
            prefix="error   ", indent=8,
        )  # fmt: skip
    else:
        from specreg.audit.draft_prediction import MODEL_SPREAD

        none = "no measured pair yet" if not p.n_pairs else "no measured pair with probes on this machine"
        say(
            f"{none}: the ranges hold acceptance's spread, the prices' and the step model's "
            f"stated {MODEL_SPREAD[0]:.2f}-{MODEL_SPREAD[1]:.2f}",
            prefix="error   ", indent=8,
        )  # fmt: skip
    _machine(report)
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
