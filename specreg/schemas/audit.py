"""The audit's vocabulary: the user's policy, gate results, per-stratum decisions, run digests.

A policy is user-written config, so every model here that a TOML file fills forbids extra keys
(a typo must be an error, never a silently ignored setting) and takes its switches as TOML
booleans only (`StrictBool`: `"yes"` or `1` is refused, naming the key, never read as true).
Defaults are the safe ones: a speed-up that is not measurably real, a changed output or an
unknown licence fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from specreg.schemas.bench import ConditionStatus, Difference, RunStatus, TuneEstimate
from specreg.schemas.bench_settings import DEFAULT_REPEAT
from specreg.schemas.sampling import DraftSampling, Sampler
from specreg.schemas.triage import NEAR_TIE_MARGIN, Triage
from specreg.schemas.watch import ProductionEvidence

if TYPE_CHECKING:
    from specreg.schemas.registry import ArtifactRecord

# The gates, declared once, in the order the audit runs them and every report shows them.
GateName = Literal[
    "integrity", "verdict", "template", "evidence", "equivalence", "speed", "memory", "licence", "rollback"
]
GATES: tuple[GateName, ...] = get_args(GateName)
# Gates judged per stratum as well as overall; the rest hold for the pair as a whole.
PER_STRATUM_GATES: tuple[GateName, ...] = ("equivalence", "speed")
# judged per measured condition, holding in every stratum or none (a condition's evidence and memory)
WHOLE_CONDITION_GATES: tuple[GateName, ...] = ("evidence", "memory")
# every gate a measured condition is judged on, in audit order (evidence, equivalence, speed, memory)
CONDITION_GATES: tuple[GateName, ...] = tuple(g for g in GATES if g in PER_STRATUM_GATES or g in WHOLE_CONDITION_GATES)
# judged once for the pair as a whole (its files, verdict, licence, rollback)
PAIR_LEVEL_GATES: tuple[GateName, ...] = tuple(g for g in GATES if g not in CONDITION_GATES)
NO_SPECULATION = "none"  # the per-stratum decision when no condition passes every gate


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EvidencePolicy(_Strict):
    """Which benchmark run counts as evidence for a pair."""

    runtime: str | None = None  # substring of the run's runtime identity; None: newest run (stated)
    hardware: str | None = None  # substring of the run's hardware identity (CPU / GPU model)
    min_repetitions: int = Field(default=DEFAULT_REPEAT, ge=1)  # as many as `bench admitted` runs by default


class SpeedPolicy(_Strict):
    """Speed-up and tail-latency thresholds, judged on medians of repetitions."""

    min_speedup: float = Field(default=1.05, ge=0)  # the speed-up's 95% interval must start at or above
    concurrency: int | None = Field(default=None, ge=1)  # None: the run's (lowest) concurrency
    required_strata: list[str] = Field(default_factory=list)  # empty: every measured stratum
    p95_tolerance_pct: float = Field(default=10.0, ge=0)  # spec p95 may exceed baseline's by this
    max_extra_errors: int = Field(default=0, ge=0)
    max_extra_timeouts: int = Field(default=0, ge=0)


class QualityPolicy(_Strict):
    """Output equivalence (greedy) or the prompt's own `expect` check."""

    require_equivalence: StrictBool = True
    required_prompts: list[str] = Field(default_factory=list)  # empty: every prompt of the run
    # the sampled stage (temperature > 0, benchmark/store/sampling.py): the condition's `expect` pass
    # rate may be lower than the baseline's by at most this, and never lower beyond chance
    expect_tolerance: float = Field(default=0.10, ge=0, le=1)
    # the distribution check's level: a condition whose outputs' first tokens differ from the
    # baseline's with p below this fails (its false-alarm rate when nothing changed)
    distribution_alpha: float = Field(default=0.01, gt=0, lt=1)
    # a greedy mismatch whose first differing token was a near tie on the baseline (its two tokens'
    # log-probabilities within `near_tie_margin` nats: the numerical effect of batched
    # verification, schemas/triage.py) is reported and does not fail ("report") or fails like any
    # other ("fail"); a confident divergence, or a mismatch that could not be triaged, always fails
    near_ties: Literal["report", "fail"] = "report"
    near_tie_margin: float = Field(default=NEAR_TIE_MARGIN, ge=0, le=2)


