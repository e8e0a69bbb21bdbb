"""Surface: GGUF files the reader accepts, with one hyper-parameter re-labelled to a hostile count.

A tiny real model (specreg.testing's factory: real tensors, real tokenizer) is written again
with one key replaced in place by a count at 0, 1, 2^31, 2^32+1, 10^12, 2^63-1 or a negative,
stored in the narrowest GGUF integer type that holds it (or deliberately too wide). Each file
goes through `check pair` (as target, as draft, every method whose rules read it), `inspect`,
the memory prediction (`--budget`) and the structure checks. Besides the oracle, a file
llama.cpp's loader is known to refuse (`llama_refuses`: its load_hparams and shape checks, as
far as they follow from the header alone) must not be admitted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from fuzz.oracle import Case
from specreg.testing import ModelSpec, write_model

COUNTS = [0, 1, 2**31, 2**32 + 1, 10**12, 2**63 - 1, -1, -(2**31)]
# the architectures issue 23 names, and the speculative ones; the long pass adds every one the rule set knows
ARCHS = ["llama", "qwen2", "qwen3moe", "glm4moe", "deepseek2", "gemma3", "phi3"]
BASE = ModelSpec()
N_EMBD, N_HEAD, N_BLOCKS = BASE.n_embd, BASE.n_head, BASE.n_layer
# short name -> key template; each read by some check, the summary or the memory model
KEYS = {
    "blocks": "{arch}.block_count",
    "experts": "{arch}.expert_count",
    "experts_used": "{arch}.expert_used_count",
    "heads": "{arch}.attention.head_count",
    "heads_kv": "{arch}.attention.head_count_kv",
    "context": "{arch}.context_length",
    "embedding": "{arch}.embedding_length",
    "ffn": "{arch}.feed_forward_length",
    "vocab": "{arch}.vocab_size",
    "nextn": "{arch}.nextn_predict_layers",
    "key_length": "{arch}.attention.key_length",
    "sliding_window": "{arch}.attention.sliding_window",
    "kv_lora_rank": "{arch}.attention.kv_lora_rank",
    "expert_ffn": "{arch}.expert_feed_forward_length",
}
# llama.cpp's generic load_hparams reads these with get_key<uint32_t>: any other type is refused
_U32_KEYS = {
    "blocks", "experts", "experts_used", "heads", "heads_kv", "context", "embedding", "ffn", "nextn", "key_length",
}  # fmt: skip


def gguf_type(value: int, wide: bool = False) -> str:
    """The narrowest GGUF integer type for `value` (UINT32 for a count), or a 64-bit one with `wide`."""
    if value >= 0:
        return "UINT64" if wide or value >= 2**32 else "UINT32"
    return "INT64" if wide or value < -(2**31) else "INT32"


@dataclass(frozen=True)
class Relabel:
    arch: str
    key: str  # a short name of KEYS, or "eagle3.layers" / "eagle3.hidden" / "dflash.block_size"
    value: int
    vtype: str

    @property
    def name(self) -> str:
        return f"{self.arch}-{self.key}-{self.value}-{self.vtype}"


@dataclass(frozen=True)
class Loader:
    """The rule-set facts llama_refuses needs (from specreg's rule set, extracted from llama.cpp)."""

    token_embd_vocab: frozenset[str]
    standard_qkv: dict[str, list[str]]  # arch -> widths of q, k, v (the rule set's structure.standard_qkv)


def llama_refuses(r: Relabel, loader: Loader) -> bool:
    """What llama.cpp b11434's loader certainly refuses of this re-labelled 2-block, 4-head model."""
    if r.key in _U32_KEYS and r.vtype != "UINT32":
        return True  # "key ... has wrong type"
    v = r.value
    widths = loader.standard_qkv.get(r.arch, ())
    uses = {"heads", "heads_kv", "embedding"}
    if any(w.startswith("head_k") for w in widths):  # key_length sizes q or k only there
        uses.add("key_length")
    if widths and r.key in uses:
        # q/k/v widths are head_dim x heads: any other head count or head size is the wrong shape
        return v != {"heads": N_HEAD, "heads_kv": N_HEAD, "key_length": N_EMBD // N_HEAD}.get(r.key, N_EMBD)
    token_embd_vocab = loader.token_embd_vocab
    return {
        "blocks": v != N_BLOCKS,  # 0 or > 512: GGML_ASSERT; any other: "wrong number of tensors"
        "experts": v > 0,  # > 1024: GGML_ASSERT; else experts without expert_used_count > 0
        "experts_used": v > 0,  # more experts used than the 0 experts
        "heads": v == 0 or v > N_EMBD,  # attention tensors narrower than one column per head
        "heads_kv": v == 0 or v > N_EMBD,
        "nextn": v > N_BLOCKS,
        "embedding": v != N_EMBD and r.arch in token_embd_vocab,  # token_embd has the wrong shape
    }.get(r.key, False)


def spec_for(r: Relabel) -> ModelSpec:
    if r.key in KEYS:
        return BASE.but(architecture=r.arch, kv_overrides=((KEYS[r.key].format(arch=r.arch), r.value, r.vtype, None),))
    if r.key == "eagle3.layers":
        item = "INT32" if -(2**31) <= r.value < 2**31 else "INT64"
        return EAGLE.but(kv_overrides=(("eagle3.target_layers", [0, 1, r.value], "ARRAY", item),))
    if r.key == "eagle3.hidden":
        return EAGLE.but(kv_overrides=(("eagle3.target_hidden_size", r.value, r.vtype, None),))
    if r.key == "dflash.block_size":
        return DFLASH.but(kv_overrides=(("dflash.block_size", r.value, r.vtype, None),))
    if r.key == "mtp.nextn":
        return MTP.but(kv_overrides=(("qwen35.nextn_predict_layers", r.value, r.vtype, None),))
    raise ValueError(r.key)


EAGLE = BASE.but(
    architecture="eagle3",
    n_layer=1,
    eagle3_target_layers=(0, 1, 2),
    eagle3_target_hidden_size=64,
    base_model="specreg-tiny",
)
DFLASH = BASE.but(
    architecture="dflash", n_layer=1, dflash_block_size=16, dflash_target_layers=(1, 2), base_model="specreg-tiny"
)
MTP = BASE.but(architecture="qwen35", nextn_predict_layers=1)
TARGET3 = BASE.but(n_layer=3)  # the target the EAGLE-3 / DFlash drafts read
SPECULATIVE_KEYS = ("eagle3.layers", "eagle3.hidden", "dflash.block_size", "mtp.nextn")


def relabels(archs: list[str], keys: list[str], counts: list[int], *, wide: bool = False) -> list[Relabel]:
    out = []
    for arch in archs:
        for key in keys:
            for v in counts:
                out.append(Relabel(arch, key, v, gguf_type(v)))
                if wide and 0 <= v < 2**32:
                    out.append(Relabel(arch, key, v, gguf_type(v, wide=True)))
    return out


def speculative_relabels(counts: list[int]) -> list[Relabel]:
    return [Relabel("-", key, v, gguf_type(v)) for key in SPECULATIVE_KEYS for v in counts]


def cases(relabelled: list[Relabel], work: Path, loader: Loader, *, every_command: bool) -> list[Case]:
    """The commands each file goes through; `every_command`: as target and as draft, all methods."""
    work.mkdir(parents=True, exist_ok=True)
    base = write_model(work / "base.gguf", BASE)
    target3 = write_model(work / "target3.gguf", TARGET3)
    db = str(work / "registry.db")
    out: list[Case] = []
    for r in relabelled:
        f = str(write_model(work / f"{r.name}.gguf", spec_for(r)))
        refused = llama_refuses(r, loader)
        js = ["--json"]
        if r.key.startswith("eagle3."):
            runs = [["check", "pair", str(target3), f, "--method", "draft-eagle3", *js]]
        elif r.key.startswith("dflash."):
            runs = [["check", "pair", str(target3), f, "--method", "draft-dflash", *js]]
        elif r.key.startswith("mtp."):
            runs = [["check", "pair", f, "--method", "draft-mtp", "--budget", "1GiB", *js]]
        else:
            runs = [["check", "pair", f, str(base), "--method", "draft-simple", "--budget", "1GiB", *js]]
            if every_command or r.key == "blocks":  # inspect reads the summary only: blocks stand for all
                runs.append(["inspect", f, *js])
            if every_command:
                runs.append(["check", "pair", str(base), f, "--method", "draft-simple", *js])
                runs.append(["check", "pair", f, "--method", "ngram-simple", "--budget", "64MiB", *js])
                runs.append(["check", "pair", f, "--method", "draft-mtp", *js])
                runs.append(["inspect", f])
        for i, argv in enumerate(runs):
            out.append(Case(id=f"gguf:{r.name}:{i}", argv=["--db", db, *argv], db=db, expect_refused=refused))
    return out


def sample(items: list[Relabel], n: int, seed: int) -> list[Relabel]:
    rng = random.Random(seed)
    return items if len(items) <= n else rng.sample(items, n)
