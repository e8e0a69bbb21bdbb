"""The tokenizer values llama.cpp would actually use, not the ones written in the file.

llama.cpp's vocab loader (src/llama-vocab.cpp, `load()`) starts from per-tokenizer defaults
(SPM: bos=1 eos=2 add_bos=true; BPE: bos=eos=11; ...), lets some pre-tokenizers change them,
drops default ids outside the vocabulary, and ignores out-of-range ids from the file. The
runtime compatibility rule compares these effective values, so the checks must too. The
defaults are data in the rule set; this module only applies them in llama.cpp's order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specreg.schemas.gguf import GGUFSummary
from specreg.validators.ruleset import RuleSet

_SPECIAL_KEYS = ("bos", "eos", "unk", "sep", "pad")


@dataclass(frozen=True)
class EffectiveVocab:
    """One file's tokenizer as llama.cpp loads it (`problem` set when it would refuse to load)."""

    model: str | None
    vocab_type: str
    pre: str | None
    pre_type: str | None
    n_tokens: int
    add_bos: bool
    add_eos: bool
    bos: int | None
    eos: int | None
    sep: int | None
    pad: int | None
    eot: int | None
    eom: int | None
    problem: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    ignored_ids: tuple[tuple[str, int, int | None], ...] = ()  # (kind, id in the file, id used instead)

    def as_evidence(self) -> dict[str, object]:
        """The facts a check prints for one side."""
        return {
            "tokenizer_model": self.model,
            "vocab_type": self.vocab_type,
            "pre": self.pre,
            "n_tokens": self.n_tokens,
            "add_bos": self.add_bos,
            "bos": self.bos,
            "add_eos": self.add_eos,
            "eos": self.eos,
        }


def _in_range(value: int | None, n_tokens: int) -> bool:
    return value is not None and 0 <= value < n_tokens


def effective_vocab(summary: GGUFSummary, rules: RuleSet) -> EffectiveVocab:
    """Apply llama.cpp's loader rules (in its order) to the raw tokenizer keys of one file."""
    tok = summary.tokenizer
    n = tok.n_tokens
    notes: list[str] = []
    model_rules = rules.tokenizer_models.get(tok.model or "")
    if model_rules is None:
        why = "no tokenizer.ggml.model" if tok.model is None else f"unknown tokenizer {tok.model!r}"
        return EffectiveVocab(
            tok.model,
            "UNKNOWN",
            tok.pre,
            None,
            n,
            False,
            False,
            None,
            None,
            None,
            None,
            tok.eot_id,
            tok.eom_id,
            problem=f"llama.cpp cannot load it: {why}",
        )
    problem: str | None = None
    if n == 0 and model_rules.type != "NONE":
        problem = "llama.cpp cannot load it: no tokenizer.ggml.tokens"
    ids: dict[str, int | None] = {k: getattr(model_rules, k) for k in _SPECIAL_KEYS}
    add_bos, add_eos = model_rules.add_bos, model_rules.add_eos
    pre = model_rules.force_pre or tok.pre
    pre_type: str | None = None
    if model_rules.type == "BPE":
        if model_rules.requires_merges and tok.n_merges == 0 and tok.merges_sha256 is None and pre != "kimi-k2":
            problem = problem or "llama.cpp cannot load it: BPE tokenizer without tokenizer.ggml.merges"
        if not pre:
            pre_type = rules.bpe_missing_pre
            notes.append("no tokenizer.ggml.pre: llama.cpp uses the 'default' pre-tokenizer and warns")
        elif pre in rules.bpe_pre_tokenizers:
            pre_rules = rules.bpe_pre_tokenizers[pre]
            pre_type = pre_rules.pre_type
            for key in _SPECIAL_KEYS:
                if key in pre_rules.stated:
                    ids[key] = getattr(pre_rules, key)
            if pre_rules.add_bos is not None:
                add_bos = pre_rules.add_bos
            if pre_rules.add_eos is not None:
                add_eos = pre_rules.add_eos
        else:
            problem = problem or f"llama.cpp cannot load it: unknown pre-tokenizer {pre!r}"
    else:
        pre_type = "DEFAULT"

    # default ids outside the vocabulary are disabled; ids from the file are used only in range
    raw = {"bos": tok.bos_id, "eos": tok.eos_id, "unk": tok.unk_id, "sep": tok.sep_id, "pad": tok.pad_id}
    ignored: list[tuple[str, int, int | None]] = []
    for key in _SPECIAL_KEYS:
        if ids[key] is not None and not _in_range(ids[key], n):
            notes.append(f"default {key} id {ids[key]} is outside the vocabulary: disabled")
            ids[key] = None
        value = raw[key]
        if value is not None:
            if _in_range(value, n):
                ids[key] = value
            else:
                notes.append(f"tokenizer.ggml.{key}_token_id={value} is out of range: default {ids[key]} used")
                ignored.append((key, value, ids[key]))
    eot = tok.eot_id if _in_range(tok.eot_id, n) else None
    eom = tok.eom_id if _in_range(tok.eom_id, n) else None
    for key, value in (("eot", tok.eot_id), ("eom", tok.eom_id)):
        if value is not None and not _in_range(value, n):
            ignored.append((key, value, None))  # no default: llama.cpp looks for the token by its text

    if tok.add_bos is not None:
        add_bos = tok.add_bos
    if tok.add_eos is not None:
        add_eos = tok.add_eos
    if pre_type in rules.add_bos_forced_pre_types and not add_bos:
        add_bos = True
        notes.append(f"llama.cpp forces add_bos=true for the {pre_type} pre-tokenizer")

    return EffectiveVocab(
        tok.model,
        model_rules.type,
        pre,
        pre_type,
        n,
        add_bos,
        add_eos,
        ids["bos"],
        ids["eos"],
        ids["sep"],
        ids["pad"],
        eot,
        eom,
        problem=problem,
        notes=tuple(notes),
        ignored_ids=tuple(ignored),
    )


def c_text(text: str, token_id: int, rules: RuleSet) -> str:
    """A token text as llama.cpp's strcmp sees it: empty texts renamed, cut at the first NUL."""
    if not text and rules.empty_token_text:
        text = rules.empty_token_text.format(id=token_id)
    if rules.draft_simple.texts_compared_as_c_strings:
        cut = text.find("\0")
        if cut >= 0:
            text = text[:cut]
    return text
