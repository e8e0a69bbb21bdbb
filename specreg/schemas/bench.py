"""Benchmark records: workloads, conditions, request rows, the run manifest and summaries.

A run is keyed by the target SHA-256 and the draft SHA-256 (None for self-speculation) and
embeds the settings and runtime it came from (PROTOCOL §1). Undefined numbers stay None:
acceptance with zero drafted tokens is undefined, not 0; an absent GPU is absent, not 0 bytes.

One module, though long: these models are one document, a `BenchRun` as it is stored, exported
and imported whole, and they refer to each other; a reader looking up any field of a run finds
it here (the settings a run was started with are bench_settings.py's).
"""

from __future__ import annotations

import json
from datetime import datetime
from itertools import pairwise
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from specreg.schemas.bench_settings import BenchSettings, Order
from specreg.schemas.checks import CheckResult
from specreg.schemas.registry import LicenceRecord
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
IdsSource = Literal["stream", "replay", "incomplete", "none"]  # where a row's token ids came from
MAX_OUTPUT_TOKENS = 65536  # the most tokens one request may ask for
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


# ---- requests --------------------------------------------------------------------------------

# How far a client TPOT may sit below the server's own per-token time and still count as decode
# speed: the two are measured on different clocks over different spans (the client from its first
# text event to its last, the server from its first sampled token to its last), and the client's
# first and last events reach it with different delays. Below the server's figure by more than
# this, the row is flagged (`RequestRow.tpot_below_server`) and left out of the reported TPOT.
TPOT_TOLERANCE_MS = 0.5
TPOT_TOLERANCE_SHARE = 0.02


TPOT_TOLERANCE_TEXT = f"max({TPOT_TOLERANCE_MS:g} ms, {TPOT_TOLERANCE_SHARE:.0%})"  # as legends say it


def tpot_tolerance_ms(server_tpot_ms: float) -> float:
    """max(TPOT_TOLERANCE_MS, TPOT_TOLERANCE_SHARE of the server's per-token time)."""
    return max(TPOT_TOLERANCE_MS, TPOT_TOLERANCE_SHARE * server_tpot_ms)


class RequestRow(BaseModel):
    """One measured request (warm-up requests are not stored)."""

    condition_idx: int
    condition: str
    prompt_id: str
    stratum: str
    repeat: int
    started_at: datetime
    ok: bool
    error: str | None = None
    timed_out: bool = False
    # the client's clocks are monotonic: a negative time is not a measurement (a forged row's)
    ttft_ms: float | None = Field(default=None, ge=0)
    total_ms: float | None = Field(default=None, ge=0)
    tpot_ms: float | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    finish_reason: str | None = None
    prompt_n: int | None = None  # prompt tokens the server processed (timings.prompt_n)
    prompt_ms: float | None = None
    predicted_ms: float | None = None
    draft_n: int | None = None
    draft_n_accepted: int | None = None
    cache_n: int | None = None
    output_text: str | None = None
    output_ids: list[int] | None = None
    # where output_ids came from: "stream" (the stream carried every id), "replay" (it did not; a
    # non-streamed return_tokens request to the same server, matching the streamed text and every
    # id the stream did carry), "incomplete" (neither: compared by text only), "none" (a chat
    # request: its stream names no ids; a chat row whose text differs from the baseline's gets them
    # by a replay: the template applied by the server, then return_tokens, kept when its text and
    # token count are the stream's). None: rows stored before specreg recorded it.
    ids_source: IdsSource | None = None
    stream_ids_n: int | None = None  # ids the stream itself carried (of output_tokens)
    # client arrivals from the first event with text on: (ms since the request was sent, tokens)
    arrivals: list[tuple[float, int]] | None = None
    server_tpot_ms: float | None = None  # the server's own timings.predicted_per_token_ms
    output_sha256: str | None = None
    matches_baseline: bool | None = None
    first_diff: int | None = None  # in diff_unit: tokens when ids were compared, else characters
    diff_unit: Literal["token", "char"] | None = None  # "char": compared by text only
    first_diff_char: int | None = None  # the first differing character (None: the texts are equal)
    diff_context: str | None = None  # a few tokens / characters either side of the first difference
    # a mismatch's first differing token judged on the baseline's top candidates there (near tie
    # or divergence: schemas/triage.py); None: equal, not greedy, or not triaged
    triage: Triage | None = None
    expect_ok: bool | None = None
    expect_detail: str | None = None
    # the sampler the request was made with and its seed (repetition seeds: schemas/sampling.py);
    # None: rows stored before specreg recorded them (greedy, the run's seed)
    seed: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None

    @property
    def ids_complete(self) -> bool:
        """Every generated id is on record: as many ids as the server's token count, from a
        source that vouches for them (rows from before the source was recorded: the count alone)."""
        ids, n = self.output_ids, self.output_tokens
        if ids is None or n is None or len(ids) != n:
            return False
        return self.ids_source in (None, "stream", "replay")

    @property
    def server_ms(self) -> float | None:
        """The server's own time for the request (timings.prompt_ms + predicted_ms: prompt
        processing and decode, as llama.cpp clocks them), None when it sent no timings."""
        if self.prompt_ms is None or self.predicted_ms is None:
            return None
        return self.prompt_ms + self.predicted_ms

    @property
    def timed_ms(self) -> float | None:
        """The request's time as speed-ups and decisions use it: the server's own (the
        client's wall clock adds the HTTP stream and whatever the client's thread waited for, a
        noise that is the client's, not the server's), the client's total when the server sent
        no timings. The client's total stays the cross-check (`contention.clock_disagreement`)."""
        server = self.server_ms
        return server if server is not None and server > 0 else self.total_ms

    @property
    def tpot_below_server(self) -> bool:
        """A client TPOT faster than the server generated the tokens, by more than the two clocks
        can disagree (`tpot_tolerance_ms`): not a decode speed (tokens that reached the client
        together, a first event the client saw late). Within the tolerance the two agree."""
        if self.tpot_ms is None or self.server_tpot_ms is None:
            return False
        return self.tpot_ms < self.server_tpot_ms - tpot_tolerance_ms(self.server_tpot_ms)

    @property
    def itl_ms(self) -> list[float]:
        """Per-token inter-token latencies after the first text: an event of k tokens gives its gap
        since the previous event once and 0 for the k - 1 tokens that came with it."""
        a = self.arrivals or []
        # no more latencies than tokens the row says were generated (a stored or imported row's
        # counts come from outside: never an allocation they size on their own)
        room = min(self.output_tokens or 0, MAX_OUTPUT_TOKENS)
        out: list[float] = []
        for (t_prev, _), (t, k) in pairwise(a):
            if len(out) >= room:
                break
            out += [t - t_prev] + [0.0] * min(max(int(k) - 1, 0), room - len(out) - 1)
        return out


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
