"""Plots for reports, drawn with matplotlib's Agg/SVG backends and returned as SVG text.

matplotlib is imported lazily (it costs ~1 s) and only through the object API (no pyplot
global state). Text is drawn as paths, so labels taken from model names cannot inject markup
into the SVG; `$` is escaped so a name never switches matplotlib into mathtext. A fixed hash
salt and no date make the same data give the same bytes (the demo re-runs idempotently).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from specreg.schemas.audit import RunDigest, StratumRow
from specreg.schemas.bench import ALL_STRATA
from specreg.text import escape_control

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PALETTE = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb")


def _label(text: object, limit: int = 40) -> str:
    s = escape_control(text, replace="?").replace("$", r"\$")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _figure(width: float, height: float) -> Figure:
    import matplotlib

    matplotlib.rcParams["svg.fonttype"] = "path"
    matplotlib.rcParams["svg.hashsalt"] = "specreg"
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _svg(fig: Figure) -> str:
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    buf = io.StringIO()
    FigureCanvasSVG(fig).print_svg(buf, metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    return buf.getvalue()


def _concurrency(run: RunDigest, concurrency: int | None) -> int | None:
    levels = sorted({r.concurrency for r in run.strata})
    if concurrency in levels:
        return concurrency
    return levels[0] if levels else None


def acceptance_plot(run: RunDigest) -> str | None:
    """Acceptance rate by draft position, one line per speculative condition (None: no data)."""
    series = [
        (c.label, c.acceptance_by_position)
        for c in run.conditions
        if not c.is_baseline and any(v is not None for v in c.acceptance_by_position)
    ]
    if not series:
        return None
    fig = _figure(7, 3.6)
    ax = fig.add_subplot()
    for i, (label, values) in enumerate(series):
        xs = list(range(1, len(values) + 1))
        ys = [math.nan if v is None else v for v in values]
        ax.plot(xs, ys, marker="o", color=PALETTE[i % len(PALETTE)], label=_label(label))
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate")
    ax.set_title("Acceptance by draft position")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _svg(fig)


def _is_baseline(run: RunDigest, label: str) -> bool:
    return any(c.label == label and c.is_baseline for c in run.conditions)


def _whiskers(rows: list[StratumRow]) -> tuple[list[float], list[float]]:
    """Distances from each speed-up to its 95% interval's ends (0 when there is no interval)."""
    lo = [max(0.0, r.speedup - r.speedup_ci95[0]) if r.speedup and r.speedup_ci95 else 0.0 for r in rows]
    hi = [max(0.0, r.speedup_ci95[1] - r.speedup) if r.speedup and r.speedup_ci95 else 0.0 for r in rows]
    return lo, hi


def speedup_plot(run: RunDigest, concurrency: int | None = None, min_speedup: float | None = None) -> str | None:
    """Speed-up per stratum and condition with 95% interval whiskers (None: no data)."""
    fig = speedup_figure(run, concurrency, min_speedup)
    return None if fig is None else _svg(fig)


