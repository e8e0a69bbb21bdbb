"""Deployment policies: safe defaults, the shipped example, and typos that name key, file and line."""

from __future__ import annotations

from pathlib import Path

import pytest
from _audit_world import specreg
from _registry_helpers import cli, one_line_error
from pydantic import BaseModel

from specreg.audit.policy import BUILTIN, example_policy_text, load_policy, parse_policy
from specreg.errors import PolicyError
from specreg.registry.store import Registry
from specreg.schemas.audit import Policy

ROOT = Path(__file__).resolve().parents[2]


def _keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out |= _keys(ann, f"{prefix}{name}.")
        else:
            out.add(f"{prefix}{name}")
    return out


def test_builtin_defaults_are_the_safe_ones() -> None:
    p, source = load_policy(None)
    assert source == BUILTIN
    assert p.speed.min_speedup == 1.05
    assert p.quality.require_equivalence is True
    assert p.licence.unknown == "fail" and p.licence.conflict == "fail"
    assert p.licence.require_revision is True
    assert p.evidence.min_repetitions >= 2


def test_example_policy_parses_and_mentions_every_key() -> None:
    text = example_policy_text()
    assert (ROOT / "examples" / "policy.toml").read_text("utf-8") == text
    policy = parse_policy(text, "policy.example.toml")
    assert policy.name == "example"
    for key in _keys(Policy):  # docs/policy.md's table of every key: tests/project/test_docs.py
        leaf = key.rsplit(".", 1)[-1]
        assert leaf in text, f"example policy does not mention {key}"


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("[speed]\nmin_sppedup = 2\n", "policy.toml:2: unknown key 'speed.min_sppedup'"),
        ('name = "x"\n[sped]\nmin_speedup = 1\n', "policy.toml:2: unknown key 'sped'"),
        ("[speed]\nmin_speedup = 'fast'\n", "policy.toml:2: key 'speed.min_speedup'"),
        ("[licence]\nunknown = 'maybe'\n", "policy.toml:2: key 'licence.unknown'"),
        ("[memory]\nmax_extra_ram_pct = -1\n", "policy.toml:2: key 'memory.max_extra_ram_pct'"),
        ("[speed\n", "policy.toml: not valid TOML"),
    ],
)
def test_bad_policy_names_key_file_and_line(tmp_path: Path, text: str, expect: str) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert str(err.value).startswith(str(tmp_path / expect)), str(err.value)


def _switches(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str]]:
    """(table, key) of every boolean key of the policy schema, found from the models themselves."""
    out: list[tuple[str, str]] = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += _switches(ann, name)
        elif ann is bool:
            out.append((prefix, name))
    return out


def test_every_policy_switch_is_a_toml_boolean(tmp_path: Path) -> None:
    """`require_signed_evidence = "yes"` read as true would switch a safety on or off by accident:
    every boolean key of the schema takes true or false only, and a string or a number is refused
    naming the key, file and line."""
    switches = _switches(Policy)
    assert ("trust", "require_signed_evidence") in switches and len(switches) >= 4
    path = tmp_path / "policy.toml"
    for table, key in switches:
        for value in ('"yes"', '"true"', "1", "0"):
            path.write_text(f"[{table}]\n{key} = {value}\n")
            with pytest.raises(PolicyError) as err:
                load_policy(path)
            assert str(err.value).startswith(f"{path}:2: key '{table}.{key}' must be true or false"), str(err.value)
        path.write_text(f"[{table}]\n{key} = false\n")
        assert getattr(getattr(load_policy(path)[0], table), key) is False


def test_cli_policy_typo_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "policy.toml"
    bad.write_text("[quality]\nrequire_equivalance = false\n")
    line = one_line_error(cli("audit", "--all", "--policy", str(bad), db=tmp_path / "r.db"))
    assert "require_equivalance" in line and str(bad) in line
    missing = one_line_error(cli("audit", "--policy", str(tmp_path / "nope.toml"), db=tmp_path / "r.db"))
    assert "nope.toml" in missing and "not found" in missing


def test_cli_audit_on_empty_registry_cannot_decide(tmp_path: Path) -> None:
    Registry(tmp_path / "r.db").close()  # an empty registry (a missing one is "no registry at ...")
    line = one_line_error(cli("audit", "--all", db=tmp_path / "r.db"))  # the real console script
    assert "no admitted pairs" in line
    for args, expect in (
        (("audit", "--pair", "7"), "no pair with id 7"),
        (("audit", "--report", str(tmp_path / "x.pdf")), ".md or .html"),
        (("audit", "--pair", "1", "--all"), "not both"),
    ):
        code, out, err = specreg(*args, db=tmp_path / "r.db")
        assert code == 2 and not out and "Traceback" not in err, (code, out, err)
        assert err.startswith("error:") and expect in err.splitlines()[0], err


def test_cli_usage_error_is_exit_2_without_traceback(tmp_path: Path) -> None:
    code, _, err = specreg("audit", "--pair", "abc", db=tmp_path / "r.db")
    assert code == 2 and "Traceback" not in err and "--pair" in err, (code, err)
