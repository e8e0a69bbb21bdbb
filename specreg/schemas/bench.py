"""Benchmark records: workloads, conditions, request rows, the run manifest and summaries.

A run is keyed by the target SHA-256 and the draft SHA-256 (None for self-speculation) and
embeds the settings and runtime it came from (PROTOCOL §1). Undefined numbers stay None:
acceptance with zero drafted tokens is undefined, not 0; an absent GPU is absent, not 0 bytes.

These models are one document, a `BenchRun` as it is stored, exported and imported whole, and
they refer to each other; a reader looking up any field of a run finds it here, but for the
settings a run was started with (bench_settings.py's) and its request rows (request_row.py's).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from specreg.schemas.bench_settings import BenchSettings, Order
from specreg.schemas.checks import CheckResult
from specreg.schemas.registry import LicenceRecord
from specreg.schemas.request_row import MAX_OUTPUT_TOKENS, RequestRow
from specreg.schemas.sampling import DraftSampling, Sampler
from specreg.schemas.triage import Triage


class Measured(BaseModel):
    """A model of measured or derived numbers: NaN and infinity are refused when one is read
    (a stored or imported record holding one is a record that cannot be read, not a number)."""

    model_config = ConfigDict(allow_inf_nan=False)


# "contended": every round the run measured was set aside as contended (benchmark/store/contention.py):
# it kept nothing to decide on, so it is neither complete nor evidence
RunStatus = Literal["running", "complete", "incomplete", "contended", "cancelled", "aborted", "failed"]
# Runs that say nothing about a pair: still going, kept nothing, or stopped by a person or a crash
# of specreg (the audit skips them, and so do the views of what runs found)
SAYS_NOTHING: tuple[RunStatus, ...] = ("running", "contended", "cancelled", "aborted")
ConditionStatus = Literal["pending", "running", "ok", "failed", "cancelled", "aborted", "skipped"]
Difference = Literal["faster", "slower", "no measurable difference"]
LengthSource = Literal["per-position", "formula"]  # where E[L] came from
ALL_STRATA = "all"


# ---- workloads (user-written: extra="forbid") ------------------------------------------------


class ChatMessage(BaseModel):
    """One chat turn of a `messages` prompt."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: str