class SamplingPolicy(Sampler):
    """The sampler production uses (default greedy): the audit takes evidence measured at it and
    `deploy` pins it."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class MemoryPolicy(_Strict):
    """Extra peak memory of the speculative server over the baseline's; None disables a limit."""

    max_extra_ram_mib: float | None = Field(default=None, ge=0)
    max_extra_ram_pct: float | None = Field(default=10.0, ge=0)  # % of the host's total RAM
    max_extra_vram_mib: float | None = Field(default=None, ge=0)
    max_extra_vram_pct: float | None = Field(default=10.0, ge=0)  # % of total VRAM


class LicencePolicy(_Strict):
    """Licence identifiers (case-insensitive) and provenance pinning."""

    allow: list[str] = Field(default_factory=list)  # empty: any licence not denied
    deny: list[str] = Field(default_factory=list)
    unknown: Literal["fail", "pass"] = "fail"
    conflict: Literal["fail", "pass"] = "fail"  # sources (user, model card, GGUF) disagree
    # a file whose provenance names a hub repository needs its revision pinned; a local file is
    # pinned by its SHA-256
    require_revision: StrictBool = True


BlockingSeverity = Literal["info", "warn", "error"]
_BLOCK_DEFAULT: tuple[BlockingSeverity, ...] = ("error", "warn")


class TemplatePolicy(_Strict):
    """Which severities of the target's `template.*` checks block deployment."""

    block: list[BlockingSeverity] = Field(default_factory=lambda: list(_BLOCK_DEFAULT))


class TrustPolicy(_Strict):
    """Whom the audit believes about evidence from other machines, and about model files.

    `signers`: a name for each trusted key, as a PEM public key file (relative to the policy's
    folder) or a key id (signing/dsse.py). With `require_signed_evidence`, a run measured
    elsewhere counts only when a named signer signed it; with `require_model_signature`, the
    integrity gate wants a verified OpenSSF model signature on every file (register --verify-signature).
    """

    signers: dict[str, str] = Field(default_factory=dict)
    require_signed_evidence: StrictBool = False
    require_model_signature: StrictBool = False


class WatchPolicy(_Strict):
    """What `specreg watch` holds a deployed server to (docs/watch.md). Live traffic is `drifted`
    when its acceptance or decode rate settles below the audited one by more than the tolerance
    (relative), decided over windows by an anytime-valid test, so noise pages nobody; speculation
    configured but no draft over `not_speculating_tokens` generated tokens is `not speculating`."""

    acceptance_tolerance: float = Field(default=0.10, ge=0, lt=1)
    decode_tolerance: float = Field(default=0.25, ge=0, lt=1)
    not_speculating_tokens: int = Field(default=64, ge=1)


class Policy(_Strict):
    """A deployment policy as written in TOML; `Policy()` is the safe built-in default."""

    name: str | None = None
    evidence: EvidencePolicy = Field(default_factory=EvidencePolicy)
    speed: SpeedPolicy = Field(default_factory=SpeedPolicy)
    quality: QualityPolicy = Field(default_factory=QualityPolicy)
    memory: MemoryPolicy = Field(default_factory=MemoryPolicy)
    licence: LicencePolicy = Field(default_factory=LicencePolicy)
    template: TemplatePolicy = Field(default_factory=TemplatePolicy)
    sampling: SamplingPolicy = Field(default_factory=SamplingPolicy)
    trust: TrustPolicy = Field(default_factory=TrustPolicy)
    watch: WatchPolicy = Field(default_factory=WatchPolicy)


# ---- run digests: what reports and gates read from a benchmark run ------------------------


