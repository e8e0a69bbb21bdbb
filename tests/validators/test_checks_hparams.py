"""structure.hparams takes llama.cpp's limits from its source, and names what it refuses."""

from __future__ import annotations

import json
import re
from pathlib import Path

from _registry_helpers import model

from specreg.gguf import format as F


def test_layer_and_expert_limits_are_the_runtime_s(llama_source: Path) -> None:
    header = (llama_source / "src" / "llama-hparams.h").read_text()
    defines = dict(re.findall(r"#define\s+(LLAMA_MAX_LAYERS|LLAMA_MAX_EXPERTS)\s+(\d+)", header))
    assert int(defines["LLAMA_MAX_LAYERS"]) == F.LLAMA_MAX_LAYERS
    assert int(defines["LLAMA_MAX_EXPERTS"]) == F.LLAMA_MAX_EXPERTS
    loader = (llama_source / "src" / "llama-model.cpp").read_text()
    assert "GGML_ASSERT(hparams.n_layer_all > 0 && hparams.n_layer_all <= LLAMA_MAX_LAYERS)" in loader
    assert "GGML_ASSERT(hparams.n_expert <= LLAMA_MAX_EXPERTS)" in loader


def test_a_block_count_past_32_bits_is_one_check_error(tmp_path: Path) -> None:
    import contextlib
    import io

    from specreg.cli import main

    wide = (("llama.block_count", 2**32 + 1, "UINT64", None),)
    t = model(tmp_path, "t.gguf", kv_overrides=wide)
    d = model(tmp_path, "d.gguf")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(["--db", str(tmp_path / "r.db"), "check", "pair", str(t), str(d), "--json"])
    checks = {c["code"]: c for c in json.loads(out.getvalue())["checks"] if c["evidence"].get("role") == "target"}
    hp = checks["structure.hparams"]
    assert hp["severity"] == "error"
    assert "key llama.block_count has wrong type UINT64 but expected type UINT32" in hp["message"]
    assert checks["structure.blocks"]["evidence"]["n_empty"] == 2**32 + 1 - 2  # arithmetic, not a list
