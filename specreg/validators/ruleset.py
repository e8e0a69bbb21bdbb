"""Rule sets: the llama.cpp facts the pair checks mirror, one JSON data file per runtime build.

A later llama.cpp build with other thresholds or defaults is a new file in `rules/`, not a code
change (extracted from its source by tools/extract_rules.py). The id stored with every verdict is
`<name>/r<revision>`; a verdict whose id is not the current one for its runtime is stale. Which
rule set judges a pair follows the server that will run it (servers/identity.py): its build's
file, or the nearest build's with a warning.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path

from specreg.errors import UsageError
from specreg.schemas.record import build

RULES_DIR = Path(__file__).parent / "rules"
# the bundled server's build (xllamacpp 2026.10.11549): what judges a pair when no server is
# named and the installed xllamacpp's own build cannot be told
RULE_SET_DEFAULT = "llama.cpp-b11549"


@dataclass(frozen=True, kw_only=True, eq=False)
class _Strict:
    """A part of a rule set. `load_rule_set` makes them from the shipped files without pydantic
    (schemas.record.build), so `check pair` does not validate them again; the tests validate every shipped
    file against these classes with pydantic, unknown keys refused (`__pydantic_config__`).

    Frozen (one cached instance is shared by every caller) but not compared by value (`eq=False`):
    a rule set is named by its `id`, nothing compares two of them field by field, and value
    equality would have every part generate `__eq__` and `__hash__` each time specreg starts."""

    __pydantic_config__ = {"extra": "forbid"}  # noqa: RUF012  # pydantic's ConfigDict, read as is


@dataclass(frozen=True, kw_only=True, eq=False)
class DraftSimpleRules(_Strict):
    max_size_difference: int
    check_start_token_id: int
    texts_compared_as_c_strings: bool = True


@dataclass(frozen=True, kw_only=True, eq=False)
class _SpecialIdDefaults(_Strict):
    """Special-token ids llama.cpp assumes when the file states none (None: no default)."""

    bos: int | None = None
    eos: int | None = None
    unk: int | None = None
    sep: int | None = None
    pad: int | None = None
    mask: int | None = None


@dataclass(frozen=True, kw_only=True, eq=False)
class TokenizerModelRules(_SpecialIdDefaults):
    """Defaults llama.cpp's vocab loader applies for one `tokenizer.ggml.model`."""

    type: str
    add_bos: bool = False
    add_eos: bool = False
    add_sep: bool = False
    force_pre: str | None = None
    requires_merges: bool = False


@dataclass(frozen=True, kw_only=True, eq=False)
class PreTokenizerRules(_SpecialIdDefaults):
    """What one BPE `tokenizer.ggml.pre` value changes (pre type, add_bos, default bos)."""

    pre_type: str | None = None
    add_bos: bool | None = None
    add_eos: bool | None = None
    add_sep: bool | None = None

    @property
    def stated(self) -> frozenset[str]:
        """The keys the rule set's file states for this pre-tokenizer: a special id stated as
        null disables the model's default (chatglm-bpe's bos), one not stated keeps it. Kept by
        `load_rule_set`; a copy made otherwise (pydantic) counts the ids that are not None."""
        kept: frozenset[str] | None = self.__dict__.get("_stated")
        if kept is not None:
            return kept
        return frozenset(f.name for f in fields(_SpecialIdDefaults) if getattr(self, f.name) is not None)


@dataclass(frozen=True, kw_only=True, eq=False)
class MtpRules(_Strict):
    architectures: list[str]
    required_tensors: list[str]


@dataclass(frozen=True, kw_only=True, eq=False)
class StructureRules(_Strict):
    """What llama.cpp's loader requires of a file's tensors, per architecture (see tools/extract_rules.py)."""

    token_embd_required: list[str]  # archs that cannot load without token_embd.weight
    token_embd_vocab: list[str]  # archs whose token_embd.weight is [n_embd, n_tokens]
    output_vocab: list[str]  # archs whose output.weight (when present) is [n_embd, n_tokens]
    # per arch: every layer needs one alternative of each group; "a+b" means a and b
    block_tensors: dict[str, list[list[str]]]
    block_tensors_dense: dict[str, list[list[str]]]  # in addition, when {arch}.expert_count is 0 or absent
    # per arch whose every layer's attn_q/k/v widths follow from the first layer's head counts
    # (create_tensor_qkv in its loader): the widths of q, k, v, each "n_embd", "head_k*n_head",
    # "head_k*n_head_kv" or "head_v*n_head_kv"
    standard_qkv: dict[str, list[str]]


@dataclass(frozen=True, kw_only=True, eq=False)
class MemoryRules(_Strict):
    """Facts the memory estimate needs that the file does not state."""

    # arch -> [n_pattern, dense_first]: llama.cpp's set_swa_pattern when the file has a window but
    # no per-layer pattern; n_pattern -1: the per-layer bool array must come from the file
    swa_patterns: dict[str, tuple[int, bool]]


@dataclass(frozen=True, kw_only=True, eq=False)
class Eagle3Rules(_Strict):
    architecture: str
    n_target_layers: int
    final_layer_allowed: bool
    d2t_ggml_type: int


@dataclass(frozen=True, kw_only=True, eq=False)
class DFlashRules(_Strict):
    architecture: str
    dspark_tensor: str
    default_block_size: int
    final_layer_archs: list[str]
    d2t_ggml_type: int


