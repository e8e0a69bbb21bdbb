"""The pieces every report is built from (report/common.py)."""

from __future__ import annotations

from specreg.report.common import run_summary
from specreg.schemas.audit import ConditionDigest, RunDigest, StratumRow


def test_an_undecided_condition_says_the_command_that_measures_on() -> None:
    """A run measured until decided that left a condition undecided: its line in the report ends
    with the `bench continue` command and the budget still needed (issue 48)."""
    cond = ConditionDigest(label="draft-simple", spec_type="draft", status="ok")
    row = StratumRow(condition="draft-simple", stratum="all", speedup=1.08, speedup_ci95=(0.97, 1.2),
                     decision="undecided", decision_budget="5m")  # fmt: skip
    run = RunDigest(run_id="20261206-1", status="complete", until_decided=True, conditions=[cond], strata=[row])
    ((line, good),) = run_summary(run)
    assert line.endswith("; undecided, to measure on: specreg bench continue 20261206-1 --budget 5m"), line
    assert good is None
    decided = row.model_copy(update={"decision": "faster", "decision_budget": None})
    ((line, _),) = run_summary(run.model_copy(update={"strata": [decided]}))
    assert "continue" not in line
