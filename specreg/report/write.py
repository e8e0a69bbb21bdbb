"""Audit and run reports, chosen by the file suffix: `.md` (SVGs beside it) or `.html` (one file)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specreg.atomic import write_atomic
from specreg.errors import UsageError
from specreg.schemas.audit import AuditReport, ModelName, RunDigest
from specreg.schemas.bench import BenchRun

SUFFIXES = {".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html"}


def _kind(path: Path) -> str:
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise UsageError(f"--report {path}: the file name must end in .md or .html")
    return kind


def check_report_path(path: str | Path) -> tuple[Path, str]:
    """The report path and its kind; a bad suffix or a missing folder is a UsageError."""
    p = Path(path)
    kind = _kind(p)
    if not p.parent.is_dir():
        raise UsageError(f"--report {p}: folder {p.parent} does not exist")
    return p, kind


def _write(
    p: Path, kind: str, svgs: dict[str, str], render_html: Callable[[], str], render_md: Callable[[str], str]
) -> list[Path]:
    """HTML: one self-contained file; Markdown: the text, each plot an SVG file beside it."""
    if kind == "html":
        write_atomic(p, render_html())
        return [p]
    written = []
    for suffix, svg in svgs.items():
        f = p.with_name(f"{p.stem}-{suffix}.svg")
        write_atomic(f, svg)
        written.append(f)
    write_atomic(p, render_md(f"{p.stem}-"))
    return [p, *written]


def write_audit_report(path: str | Path, report: AuditReport) -> list[Path]:
    """Write the audit report; returns every file written (the report, then any SVGs)."""
    from specreg.report import html, markdown, plots

    p, kind = check_report_path(path)
    if report.models:  # each run's section names its models as the audit does
        runs = [r if r.models else r.model_copy(update={"models": report.models}) for r in report.runs]
        report = report.model_copy(update={"runs": runs})
    drawn = {r.run_id: plots.run_plots(r, None, report.policy.speed.min_speedup) for r in report.runs}
    files = {f"{markdown.slug(run_id)}-{name}": svg for run_id, svgs in drawn.items() for name, svg in svgs.items()}
    return _write(
        p,
        kind,
        files,
        lambda: html.render_audit(report, drawn),
        lambda prefix: markdown.render_audit(report, drawn, prefix),
    )


def write_run_report(path: str | Path, run: RunDigest) -> list[Path]:
    """Write a report for one benchmark run; returns every file written."""
    from specreg.report import html, markdown, plots

    p, kind = check_report_path(path)
    svgs = plots.run_plots(run)
    return _write(
        p, kind, svgs, lambda: html.render_run(run, svgs), lambda prefix: markdown.render_run(run, svgs, prefix)
    )


def write_run_report_for(path: str | Path, run: BenchRun, models: dict[str, ModelName] | None = None) -> list[Path]:
    """`specreg runs show RUN --report PATH`: digest a loaded run and write its report (`models`:
    the registry's names for its artifacts, by SHA-256)."""
    from specreg.benchmark.store.digest import digest_run

    check_report_path(path)
    digest = digest_run(run)
    node = run.info.node or (run.manifest.node if run.manifest is not None else None)
    if node is not None:  # a run measured on a Ray node says which, as the audit's evidence line does
        digest = digest.model_copy(update={"attested_by": f"measured on {node.line()}"})
    return write_run_report(path, digest.model_copy(update={"models": models}) if models else digest)
