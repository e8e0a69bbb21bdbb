"""What `specreg drafts TARGET` answers: every candidate judged, the admitted ones ranked.

One row per (candidate, method): a draft file for the method its architecture serves, and the
target alone for MTP and the n-gram methods. The prediction carries where its acceptance came
from (`source`), so a reader can tell a measured pair from a prior.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specreg.schemas.base import BaseModel
from specreg.schemas.machine_probe import MachineProbe, PairProbe

# "pair probe": the pair run together on a few prompts on this machine (benchmark/run/pair_probe.py)
AcceptanceSource = Literal["this pair", "pair probe", "same families", "prior", "measured n-gram", "none"]
# where the step prices came from: both models' machine probes, the target's alone (the draft's
# r from its weights), none (hardware-blind: any machine), or this pair's own runs
CostSource = Literal["machine probe", "target probe", "hardware-blind", "measured runs"]


class Prediction(BaseModel):
    """A predicted decode speed-up over the baseline and the acceptance it came from."""

    source: AcceptanceSource
    evidence: str  # one line: "3 runs", "2 pairs of SmolLM2 / SmolLM2", "prior at ratio 0.12"
    alpha: float | None = None  # per-token acceptance
    alpha_range: tuple[float, float] | None = None
    draft_cost: float | None = None  # r: one draft decode in target decodes
    verify_cost: float | None = None  # v(k): a verify step at the predicted k, in target decodes
    draft_length: int | None = None  # k at which the prediction is best (tune.py's curve)
    speedup: float  # the point prediction, at k
    speedup_range: tuple[float, float]  # at k: acceptance, prices and the step model's spread
    costs: CostSource | None = None  # None: a method with no draft to price (n-gram)
    verdict: str | None = None  # "not faster on this machine" / "faster ..." / "either way ..."; None: blind
    measured_speedup: float | None = None  # the newest run of this very pair, end to end
    measured_ci95: tuple[float, float] | None = None


class DraftRow(BaseModel):
    """One candidate for one method: its verdict, facts, licence and prediction."""

    method: str
    draft: str | None = None  # what a user recognises it by; None for target-only methods
    where: str  # registry, hf-cache, dir, hub, target
    ref: str | None = None  # what `check pair` / `fetch` take: a path, SHA-256 or hf:// reference
    sha256: str | None = None
    repo: str | None = None
    revision: str | None = None
    quant: str | None = None
    size_bytes: int | None = None
    bytes_per_token: int | None = None  # weights one draft decode reads (the embedding row excluded)
    parameters: int | None = None
    licence: str | None = None
    licence_allowed: bool | None = None
    licence_note: str | None = None
    admitted: bool
    reason: str | None = None  # the first error's code: message (rejected rows)
    reason_code: str | None = None
    warnings: int = 0
    local: bool = True  # bytes on this machine: can be benchmarked without a download
    prediction: Prediction | None = None


class PriorFit(BaseModel):
    """The acceptance prior: logit(alpha) = a + b*log10(draft/target parameters) + c*(tokens differ)."""

    a: float
    b: float
    c: float
    sigma: float  # residual standard deviation, in logits
    n_pairs: int  # measured pairs it was refitted on (0: the stated default alone)
    how: str
    draft_cost_offset: float  # r = offset + draft/target weight bytes
    n_cost_pairs: int


class ErrorStat(BaseModel):
    """Measured / predicted speed-up over every pair that has runs (out of sample: each pair
    predicted without its own runs)."""

    n_pairs: int
    low: float | None = None
    median: float | None = None
    high: float | None = None
    pairs: list[dict[str, object]] = Field(default_factory=list)
    costs: str | None = None  # how its predictions were priced: "machine probes" or "hardware-blind"


class MachineUse(BaseModel):
    """The machine probes a report's predictions were priced with, or why they are hardware-blind."""

    key: str | None = None  # hardware class; runtime; speed flags (None: not probed)
    probes: list[MachineProbe] = Field(default_factory=list)  # the target's first, then the drafts'
    measured: list[str] = Field(default_factory=list)  # SHA-256s probed by this command (the rest were kept)
    pairs: list[PairProbe] = Field(default_factory=list)  # the best local drafts run with the target
    pairs_measured: int = 0  # of those, run by this command (the rest were kept)
    seconds: float = 0.0  # what this command's own probes took
    failures: list[str] = Field(default_factory=list)
    not_probed: int = 0  # local drafts past the probe limit (priced by the target's probe and their weights)
    blind: str | None = None  # why the predictions do not know the machine (--no-probe, a remote target, ...)


class HalvingRound(BaseModel):
    """One round of `--bench`'s successive halving: who ran, what each measured, who went on."""

    round: int
    run_ids: list[str] = Field(default_factory=list)
    measured: dict[str, float | None] = Field(default_factory=dict)  # row label -> speed-up
    kept: list[str] = Field(default_factory=list)


class BenchOutcome(BaseModel):
    """`--bench N --budget D`: the rounds, the audit's verdict and the deploy command (or why not)."""

    rounds: list[HalvingRound] = Field(default_factory=list)
    winner: str | None = None
    pair_id: int | None = None
    verdict: str | None = None
    deploy_command: str | None = None
    why_not: str | None = None
    repetitions: int | None = None  # the winner's audited run, as the evidence gate counted them
    minimum_met_by: str | None = None  # set when fewer than the policy's minimum: its anytime-valid decision
    left_out: list[str] = Field(default_factory=list)  # candidates not measurable here, with why


class DraftReport(BaseModel):
    target: str
    target_sha256: str
    target_name: str | None = None
    rule_set: str
    rule_set_chosen_by: str
    policy: str
    rows: list[DraftRow] = Field(default_factory=list)  # admitted, best first
    rejected: list[DraftRow] = Field(default_factory=list)
    rejected_by_reason: dict[str, int] = Field(default_factory=dict)
    other_tokenizer: int = 0  # registry files of another tokenizer family, not opened
    failures: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    searched_repos: int = 0
    hub_bytes_fetched: int = 0
    prior: PriorFit
    error: ErrorStat
    machine: MachineUse
    bench: BenchOutcome | None = None