class Expect(BaseModel):
    """An optional output check: exactly one of exact text, a regex, or a JSON schema."""

    model_config = ConfigDict(extra="forbid")
    exact: str | None = None
    regex: str | None = None
    json_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one(self) -> Expect:
        given = [k for k in ("exact", "regex", "json_schema") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of exact, regex, json_schema")
        return self


class WorkloadItem(BaseModel):
    """One line of a workload JSONL file."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=200)
    stratum: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,39}$")
    prompt: str | None = None
    messages: list[ChatMessage] | None = Field(default=None, min_length=1)
    max_tokens: int = Field(default=32, ge=1, le=MAX_OUTPUT_TOKENS)
    expect: Expect | None = None

    @model_validator(mode="after")
    def _prompt_or_messages(self) -> WorkloadItem:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of prompt, messages")
        return self


class PromptInfo(BaseModel):
    """A workload item as run: its content hash and its input token count on this server."""

    id: str
    stratum: str
    kind: Literal["prompt", "messages"]
    content_sha256: str
    input_tokens: int | None = None
    max_tokens: int
    expect: Expect | None = None


# ---- conditions ------------------------------------------------------------------------------


class ConditionSpec(BaseModel):
    """One server configuration of a run; `params` holds only values the user set (else build defaults)."""

    name: str
    method: str  # "none" or a --spec-type name
    draft_path: str | None = None
    draft_sha256: str | None = None
    draft_n_max: int | None = None
    draft_n_min: int | None = None
    params: dict[str, int] = Field(default_factory=dict)  # llama-server flag -> value
    concurrency: int = 1  # requests in flight = server slots (-np)
    # the sampler every request of this condition is made with (schemas/sampling.py); older
    # runs: greedy. A speed-up is against the baseline at the same concurrency and sampler.
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    draft_sampling: DraftSampling | None = None  # --spec-draft-sampling (None: the build's default)

    @property
    def sampler(self) -> Sampler:
        return Sampler(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, min_p=self.min_p)


class SpecCounters(BaseModel):
    """`llamacpp:spec_decode_*` deltas over one condition."""

    drafted: int
    accepted: int
    steps: int
    per_position: dict[int, int] = Field(default_factory=dict)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def mean_accepted_per_step(self) -> float | None:
        return self.accepted / self.steps if self.steps else None


class GpuDevice(BaseModel):
    """One NVIDIA GPU as NVML reports it, with the peaks seen during a condition."""

    index: int
    name: str
    memory_total_bytes: int | None = None
    temperature_c_max: int | None = None
    sm_clock_mhz_min: int | None = None
    mem_clock_mhz_min: int | None = None


class GpuObservation(BaseModel):
    """GPU facts; `present=False` with a reason when there is no NVIDIA GPU (never zeros)."""

    present: bool
    reason: str | None = None
    driver: str | None = None
    devices: list[GpuDevice] = Field(default_factory=list)
    peak_vram_bytes: int | None = None
    peak_vram_by_pid: dict[int, int] = Field(default_factory=dict)


class MemoryObservation(BaseModel):
    """Peak resident memory of the server process tree and the GPU view."""

    peak_rss_bytes: int | None = None
    samples: int = 0
    gpu: GpuObservation
    predicted_rss_bytes: int | None = None  # from GGUF metadata (validators.memory_budget), for the error


class WarmupRecord(BaseModel):
    """The warm-up of one server start: latencies of the uncounted requests, and whether they settled."""

    round: int = 0
    latencies_ms: list[float] = Field(default_factory=list)
    # per request, the tokens the server drafted (its memory prediction sizes the verification
    # batches from them); empty in older records, None where not known
    drafted: list[int | None] = Field(default_factory=list)
    steady: bool | None = None  # two in a row within the tolerance; None: fewer than 2 allowed
    tolerance: float = 0.10


# why a slot ran: the planned rounds; with --tune its first pass, the rounds that decide the
# tuning's leader, the other lengths after it, and the other methods (also a run's --budget rounds);
# once the tuning is settled, the chosen length's strata still undecided (and their baseline)
SlotPhase = Literal["planned", "first pass", "leader", "lengths", "methods", "strata"]


class RoundLoad(BaseModel):
    """How busy the machine was while one slot of a condition measured its requests (after its
    warm-up): CPU time per wall second, in cores, of this specreg and its server (ours) and of
    every other process (others), the hypervisor's steal, and the 1-minute load at the end.
    `busy` says why the slot ran under contention (benchmark/store/contention.py), else None."""

    round: int
    repeats: list[int] = Field(default_factory=list)
    wall_s: float
    cores: int
    ours_cores: float
    others_cores: float
    steal_cores: float = 0.0
    load1: float | None = None
    busy: str | None = None
    # where the slot's wall time went (issue 32: a --tune run's time by phase), seconds: starting
    # the server until it answered, warming it up, the measured requests, and after them
    # (counters, id replays, stopping the server); `phase`: why the runner ran it (PHASES)
    start_s: float | None = None
    warmup_s: float | None = None
    requests_s: float | None = None
    after_s: float | None = None
    phase: SlotPhase | None = None
    # seconds the slot waited for a quieter machine (`--busy-wait`): before its server started and
    # between its requests; not part of any of the parts above, nor of the load judged
    waited_s: float | None = None
    # of `after_s`: the id replays (execute.py), which a condition's later slots reuse; stored so
    # that a continued run prices its slots as the run that measured them did (`budget.costs`)
    replay_s: float | None = None


class ConditionRun(BaseModel):
    """What happened to one condition: the server(s), logs, counters and memory.

    In round order a condition's server is started once per round; counters are summed over the
        rounds, memory is the peak over them, and the argv/port/pid/log are the latest round's.
    """

    idx: int
    spec: ConditionSpec
    status: ConditionStatus = "pending"
    failure: str | None = None
    failure_lines: list[str] = Field(default_factory=list)
    argv: list[str] = Field(default_factory=list)
    port: int | None = None
    server_pid: int | None = None
    log_path: str | None = None
    log_tail: str | None = None
    metrics_before: dict[str, float] | None = None
    metrics_after: dict[str, float] | None = None
    counters: SpecCounters | None = None
    memory: MemoryObservation | None = None
    warmup: list[WarmupRecord] = Field(default_factory=list)
    load: list[RoundLoad] = Field(default_factory=list)  # one per slot measured
    started_at: datetime | None = None
    finished_at: datetime | None = None


# ---- manifest (PROTOCOL §1) ------------------------------------------------------------------


class RuntimeInfo(BaseModel):
    """The server program: bundled xllamacpp or a user's llama-server binary."""

    kind: Literal["bundled", "external"]
    path: str
    sha256: str | None = None
    version_text: str
    xllamacpp_version: str | None = None
    build_info: dict[str, Any] = Field(default_factory=dict)
    spec_defaults: dict[str, int] = Field(default_factory=dict)


class ArtifactRef(BaseModel):
    """A model file as it was when the run started (licence record included)."""

    sha256: str
    path: str
    size: int | None = None
    repo: str | None = None
    revision: str | None = None
    file_type: str | None = None
    tokenizer_model: str | None = None
    tokenizer_pre: str | None = None
    chat_template_sha256: str | None = None
    licence: LicenceRecord = Field(default_factory=LicenceRecord)


class DraftInfo(BaseModel):
    """The speculation under test: the admitted method, the draft artifact (if any), the verdict."""

    method: str
    artifact: ArtifactRef | None = None
    pair_id: int | None = None
    rule_set: str | None = None
    compatibility: list[CheckResult] = Field(default_factory=list)
    draft_n_max: int | None = None
    draft_n_min: int | None = None


class HardwareInfo(BaseModel):
    """The machine: CPU, RAM, GPU (absent with a reason), load when the run started."""

    cpu_model: str | None = None
    logical_cores: int | None = None
    physical_cores: int | None = None
    ram_bytes: int | None = None
    load_avg_1m: float | None = None
    platform: str
    gpu: GpuObservation
    placement: str  # "cpu" or "gpu (ngl=…)"


class WorkloadSource(BaseModel):
    """Where a standard workload's prompts came from: a pinned wheel on the package index, the
    data file inside it, and which prompts this run used (a `--sample` of them, or all)."""

    package: str
    version: str
    wheel_sha256: str
    data_file: str
    data_sha256: str
    index_sha256: str | None = None  # sharegpt: the derived index it read, pinned like the data file
    sample: int | None = None  # prompts per stratum, None: every prompt that fits
    filter: str | None = None  # how prompts were filtered (sharegpt: by length for the context)
    available: int = 0  # prompts that passed the filter, before sampling
    prompt_ids: list[str] = Field(default_factory=list)


class RequestSettings(BaseModel):
    """How requests were made."""

    workload: str
    workload_sha256: str
    workload_source: WorkloadSource | None = None  # standard workloads (mt-bench, humaneval, sharegpt)
    temperature: float = 0.0  # the lowest measured (every one: `temperatures`)
    seed: int  # repetition r's requests use seed + r (schemas/sampling.py repetition_seed)
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    temperatures: list[float] = Field(default_factory=list)
    draft_sampling: list[DraftSampling] = Field(default_factory=list)  # --draft-sampling as given
    seeds: str | None = None  # how each repetition's seed is derived (None: one seed for all)
    max_tokens_override: int | None = None
    concurrency: int = 1  # the lowest level measured (every level: `concurrency_levels`)
    concurrency_levels: list[int] = Field(default_factory=list)
    cache_prompt: bool = False
    stop: list[str] = Field(default_factory=list)


class ScheduleSlot(BaseModel):
    """One server start in the run's order: the condition and the repetitions it measured."""

    round: int
    condition: str
    repeats: list[int]


class ObservationSettings(BaseModel):
    """How the run observed: warm-up, repetitions, deadlines, the client clock."""

    mode: Literal["warm", "cold"] = "warm"
    warmup_requests: int = 1  # at most, per server start (stops once two agree within the tolerance)
    warmup_tolerance: float | None = None
    repeat: int = 1
    order: Order | None = None  # rounds: a server per condition per repetition, order below
    schedule: list[ScheduleSlot] = Field(default_factory=list)
    start_timeout_s: float
    request_timeout_s: float
    run_timeout_s: float
    client_clock: str = "time.perf_counter (monotonic)"
    threads: int | None = None
    server_cpus: list[int] | None = None  # the cores the servers were bound to (servers/pinning.py)
    ctx_size: int


class Continuation(BaseModel):
    """One `bench continue` of a run: when it began, what the run was then, what it was given,
    and its first new repetition, one past those stored (their seeds go on from there; planned
    slots a fault cut short are finished first, at their own repetitions)."""

    started_at: datetime
    previous_status: RunStatus
    previous_finished_at: datetime | None = None  # the session before it ended (None: aborted unseen)
    budget_s: float
    first_repeat: int
    methods: list[str] | None = None  # --methods: only these continued (None: every condition)
    tune: bool = False  # the tuning was continued (its candidates measured on)


class NodeInfo(BaseModel):
    """The cluster node a dispatched run was measured on (`bench admitted --executor ray`): the
    node's id, its host name and address, and the resources the run asked for when it was placed
    (`--resources`; empty: Ray's defaults). A run measured by this specreg itself has none."""

    executor: Literal["ray"] = "ray"
    node_id: str
    host: str
    address: str
    resources: dict[str, float] = Field(default_factory=dict)

    def line(self) -> str:
        """One line for listings and evidence: where, and with what it was placed."""
        asked = json.dumps(self.resources, sort_keys=True) if self.resources else "default resources"
        return f"Ray node {self.node_id[:12]} on {self.host} ({self.address}), placed with {asked}"


class RunManifest(BaseModel):
    """PROTOCOL §1: runtime, target, draft, hardware, request, observation."""

    runtime: RuntimeInfo
    target: ArtifactRef
    draft: DraftInfo
    hardware: HardwareInfo
    request: RequestSettings
    observation: ObservationSettings
    settings: BenchSettings | None = None  # the invocation's validated settings (None: older runs)
    # each `bench continue` that measured on (benchmark/run/resume.py), in order: the run is one
    # piece of evidence, its rounds measured across these sessions
    continued: list[Continuation] = Field(default_factory=list)
    node: NodeInfo | None = None  # the cluster node that ran it (None: measured by the specreg that stored it)


# ---- results ---------------------------------------------------------------------------------


class Stat(Measured):
    """Median and p95 of one quantity over the successful requests."""

    p50: float | None = None
    p95: float | None = None


class TuneEstimate(Measured):
    """`--tune`'s prediction for one condition's draft length (benchmark/plan/tune.py), made from the
    first pass's acceptance profile before the candidate was measured; the measurement is the
    summary's own speed-up."""

    draft_max: int  # --spec-draft-n-max
    predicted_speedup: float | None = None  # end to end, what the measured speed-up compares with
    predicted_decode_speedup: float | None = None  # the decode phase alone, as stepcost.py prices it
    role: Literal["first pass", "candidate"]  # candidate: on the ladder (the first pass can be one)
    profile: Literal["per-position", "geometric"]  # the acceptance curve the prediction used
    first_pass: str  # the condition whose profile it came from
    curve: dict[int, float] = Field(default_factory=dict)  # first pass only: end to end, every k in 1..32
    chosen: bool = False  # the tuned length (per concurrency): a decided one first (tune.Tuner.standing)
    decided: bool = False  # the chosen length is decided and no other measured or predicted can beat it
    why: str | None = None  # the chosen length only: why it was chosen, in words
    # the chosen length only: seconds into the run (from its first slot) at which the tuning was
    # settled, before any rounds spent on its strata (what a grid of lengths is compared with)
    settled_s: float | None = None


class ConditionSummary(Measured):
    """One condition over one stratum (or `all`): the comparison table's row."""

    condition: str
    method: str
    stratum: str
    status: ConditionStatus
    n_requests: int = 0
    n_ok: int = 0
    n_errors: int = 0
    n_timeouts: int = 0
    total_ms: Stat = Field(default_factory=Stat)
    ttft_ms: Stat = Field(default_factory=Stat)
    tpot_ms: Stat = Field(default_factory=Stat)  # client TPOT of the rows not flagged below
    itl_ms: Stat = Field(default_factory=Stat)  # per-token inter-token latency, every token pooled
    server_tpot_ms: Stat = Field(default_factory=Stat)  # the server's predicted_per_token_ms
    n_tpot_flagged: int = 0  # rows whose client TPOT was below the server's: left out of tpot_ms
    decode_tps: float | None = None
    output_tokens: int = 0
    drafted: int | None = None
    accepted: int | None = None
    acceptance: float | None = None
    mean_accepted_per_step: float | None = None
    # the condition's parameters (what `deploy` pins): draft length and requests in flight
    concurrency: int | None = None  # None: older runs (the manifest's concurrency)
    draft_n_max: int | None = None
    draft_n_min: int | None = None
    params: dict[str, int] = Field(default_factory=dict)
    # speed-up vs the baseline at the same concurrency: median ratio over paired requests
    # (prompt x repetition), with a seeded paired-bootstrap 95% interval; None when not measured
    # or the condition failed (`speedup_note` says why)
    speedup: float | None = None
    speedup_ci95: tuple[float, float] | None = None
    n_paired: int = 0
    difference: Difference | None = None
    speedup_note: str | None = None
    # the anytime-valid decision against `decision_min_speedup` (decision/bar.py): its interval
    # holds however many rounds were looked at, so `--budget` may stop when it is decided;
    # `decision_method` "bar" for bar.py's tests, None for the sequence of runs before them
    # (decision/sequential.py), which an import draws their decisions with again
    decision: Literal["faster", "not faster", "undecided"] | None = None
    decision_ci: tuple[float, float] | None = None
    decision_min_speedup: float | None = None
    decision_method: Literal["bar"] | None = None
    # undecided at the end of a `--budget` run: about how many more rounds would decide it (None:
    # not within budget.HORIZON more, or not projected) and the --budget that would have
    decision_more_rounds: int | None = None
    decision_budget: str | None = None
    # rounds whose timings were left out of the speed-up, its interval and the decision because
    # they ran under contention (benchmark/store/contention.py): requests set aside and, per round, why
    n_set_aside: int = 0
    set_aside: list[str] = Field(default_factory=list)
    # consistency with acceptance, from this group's own requests (benchmark/store/stepcost.py): E[L]
    # tokens per step that carried a draft, tokens per target step over all steps, the speed-up
    # the step-cost model predicts, and "unexplained" when the interval's low end is above what
    # acceptance could give at all (tokens per target step: drafting and verifying for free)
    alpha: float | None = None  # per-token acceptance (None: nothing drafted)
    draft_length: float | None = None  # k: tokens drafted per step that drafted (the condition's mean)
    expected_accepted_length: float | None = None  # E[L]; 1.0 when nothing was drafted
    accepted_length_source: LengthSource | None = None
    tokens_per_step: float | None = None  # output tokens / target steps (steps without a draft count)
    verify_cost: float | None = None  # one target step verifying k+1 tokens, in baseline decode steps
    draft_cost: float | None = None  # one draft-model decode, in baseline decode steps (0: n-gram)
    step_cost: float | None = None  # the mean target step (verify + drafting), in baseline decode steps
    predicted_speedup: float | None = None  # tokens_per_step / step_cost (decode phase)
    tune: TuneEstimate | None = None  # --tune: this draft length's prediction before it was measured
    unexplained: bool | None = None
    unexplained_reason: str | None = None
    peak_rss_bytes: int | None = None
    rss_overhead_bytes: int | None = None
    peak_vram_bytes: int | None = None
    vram_overhead_bytes: int | None = None
    n_compared: int = 0
    n_equal: int = 0
    n_text_only: int = 0  # of n_compared, compared by text alone (a side's ids incomplete, or chat)
    first_mismatch: str | None = None  # "prompt_id#repeat @ token 7, char 12"
    mismatch_context: str | None = None  # the first mismatch's tokens and characters either side
    mismatch_triage: Triage | None = None  # the first mismatch's triage (None: not triaged)
    # mismatches by triage at the run's margin (schemas/triage.py): near ties, and the rest
    # (confident divergences, unclassified, untriaged), which always fail equivalence
    n_near_ties: int = 0
    n_divergences: int = 0
    n_expect_checked: int = 0
    n_expect_failed: int = 0
    # the sampler (every condition's own; a speed-up is against the baseline at the same one)
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    draft_sampling: DraftSampling | None = None
    # the sampled stage (temperature > 0, benchmark/store/sampling.py): the baseline's expect checks on the
    # same prompts, the pass-rate difference (condition - baseline) with its 95% interval, and the
    # distribution check of the first generated tokens against the baseline's
    n_base_expect_checked: int = 0
    n_base_expect_failed: int = 0
    expect_diff: float | None = None
    expect_diff_ci95: tuple[float, float] | None = None
    dist_p: float | None = None  # permutation p-value; None: not run (greedy, baseline, no samples)
    dist_n: int = 0  # prompts with outputs on both sides
    dist_flagged: bool | None = None  # p below the check's alpha: the outputs differ beyond chance
    dist_note: str | None = None

    @property
    def sampler(self) -> Sampler:
        return Sampler(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, min_p=self.min_p)


class RunInfo(BaseModel):
    """A run's row in `specreg runs`."""

    run_id: str
    pair_id: int | None = None
    status: RunStatus
    status_reason: str | None = None
    method: str
    target_sha256: str
    draft_sha256: str | None = None
    started_at: datetime
    finished_at: datetime | None = None
    runner_pid: int | None = None
    run_dir: str | None = None
    n_conditions: int = 0
    n_requests: int = 0
    hardware: str | None = None  # the hardware class (servers/hardware.py) of the manifest
    host: str | None = None  # the host an imported run came from; None: measured here
    node: NodeInfo | None = None  # the cluster node a dispatched run ran on (run_origins)


class BenchRun(BaseModel):
    """Everything stored about one run: what `runs show` prints and reports are built from."""

    info: RunInfo
    manifest: RunManifest | None = None
    prompts: list[PromptInfo] = Field(default_factory=list)
    conditions: list[ConditionRun] = Field(default_factory=list)
    requests: list[RequestRow] = Field(default_factory=list)
    summaries: list[ConditionSummary] = Field(default_factory=list)