class StratumRow(BaseModel):
    """One condition x stratum of a run, with the baseline comparison already made."""

    condition: str
    stratum: str
    concurrency: int = 1
    draft_n_max: int | None = None
    status: str = "ok"  # the condition's status: a failed one has no speed-up (speedup_note says why)
    n_requests: int = 0
    n_repetitions: int = 0
    median_total_ms: float | None = None
    p95_total_ms: float | None = None
    median_ttft_ms: float | None = None
    median_tpot_ms: float | None = None  # client TPOT of the requests not below the server's time
    p50_itl_ms: float | None = None  # per-token inter-token latency (client arrivals)
    p95_itl_ms: float | None = None
    median_server_tpot_ms: float | None = None  # the server's own predicted_per_token_ms
    tpot_below_server: int = 0  # requests whose client TPOT was below the server's: no decode speed
    acceptance: float | None = None  # None when nothing was drafted (never 0)
    speedup: float | None = None  # baseline median total / this median total (paired requests)
    speedup_ci95: tuple[float, float] | None = None  # seeded paired bootstrap over prompt x repetition
    difference: Difference | None = None  # "no measurable difference" when the interval holds 1.0
    speedup_note: str | None = None
    n_paired: int = 0
    # the anytime-valid decision (decision/bar.py) and its interval, which holds however
    # many rounds were looked at: what a run measured until decided (`--budget`) is gated on
    decision: Literal["faster", "not faster", "undecided"] | None = None
    decision_ci: tuple[float, float] | None = None
    decision_min_speedup: float | None = None
    # undecided at the end of a `--budget` run: about how many more rounds would decide it (None:
    # not within budget.HORIZON more, or not projected) and the --budget that would have
    decision_more_rounds: int | None = None
    decision_budget: str | None = None
    drafted: int | None = None
    accepted: int | None = None
    expected_accepted_length: float | None = None  # E[L]: tokens per step that drafted (this stratum's)
    predicted_speedup: float | None = None  # tokens per target step / step cost (benchmark/store/stepcost.py)
    tune: TuneEstimate | None = None  # --tune: this draft length's prediction before it was measured
    unexplained: bool | None = None  # the interval's low end above tokens per target step
    unexplained_reason: str | None = None
    speedup_p5: float | None = None  # spread of per-request ratios (reports only)
    speedup_p95: float | None = None
    errors: int = 0
    timeouts: int = 0
    equivalent: int = 0  # requests whose output matched the baseline / passed `expect`
    compared: int = 0  # requests that could be compared
    compared_text_only: int = 0  # of those, compared by text alone (a side's token ids incomplete)
    first_mismatch: str | None = None  # "prompt#rep @ token 7, char 12: <context>"
    # per prompt in failed_prompts, the most severe triage of its mismatched rows (schemas/triage.py;
    # absent: some row of it was not triaged), judged against the policy's margin by the gate
    triage: dict[str, Triage] = Field(default_factory=dict)
    prompts: list[str] = Field(default_factory=list)  # prompt ids measured in this stratum
    failed_prompts: list[str] = Field(default_factory=list)  # prompt ids that broke equivalence
    # the sampler (greedy unless measured otherwise) and the sampled stage's checks (T > 0)
    temperature: float = 0.0
    draft_sampling: DraftSampling | None = None
    expect_checked: int = 0  # this condition's `expect` checks at this sampler
    expect_failed: int = 0
    base_expect_checked: int = 0  # the baseline's, same prompts and sampler
    base_expect_failed: int = 0
    expect_diff: float | None = None  # pass rate, condition - baseline
    expect_diff_ci95: tuple[float, float] | None = None
    dist_p: float | None = None  # the distribution check's p-value (benchmark/store/sampling.py)
    dist_n: int = 0
    dist_note: str | None = None


class ConditionDigest(BaseModel):
    """One server condition of a run: what ran, how it ended, what it cost."""

    label: str
    spec_type: str
    target_sha256: str | None = None
    draft_sha256: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    concurrency: int = 1
    draft_n_max: int | None = None
    draft_n_min: int | None = None
    status: ConditionStatus = "ok"
    failure: str | None = None
    command: list[str] = Field(default_factory=list)
    peak_ram_mib: float | None = None
    predicted_ram_mib: float | None = None  # from GGUF metadata, before the run
    peak_vram_mib: float | None = None
    extra_ram_mib: float | None = None  # over the baseline condition
    extra_vram_mib: float | None = None
    acceptance: float | None = None
    acceptance_by_position: list[float | None] = Field(default_factory=list)
    drafts: int | None = None  # verification steps that drafted (llama.cpp's spec_decode_num_drafts)
    drafted_tokens: int | None = None
    warmup_notes: list[str] = Field(default_factory=list)  # server starts whose warm-up never settled
    # the sampler its requests were made with (greedy for runs before it was recorded)
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    draft_sampling: DraftSampling | None = None

    @property
    def is_baseline(self) -> bool:
        return self.spec_type == "none"

    @property
    def sampler(self) -> Sampler:
        return Sampler(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, min_p=self.min_p)


@dataclass(kw_only=True)
class ModelName:
    """What tells a model file apart beside its SHA-256 prefix: general.name, file name, quant."""

    name: str | None = None
    file: str | None = None
    quant: str | None = None  # as people name it: Q4_K_M, F32 (text.quant_text)

    @classmethod
    def of(cls, record: ArtifactRecord) -> ModelName:
        from specreg.text import quant_text

        path = record.paths[0] if record.paths else None
        return cls(
            name=record.name, file=path.rsplit("/", 1)[-1] if path else None, quant=quant_text(record.file_type_name)
        )


