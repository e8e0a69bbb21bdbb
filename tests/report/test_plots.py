"""The plots and the HTML's marks on a hand-made run digest: the shapes issue 25 saw mislead.

The real runs (`_audit_world`) cannot be made to show a wide interval, 6 short drafts of a
64-token maximum or a changed output on demand; these digests can, and cost no server.
"""

from __future__ import annotations

from specreg.report import html, plots
from specreg.schemas.audit import ConditionDigest, ModelName, RunDigest, StratumRow

TARGET = "2fc5918b02d7" + "0" * 52


def _run() -> RunDigest:
    mod_accepts = [0.5, 0.3, 0.1] + [0.0] * 61  # 6 drafts of 3 tokens; positions 4..64 never drafted
    conditions = [
        ConditionDigest(label="none", spec_type="none"),
        ConditionDigest(
            label="ngram-mod",
            spec_type="ngram-mod",
            acceptance_by_position=mod_accepts,
            drafts=6,
            drafted_tokens=18,
            warmup_notes=["round 1: 3 warm-up requests never agreed within 10% (40, 20, 31 ms)"],
        ),
        ConditionDigest(
            label="draft-simple",
            spec_type="draft-simple",
            draft_sha256="d" * 64,
            acceptance_by_position=[0.8, 0.6],
            drafts=40,
            drafted_tokens=80,
        ),
    ]
    strata = [
        StratumRow(condition="none", stratum="all", speedup=1.0, speedup_note="reference"),
        StratumRow(
            condition="ngram-mod",
            stratum="all",
            speedup=1.3,
            speedup_ci95=(0.69, 85.27),  # the interval that stretched the old axis to 85
            predicted_speedup=1.2,
            compared=6,
            equivalent=3,
            first_mismatch="code#0 @ token 11, char 40: 'return' vs 'yield'",
        ),
        StratumRow(
            condition="draft-simple",
            stratum="all",
            speedup=0.9,
            speedup_ci95=(0.8, 1.0),
            predicted_speedup=1.1,
            compared=6,
            equivalent=6,
        ),
    ]
    return RunDigest(
        run_id="r1",
        status="complete",
        target_sha256=TARGET,
        target_name="gemma",
        runtime="bundled version: 0 (unknown)\nbuilt with GNU for x86_64\nxllamacpp 2026.10.11549\n",
        conditions=conditions,
        strata=strata,
        models={TARGET: ModelName(name="gemma", file="gemma-270m.gguf", quant="Q4_K_M")},
    )


def test_acceptance_is_drawn_only_where_drafted_with_the_number_of_drafts() -> None:
    run = _run()
    assert [plots.positions_drafted(c) for c in run.conditions[1:]] == [3, 2]
    fig = plots.acceptance_figure(run)
    assert fig is not None
    lines = {ln.get_label(): ln for ln in fig.axes[0].lines}
    mod = lines["ngram-mod (6 drafts)"]
    assert list(mod.get_xdata()) == [1, 2, 3]  # never 0.0 at positions 4..64
    assert list(lines["draft-simple (40 drafts)"].get_xdata()) == [1, 2]


def test_speedup_axis_is_log_centred_on_1x_and_clips_a_wide_whisker() -> None:
    fig = plots.speedup_figure(_run())
    assert fig is not None
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    assert ax.get_xscale() == "log" and abs(lo * hi - 1) < 1e-9 and hi < 4  # not stretched to 85
    arrows = [ln for ln in ax.lines if ln.get_marker() == ">"]
    assert len(arrows) == 1 and arrows[0].get_xdata()[0] == hi  # the cut whisker, marked at the edge
    predicted = [ln for ln in ax.lines if ln.get_marker() == "D" and len(ln.get_xdata())]
    assert sorted(float(ln.get_xdata()[0]) for ln in predicted) == [1.1, 1.2]  # beside the measured
    assert [ln.get_label() for ln in ax.lines if ln.get_label() == "predicted"] == ["predicted"]  # one key


def test_one_colour_per_method_in_every_plot() -> None:
    run = _run()
    acc, speed = plots.acceptance_figure(run), plots.speedup_figure(run)
    assert acc is not None and speed is not None
    by_label = {ln.get_label(): ln.get_color() for ln in acc.axes[0].lines}
    assert by_label["ngram-mod (6 drafts)"] == plots.method_colour("ngram-mod")
    dots = {ln.get_color() for ln in speed.axes[0].lines if ln.get_marker() == "o"}
    assert dots == {plots.method_colour("ngram-mod"), plots.method_colour("draft-simple")}
    assert plots.method_colour("ngram-mod") != plots.method_colour("draft-simple")


def test_html_marks_mismatches_and_warnings_and_names_models() -> None:
    page = html.render_run(_run(), {})
    assert '<td class="fail">3/6</td>' in page  # the changed outputs stand out
    assert "<td>6/6</td>" in page
    first = "ngram-mod / all: 3 of 6 outputs differ from the baseline; first: code#0 @ token 11"
    assert f'<li class="fail">{first}' in page
    assert '<li class="warn">warm-up not steady: ngram-mod round 1: 3 warm-up requests' in page
    decision = page[page.index('id="decision"') : page.index("</section>")]
    assert "outputs differ in all" in decision and "warm-up not steady: ngram-mod" in decision
    assert "2fc5918b02d7 gemma (gemma-270m.gguf, Q4_K_M)" in page
    assert "bundled xllamacpp 2026.10.11549 (llama.cpp build 11549)" in page
    assert "version: 0" not in page and "\\x0a" not in page
