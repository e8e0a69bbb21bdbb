"""draft-dflash / draft-dspark: block-diffusion drafts that read the target's layer inputs.

Mirrors src/models/dflash.cpp and the DFlash implementation in common/speculative.cpp:
- `dflash.target_layers` is required (load throws without it); each id is passed to
  llama_set_embeddings_layer_inp, which asserts id <= n_layer, and only a few target graphs
  expose layer n_layer (rule set: dflash.final_layer_archs) - anything else aborts the server.
- the encoder input width is n_target_layers * the draft's own embedding length, while the
  target delivers n_target_layers * its embedding length: they must be equal.
- `dflash.block_size` falls back to 16 when absent: drafting then runs with a block size the
  draft was not trained for, so a missing key is an error here.
- DSpark is a DFlash draft with a Markov head (`markov_w1.weight`), the tensor llama.cpp's
  own auto-detection uses to tell them apart.
"""

from __future__ import annotations

from specreg.schemas.checks import CheckResult
from specreg.validators.checks_common import base_model
from specreg.validators.checks_eagle3 import architecture, d2t, hidden_size, target_layers
from specreg.validators.checks_simple import tokenizer_identity
from specreg.validators.ruleset import RuleSet
from specreg.validators.side import Side, result


def is_dspark(d: Side, rules: RuleSet) -> bool:
    """llama.cpp's own test (common_speculative_types_from_gguf): the Markov head tensor."""
    return d.tensor(rules.dflash.dspark_tensor) is not None


def check_dflash(t: Side, d: Side, rules: RuleSet, *, dspark: bool) -> list[CheckResult]:
    r = rules.dflash
    spec = d.summary.speculative
    arch = r.architecture
    out = [architecture("dflash.architecture", d, arch)]

    block = spec.dflash_block_size
    if block is None:
        out.append(
            result(
                "dflash.block_size",
                "error",
                f"{arch}.block_size is missing: llama.cpp would draft with its default "
                f"{r.default_block_size}, not the trained size",
                block_size=None,
                default=r.default_block_size,
            )
        )
    elif block < 2:
        out.append(
            result("dflash.block_size", "error", f"{arch}.block_size {block} leaves no draft tokens", block_size=block)
        )
    else:
        out.append(result("dflash.block_size", "pass", f"trained block size {block}", block_size=block))

    final_ok = t.summary.architecture in r.final_layer_archs
    out.append(
        target_layers(
            "dflash.target_layers",
            spec.dflash_target_layers,
            t,
            n_required=None,
            final_allowed=final_ok,
            key=f"{arch}.target_layers",
        )
    )

    # llama.cpp sizes the encoder by the draft's embedding length; a stated target_hidden_size must agree too
    out.append(
        hidden_size(
            "dflash.target_hidden_size",
            d.summary.embedding_length,
            t,
            what="draft embedding length (DFlash encoder width per layer)",
            consequence="the draft rejects every batch of target features",
        )
    )
    stated = spec.dflash_target_hidden_size
    if stated is not None and stated != t.summary.embedding_length:
        out[-1] = result(
            "dflash.target_hidden_size",
            "error",
            f"{arch}.target_hidden_size {stated} != target embedding length {t.summary.embedding_length}",
            draft=stated,
            target=t.summary.embedding_length,
            source=f"{arch}.target_hidden_size",
        )

    out.append(d2t("dflash.d2t", t, d, r.d2t_ggml_type))
    out.append(tokenizer_identity("dflash.tokenizer", t, d, rules))

    has_head = is_dspark(d, rules)
    if dspark and not has_head:
        out.append(
            result(
                "dspark.markov_head",
                "error",
                f"draft-dspark needs the Markov head tensor {r.dspark_tensor}; this is a plain DFlash draft",
                tensor=r.dspark_tensor,
                present=False,
            )
        )
    elif not dspark and has_head:
        out.append(
            result(
                "dspark.markov_head",
                "warn",
                f"draft has a DSpark Markov head ({r.dspark_tensor}): run it as draft-dspark",
                tensor=r.dspark_tensor,
                present=True,
            )
        )
    else:
        out.append(
            result(
                "dspark.markov_head",
                "pass",
                "Markov head " + ("present" if has_head else "absent, as expected"),
                tensor=r.dspark_tensor,
                present=has_head,
            )
        )
    out.append(base_model("dflash.base_model", t, d))
    return out