@dataclass(frozen=True, kw_only=True, eq=False)
class AdvisoryRules(_Strict):
    """specreg's own thresholds for warnings (not llama.cpp's)."""

    draft_size_warn_ratio: float
    pad_token_patterns: list[str]
    pad_token_types: list[int]
    evidence_max_items: int = 5
    template_warn_bytes: int = 64 << 10  # the largest real chat template in llama.cpp's models/ is 18 KB


@dataclass(frozen=True, kw_only=True, eq=False)
class ServerMetricNames(_Strict):
    """The `/metrics` samples a running server's speculation is read from (tools/server/
    server-task.cpp `to_metrics`); `requests` None: this build counts no requests there."""

    drafted: str
    accepted: str
    drafts: str  # verification steps that carried a draft
    accepted_per_position: str  # one series per draft position, only once something was drafted
    position_label: str
    generated: str  # tokens generated (a request's are added when it finishes)
    generated_seconds: str  # time spent generating them
    processing: str  # requests in flight (a gauge)
    requests: str | None = None


@dataclass(frozen=True, kw_only=True, eq=False)
class ServerRules(_Strict):
    """What a running llama-server of this build shows about itself, as `specreg watch` reads it
    (no pair check uses these)."""

    metrics: ServerMetricNames
    slot_speculative: str  # /slots: per slot, whether it can speculate (server_slot::can_speculate)
    # /props `default_generation_settings.params["speculative.types"]`: the server's configured
    # speculation (False: it is a request's default, "none" even with a draft loaded)
    props_shows_speculation: bool


@dataclass(frozen=True, kw_only=True, eq=False)
class RuleSet(_Strict):
    """Everything a check needs to know about one llama.cpp build."""

    name: str
    revision: int
    runtime: str
    build: int
    source: str = ""  # the source tree the facts were extracted from
    description: str = ""
    draft_simple: DraftSimpleRules
    tokenizer_models: dict[str, TokenizerModelRules]
    bpe_pre_tokenizers: dict[str, PreTokenizerRules]
    bpe_missing_pre: str
    add_bos_forced_pre_types: list[str]
    empty_token_text: str | None
    eot_texts: list[str]
    eom_texts: list[str]
    mtp: MtpRules
    structure: StructureRules
    memory: MemoryRules
    eagle3: Eagle3Rules
    dflash: DFlashRules
    vocab_type_ids: dict[str, int]
    advisory: AdvisoryRules
    server: ServerRules

    @property
    def id(self) -> str:
        """The identity stored with each verdict: name and revision."""
        return f"{self.name}/r{self.revision}"


def known_rule_sets() -> list[str]:
    """Names of the rule sets shipped in `validators/rules/`."""
    return sorted(p.stem for p in RULES_DIR.glob("*.json"))


@cache
def load_rule_set(runtime: str | None = None) -> RuleSet:
    """The rule set for a runtime build name (default: RULE_SET_DEFAULT).

    Raises:
        UsageError: when no rule set is shipped under that name, or its file is invalid.
    """
    name = runtime or RULE_SET_DEFAULT
    path = RULES_DIR / f"{name}.json"
    if "/" in name or not path.is_file():
        known = ", ".join(known_rule_sets()) or "none"
        raise UsageError(f"unknown runtime {name!r}; known rule sets: {known}", hint="pass --runtime with one of those")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        rules: RuleSet = build(RuleSet, data)
        for pre, stated in data["bpe_pre_tokenizers"].items():
            object.__setattr__(rules.bpe_pre_tokenizers[pre], "_stated", frozenset(stated))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise UsageError(f"rule set {path} is invalid: {str(exc).splitlines()[0] if str(exc) else exc!r}") from exc
    return rules


_BUILD_IN_NAME = re.compile(r"-b(\d+)$")  # llama.cpp-b11549: the build a rule set's file is named for


def rule_set_names() -> dict[int, str]:
    """Build number -> the shipped rule set mirroring it, read from the file names (each file's
    own `build` equals its name's: tests/validators/test_ruleset.py), so `check pair` does not
    load and validate every rule set to ask its build, only the one it uses."""
    names = {}
    for name in known_rule_sets():
        m = _BUILD_IN_NAME.search(name)
        if m:
            names[int(m.group(1))] = name
    return names


def for_build(build: int | None) -> tuple[RuleSet, str | None]:
    """The rule set of llama.cpp build `build`, or the nearest shipped one and a warning saying so.

    Nearest: the smallest distance in build numbers (a tie: the older); unknown build:
    RULE_SET_DEFAULT."""
    names = rule_set_names()
    if build is not None and build in names:
        return load_rule_set(names[build]), None
    if build is None:
        rules = load_rule_set(RULE_SET_DEFAULT)
        return rules, f"the server's llama.cpp build is unknown; judged with {rules.name}"
    rules = load_rule_set(names[min(names, key=lambda b: (abs(b - build), b))])
    return rules, f"no rule set for build {build}; judged with {rules.name}"


def current_rule_set_id(rule_set_id: str) -> str | None:
    """The current id for the runtime a stored verdict names, or None if that runtime is unknown."""
    name = rule_set_id.rsplit("/r", 1)[0]
    if name not in known_rule_sets():
        return None
    return load_rule_set(name).id


def is_stale(rule_set_id: str) -> bool:
    """A verdict is stale when its rule set is no longer the current revision of its runtime."""
    return current_rule_set_id(rule_set_id) != rule_set_id
