"""The wording every view shares (terminal, HTML, Markdown): ratios, plurals, log lines, runtimes, models."""

from __future__ import annotations

import pytest

from specreg.servers.identity import runtime_text
from specreg.text import log_message, model_label, plural, quant_text
from specreg.units import ratio_text, sig_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (2.5533, "2.6x"),  # the draft-size ratio, once printed as 3x
        (1.0, "1.0x"),
        (0.5, "0.50x"),
        (0.69, "0.69x"),
        (85.27, "85x"),
        (9.96, "10x"),  # rounding up past a power of ten keeps two figures, not "10.0"
        (123.4, "120x"),
        (1234.0, "1,200x"),
        (None, "-"),
    ],
)
def test_ratio_text_two_significant_figures(value: float | None, text: str) -> None:
    assert ratio_text(value) == text


def test_sig_text_never_uses_exponents() -> None:
    assert "e" not in sig_text(1.5e7) and sig_text(1.5e7) == "15,000,000"
    assert sig_text(0.000123) == "0.00012"
    assert sig_text(0.0) == "0.0"


@pytest.mark.parametrize(
    ("n", "word", "many", "text"),
    [
        (1, "token text", None, "1 token text"),
        (2, "token text", None, "2 token texts"),
        (0, "pair", None, "0 pairs"),
        (1, "pair", None, "1 pair"),
        (1500, "match", "matches", "1,500 matches"),
    ],
)
def test_plural(n: int, word: str, many: str | None, text: str) -> None:
    assert plural(n, word, many) == text


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "0.02.111.646 W spec common_specu: the target and draft vocabs are not compatible",
            "the target and draft vocabs are not compatible",
        ),
        ("0.00.018.346 E spec         init: failed to create", "failed to create"),  # %12.*s pads on the left
        ("E srv  load_model: failed to load model", "failed to load model"),  # no timestamp
        ("\x1b[34m0.00.018.346\x1b[0m \x1b[35mW spec common_specu: odd\x1b[0m", "odd"),  # colours
        ("llama_model_load: error loading model", "llama_model_load: error loading model"),  # no prefix
        ("W: a line of its own", "W: a line of its own"),
    ],
)
def test_log_message_strips_llama_cpp_prefix(line: str, message: str) -> None:
    assert log_message(line) == message


def test_runtime_text_names_the_build_not_version_zero() -> None:
    bundled = "bundled version: 0 (unknown)\nbuilt with GNU 12 for x86_64\nxllamacpp 2026.10.11549"
    assert runtime_text(bundled) == "bundled xllamacpp 2026.10.11549 (llama.cpp build 11549)"
    assert "\n" not in runtime_text(bundled) and "version: 0" not in runtime_text(bundled)
    assert runtime_text("external version: 11434 (abc1234)\nbuilt with clang") == (
        "external llama.cpp build 11434 (abc1234)"
    )
    assert runtime_text("external version: 0 (unknown)\nbuilt with x") == "external version: 0 (unknown)"
    assert runtime_text(None) == "unknown runtime"


def test_model_label_puts_names_beside_the_sha_prefix() -> None:
    sha = "2fc5918b02d7" + "0" * 52
    assert quant_text("MOSTLY_Q4_K_M") == "Q4_K_M" and quant_text("ALL_F32") == "F32"
    assert quant_text("GUESSED_X") is None and quant_text(None) is None
    assert model_label(sha, name="SmolLM2 135M", file="/m/s.gguf", quant="MOSTLY_Q4_K_M") == (
        "2fc5918b02d7 SmolLM2 135M (s.gguf, Q4_K_M)"
    )
    # the quant already in the file name is not said twice
    assert model_label(sha, name="S", file="s.Q4_K_M.gguf", quant="MOSTLY_Q4_K_M") == "2fc5918b02d7 S (s.Q4_K_M.gguf)"
    assert model_label(sha, file="a/b.gguf", quant="Q8_0") == "2fc5918b02d7 b.gguf (Q8_0)"
    assert model_label(sha) == "2fc5918b02d7"
