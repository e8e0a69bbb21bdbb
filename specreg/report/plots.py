"""Plots for reports, drawn with matplotlib's Agg/SVG backends and returned as SVG text.

matplotlib is imported lazily (it is slow to import) and only through the object API (no pyplot
global state). Text is drawn as paths, so labels taken from model names cannot inject markup
into the SVG; `$` is escaped so a name never switches matplotlib into mathtext. A fixed hash
salt and no date make the same data give the same bytes (the demo re-runs idempotently).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from specreg.schemas.audit import ConditionDigest, RunDigest, StratumRow
from specreg.schemas.bench import ALL_STRATA
from specreg.schemas.methods import Method
from specreg.text import escape_control, plural

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Paul Tol's colour-blind-safe set; one colour per method in every plot of every report.
PALETTE = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb")
_METHOD_ORDER = tuple(m.value for m in Method)
_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P")
FONT = 11  # points; the figures are ~540 px wide, so text stays >= ~7 px on a 390 px phone


def method_colour(method: str) -> str:
    """The one colour a method has in every plot (unknown methods share the last, grey)."""
    if method in _METHOD_ORDER:
        return PALETTE[_METHOD_ORDER.index(method) % (len(PALETTE) - 1)]
    return PALETTE[-1]


def _label(text: object, limit: int = 40) -> str:
    s = escape_control(text, replace="?").replace("$", r"\$")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _figure(width: float, height: float) -> Figure:
    import matplotlib

    matplotlib.rcParams["svg.fonttype"] = "path"
    matplotlib.rcParams["svg.hashsalt"] = "specreg"
    matplotlib.rcParams["font.size"] = FONT
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _svg(fig: Figure) -> str:
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    buf = io.StringIO()
    FigureCanvasSVG(fig).print_svg(buf, metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    return buf.getvalue()


def _method(run: RunDigest, label: str) -> str:
    return next((c.spec_type for c in run.conditions if c.label == label), label)


def _is_baseline(run: RunDigest, label: str) -> bool:
    return any(c.label == label and c.is_baseline for c in run.conditions)


def positions_drafted(c: ConditionDigest) -> int:
    """How many draft positions some draft is known to have reached: the last position where a
    token was accepted, or the mean draft length rounded up (the longest draft is at least that).
    llama.cpp counts drafts and accepted tokens per position, not drafts per position, so later
    positions may or may not have been drafted: they are not drawn (never as 0)."""
    values = c.acceptance_by_position
    last = max((i + 1 for i, v in enumerate(values) if v), default=0)
    mean = math.ceil(c.drafted_tokens / c.drafts) if c.drafts and c.drafted_tokens else 0
    return min(len(values), max(last, mean))


def acceptance_plot(run: RunDigest) -> str | None:
    """Share of drafts accepted at each draft position, per speculative condition, over the
    positions drafted (None: nothing drafted)."""
    fig = acceptance_figure(run)
    return None if fig is None else _svg(fig)


def acceptance_figure(run: RunDigest) -> Figure | None:
    """The acceptance figure itself (see `positions_drafted` for which positions are drawn)."""
    series = [(c, positions_drafted(c)) for c in run.conditions if not c.is_baseline and c.drafts]
    series = [(c, n) for c, n in series if n]
    if not series:
        return None
    fig = _figure(5.4, 3.6)
    ax = fig.add_subplot()
    seen: dict[str, int] = {}
    for c, n in series:
        k = seen[c.spec_type] = seen.get(c.spec_type, -1) + 1
        xs = list(range(1, n + 1))
        ys = [math.nan if v is None else v for v in c.acceptance_by_position[:n]]
        drafts = c.drafts or 0
        ax.plot(
            xs,
            ys,
            marker=_MARKERS[k % len(_MARKERS)],
            linestyle=_STYLES[k % len(_STYLES)],
            color=method_colour(c.spec_type),
            label=_label(f"{c.label} ({plural(drafts, 'draft')})"),
        )
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("draft position (positions some draft reached)")
    ax.set_ylabel("accepted / drafts")
    _title(fig, "Acceptance by draft position")
    ax.grid(alpha=0.3)
    _legend(fig, ax, ncol=1 if len(series) > 2 else 2)
    return fig


def _title(fig: Figure, text: str) -> None:
    """The title over the whole figure, from its left edge (an axes title can run off the figure)."""
    fig.suptitle(text, x=0.01, ha="left", fontsize=FONT + 1)


def _legend(fig: Figure, ax: Any, ncol: int = 2) -> None:
    """The legend under the plot, outside it (never on the data), in the figure's own layout."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=ncol, frameon=False, fontsize=FONT - 1)