def speedup_figure(run: RunDigest, concurrency: int | None = None, min_speedup: float | None = None) -> Figure | None:
    """The speed-up figure itself. A condition without a speed-up (it failed) gets no bar, only the
    word "failed" where the bar would be: a failed condition is never drawn as a slow or fast result.
    """
    conc = _concurrency(run, concurrency)
    rows = [r for r in run.strata if r.concurrency == conc and not _is_baseline(run, r.condition)]
    if not any(r.speedup is not None for r in rows):
        return None
    strata = sorted({r.stratum for r in rows})
    conds = list(dict.fromkeys(r.condition for r in rows))
    fig = _figure(max(6.5, 2.8 + 0.55 * len(strata) * max(1, len(conds))), 3.8)
    ax = fig.add_subplot()
    width = 0.8 / len(conds)
    for j, cond in enumerate(conds):
        by = {r.stratum: r for r in rows if r.condition == cond}
        drawn = [(i, by[s]) for i, s in enumerate(strata) if s in by and by[s].speedup is not None]
        xs = [i - 0.4 + width * (j + 0.5) for i, _ in drawn]
        ys = [float(r.speedup or 0.0) for _, r in drawn]
        ax.bar(
            xs,
            ys,
            width * 0.9,
            yerr=list(_whiskers([r for _, r in drawn])),
            capsize=3,
            color=PALETTE[j % len(PALETTE)],
            label=_label(cond),
        )
        for i, s in enumerate(strata):
            if s in by and by[s].speedup is None:
                ax.text(i - 0.4 + width * (j + 0.5), 0.02, "failed", rotation=90, ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    if min_speedup is not None:
        ax.axhline(min_speedup, color="#cc3311", linestyle="--", linewidth=1, label=f"policy minimum {min_speedup:g}")
    ax.set_xticks(range(len(strata)), [_label(s, 20) for s in strata])
    ax.set_ylabel("speed-up vs --spec-type none")
    ax.set_title(f"Speed-up per stratum (median, 95% interval; concurrency {conc})", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never on them
    return fig


def _sweep_plot(
    run: RunDigest,
    x_of: Callable[[StratumRow], int | None],
    series_of: Callable[[StratumRow], str],
    xlabel: str,
    title: str,
    min_speedup: float | None,
) -> str | None:
    """Speed-up over every stratum ("all") against one swept value, one line per series."""
    rows = [r for r in run.strata if r.stratum == ALL_STRATA and not _is_baseline(run, r.condition)]
    series: dict[str, list[tuple[int, StratumRow]]] = {}
    for r in rows:
        x = x_of(r)
        if x is not None and r.speedup is not None:
            series.setdefault(series_of(r), []).append((x, r))
    if len({x for pts in series.values() for x, _ in pts}) < 2:
        return None
    fig = _figure(7, 3.8)
    ax = fig.add_subplot()
    for i, (name, pts) in enumerate(sorted(series.items())):
        pts.sort(key=lambda p: p[0])
        lo, hi = _whiskers([r for _, r in pts])
        ax.errorbar(
            [x for x, _ in pts],
            [float(r.speedup or 0.0) for _, r in pts],
            yerr=[lo, hi],
            marker="o",
            capsize=3,
            color=PALETTE[i % len(PALETTE)],
            label=_label(name),
        )
    ax.axhline(1.0, color="black", linewidth=0.8)
    if min_speedup is not None:
        ax.axhline(min_speedup, color="#cc3311", linestyle="--", linewidth=1, label=f"policy minimum {min_speedup:g}")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("speed-up vs --spec-type none")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _svg(fig)


def _method(run: RunDigest, label: str) -> str:
    return next((c.spec_type for c in run.conditions if c.label == label), label)


def concurrency_plot(run: RunDigest, min_speedup: float | None = None) -> str | None:
    """Speed-up against concurrency per method (and draft length): where speculation stops paying."""
    return _sweep_plot(
        run,
        lambda r: r.concurrency,
        lambda r: _method(run, r.condition) + ("" if r.draft_n_max is None else f" k{r.draft_n_max}"),
        "concurrency (requests in flight)",
        "Speed-up by concurrency (all strata, 95% interval)",
        min_speedup,
    )


def draft_length_plot(run: RunDigest, min_speedup: float | None = None) -> str | None:
    """Speed-up against draft length (--spec-draft-n-max) per method and concurrency."""
    return _sweep_plot(
        run,
        lambda r: r.draft_n_max,
        lambda r: f"{_method(run, r.condition)} c{r.concurrency}",
        "draft length (--spec-draft-n-max)",
        "Speed-up by draft length (all strata, 95% interval)",
        min_speedup,
    )


def memory_plot(run: RunDigest) -> str | None:
    """Peak server RAM (and VRAM when recorded) per condition (None: nothing measured)."""
    conds = [c for c in run.conditions if c.peak_ram_mib is not None or c.peak_vram_mib is not None]
    if not conds:
        return None
    gpu = any(c.peak_vram_mib is not None for c in conds)
    fig = _figure(7, 0.9 + 0.45 * len(conds))
    ax = fig.add_subplot()
    ys = list(range(len(conds)))
    h = 0.38 if gpu else 0.7
    ram = [c.peak_ram_mib or 0.0 for c in conds]
    ax.barh([y - (h / 2 if gpu else 0) for y in ys], ram, h, color=PALETTE[0], label="peak RAM")
    if gpu:
        vram = [c.peak_vram_mib or 0.0 for c in conds]
        ax.barh([y + h / 2 for y in ys], vram, h, color=PALETTE[1], label="peak VRAM")
    for y, value in zip(ys, ram, strict=True):
        ax.text(value, y - (h / 2 if gpu else 0), f" {value:.0f}", va="center", fontsize=8)
    ax.set_yticks(ys, [_label(c.label, 30) for c in conds])
    ax.invert_yaxis()
    ax.set_xlabel("MiB")
    ax.set_title("Peak server memory per condition")
    ax.legend(fontsize=8, loc="lower right")
    return _svg(fig)


def tune_plot(run: RunDigest) -> str | None:
    """`--tune`: the speed-up its first pass predicted for every draft length (a line per
    concurrency, end to end), and what each measured length gave (points with their 95%
    interval), over all strata; the chosen length ringed (None: not a tuned run)."""
    rows = [r for r in run.strata if r.stratum == ALL_STRATA and r.tune is not None]
    if not rows:
        return None
    fig = _figure(7, 3.8)
    ax = fig.add_subplot()
    for i, conc in enumerate(sorted({r.concurrency for r in rows})):
        color = PALETTE[i % len(PALETTE)]
        mine = sorted((r for r in rows if r.concurrency == conc), key=lambda r: r.tune.draft_max if r.tune else 0)
        curve = next((r.tune.curve for r in mine if r.tune and r.tune.curve), {})
        if curve:
            xs = sorted(curve)
            ax.plot(xs, [curve[k] for k in xs], color=color, linewidth=1.2, label=f"predicted c{conc}")
        measured = [r for r in mine if r.speedup is not None]
        if measured:
            lo, hi = _whiskers(measured)
            ax.errorbar(
                [r.tune.draft_max for r in measured if r.tune],
                [float(r.speedup or 0.0) for r in measured],
                yerr=[lo, hi],
                fmt="o",
                capsize=3,
                color=color,
                label=f"measured c{conc}",
            )
        for r in measured:
            if r.tune and r.tune.chosen:
                ax.plot(
                    [r.tune.draft_max], [float(r.speedup or 0.0)], "o", markersize=12, fillstyle="none", color=color
                )
    ax.axhline(1.0, color="black", linewidth=0.8)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("draft length (--spec-draft-n-max)")
    ax.set_ylabel("speed-up vs --spec-type none")
    ax.set_title("--tune: predicted and measured speed-up by draft length (ringed: chosen)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _svg(fig)


def run_plots(run: RunDigest, concurrency: int | None = None, min_speedup: float | None = None) -> dict[str, str]:
    """Every plot that has data for this run: {name: svg text}."""
    out: dict[str, str | None] = {
        "acceptance": acceptance_plot(run),
        "speedup": speedup_plot(run, concurrency, min_speedup),
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
