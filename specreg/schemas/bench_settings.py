"""The settings of one `bench admitted`: validated once, embedded in every run's manifest.

User input (command-line flags, or a caller's keyword arguments), so unknown fields are errors
and every field carries its constraint; `from_options` turns a validation error into one line
that names the flag.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from specreg.schemas.sampling import MAX_TEMPERATURE, DraftSampling, Sampler

Order = Literal["rounds", "blocked"]
# Repetitions of every prompt: `bench admitted` runs this many by default and the default policy
# asks for as many, so the README's `check pair && bench admitted && audit` can pass.
DEFAULT_REPEAT = 3


# A slot is set aside when other processes take this share of the logical cores while it runs
# (benchmark/store/contention.py says why 0.25, with the numbers measured). SPECREG_BUSY_SHARE sets the
# default for every run (0 or off: set nothing aside), e.g. on a machine that is always shared.
DEFAULT_BUSY_SHARE = 0.25
BUSY_SHARE_ENV = "SPECREG_BUSY_SHARE"
# Before each slot (and between the requests of a long one) a run waits while the machine is that
# busy, at most this long in all (servers/load.py: wait_for_quiet); then it measures, and what it
# measured busy is set aside as before. 0: never wait.
DEFAULT_BUSY_WAIT_S = 180.0


def parse_busy_share(text: str, source: str = "--busy-share") -> float:
    """A share of the cores in [0, 1] ("off": 0); a bad value is one UsageError line."""
    from specreg.errors import UsageError

    t = text.strip().lower()
    if t == "off":
        return 0.0
    try:
        v = float(t)
    except ValueError:
        v = -1.0
    if not 0.0 <= v <= 1.0:
        raise UsageError(f"{source} {text!r}: expected a share of the cores between 0 and 1, or off")
    return v


def parse_wait(text: str, source: str = "--busy-wait") -> float:
    """A wait as `--busy-wait` takes it (`3m`, `90s`, `0` or off for none) -> seconds; a bad value
    is one UsageError line."""
    from specreg.errors import UsageError
    from specreg.units import parse_duration

    if text.strip().lower() in ("0", "0s", "off"):
        return 0.0
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"{source} {exc}") from None


def default_busy_share() -> float:
    env = os.environ.get(BUSY_SHARE_ENV)
    return DEFAULT_BUSY_SHARE if env is None else parse_busy_share(env, BUSY_SHARE_ENV)


def duration_text(seconds: float) -> str:
    """Seconds as a duration option takes them: `3m`, `1.5h`, `90s` (`0` for none)."""
    if seconds <= 0:
        return "0"
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and (seconds / size * 10) % 1 == 0:  # a tenth of the unit at most
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _text(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _flag(name: str) -> dict[str, Any]:
    return {"flag": name}


class BenchSettings(BaseModel):
    """Everything a `bench admitted` invocation can set; validated once, recorded in each manifest.

    `concurrency` and `draft_n_max` are lists: the run measures every value (a sweep). A single
    int is accepted for either. Each field names its command-line flag (json_schema_extra), so a
    validation error can say which option was wrong.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    methods: list[str] | None = Field(default=None, json_schema_extra=_flag("--methods"))
    workload: str = Field(default="default", min_length=1, json_schema_extra=_flag("--workload"))
    repeat: int = Field(default=DEFAULT_REPEAT, ge=1, le=10_000, json_schema_extra=_flag("--repeat"))
    max_tokens: int | None = Field(default=None, ge=1, le=65536, json_schema_extra=_flag("--max-tokens"))
    concurrency: list[int] = Field(default_factory=lambda: [1], min_length=1, json_schema_extra=_flag("--concurrency"))
    draft_n_max: list[int] | None = Field(default=None, min_length=1, json_schema_extra=_flag("--draft-max"))
    draft_n_min: int | None = Field(default=None, ge=0, json_schema_extra=_flag("--draft-min"))
    ngram: dict[str, int] = Field(default_factory=dict, json_schema_extra=_flag("--ngram"))
    seed: int = Field(default=42, ge=0, json_schema_extra=_flag("--seed"))
    # a standard workload's prompts per stratum, drawn with `seed` (None: all of them)
    sample: int | None = Field(default=None, ge=1, le=100_000, json_schema_extra=_flag("--sample"))
    # warm-up: requests until two in a row agree within `warmup_tolerance`, at most `warmup`
    warmup: int = Field(default=8, ge=0, le=1000, json_schema_extra=_flag("--warmup"))
    warmup_tolerance: float = Field(default=0.10, gt=0, lt=1)
    order: Order = Field(default="rounds", json_schema_extra=_flag("--order"))
    bootstrap_resamples: int = Field(default=2000, ge=100, le=1_000_000)
    ctx_size: int = Field(default=4096, ge=1, json_schema_extra=_flag("--ctx-size"))
    threads: int | None = Field(default=None, ge=1, json_schema_extra=_flag("--threads"))
    gpu_layers: str | None = Field(default=None, json_schema_extra=_flag("--gpu-layers"))
    server: str | None = Field(default=None, json_schema_extra=_flag("--server"))
    start_timeout_s: float = Field(default=120.0, gt=0, json_schema_extra=_flag("--start-timeout"))
    request_timeout_s: float = Field(default=120.0, gt=0, json_schema_extra=_flag("--request-timeout"))
    run_timeout_s: float = Field(default=3600.0, gt=0, json_schema_extra=_flag("--run-timeout"))
    # measure until decided: rounds go on after `repeat` until every condition's speed-up is
    # decided against `min_speedup` (decision/bar.py), or this many seconds have passed
    budget_s: float | None = Field(default=None, gt=0, json_schema_extra=_flag("--budget"))
    min_speedup: float = Field(default=1.05, gt=0, json_schema_extra=_flag("--min-speedup"))
    # the sampler (schemas/sampling.py): a list of temperatures is a sweep like `draft_n_max`;
    # top_p / top_k / min_p hold for every temperature (None: the server's default)
    temperature: list[float] = Field(
        default_factory=lambda: [0.0], min_length=1, json_schema_extra=_flag("--temperature")
    )
    top_p: float | None = Field(default=None, gt=0.0, le=1.0, json_schema_extra=_flag("--top-p"))
    top_k: int | None = Field(default=None, ge=0, json_schema_extra=_flag("--top-k"))
    min_p: float | None = Field(default=None, ge=0.0, le=1.0, json_schema_extra=_flag("--min-p"))
    # --spec-draft-sampling for draft methods at temperature > 0 (None: the build's default)
    draft_sampling: list[DraftSampling] | None = Field(
        default=None, min_length=1, json_schema_extra=_flag("--draft-sampling")
    )
    # a busy machine: slots whose other processes took this share of the cores, or holding a
    # request far outside its prompt's spread, are set aside (benchmark/store/contention.py); 0: none
    busy_share: float = Field(default_factory=default_busy_share, ge=0, le=1, json_schema_extra=_flag("--busy-share"))
    # ... and before measuring, the run waits for a quieter machine, this many seconds in all (0: never)
    busy_wait_s: float = Field(default=DEFAULT_BUSY_WAIT_S, ge=0, le=86400, json_schema_extra=_flag("--busy-wait"))
    # --tune: a short first pass at one generous draft length, then the draft lengths its
    # acceptance profile predicts best, decided first, its neighbours while they could beat it (benchmark/plan/tune.py)
    tune: bool = Field(default=False, json_schema_extra=_flag("--tune"))
    # the server on all cores but one, the client on that one, on 4+ cores (servers/pinning.py); False: the
    # build's threads on every core (before issue 32)
    pin: bool = Field(default=True, json_schema_extra=_flag("--pin"))
    # rounds in a balanced order (each round the reverse of the one before, rotated every two:
    # ABBA for two conditions, conditions.balanced_order); False: a seeded shuffle per round
    balance: bool = Field(default=True, json_schema_extra=_flag("--shuffle"))

    @field_validator("tune")
    @classmethod
    def _tuning(cls, v: bool, info: ValidationInfo) -> bool:  # declared after what it reads
        lengths = info.data.get("draft_n_max")
        if v and info.data.get("budget_s") is None:
            raise ValueError("needs --budget DURATION: it measures the candidates until the best is decided")
        if v and lengths is not None and len(lengths) > 1:
            raise ValueError("takes one --draft-max, the first pass's draft length (the candidates are chosen)")
        if v and (len(info.data.get("temperature") or [0.0]) > 1 or len(info.data.get("draft_sampling") or []) > 1):
            raise ValueError("tunes at one sampler: give one --temperature and one --draft-sampling")
        return v

    @field_validator("concurrency", "draft_n_max", mode="before")
    @classmethod
    def _listed(cls, v: object) -> object:
        return [v] if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if any(c < 1 for c in v):
            raise ValueError("every concurrency must be at least 1")
        return sorted(set(v))

    @field_validator("draft_n_max")
    @classmethod
    def _lengths(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(k < 0 for k in v):
            raise ValueError("every draft length must be >= 0")
        return None if v is None else sorted(set(v))

    @field_validator("temperature", mode="before")
    @classmethod
    def _temperatures_listed(cls, v: object) -> object:
        return [v] if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    @field_validator("temperature")
    @classmethod
    def _temperatures(cls, v: list[float]) -> list[float]:
        if any(not 0.0 <= t <= MAX_TEMPERATURE for t in v):
            raise ValueError(f"every temperature must be between 0 and {MAX_TEMPERATURE:g}")
        return sorted(set(v))

    @field_validator("draft_sampling", mode="before")
    @classmethod
    def _modes_listed(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v

    @field_validator("draft_sampling")
    @classmethod
    def _modes(cls, v: list[DraftSampling] | None) -> list[DraftSampling] | None:
        return None if v is None else list(dict.fromkeys(v))

    def samplers(self) -> list[Sampler]:
        """One sampler per temperature, greedy first: the stages in the protocol's order."""
        return [Sampler(temperature=t, top_p=self.top_p, top_k=self.top_k, min_p=self.min_p) for t in self.temperature]

    @classmethod
    def from_options(cls, **values: Any) -> BenchSettings:
        """Validated settings from command-line values; a bad value is a UsageError naming its flag."""
        from pydantic import ValidationError

        from specreg.errors import UsageError

        try:
            return cls(**values)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else ""
            more = len(exc.errors()) - 1
            tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
            msg = str(first["msg"]).removeprefix("Value error, ")
            raise UsageError(f"{cls.flag_of(field)}: {msg}{tail}") from None

    def argv(self) -> list[str]:
        """The `bench admitted` options that give these settings again (those set away from their
        defaults), in field order: what a message that says how to measure again prints."""
        out: list[str] = []
        defaults = BenchSettings()
        for name, info in type(self).model_fields.items():
            extra = info.json_schema_extra
            flag = extra.get("flag") if isinstance(extra, dict) else None
            value, default = getattr(self, name), getattr(defaults, name)
            if not isinstance(flag, str) or value == default:
                continue
            if isinstance(value, bool):  # --tune; --no-pin; --shuffle (balance off)
                out.append(flag if value else "--no-" + flag.removeprefix("--") if name == "pin" else flag)
            elif isinstance(value, dict):
                out += [x for k, v in value.items() for x in ("--ngram", f"{k.removeprefix('--spec-ngram-')}={v}")]
            elif isinstance(value, list):
                out += [flag, ",".join(_text(v) for v in value)]
            elif name == "busy_share" and value == 0:
                out += [flag, "off"]
            elif name in ("budget_s", "busy_wait_s"):
                out += [flag, duration_text(value)]
            elif value is not None:
                out += [flag, _text(value)]
        return out

    @classmethod
    def flag_of(cls, field: str) -> str:
        """The command-line flag of a field (for error messages)."""
        info = cls.model_fields.get(field)
        extra = info.json_schema_extra if info is not None else None
        return str(extra["flag"]) if isinstance(extra, dict) and "flag" in extra else field
