"""One run in detail (`runs show`, the end of `bench`): its header, the condition x stratum
table, and everything a number there needs to be read right.

Beside the table come the decisions and what would decide the rest, the samplers' checks, the
rounds set aside as contended, memory past its prediction, the tuning, the client timings, and
each mismatch and failure with its log lines. Every text that came from a model, a log or a
file is escaped (`safe_plain`, `say`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from specreg.commands.layout import Col, pack
from specreg.commands.output import Cell, print_listing, safe_plain, say, show_lines, width
from specreg.commands.views.cells import MISMATCH_MARK, STATUS_STYLE, WARN_MARK, ms_text, num_text, pct_text
from specreg.commands.views.sampling import show_samplers
from specreg.schemas.request_row import TPOT_TOLERANCE_TEXT
from specreg.text import model_label, plural
from specreg.units import MIB, mib_text

if TYPE_CHECKING:
    from rich.console import Console

    from specreg.benchmark.store.ending import Ending
    from specreg.schemas.bench import ArtifactRef, BenchRun, ConditionSummary, WorkloadSource
    from specreg.schemas.machine_probe import MachineProbe


def _equiv(s: ConditionSummary) -> Cell:
    if s.method == "none":
        return "reference"
    if not s.n_compared:
        return "-"
    if s.first_mismatch:
        return (f"{MISMATCH_MARK} {s.n_equal}/{s.n_compared}", "bold red")
    return (f"{s.n_equal}/{s.n_compared}", "green")


# The condition (its swept values: `draft-simple k16 c2`) and the stratum tell rows apart: never
# shortened. On a narrow terminal the numbers move beneath their row instead, highest `stack` first.
_COLUMNS = (
    Col("condition", limit=40),
    Col("stratum", limit=24),
    Col("status"),
    Col("accept", right=True),
    Col("speed-up", right=True),
    Col("E[L]", right=True, stack=7),
    Col("predicted", right=True, stack=8),
    Col("p50 ms", right=True),
    Col("p95 ms", right=True, stack=1),
    Col("TTFT ms", right=True, stack=3),
    Col("RSS MiB", stack=4),
    Col("equal", stack=2),
    Col("errors", stack=5),
    Col("expect", stack=6),
)


def _row(s: ConditionSummary, expects: bool) -> list[Cell]:
    whole = s.stratum == "all"
    rss = "-"
    if s.peak_rss_bytes is not None and whole:
        extra = f" ({mib_text(s.rss_overhead_bytes, signed=True)})" if s.rss_overhead_bytes is not None else ""
        rss = mib_text(s.peak_rss_bytes) + extra
    errors = "-" if not (s.n_errors or s.n_timeouts) else f"{s.n_errors} err, {s.n_timeouts} timeout"
    expect = f"{s.n_expect_failed} of {s.n_expect_checked} failed" if expects and s.n_expect_checked else "-"
    return [
        s.condition if whole else "",
        s.stratum,
        (s.status, STATUS_STYLE.get(s.status, "white")) if whole else "",
        "-" if s.method == "none" else pct_text(s.acceptance),
        _speedup(s),
        num_text(s.expected_accepted_length),
        num_text(s.predicted_speedup, "x"),
        ms_text(s.total_ms.p50),
        ms_text(s.total_ms.p95),
        ms_text(s.ttft_ms.p50),
        rss,
        _equiv(s),
        errors,
        expect,
    ]


_TIMING_COLUMNS = (
    Col("condition", limit=40),
    Col("stratum", limit=24),
    Col("TTFT ms", right=True),
    Col("ITL p50", right=True),
    Col("ITL p95", right=True),
    Col("TPOT ms", right=True),
    Col("srv ms/tok", right=True, stack=2),
    Col("TPOT<srv", right=True, stack=1),
)

TIMINGS_LEGEND = (
    "client timings, p50 over requests: TTFT to the first generated text; ITL per token (a token "
    "that came in the same event as the one before: 0); TPOT (last token - first text) / tokens "
    "after it. srv ms/tok: the server's own predicted_per_token_ms. TPOT<srv: requests whose "
    f"TPOT was below it by more than {TPOT_TOLERANCE_TEXT}, which is no decode speed: left out of TPOT."
)


def tpot_cells(s: ConditionSummary) -> tuple[str, str]:
    """The client TPOT median (without the requests below the server's time) and how many those were."""
    return num_text(s.tpot_ms.p50), f"{s.n_tpot_flagged}/{s.n_ok}" if s.n_tpot_flagged else "-"


def _timing_row(s: ConditionSummary) -> list[Cell]:
    tpot, below = tpot_cells(s)
    return [
        s.condition if s.stratum == "all" else "",
        s.stratum,
        ms_text(s.ttft_ms.p50),
        num_text(s.itl_ms.p50),
        num_text(s.itl_ms.p95),
        tpot,
        num_text(s.server_tpot_ms.p50),
        (below, "yellow") if s.n_tpot_flagged else below,
    ]


TEXT_ONLY_LEGEND = (
    "text only: a side's token ids are not all on record (a chat request, or a stream that left "
    "ids out and no replay gave them), so a token change that keeps the text passes"
)


def _comparisons(summaries: list[ConditionSummary]) -> None:
    """Where outputs could only be compared by text, and each first difference with its context."""
    for s in summaries:
        if s.n_text_only:
            say(
                f"{s.n_text_only} of {s.n_compared} outputs compared by text only",
                prefix=f"{s.condition} / {s.stratum}: ",
                indent=4,
            )
    if any(s.n_text_only for s in summaries):
        say(TEXT_ONLY_LEGEND, style="dim")
    for s in summaries:
        if s.first_mismatch:
            differ = s.n_compared - s.n_equal
            say(
                f"{s.condition} / {s.stratum}: {plural(differ, 'output')} of {s.n_compared} "
                f"{'differs' if differ == 1 else 'differ'} from the baseline; the first at {s.first_mismatch}",
                prefix=f"{MISMATCH_MARK} mismatch: ",
                marks=[(f"{MISMATCH_MARK} mismatch:", "bold red")],
                indent=4,
            )
            if s.mismatch_context:
                say(s.mismatch_context, prefix="    ", style="yellow", indent=6)
            say(_triage_line(s), prefix="    triage: ", style="yellow", indent=6)


def _triage_line(s: ConditionSummary) -> str:
    """The first mismatch's triage and how the condition's mismatches divide (schemas/triage.py)."""
    first = s.mismatch_triage.text() if s.mismatch_triage else "not triaged (no baseline probabilities on record)"
    ties = plural(s.n_near_ties, "near tie")
    rest = plural(s.n_divergences, "divergence")
    return (
        f"{first}. Of the mismatches: {ties} (reported, not failed, by the default policy), {rest} or "
        "untriaged (fail equivalence)"
    )


def _speedup(s: ConditionSummary) -> Cell:
    """The speed-up and its interval; `reference`; `-` for a condition without one (its reason is
    printed below)."""
    from specreg.benchmark.store.statistics import interval_text

    if s.speedup_note == "reference":
        return "reference"
    text = interval_text(s.speedup, s.speedup_ci95, short=True)
    return (f"{text} unexplained", "bold red") if s.unexplained else text


def _legend_no_difference(summaries: list[ConditionSummary]) -> None:
    from specreg.benchmark.store.statistics import NO_DIFFERENCE_LEGEND, difference

    if any(difference(s.speedup_ci95) == "no measurable difference" for s in summaries if s.speedup is not None):
        say(NO_DIFFERENCE_LEGEND, style="dim")
    if any(s.predicted_speedup is not None for s in summaries):
        say(PREDICTED_LEGEND, style="dim")


PREDICTED_LEGEND = (
    "E[L]: tokens per step that drafted; predicted: the decode speed-up this stratum's acceptance "
    "gives at the step costs measured in this run"
)


def _rounds_text(run: BenchRun) -> str:
    """`rounds 4 (planned 1, then until decided)`: what was measured, not only what was planned
    (issue 32: a one-round run's header said `repeat 3`)."""
    m = run.manifest
    planned = m.observation.repeat if m is not None else 0
    measured = len({r.repeat for r in run.requests})
    if not run.requests:
        return f"repeat {planned}"
    budget = m.settings.budget_s if m is not None and m.settings is not None else None
    if measured == planned and not budget:
        return f"repeat {planned}"
    return f"rounds {measured} (planned {planned}" + (", then until decided)" if budget else ")")


def _decisions(run: BenchRun) -> None:
    """Each condition's anytime-valid decision against the minimum speed-up (what `--budget` runs
    until), with the interval it was made on. A failed condition is undecided whatever its pairs
    say (speculation that did not run is a failure, not a speed); with no projection to print,
    it says so, or "undecided after 21 rounds" read like a budget too small."""
    decided = [s for s in run.summaries if s.stratum == "all" and s.decision is not None]
    if not decided:
        return
    from specreg.decision.budget import undecided_text

    bar = decided[0].decision_min_speedup or 0.0
    rounds: dict[str, set[int]] = {}
    for r in run.requests:
        rounds.setdefault(r.condition, set()).add(r.repeat)
    parts = [
        f"{s.condition} "
        + (
            undecided_text(len(rounds.get(s.condition, ())), s.decision_more_rounds, s.decision_budget)
            + (" (the condition failed)" if s.status == "failed" and s.decision_more_rounds is None else "")
            if s.decision == "undecided"
            else f"{s.decision}" + (f" [{s.decision_ci[0]:.2f}, {s.decision_ci[1]:.2f}]" if s.decision_ci else "")
        )
        for s in decided
    ]
    budget = run.manifest.settings.budget_s if run.manifest and run.manifest.settings else None
    how = f"measured until decided, budget {budget:g} s" if budget else "after the planned rounds"
    if not any(s.decision_method == "bar" for s in decided):  # decision/bar.py's `Method`: the run's own
        how += "; an older run, decided by the two-sided sequence"
    say("; ".join(parts), prefix=f"decided against {bar:g}x ({how}): ", indent=4)


def _set_aside(run: BenchRun) -> None:
    """How busy the machine was, and the rounds that set aside (benchmark/store/contention.py)."""
    from specreg.benchmark.store.contention import run_notes

    loads = [x for c in run.conditions for x in c.load]
    notes = run_notes(run.summaries)
    if notes:
        say(notes[0], prefix="busy: ", marks=[("busy:", "yellow")], indent=4)
        for line in notes[1:]:
            say(line, prefix="  ", indent=6)
    elif loads:
        worst = max(loads, key=lambda x: x.others_cores + x.steal_cores)
        share = run.manifest.settings.busy_share if run.manifest and run.manifest.settings else None
        off = " (--busy-share off)" if share == 0 else ""
        say(
            f"others used at most {worst.others_cores + worst.steal_cores:.2f} of {worst.cores} cores in a "
            f"round; none set aside{off}",
            prefix="machine load: ",
            style="dim",
            indent=4,
        )


def _tuning(run: BenchRun) -> None:
    """`--tune`: each measured draft length's prediction (made before it ran) beside what it
    measured, over all strata, and the choice (benchmark/plan/tune.py)."""
    from specreg.benchmark.store.statistics import interval_text

    tuned = [s for s in run.summaries if s.stratum == "all" and s.tune is not None]
    for conc in sorted({s.concurrency or 1 for s in tuned}):
        mine = sorted((s for s in tuned if (s.concurrency or 1) == conc), key=lambda s: s.draft_n_max or 0)
        first = next((s for s in mine if s.tune and s.tune.curve), None)
        if first is None or first.tune is None:
            continue
        curve = first.tune.curve
        best = max(curve, key=lambda k: (round(curve[k], 6), -k)) if curve else None
        parts = [
            f"k{s.tune.draft_max} predicted {s.tune.predicted_speedup or 0:.2f}x measured "
            + interval_text(s.speedup, s.speedup_ci95)
            for s in mine
            if s.tune and s.tune.role == "candidate"
        ]
        chosen = next((s for s in mine if s.tune and s.tune.chosen), None)
        if chosen is not None and chosen.tune is not None:
            how = chosen.tune.why or (
                "decided" if chosen.tune.decided else "the budget ended before the best was decided"
            )
            word = "chosen" if chosen.tune.decided or chosen.decision != "undecided" else "leading, undecided"
            parts.append(f"{word} k{chosen.tune.draft_max} ({how})")
        say(
            "; ".join(parts),
            prefix=f"tuned at c{conc} from {first.condition} ({first.tune.profile} profile, best predicted k{best}): ",
            indent=4,
        )


def _machine_probes(run: BenchRun, probes: Mapping[str, MachineProbe]) -> None:
    """The target's and the draft's machine probes on the machine, build and flags the run was
    measured on, beside what the run itself measured: the baseline's decode, and per draft
    condition the verify step and the draft decode its step model fitted (stepcost.py)."""
    from specreg.benchmark.store.stepcost import probe_prices

    target = probes.get(run.info.target_sha256)
    if target is None:
        return
    draft = probes.get(run.info.draft_sha256 or "")
    t_d = sorted(target.decode_ms())[len(target.rounds) // 2]
    base = next((s for s in run.summaries if s.method == "none" and s.stratum == "all"), None)
    here = base.server_tpot_ms.p50 if base is not None else None
    head = f"target {t_d:.1f} ms/token" + (f" (this run's baseline: {here:.1f})" if here else "")
    parts = [head]
    prices = probe_prices(target, draft, 32)
    for s in run.summaries:
        if prices is None or s.stratum != "all" or not s.draft_n_max or s.verify_cost is None:
            continue
        k = min(s.draft_n_max, len(prices.verify))
        probe = f"verify {prices.verify[k - 1]:.1f}" + (f", r {prices.draft:.2f}" if prices.draft is not None else "")
        fitted = f"verify {s.verify_cost:.1f}" + (f", r {s.draft_cost:.2f}" if s.draft_cost is not None else "")
        parts.append(f"{s.condition}: {probe} (fitted on this run: {fitted})")
    say("; ".join(parts), prefix="machine probe of this hardware and build: ", indent=4)


def _unexplained(run: BenchRun) -> None:
    """Speed-ups that acceptance cannot account for, each with why (the audit fails them), and
    warm-ups that never settled (their condition's numbers may still include a cold start)."""
    for c in run.conditions:
        for w in c.warmup:
            if w.steady is False:
                ms = ", ".join(f"{x:.0f}" for x in w.latencies_ms)
                say(
                    f"{c.spec.name} round {w.round}: {len(w.latencies_ms)} requests never agreed within "
                    f"{w.tolerance:.0%} ({ms} ms)",
                    prefix=f"{WARN_MARK} warm-up not steady: ",
                    marks=[(f"{WARN_MARK} warm-up not steady:", "yellow")],
                    indent=4,
                )
    for s in run.summaries:
        if s.unexplained:
            say(
                s.unexplained_reason or "",
                prefix=f"{MISMATCH_MARK} unexplained {s.condition} / {s.stratum}: ",
                marks=[(f"{MISMATCH_MARK} unexplained", "bold red")],
                indent=4,
            )


def _workload_source(src: WorkloadSource) -> None:
    """Where a standard workload's prompts came from, pinned: package, wheel and data file hashes,
    and the prompts used (the first few ids; `--json` has them all)."""
    data = src.data_file.rsplit("/", 1)[-1]
    say(
        f"{src.package}=={src.version} wheel sha256 {src.wheel_sha256}, {data} sha256 {src.data_sha256}",
        prefix="  prompts from ",
        indent=4,
    )
    ids = src.prompt_ids
    shown = ", ".join(ids[:6]) + (f", +{len(ids) - 6} more" if len(ids) > 6 else "")
    of = f" of {src.available}" if src.available else ""
    sample = f", --sample {src.sample}" if src.sample else ""
    say(f"{len(ids)}{of}{sample}: {shown}", prefix="  prompts used ", indent=4)


def _model(sha256: str, ref: ArtifactRef | None, name: str | None) -> str:
    """`16c03fe0a65d demo-target (target.gguf, F32)`: the SHA-256 prefix with what names the file."""
    return model_label(sha256, name=name, file=ref.path if ref else None, quant=ref.file_type if ref else None)


def _memory_flags(run: BenchRun) -> None:
    """Each condition whose measured peak RSS passed its prediction's margin (the audit's memory
    gate then counts the measured peak, the larger)."""
    from specreg.validators.memory_budget import exceeded_text, prediction_exceeded

    for c in run.conditions:
        mem = c.memory
        if mem is None or not mem.peak_rss_bytes or not mem.predicted_rss_bytes:
            continue
        over = prediction_exceeded(mem.peak_rss_bytes, mem.predicted_rss_bytes)
        if over is not None:
            line = exceeded_text(c.spec.name, mem.peak_rss_bytes / MIB, mem.predicted_rss_bytes / MIB, over)
            say(line, prefix="memory: ", marks=[("memory:", "yellow")], indent=4)


def show_run(
    run: BenchRun, names: Mapping[str, str | None] | None = None, probes: Mapping[str, MachineProbe] | None = None
) -> None:
    """Header, the condition x stratum comparison, then each difference and failure with its log lines.

    `names`: general.name by SHA-256 (from the registry), shown beside each SHA-256 prefix;
    `probes`: the models' machine probes on the run's machine key, shown beside its step costs."""
    i, m = run.info, run.manifest
    names = names or {}
    say(
        f"pair {i.pair_id}  method {i.method}",
        prefix=f"run {i.run_id}  {i.status}  ",
        marks=[(f"  {i.status}  ", STATUS_STYLE.get(i.status, "white"))],
        indent=2,
    )
    if i.status_reason:
        say(i.status_reason, prefix="  ", style="dim", indent=2)
    node = i.node or (m.node if m is not None else None)  # the registry's record, else the run's own
    if node is not None:
        say(node.line(), prefix="  ran on ", indent=4)
    draft_ref = m.draft.artifact if m is not None else None
    head = [
        f"target {_model(i.target_sha256, m.target if m else None, names.get(i.target_sha256))}",
        f"draft {_model(i.draft_sha256, draft_ref, names.get(i.draft_sha256)) if i.draft_sha256 else 'none (self)'}",
    ]
    if m is not None:
        from specreg.benchmark.store.digest import runtime_identity
        from specreg.servers.identity import runtime_text

        gpu = m.hardware.gpu
        gpus = ", ".join(d.name for d in gpu.devices) if gpu.present else f"absent ({gpu.reason})"
        head += [
            f"runtime {runtime_text(runtime_identity(m))}",
            f"workload {m.request.workload}",
            _rounds_text(run),
            f"concurrency {','.join(map(str, m.request.concurrency_levels or [m.request.concurrency]))}",
            f"seed {m.request.seed}" + (" + repetition" if m.request.seeds else ""),
            *([f"temperature {','.join(f'{t:g}' for t in m.request.temperatures)}"] if m.request.temperatures else []),
            *([f"order {m.observation.order}"] if m.observation.order else []),
            f"cpu {m.hardware.cpu_model or '?'}",
            f"gpu {gpus}",
        ]
        from specreg.benchmark.store.efficiency import efficiency

        eff = efficiency(run)
        if eff is not None:
            head.append(eff.text())
    show_lines(pack([safe_plain(h) for h in head], width(), indent=2))
    if m is not None and m.request.workload_source is not None:
        _workload_source(m.request.workload_source)
    expects = any(s.n_expect_checked for s in run.summaries)
    cols = _COLUMNS if expects else _COLUMNS[:-1]
    rows = [_row(s, expects)[: len(cols)] for s in run.summaries if s.n_requests or s.stratum == "all"]
    show_lines([""])
    print_listing(cols, rows)
    _legend_no_difference(run.summaries)
    _decisions(run)
    show_samplers(run)
    _set_aside(run)
    _memory_flags(run)
    _tuning(run)
    _machine_probes(run, probes or {})
    show_lines([""])
    print_listing(_TIMING_COLUMNS, [_timing_row(s) for s in run.summaries if s.n_ok])
    say(TIMINGS_LEGEND, style="dim")
    _unexplained(run)
    _comparisons(run.summaries)
    for c in run.conditions:
        if c.status == "ok":
            continue
        say(
            c.failure or "",
            prefix=f"{c.status} {c.spec.name}: ",
            marks=[(c.status, STATUS_STYLE.get(c.status, "white"))],
            indent=4,
        )
        for ln in c.failure_lines[:12]:
            say(ln, prefix="    ", style="dim", indent=6)
        if c.log_path:
            say(str(c.log_path), prefix="    log: ", indent=6)
    show_run_ending(run)


def show_run_ending(run: BenchRun) -> None:
    """The paragraph of a run that kept nothing or whose budget ended undecided: what happened
    and the command that measures on (benchmark/store/ending.py), with this command's registry."""
    from specreg.benchmark.store.ending import ending
    from specreg.commands.options import db_path
    from specreg.paths import default_db_path

    db = db_path()
    end = ending(run, db if db != default_db_path() else None)
    if end is not None:
        show_ending(end)


def show_ending(end: Ending, out: Console | None = None) -> None:
    """An ending's paragraph, then its command on lines of its own that paste into a shell."""
    show_lines([""], out)
    say(end.text, out=out)
    if end.command:
        from specreg.audit.deploy import wrap_command

        show_lines([safe_plain(ln) for ln in wrap_command(end.command, width(out), indent="  ")], out)
