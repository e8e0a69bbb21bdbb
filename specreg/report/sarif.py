"""SARIF 2.1.0 for CI code scanning: `check pair --format sarif` and `audit --format sarif`.

One result per failing or warning check (a pair check's code is its rule id), or per failed
audit gate (`audit.<gate>`), located at the model file it is about. Messages are untrusted
text (they quote model names and token strings): control characters are escaped, and a SARIF
consumer shows message text as plain text, never markup.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from specreg import __version__
from specreg.schemas.audit import AuditReport
from specreg.schemas.checks import PairVerdict
from specreg.text import escape_control

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"error": "error", "warn": "warning"}
# Checks about the target itself; every other check compares the draft with the target.
_TARGET_PREFIXES = ("target.", "mtp.")


def _uri(path: str) -> str:
    """A file URI: an absolute path as file:///..., a relative one as given (relative to the repo root)."""
    p = Path(path)
    return p.as_uri() if p.is_absolute() else quote(p.as_posix())


def _location(path: str | None, sha256: str | None, role: str) -> dict[str, Any]:
    if path:
        return {"physicalLocation": {"artifactLocation": {"uri": _uri(path)}}}
    # a model known only by its SHA-256 (an imported record): a logical location names it
    return {
        "logicalLocations": [{"name": sha256 or "unknown", "kind": "module", "fullyQualifiedName": f"{role}:{sha256}"}]
    }


def _log(rules: dict[str, str], results: list[dict[str, Any]]) -> dict[str, Any]:
    ids = sorted(rules)
    index = {r: i for i, r in enumerate(ids)}
    for res in results:
        res["ruleIndex"] = index[res["ruleId"]]
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "specreg",
                        "version": __version__,
                        "rules": [{"id": r, "shortDescription": {"text": rules[r]}} for r in ids],
                    }
                },
                "results": results,
            }
        ],
    }


def verdict_sarif(v: PairVerdict, target_path: str | None, draft_path: str | None) -> dict[str, Any]:
    """The failing and warning checks of a pair verdict as a SARIF log."""
    rules: dict[str, str] = {}
    results: list[dict[str, Any]] = []
    for c in v.checks:
        if c.severity not in _LEVEL:
            continue
        about_target = c.code.startswith(_TARGET_PREFIXES) or v.draft_sha256 is None
        where = (
            _location(target_path, v.target_sha256, "target")
            if about_target
            else _location(draft_path, v.draft_sha256, "draft")
        )
        rules.setdefault(c.code, f"specreg pair check {c.code}")
        results.append(
            {
                "ruleId": c.code,
                "level": _LEVEL[c.severity],
                "message": {"text": escape_control(c.message)},
                "locations": [where],
                "properties": {
                    "method": v.method,
                    "rule_set": v.rule_set,
                    "admitted": v.admitted,
                    "target_sha256": v.target_sha256,
                    "draft_sha256": v.draft_sha256,
                },
            }
        )
    return _log(rules, results)


def audit_sarif(report: AuditReport, paths: dict[str, str]) -> dict[str, Any]:
    """Every failed gate of every audited pair (per hardware class) as a SARIF log.

    `paths`: SHA-256 -> a registered path of that model on this machine (absent: logical location).
    """
    rules: dict[str, str] = {}
    results: list[dict[str, Any]] = []
    for p in report.pairs:
        for g in p.gates:
            if g.passed:
                continue
            rule = f"audit.{g.gate}"
            rules.setdefault(rule, f"specreg deployment gate: {g.gate}")
            where = [_location(paths.get(p.target_sha256), p.target_sha256, "target")]
            if p.draft_sha256:
                where.append(_location(paths.get(p.draft_sha256), p.draft_sha256, "draft"))
            on = f" on {p.hardware}" if p.hardware else ""
            results.append(
                {
                    "ruleId": rule,
                    "level": "error",
                    "message": {"text": escape_control(f"pair {p.pair_id} ({p.method}){on}: {g.message}")},
                    "locations": where,
                    "properties": {
                        "pair_id": p.pair_id,
                        "method": p.method,
                        "hardware": p.hardware,
                        "run_id": p.run_id,
                        "policy": report.policy_source,
                    },
                }
            )
    return _log(rules, results)


def dumps(log: dict[str, Any]) -> str:
    return json.dumps(log, indent=2, ensure_ascii=False)