def _log_limits(values: list[float]) -> tuple[float, float]:
    """x limits on a log axis centred on 1x, wide enough for every point (not every whisker)."""
    spread = max((abs(math.log(v)) for v in values if v and v > 0), default=0.0)
    half = max(math.log(2.0), spread * 1.25)
    return math.exp(-half), math.exp(half)


def _ratio_axis(axis: Any) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=2.0, numticks=7))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x" if v >= 1 else f"1/{1 / v:g}x"))
    axis.set_minor_formatter(NullFormatter())


def _clipped(value: float, lo: float, hi: float) -> float:
    return min(max(value, lo), hi)


def _vertical_whisker(
    ax: Any, x: float, ci: tuple[float, float] | None, lo: float, hi: float, colour: str, width: float
) -> None:
    """A 95% interval drawn upright at `x` on a log axis [lo, hi]: cut at the frame, with an
    arrowhead where it leaves it (one wide interval never flattens the rest)."""
    if not ci:
        return
    a, b = ci
    ax.plot([x, x], [_clipped(a, lo, hi), _clipped(b, lo, hi)], color=colour, linewidth=width)
    if a < lo:
        ax.plot([x], [lo], marker="v", color=colour, markersize=7, clip_on=False)
    if b > hi:
        ax.plot([x], [hi], marker="^", color=colour, markersize=7, clip_on=False)


def speedup_plot(run: RunDigest, concurrency: int | None = None, min_speedup: float | None = None) -> str | None:
    """Speed-up per condition and stratum, 95% interval whiskers, predicted beside (None: no data)."""
    fig = speedup_figure(run, concurrency, min_speedup)
    return None if fig is None else _svg(fig)


def speedup_figure(run: RunDigest, concurrency: int | None = None, min_speedup: float | None = None) -> Figure | None:
    """One row per condition (every draft length and concurrency, or one `concurrency`) and
    stratum: the median speed-up with its 95% interval on a log axis centred on 1x. A whisker
    that leaves the frame is cut at the edge and marked with an arrowhead (one wide interval
    never flattens the rest); the predicted speed-up is an open diamond in the same row. A
    condition without a speed-up (it failed) gets only the word "failed": never a slow result.
    """
    rows = [
        r
        for r in run.strata
        if (concurrency is None or r.concurrency == concurrency) and not _is_baseline(run, r.condition)
    ]
    if not any(r.speedup is not None for r in rows):
        return None
    strata = [ALL_STRATA, *sorted({r.stratum for r in rows} - {ALL_STRATA})]
    conds = list(dict.fromkeys(r.condition for r in rows))
    order = [(c, s) for c in conds for s in strata if any(r.condition == c and r.stratum == s for r in rows)]
    by = {(r.condition, r.stratum): r for r in rows}
    points = [v for r in rows for v in (r.speedup, r.predicted_speedup) if v]
    lo, hi = _log_limits([*points, *([min_speedup] if min_speedup else [])])
    fig = _figure(5.4, 1.2 + 0.24 * len(order))
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    labelled: set[str] = set()
    for y, key in enumerate(order):
        r = by[key]
        method = _method(run, r.condition)
        colour = method_colour(method)
        if r.speedup is None:
            ax.text(lo * 1.04, y, "failed: no speed-up", ha="left", va="center", fontsize=FONT - 1, color="#555555")
            continue
        first = method not in labelled
        labelled.add(method)
        if r.speedup_ci95:
            a, b = r.speedup_ci95
            ax.plot([_clipped(a, lo, hi), _clipped(b, lo, hi)], [y, y], color=colour, linewidth=1.6)
            if a < lo:
                ax.plot([lo], [y], marker="<", color=colour, markersize=7, clip_on=False)
            if b > hi:
                ax.plot([hi], [y], marker=">", color=colour, markersize=7, clip_on=False)
        ax.plot([r.speedup], [y], "o", color=colour, markersize=6, label=_label(method) if first else None)
        if r.predicted_speedup:
            ax.plot(
                [_clipped(r.predicted_speedup, lo, hi)],
                [y],
                "D",
                markerfacecolor="none",
                markeredgecolor=colour,
                markersize=6,
            )
            labelled.add("predicted")
    if "predicted" in labelled:  # one grey key for every method's open diamond
        ax.plot([], [], "D", markerfacecolor="none", markeredgecolor="#555555", linestyle="none", label="predicted")
    ax.axvline(1.0, color="black", linewidth=0.8)
    if min_speedup:
        ax.axvline(min_speedup, color="#cc3311", linestyle="--", linewidth=1, label=f"policy minimum {min_speedup:g}x")
    _ratio_axis(ax.xaxis)
    ax.set_yticks(range(len(order)), [_label(f"{c} · {s}", 34) for c, s in order], fontsize=FONT - 1)
    ax.set_ylim(len(order) - 0.5, -0.5)
    ax.set_xlabel("speed-up vs no speculation (log scale)")
    levels = sorted({r.concurrency for r in rows})
    _title(fig, f"Speed-up, 95% interval (concurrency {', '.join(map(str, levels))})")
    ax.grid(axis="x", alpha=0.3, which="both")
    _legend(fig, ax, ncol=3)
    return fig


