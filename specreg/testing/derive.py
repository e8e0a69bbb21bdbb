"""Write another precision of a GGUF model with gguf-py: same keys, same tokenizer, same tensors.

Used for the real-model pair (`realmodel.py`): dequantizing the Q4_1 file to F32 gives a target
whose weights are exactly the values the Q4_1 draft approximates; re-quantizing to Q8_0 gives a
second, larger draft. Every key/value is copied in order with its stored type, only
`general.file_type` says what the new file is; tensors are streamed one at a time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

RECIPE = "derive-v1"  # bump when the output of a variant changes: cached files are then rebuilt

# variant -> (general.file_type, ggml type name for 2-D weights, ggml type name for 1-D tensors)
_PLAN: dict[str, tuple[int, str, str]] = {
    "f32": (0, "F32", "F32"),  # LLAMA_FTYPE_ALL_F32
    "f16": (1, "F16", "F32"),  # LLAMA_FTYPE_MOSTLY_F16
    "q8_0": (7, "Q8_0", "F32"),  # LLAMA_FTYPE_MOSTLY_Q8_0
}


def _copy_metadata(reader: Any, writer: Any, file_type: int) -> None:
    import gguf

    for key, fld in reader.fields.items():
        if key.startswith("GGUF.") or key == gguf.Keys.General.ARCHITECTURE:
            continue  # the header is the writer's; it writes general.architecture itself (first)
        vtype = fld.types[0]
        if key == gguf.Keys.General.FILE_TYPE:
            writer.add_key_value(key, file_type, vtype)
            continue
        sub = fld.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, fld.contents(), vtype, sub_type=sub)


def derive(source: str | Path, out: str | Path, variant: str) -> None:
    """Write `variant` ('f32', 'f16', 'q8_0') of the model in `source` to `out`."""
    import gguf
    import numpy as np
    from gguf.quants import dequantize, quant_shape_to_byte_shape, quantize

    if variant not in _PLAN:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(_PLAN)}")
    file_type, weight_type, vector_type = _PLAN[variant]
    Q = gguf.GGMLQuantizationType
    reader = gguf.GGUFReader(source)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(out, arch)
    _copy_metadata(reader, writer, file_type)

    plan: list[tuple[Any, Any]] = []  # (tensor, output type)
    for t in reader.tensors:
        qtype = Q[weight_type if len(t.shape) >= 2 else vector_type]
        shape = tuple(int(n) for n in reversed(t.shape.tolist()))  # numpy order (rows last-dim first)
        n_el = int(t.n_elements)
        if qtype == Q.F32:
            writer.add_tensor_info(t.name, shape, np.dtype(np.float32), n_el * 4)
        elif qtype == Q.F16:
            writer.add_tensor_info(t.name, shape, np.dtype(np.float16), n_el * 2)
        else:
            block, type_size = gguf.GGML_QUANT_SIZES[qtype]
            byte_shape = quant_shape_to_byte_shape(shape, qtype)
            writer.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8), n_el // block * type_size, raw_dtype=qtype)
        plan.append((t, qtype))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t, qtype in plan:
        if t.tensor_type == qtype:
            data = np.asarray(t.data)  # already in the wanted type: copied byte for byte
        else:
            values = dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32, copy=False)
            if qtype == Q.F32:
                data = values
            elif qtype == Q.F16:
                data = values.astype(np.float16)
            else:
                data = quantize(values, qtype)
        writer.write_tensor_data(np.ascontiguousarray(data))
    writer.close()
