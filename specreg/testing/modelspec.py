"""What distinguishes one tiny test model from another: `ModelSpec`, and the specs others share.

Its own module so the vocabulary builder (testing/vocab.py) and the weight writer
(testing/factory.py) can both read a spec without importing each other.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

SMALL_NOISE = 0.05  # partial acceptance against the same-seed target (measured: ~30-70%)


@dataclass(frozen=True)
class ModelSpec:
    """Everything that distinguishes one tiny test model from another."""

    # weights
    seed: int = 0
    noise: float = 0.0
    noise_seed: int = 1
    weight_scale: float = 0.5
    # A "really faster" pair: blocks scaled down to nearly nothing make the next token a function
    # of the current one, and a head (embeddings, output) from its own seed is the same for any
    # depth, so a 1-layer draft predicts what an 8-layer target does at an eighth of the cost.
    block_scale: float = 1.0  # multiplies every 2-D block weight
    head_seed: int | None = None  # token_embd / output from this seed instead of the base stream
    # > 0: a head that loops - every token is followed by the first of `cycle` tokens in the
    # middle of the vocabulary, each of those by the next, the last by the first again (with
    # blocks scaled to nearly nothing: see CYCLER)
    cycle: int = 0
    # (token, next) pairs: a head under which greedy decoding follows this table - each listed
    # token is followed by its next, every other token by the first pair's next (with blocks
    # scaled to nearly nothing). Loops of chosen tokens: the demo's target (specreg/demo.py)
    next_tokens: tuple[tuple[int, int], ...] = ()
    file_type: str = "f32"  # "f32" or "f16" (2-D weights; norms stay f32)
    # shape
    architecture: str = "llama"
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 4
    n_ff: int = 128
    n_ctx: int = 512
    vocab_only: bool = False
    # vocabulary
    vocab_type: str = "llama"  # tokenizer.ggml.model: "llama" (SPM) or "gpt2" (BPE)
    # a real tokenizer: every tokenizer.* key copied from this GGUF (e.g. llama.cpp's
    # models/ggml-vocab-*.gguf); the vocabulary fields below are then ignored
    tokenizer_from: str | None = None
    pre: str | None = None  # tokenizer.ggml.pre
    n_words: int = 160  # word pieces after the 256 byte tokens
    extra_tokens: int = 0  # appended tokens ("<extra_N>", type USER_DEFINED)
    pad_tokens: int = 0  # appended padding tokens ("[PAD_N]", type UNUSED)
    token_edits: tuple[tuple[int, str], ...] = ()  # (id, new text)
    token_type_edits: tuple[tuple[int, int], ...] = ()  # (id, new type)
    merge_edits: tuple[tuple[int, str], ...] = ()  # (index, new "left right" merge), BPE only
    # special tokens; None leaves the key out of the file
    bos_id: int | None = 1
    eos_id: int | None = 2
    unk_id: int | None = 0
    pad_id: int | None = None
    eot_id: int | None = None
    eom_id: int | None = None
    add_bos: bool | None = True
    add_eos: bool | None = False
    chat_template: str | None = None
    # identity, licence, provenance
    name: str | None = "specreg-tiny"
    license: str | None = "apache-2.0"
    license_name: str | None = None
    license_link: str | None = None
    base_model: str | None = None  # general.base_model.0.name
    base_model_repo_url: str | None = None
    repo_url: str | None = None
    # speculative metadata
    eagle3_target_layers: tuple[int, ...] | None = None
    eagle3_target_hidden_size: int | None = None
    d2t: tuple[int, ...] | None = None  # EAGLE-3 draft-to-target id offsets
    dflash_block_size: int | None = None
    dflash_target_layers: tuple[int, ...] | None = None
    dflash_target_hidden_size: int | None = None
    nextn_predict_layers: int = 0  # MTP heads: extra blocks with blk.N.nextn.* tensors
    extra_kv: tuple[tuple[str, object], ...] = ()
    # (key, value, GGUF type name, array item type name or None): replaces a key the factory writes,
    # in place and with the stated type (hostile counts: block_count as UINT64 2^32+1, INT32 -1)
    kv_overrides: tuple[tuple[str, object, str, str | None], ...] = ()
    # tensors added or reshaped (name, numpy shape), e.g. a DSpark head ("markov_w1.weight") or a
    # reduced-vocab EAGLE-3 output ("output.weight", (n_draft_vocab, n_embd)); and tensors left out
    extra_tensors: tuple[tuple[str, tuple[int, ...]], ...] = ()
    drop_tensors: tuple[str, ...] = ()

    def but(self, **changes: object) -> ModelSpec:
        """This spec with some fields changed (the one-rule-broken variants)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


# Tiny weights whose output loops with a period of 64 tokens whatever the prompt: near-zero blocks
# under a head that maps every token to the next of the cycle. Every n-gram method then drafts in
# full (ngram-simple copies at most one period, so the period must be at least its 48-token
# m-gram), and a draft of the same head is always accepted: the memory of real speculation on a
# tiny model.
CYCLER = ModelSpec(head_seed=7, block_scale=0.01, cycle=64)
# A pair on which a draft model wins on 2 cores (benchmarks/bench_decision.py, tests of --tune and
# its strata): a 16-layer target and a 1-layer draft of the same weights, wide enough that a
# verification batch costs little more than one token.
FAST_PAIR = {"n_embd": 384, "n_ff": 1536, "n_ctx": 1024, "block_scale": 0.02, "head_seed": 7}
FAST_TARGET = ModelSpec(n_layer=16, **FAST_PAIR)  # type: ignore[arg-type]
FAST_DRAFT = ModelSpec(n_layer=1, name="small-draft", **FAST_PAIR)  # type: ignore[arg-type]
# Two strata for that pair: prompts the models repeat (drafting wins most) and plain questions.
FAST_ITEMS = [
    {"id": "rep-1", "stratum": "repetitive", "max_tokens": 32, "prompt": "a b c a b c a b c"},
    {"id": "rep-2", "stratum": "repetitive", "max_tokens": 32, "prompt": "key: value\nkey: value\nkey:"},
    {"id": "chat-1", "stratum": "chat", "max_tokens": 32, "prompt": "Why test a server before production?"},
    {"id": "chat-2", "stratum": "chat", "max_tokens": 32, "prompt": "Question: what is a draft model?\nAnswer:"},
]
# A passage longer than ngram-simple's 48-token m-gram: a real model given it three times over
# goes on repeating it, so the n-gram methods draft in full on a real model too.
LOOP_TEXT = (
    "The small draft model proposes a few tokens, the target model checks all of them in one "
    "batch and keeps the ones it agrees with, then the draft starts again from the first token "
    "the target rejected, so the output is exactly what the target alone would have written. "
)