def _sweep_plot(
    run: RunDigest,
    x_of: Callable[[StratumRow], int | None],
    series_of: Callable[[StratumRow], str],
    xlabel: str,
    title: str,
    min_speedup: float | None,
) -> str | None:
    """Speed-up over every stratum ("all") against one swept value, one line per series, its
    colour the method's; the predicted speed-up dotted beside it. Log axis centred on 1x, whiskers
    cut at the frame and marked."""
    rows = [r for r in run.strata if r.stratum == ALL_STRATA and not _is_baseline(run, r.condition)]
    series: dict[str, list[tuple[int, StratumRow]]] = {}
    for r in rows:
        x = x_of(r)
        if x is not None and r.speedup is not None:
            series.setdefault(series_of(r), []).append((x, r))
    if len({x for pts in series.values() for x, _ in pts}) < 2:
        return None
    points = [v for pts in series.values() for _, r in pts for v in (r.speedup, r.predicted_speedup) if v]
    lo, hi = _log_limits([*points, *([min_speedup] if min_speedup else [])])
    fig = _figure(5.4, 4.2)
    ax = fig.add_subplot()
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    values = sorted({x for pts in series.values() for x, _ in pts})
    at = {v: i for i, v in enumerate(values)}  # evenly spaced: 1, 2, 8 read as levels, not distances
    step = 0.5 / max(1, len(series))  # series side by side at one value, so whiskers never overlap
    seen: dict[str, int] = {}
    for n, (name, pts) in enumerate(sorted(series.items())):
        pts.sort(key=lambda p: p[0])
        method = _method(run, pts[0][1].condition)
        k = seen[method] = seen.get(method, -1) + 1
        colour, marker = method_colour(method), _MARKERS[k % len(_MARKERS)]
        dx = (n - (len(series) - 1) / 2) * step
        xs = [at[x] + dx for x, _ in pts]
        ys = [float(r.speedup or 0.0) for _, r in pts]
        ax.plot(xs, ys, marker=marker, linestyle=_STYLES[k % len(_STYLES)], color=colour, label=_label(name))
        for px, (_, r) in zip(xs, pts, strict=True):
            _vertical_whisker(ax, px, r.speedup_ci95, lo, hi, colour, 1.2)
        pred = [(px, r.predicted_speedup) for px, (_, r) in zip(xs, pts, strict=True) if r.predicted_speedup]
        if pred:
            ax.plot([px for px, _ in pred], [_clipped(v, lo, hi) for _, v in pred], marker="D", markerfacecolor="none",
                    linestyle=":", color=colour, label=_label(f"{name} predicted"))  # fmt: skip
    ax.axhline(1.0, color="black", linewidth=0.8)
    if min_speedup:
        ax.axhline(min_speedup, color="#cc3311", linestyle="--", linewidth=1, label=f"policy minimum {min_speedup:g}x")
    ax.set_xticks(range(len(values)), [str(v) for v in values])
    ax.set_xlim(-0.5, len(values) - 0.5)
    _ratio_axis(ax.yaxis)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("speed-up (log)")
    _title(fig, title)
    ax.grid(alpha=0.3, which="both")
    _legend(fig, ax, ncol=2)
    return _svg(fig)


def concurrency_plot(run: RunDigest, min_speedup: float | None = None) -> str | None:
    """Speed-up against concurrency per method (and draft length): where speculation stops paying."""
    return _sweep_plot(
        run,
        lambda r: r.concurrency,
        lambda r: _method(run, r.condition) + ("" if r.draft_n_max is None else f" k{r.draft_n_max}"),
        "concurrency (requests in flight)",
        "Speed-up by concurrency (all strata)",
        min_speedup,
    )


def draft_length_plot(run: RunDigest, min_speedup: float | None = None) -> str | None:
    """Speed-up against draft length (--spec-draft-n-max) per method and concurrency."""
    return _sweep_plot(
        run,
        lambda r: r.draft_n_max,
        lambda r: f"{_method(run, r.condition)} c{r.concurrency}",
        "draft length (--spec-draft-n-max)",
        "Speed-up by draft length (all strata)",
        min_speedup,
    )


