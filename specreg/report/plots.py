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
from typing import TYPE_CHECKING

from specreg.schemas.audit import RunDigest
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


def speedup_plot(run: RunDigest, concurrency: int | None = None, min_speedup: float | None = None) -> str | None:
    """Median speed-up per stratum and condition, whiskers from p5 to p95 (None: no data)."""
    conc = _concurrency(run, concurrency)
    rows = [
        r
        for r in run.strata
        if r.concurrency == conc
        and r.speedup is not None
        and not any(c.label == r.condition and c.is_baseline for c in run.conditions)
    ]
    if not rows:
        return None
    strata = sorted({r.stratum for r in rows})
    conds = list(dict.fromkeys(r.condition for r in rows))
    fig = _figure(max(6.5, 2.8 + 0.55 * len(strata) * max(1, len(conds))), 3.8)
    ax = fig.add_subplot()
    width = 0.8 / len(conds)
    for j, cond in enumerate(conds):
        by = {r.stratum: r for r in rows if r.condition == cond}
        xs, ys, lo, hi = [], [], [], []
        for i, s in enumerate(strata):
            r = by.get(s)
            if r is None or r.speedup is None:
                continue
            xs.append(i - 0.4 + width * (j + 0.5))
            ys.append(r.speedup)
            lo.append(max(0.0, r.speedup - (r.speedup_p5 if r.speedup_p5 is not None else r.speedup)))
            hi.append(max(0.0, (r.speedup_p95 if r.speedup_p95 is not None else r.speedup) - r.speedup))
        ax.bar(xs, ys, width * 0.9, yerr=[lo, hi], capsize=3, color=PALETTE[j % len(PALETTE)], label=_label(cond))
    ax.axhline(1.0, color="black", linewidth=0.8)
    if min_speedup is not None:
        ax.axhline(min_speedup, color="#cc3311", linestyle="--", linewidth=1, label=f"policy minimum {min_speedup:g}")
    ax.set_xticks(range(len(strata)), [_label(s, 20) for s in strata])
    ax.set_ylabel("speed-up vs --spec-type none")
    ax.set_title(f"Speed-up per stratum (median, p5–p95; concurrency {conc})", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never on them
    return _svg(fig)


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


def run_plots(run: RunDigest, concurrency: int | None = None, min_speedup: float | None = None) -> dict[str, str]:
    """Every plot that has data for this run: {name: svg text}."""
    out: dict[str, str | None] = {
        "acceptance": acceptance_plot(run),
        "speedup": speedup_plot(run, concurrency, min_speedup),
        "memory": memory_plot(run),
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