def named(sha256: str | None, models: dict[str, ModelName], name: str | None = None) -> str:
    """A model as every report names it (text.model_label): the 12-hex SHA-256 prefix with
    general.name, file and quant from `models`, else with `name` alone."""
    from specreg.text import model_label

    if not sha256:
        return name or "–"
    m = models.get(sha256)
    return model_label(sha256, name=m.name, file=m.file, quant=m.quant) if m else model_label(sha256, name=name)


class RunDigest(BaseModel):
    """A benchmark run reduced to what the audit and the reports need."""

    run_id: str
    status: RunStatus
    created_at: datetime | None = None
    runtime: str | None = None
    hardware: str | None = None
    total_ram_mib: float | None = None
    total_vram_mib: float | None = None
    target_sha256: str | None = None
    target_name: str | None = None
    workload: str | None = None
    repetitions: int = 0
    # measured until decided (`--budget`): rounds were added while the decision was undecided, so
    # only the anytime-valid interval is valid at the end (a bootstrap interval is not, after such a stop)
    until_decided: bool = False
    conditions: list[ConditionDigest] = Field(default_factory=list)
    strata: list[StratumRow] = Field(default_factory=list)
    models: dict[str, ModelName] = Field(default_factory=dict)  # sha256 -> names, filled for reports
    set_aside: list[str] = Field(default_factory=list)  # rounds run under contention (benchmark/store/contention.py)
    # who vouches for this run (audit/trust.py): measured here, or its signer; filled by the audit
    attested_by: str | None = None

    def baseline(self, concurrency: int | None = None) -> ConditionDigest | None:
        """The baseline condition (at this concurrency, when given)."""
        return next(
            (c for c in self.conditions if c.is_baseline and (concurrency is None or c.concurrency == concurrency)),
            None,
        )

    def rollback(self, concurrency: int | None = None) -> ConditionDigest | None:
        """The baseline a pair measured in this run rolls back to: the one at its concurrency,
        else the run's first. The one choice the audit's rollback gate and `deploy` both make."""
        return self.baseline(concurrency) or self.baseline()

    @property
    def concurrency_levels(self) -> list[int]:
        return sorted({r.concurrency for r in self.strata})

    def rows(self, condition: str) -> list[StratumRow]:
        return [r for r in self.strata if r.condition == condition]


# ---- audit results -------------------------------------------------------------------------


@dataclass(kw_only=True)
class GateResult:
    """One gate for one pair: passed or not, why, and the numbers it looked at. A dataclass, like
    `Candidate`: an audit of a fleet makes one per gate and pair from values it computed itself,
    and validating each of them again on the way in would only cost time."""

    gate: GateName
    passed: bool
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    strata: dict[str, bool] = field(default_factory=dict)  # per-stratum outcome where it applies


@dataclass(kw_only=True)
class ConditionOutcome:
    """One measured condition of a pair (a draft length at a concurrency) under the condition gates."""

    condition: str
    concurrency: int = 1
    draft_n_max: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    temperature: float = 0.0  # the sampler it was measured at (the policy's)
    draft_sampling: DraftSampling | None = None
    failed: dict[str, str] = field(default_factory=dict)  # gate -> message, condition gates that failed
    strata: dict[str, bool] = field(default_factory=dict)  # equivalence and speed both pass there
    # where one fails: which, with its numbers ("speed 0.94x [0.80, 1.51]", "equivalence 3/6 equal")
    strata_why: dict[str, str] = field(default_factory=dict)
    # (evidence and memory hold everywhere or nowhere; equivalence and speed are judged per stratum)
    speedup: float | None = None  # over every stratum ("all")
    speedup_ci95: tuple[float, float] | None = None

    @property
    def passed(self) -> bool:
        return not self.failed


@dataclass(kw_only=True)
class UncheckedCondition:
    """A condition a pair's run measured for a method no pair of its target was checked for (an
    n-gram method in a draft pair's run): judged like the pair's own, deployable once checked."""

    method: str
    outcome: ConditionOutcome
    check_command: list[str]  # the `specreg check pair` that admits the method for this target


