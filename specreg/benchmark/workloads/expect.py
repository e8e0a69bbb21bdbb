"""Output checks from a workload's `expect`: exact text, a regex, or a JSON-schema subset.

The schema subset (type, properties, required, additionalProperties, items, enum, const,
minItems, maxItems, minLength, maxLength, minimum, maximum) covers what workloads need without
another dependency; a schema using any other keyword is refused when the workload loads, so a
check is never silently weaker than written.
"""

from __future__ import annotations

import json
import re
from typing import Any

from specreg.schemas.bench import Expect

SUPPORTED = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "title",
    "description",
    "$schema",
}
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "number": (int, float),
    "integer": (int,),
    "null": (type(None),),
}


def unsupported_keywords(schema: Any, path: str = "$") -> list[str]:
    """Keywords this checker does not implement, with where they are (empty: fully supported)."""
    out: list[str] = []
    if not isinstance(schema, dict):
        return [f"{path} (not an object)"]
    for k, v in schema.items():
        if k not in SUPPORTED:
            out.append(f"{path}.{k}")
        elif k == "properties" and isinstance(v, dict):
            for name, sub in v.items():
                out += unsupported_keywords(sub, f"{path}.properties.{name}")
        elif k == "items":
            out += unsupported_keywords(v, f"{path}.items")
    return out


def _validate(value: Any, schema: dict[str, Any], path: str) -> str | None:
    t = schema.get("type")
    if t is not None:
        names = t if isinstance(t, list) else [t]
        ok = any(
            isinstance(value, _TYPES.get(n, ())) and not (n in ("number", "integer") and isinstance(value, bool))
            for n in names
        )
        if not ok:
            return f"{path}: expected {t}, got {type(value).__name__}"
    if "const" in schema and value != schema["const"]:
        return f"{path}: expected {schema['const']!r}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path}: not one of {schema['enum']!r}"
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                return f"{path}: missing required field {name!r}"
        props = schema.get("properties", {})
        for name, sub in props.items():
            if name in value and (err := _validate(value[name], sub, f"{path}.{name}")):
                return err
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(props))
            if extra:
                return f"{path}: unexpected fields {extra}"
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            return f"{path}: fewer than {schema['minItems']} items"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return f"{path}: more than {schema['maxItems']} items"
        if isinstance(schema.get("items"), dict):
            for i, v in enumerate(value):
                if err := _validate(v, schema["items"], f"{path}[{i}]"):
                    return err
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            return f"{path}: shorter than {schema['minLength']}"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"{path}: longer than {schema['maxLength']}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{path}: below {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{path}: above {schema['maximum']}"
    return None


def check(expect: Expect, text: str) -> tuple[bool, str | None]:
    """(passed, why not) for one output."""
    if expect.exact is not None:
        return (True, None) if text == expect.exact else (False, "output differs from expect.exact")
    if expect.regex is not None:
        try:
            hit = re.search(expect.regex, text)
        except re.error as exc:
            return False, f"bad regex: {exc}"
        return (True, None) if hit else (False, "expect.regex did not match")
    try:
        value = json.loads(text.strip())
    except json.JSONDecodeError as exc:
        return False, f"output is not JSON ({exc.msg} at char {exc.pos})"
    err = _validate(value, expect.json_schema or {}, "$")
    return (err is None, err)