def memory_plot(run: RunDigest) -> str | None:
    """Peak server RAM (and VRAM, hatched, when recorded) per condition in its method's colour
    (None: nothing measured)."""
    conds = [c for c in run.conditions if c.peak_ram_mib is not None or c.peak_vram_mib is not None]
    if not conds:
        return None
    gpu = any(c.peak_vram_mib is not None for c in conds)
    fig = _figure(5.4, 1.1 + 0.32 * len(conds) * (2 if gpu else 1))
    ax = fig.add_subplot()
    ys = list(range(len(conds)))
    h = 0.38 if gpu else 0.7
    colours = [method_colour(c.spec_type) for c in conds]
    ram = [c.peak_ram_mib or 0.0 for c in conds]
    ax.barh([y - (h / 2 if gpu else 0) for y in ys], ram, h, color=colours)
    if gpu:
        vram = [c.peak_vram_mib or 0.0 for c in conds]
        ax.barh([y + h / 2 for y in ys], vram, h, color="white", edgecolor=colours, hatch="///")
    for y, value in zip(ys, ram, strict=True):
        ax.text(value, y - (h / 2 if gpu else 0), f" {value:.0f}", va="center", fontsize=FONT - 1)
    ax.set_yticks(ys, [_label(c.label, 30) for c in conds], fontsize=FONT - 1)
    ax.invert_yaxis()
    ax.set_xlabel("MiB" + (" (hatched: peak VRAM)" if gpu else ""))
    ax.margins(x=0.15)
    _title(fig, "Peak server RAM per condition")
    return _svg(fig)


def tune_plot(run: RunDigest) -> str | None:
    """`--tune`: the speed-up its first pass predicted for every draft length (a line per
    concurrency, end to end), and what each measured length gave (points with their 95%
    interval, clipped at the frame and marked there as in the speed-up plot), over all strata, on
    the same log axis centred on 1x, in the method's colour; the chosen length ringed (None: not
    a tuned run)."""
    rows = [r for r in run.strata if r.stratum == ALL_STRATA and r.tune is not None]
    if not rows:
        return None
    values = [v for r in rows for v in (r.speedup, *(r.tune.curve.values() if r.tune else ())) if v]
    lo, hi = _log_limits(values)
    fig = _figure(5.4, 3.4)
    ax = fig.add_subplot()
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    for i, conc in enumerate(sorted({r.concurrency for r in rows})):
        mine = sorted((r for r in rows if r.concurrency == conc), key=lambda r: r.tune.draft_max if r.tune else 0)
        colour = method_colour(_method(run, mine[0].condition))
        marker, style = _MARKERS[i % len(_MARKERS)], _STYLES[i % len(_STYLES)]
        curve = next((r.tune.curve for r in mine if r.tune and r.tune.curve), {})
        if curve:
            xs = sorted(curve)
            ys = [_clipped(curve[k], lo, hi) for k in xs]
            ax.plot(xs, ys, color=colour, linewidth=1.2, linestyle=style, label=f"predicted c{conc}")
        for r in mine:
            if r.speedup is None or r.tune is None:
                continue
            x, y = r.tune.draft_max, _clipped(r.speedup, lo, hi)
            _vertical_whisker(ax, x, r.speedup_ci95, lo, hi, colour, 1.4)
            ax.plot([x], [y], marker=marker, color=colour, linestyle="none")
            if r.tune.chosen:
                ax.plot([x], [y], "o", markersize=12, fillstyle="none", color=colour)
        ax.plot([], [], marker=marker, color=colour, linestyle="none", label=f"measured c{conc}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _ratio_axis(ax.yaxis)
    ax.set_xlabel("draft length (--spec-draft-n-max)")
    ax.set_ylabel("speed-up vs --spec-type none")
    _title(fig, "--tune: predicted and measured speed-up (ringed: chosen)")
    ax.grid(alpha=0.3)
    _legend(fig, ax)
    return _svg(fig)


def run_plots(run: RunDigest, concurrency: int | None = None, min_speedup: float | None = None) -> dict[str, str]:
    """Every plot that has data for this run: {name: svg text}."""
    out: dict[str, str | None] = {
        "acceptance": acceptance_plot(run),
        "speedup": speedup_plot(run, concurrency, min_speedup),  # concurrency None: every level
        "concurrency": concurrency_plot(run, min_speedup),
        "draft-length": draft_length_plot(run, min_speedup),
        "memory": memory_plot(run),
        "tune": tune_plot(run),
    }
    return {k: v for k, v in out.items() if v is not None}


_PROLOGUE = re.compile(r"^.*?(?=<svg\b)", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)


def inline_svg(svg: str, prefix: str) -> str:
    """SVG text fit to sit inside HTML: no XML prologue or RDF metadata, ids made unique."""
    svg = _PROLOGUE.sub("", svg, count=1)
    svg = _METADATA.sub("", svg)
    svg = re.sub(r'\bid="', f'id="{prefix}-', svg)
    svg = svg.replace("url(#", f"url(#{prefix}-").replace('href="#', f'href="#{prefix}-')
    return svg