@dataclass(kw_only=True)
class PairAudit:
    """Every gate for one registered pair; `passed` iff every gate passed.

    The gates are those of the pair's best condition at the judged concurrency (`condition`,
    `concurrency`, `draft_n_max`); `conditions` has every measured condition of the pair.
    """

    pair_id: int
    method: str
    target_sha256: str
    draft_sha256: str | None = None
    target_name: str | None = None
    draft_name: str | None = None
    passed: bool
    gates: list[GateResult]
    run_id: str | None = None
    condition: str | None = None
    concurrency: int | None = None
    draft_n_max: int | None = None
    speedup: float | None = None
    speedup_ci95: tuple[float, float] | None = None
    rollback_command: list[str] | None = None
    speculative_command: list[str] | None = None
    hardware: str | None = None  # the hardware class whose runs were the evidence (None: no run)
    conditions: list[ConditionOutcome] = field(default_factory=list)
    not_benchmarkable: str | None = None  # admitted, but a side is vocab-only: why there is no run
    # the verdict stands on a trusted signer's signature ("admitted by lab-a, signed"), not on
    # checks made here (audit/trust.py); None: this machine's own checks
    signed_verdict: str | None = None
    # conditions of this pair's run for methods its target has no pair for (see UncheckedCondition)
    unchecked: list[UncheckedCondition] = field(default_factory=list)

    def gate(self, name: GateName) -> GateResult | None:
        return next((g for g in self.gates if g.gate == name), None)

    @property
    def failed_gates(self) -> list[GateName]:
        return [g.gate for g in self.gates if not g.passed]


@dataclass(kw_only=True)
class Candidate:
    """One pair considered for one stratum, and why it did or did not win (one per pair and stratum)."""

    pair_id: int
    condition: str | None = None
    concurrency: int | None = None
    draft_n_max: int | None = None
    speedup: float | None = None
    speedup_ci95: tuple[float, float] | None = None
    eligible: bool
    reason: str
    method: str | None = None  # set for a method measured in the run but not checked for the target
    check_command: list[str] | None = None  # ... and the command that checks it (then audit, deploy)


@dataclass(kw_only=True)
class StratumDecision:
    """Per workload and concurrency: the passing condition with the best speed-up, or "none"."""

    target_sha256: str
    target_name: str | None = None
    stratum: str
    concurrency: int = 1
    choice: str = NO_SPECULATION
    pair_id: int | None = None
    condition: str | None = None
    draft_n_max: int | None = None  # the best draft length (None: the build's default, or no draft)
    speedup: float | None = None
    speedup_ci95: tuple[float, float] | None = None
    run_id: str | None = None
    candidates: list[Candidate] = field(default_factory=list)
    hardware: str | None = None  # decided for this hardware class
    # the best measured condition that passes every gate measured here and beats `choice`, but is
    # of a method no pair of this target was checked for: deployable after its check pair
    unchecked: Candidate | None = None


class AuditReport(BaseModel):
    """The whole audit: policy used, every pair's gates, decisions and the runs they read."""

    created_at: datetime
    policy: Policy
    policy_source: str  # a file path, or "built-in defaults"
    rule_set: str | None = None
    rehash: bool = False
    passed: bool
    pairs: list[PairAudit]
    decisions: list[StratumDecision] = Field(default_factory=list)
    runs: list[RunDigest] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    hardware_classes: list[str] = Field(default_factory=list)  # audited one by one when there are several
    models: dict[str, ModelName] = Field(default_factory=dict)  # sha256 -> names of every model audited
    # what `specreg watch` recorded of the audited pairs in production (filled by the command)
    production: list[ProductionEvidence] = Field(default_factory=list)


# ---- the deploy command ----------------------------------------------------------------------


class DeployCommand(BaseModel):
    """`specreg deploy`: the pinned llama-server command for an audited condition, or why not."""

    pair_id: int
    method: str
    deployable: bool
    failed_gates: list[GateResult] = Field(default_factory=list)  # why not (empty when deployable)
    run_id: str | None = None
    rule_set: str | None = None  # the verdict's rule set (the llama.cpp build it was judged for)
    condition: str | None = None
    stratum: str | None = None  # None: the whole workload
    concurrency: int | None = None
    draft_n_max: int | None = None  # the deployed draft length (None: the build's default, or no draft)
    sampler: str | None = None  # the sampler pinned (the policy's, as measured): "T0.7 p0.9"
    draft_sampling: DraftSampling | None = None  # the --spec-draft-sampling mode that won (None: default)
    argv: list[str] | None = None  # None when refused
    rollback_argv: list[str] | None = None  # the baseline (no speculation), also given when refused
    sha256: dict[str, str] = Field(default_factory=dict)  # each model path in argv -> its SHA-256
    verify: str | None = None  # one shell line: `printf ... | sha256sum -c`
    speedup: float | None = None
    speedup_ci95: list[float] | None = None  # [low, high] where the run has it
    notes: list[str] = Field(default_factory=list)
