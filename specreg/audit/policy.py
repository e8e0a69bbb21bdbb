"""Load a deployment policy from TOML: unknown keys and bad values name the key, file and line."""

from __future__ import annotations

import re
import tomllib
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from specreg.errors import PolicyError
from specreg.paths import read_regular
from specreg.schemas.audit import Policy

BUILTIN = "built-in defaults"
MAX_POLICY_BYTES = 1 << 20  # a policy is a page of TOML


def example_policy_text() -> str:
    """The example policy shipped with the package (every key, with its meaning)."""
    return resources.files("specreg.audit").joinpath("policy.example.toml").read_text("utf-8")


def _line_of(text: str, dotted: str) -> int | None:
    """Best-effort line number of a dotted key (`speed.min_speedup`) in TOML text."""
    parts = dotted.split(".")
    leaf = re.escape(parts[-1])
    table = ".".join(parts[:-1])
    current = ""
    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = re.match(r"^\[\s*([^\]]+?)\s*\]", stripped)
        if header:
            current = header.group(1).strip()
            if current == dotted:
                return no
            continue
        if re.match(rf'^["\']?{leaf}["\']?\s*=', stripped) and current == table:
            return no
        if table and re.match(rf"^{re.escape(dotted)}\s*=", stripped) and current == "":
            return no
    return None


def _describe(err: ValidationError, path: str, text: str) -> str:
    first = err.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(top level)"
    line = _line_of(text, key)
    where = f"{path}:{line}" if line else path
    if first["type"] == "extra_forbidden":
        problem = f"unknown key '{key}'"
    elif first["type"] == "bool_type":  # StrictBool: a string or a number is not a switch
        problem = f"key '{key}' must be true or false (a TOML boolean), not {first['input']!r}"[:200]
    else:
        problem = f"key '{key}': {first['msg']}"
    more = len(err.errors()) - 1
    tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{where}: {problem}{tail}"


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Validate policy TOML text; raises PolicyError naming the key and `source`."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:
        raise PolicyError(f"{source}: not valid TOML: nested too deeply") from None
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(
            _describe(exc, source, text),
            hint="see the example policy (specreg/audit/policy.example.toml) for every key",
        ) from None


def policy_folder(source: str) -> Path | None:
    """The folder a policy's relative paths (its `[trust] signers` key files) are read from."""
    return None if source == BUILTIN else Path(source).parent


def load_policy(path: str | Path | None) -> tuple[Policy, str]:
    """The policy in `path` (or the safe built-in defaults) and where it came from."""
    if path is None:
        return Policy(), BUILTIN
    p = Path(path)
    try:
        text = read_regular(p, MAX_POLICY_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise PolicyError(f"{p}: policy file not found") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise PolicyError(f"{p}: cannot read policy file: {why}") from None
    return parse_policy(text, str(p)), str(p)
