"""Derive ggml's tensor type table (id, name, block size, bytes per block) from a llama.cpp tree.

The reader must size tensors exactly as the runtime does: a wrong block size refuses files the
runtime loads (Q8_1 is 36 bytes in ggml, 40 in the `gguf` 0.19 wheel) or admits ones it refuses.
So the table is taken from the runtime's own source, not from a Python package's copy of it:

- ids and names: `enum ggml_type` in ggml/include/ggml.h;
- block and type sizes: `type_traits[]` in ggml/src/ggml.c (`.blck_size`, `.type_size`), where
  each `sizeof(block_x)` is the expression of its `static_assert(sizeof(block_x) == ...)` in
  ggml/src/ggml-common.h, evaluated with the header's `#define`s and the C sizes of the scalar
  types (removed types have size 0 there and are left out: the runtime refuses them too).

A new llama.cpp build is a data change:
`python tools/extract_ggml_types.py SRC_TREE > specreg/gguf/ggml_types.py`, then review the diff.
tests/gguf/test_ggml_types.py re-extracts the table from the cached source and compares every type
(and checks the sdist's own gguf-py, and, where a compiler is there, ggml itself), so a
transcription error cannot hide. Never imported by specreg.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

# C sizes of the scalar types type_traits[] and the static_asserts name (ggml.h: ggml_fp16_t is
# uint16_t, ggml_bf16_t a struct of one uint16_t; ggml-common.h: ggml_half(2) are uint16_t/uint32_t).
C_SIZES = {
    "int8_t": 1,
    "uint8_t": 1,
    "int16_t": 2,
    "uint16_t": 2,
    "int32_t": 4,
    "uint32_t": 4,
    "int64_t": 8,
    "uint64_t": 8,
    "float": 4,
    "double": 8,
    "ggml_fp16_t": 2,
    "ggml_bf16_t": 2,
    "ggml_half": 2,
    "ggml_half2": 4,
}


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _enum(ggml_h: str) -> dict[int, str]:
    body = re.search(r"enum\s+ggml_type\s*\{(.*?)\};", _strip_comments(ggml_h), re.S)
    if body is None:
        raise ValueError("ggml.h: no enum ggml_type")
    return {int(v): name for name, v in re.findall(r"GGML_TYPE_(\w+)\s*=\s*(\d+)", body.group(1)) if name != "COUNT"}


def _defines(common_h: str) -> dict[str, str]:
    """`#define NAME value` (the value as text, as the preprocessor substitutes it)."""
    return dict(re.findall(r"^#define\s+(\w+)\s+([^\n]+?)\s*$", _strip_comments(common_h), re.M))


def _block_sizes(common_h: str) -> dict[str, str]:
    """block struct name -> the expression its static_assert says sizeof() equals."""
    pairs = re.findall(r"static_assert\(\s*sizeof\((block_\w+)\)\s*==\s*([^,]+),", _strip_comments(common_h))
    return dict(pairs)


def _eval(expr: str, defines: dict[str, str], blocks: dict[str, str], depth: int = 0) -> int:
    """A C integer constant expression of sizeof(), macros, + - * / and parentheses."""
    if depth > 8:
        raise ValueError(f"too deeply nested: {expr}")

    def sizeof(m: re.Match[str]) -> str:
        name = m.group(1)
        if name in C_SIZES:
            return str(C_SIZES[name])
        if name in blocks:
            return f"({_eval(blocks[name], defines, blocks, depth + 1)})"
        raise ValueError(f"no size known for {name}")

    text = re.sub(r"sizeof\(\s*(\w+)\s*\)", sizeof, expr)
    for _ in range(8):  # macros may expand to macros (IQ3S_N_SCALE -> QK_K/64); textually, as cpp does
        new = re.sub(r"\b([A-Z_][A-Z0-9_]*)\b", lambda m: defines.get(m.group(1), m.group(1)), text)
        if new == text:
            break
        text = new
    return _arith(ast.parse(text.strip(), mode="eval").body, expr)


def _arith(node: ast.expr, where: str) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp):
        a, b = _arith(node.left, where), _arith(node.right, where)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.Div) and a >= 0 and b > 0:
            return a // b  # C integer division (operands here are non-negative)
    raise ValueError(f"not an integer constant expression: {where}")


def _traits(ggml_c: str) -> dict[str, tuple[str, str]]:
    """type_traits[] entry key ('Q8_1' or '4') -> (blck_size expression, type_size expression)."""
    text = _strip_comments(ggml_c)
    head = "type_traits[GGML_TYPE_COUNT] = {"
    start = text.index(head) + len(head)
    end = text.index("\n};", start)
    out = {}
    for m in re.finditer(r"\[\s*(?:GGML_TYPE_(\w+)|(\d+))\s*\]\s*=\s*\{(.*?)\n\s*\},", text[start:end], re.S):
        name, number, body = m.group(1), m.group(2), m.group(3)
        blck = re.search(r"\.blck_size\s*=\s*([^,\n]+),", body)
        size = re.search(r"\.type_size\s*=\s*([^,\n]+),", body)
        if blck is None or size is None:
            raise ValueError(f"ggml.c: type_traits entry {name or number} lacks blck_size/type_size")
        out[name or number] = (blck.group(1).strip(), size.group(1).strip())
    return out


def extract_ggml_types(src: Path) -> dict[int, tuple[str, int, int]]:
    """ggml type id -> (name, block size, bytes per block) for every type the runtime can load."""
    ggml = src / "ggml"
    enum = _enum((ggml / "include" / "ggml.h").read_text())
    common = (ggml / "src" / "ggml-common.h").read_text()
    defines, blocks = _defines(common), _block_sizes(common)
    traits = _traits((ggml / "src" / "ggml.c").read_text())
    table: dict[int, tuple[str, int, int]] = {}
    for tid, name in sorted(enum.items()):
        if name not in traits:
            raise ValueError(f"ggml.c: type_traits has no entry for GGML_TYPE_{name}")
        blck_expr, size_expr = traits[name]
        blck, size = _eval(blck_expr, defines, blocks), _eval(size_expr, defines, blocks)
        if blck > 0 and size > 0:
            table[tid] = (name, blck, size)
    return table


def render(table: dict[int, tuple[str, int, int]], build: str) -> str:
    lines = [
        f'"""ggml\'s tensor types as llama.cpp {build} defines them. Generated; do not edit.',
        "",
        "Written by `python tools/extract_ggml_types.py SRC_TREE > specreg/gguf/ggml_types.py` from the",
        "runtime's own source (ggml.h's enum ggml_type, ggml.c's type_traits[], ggml-common.h's block",
        "structs); tests/gguf/test_ggml_types.py re-extracts it from that source and compares every type.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Final",
        "",
        f'RUNTIME: Final = "llama.cpp {build}"',
        "",
        "# ggml type id -> (name, block size in elements, bytes per block); removed types are absent",
        "GGML_TYPES: Final[dict[int, tuple[str, int, int]]] = {",
        *(f'    {tid}: ("{name}", {blck}, {size}),' for tid, (name, blck, size) in sorted(table.items())),
        "}",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: extract_ggml_types.py SRC_TREE [BUILD, e.g. b11434]", file=sys.stderr)
        return 2
    build = argv[2] if len(argv) == 3 else "b11434"
    sys.stdout.write(render(extract_ggml_types(Path(argv[1])), build))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
