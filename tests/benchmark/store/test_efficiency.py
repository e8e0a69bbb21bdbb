"""The harness's efficiency: measured requests over the wall clock of a run's sessions."""

from __future__ import annotations

from datetime import datetime, timedelta

from specreg.benchmark.store.efficiency import efficiency
from specreg.schemas.bench import BenchRun, ConditionRun, ConditionSpec, Continuation, RoundLoad, RunInfo, RunManifest
from specreg.schemas.request_row import RequestRow

T0 = datetime(2026, 1, 1, 12, 0, 0)


def _run(loads: list[RoundLoad], finished: datetime | None, continued: list[Continuation] | None = None) -> BenchRun:
    info = RunInfo(run_id="r", pair_id=1, status="complete", method="draft-simple", target_sha256="a" * 64,
                   started_at=T0, finished_at=finished)  # fmt: skip
    cond = ConditionRun(idx=0, spec=ConditionSpec(name="none", method="none"), status="ok", load=loads)
    rows = [RequestRow(condition_idx=0, condition="none", prompt_id="p", stratum="chat", repeat=0,
                       started_at=T0 + timedelta(seconds=70), ok=True, total_ms=5000.0)]  # fmt: skip
    manifest = RunManifest.model_construct(continued=continued or [])
    return BenchRun(info=info, manifest=manifest, conditions=[cond], requests=rows)


def _load(requests_s: float) -> RoundLoad:
    return RoundLoad(round=0, wall_s=requests_s, cores=2, ours_cores=1, others_cores=0, requests_s=requests_s,
                     start_s=1.0, warmup_s=1.0, after_s=1.0)  # fmt: skip


def test_one_session_is_its_requests_over_its_wall_clock() -> None:
    eff = efficiency(_run([_load(30.0), _load(15.0)], T0 + timedelta(seconds=90)))
    assert eff is not None and eff.share == 0.5 and eff.sessions == 1
    assert eff.text() == "measured requests 50% of 1.5 min"
    assert efficiency(_run([], T0 + timedelta(seconds=90))) is None  # nothing measured: no share


def test_the_time_between_sessions_is_not_the_runs() -> None:
    """Killed (no end recorded: its last request's end), continued an hour later for 60 s."""
    later = T0 + timedelta(hours=1)
    cont = Continuation(started_at=later, previous_status="aborted", previous_finished_at=None, budget_s=60,
                        first_repeat=1)  # fmt: skip
    eff = efficiency(_run([_load(25.0), _load(25.0)], later + timedelta(seconds=60), [cont]))
    assert eff is not None and eff.sessions == 2
    assert eff.wall_s == 75.0 + 60.0  # the first session ends at its last request (70 s + 5 s)
    assert eff.text() == "measured requests 37% of 2.2 min in 2 sessions"
