"""Chat-template scans kept by the template's SHA-256: a template is lexed once per scanner.

`validators.template_scan.scan_template` asks here before lexing: checking a pair whose target
template was scanned before (the same file re-checked, or any file with the same template)
imports no jinja2 and lexes nothing. The key includes `scanner_id()`, a hash of the scanner's
rules and jinja2's lexer source, so a new rule or lexer re-scans. Entries are written by this
registry's own checks; a damaged entry reads as a miss and is scanned again.
"""

from __future__ import annotations

import sqlite3

from specreg.errors import RegistryError
from specreg.registry.db import Database, now_iso
from specreg.validators.template_scan import Scan, scan_from_json, scan_to_json


class TemplateScans:
    """The registry's `ScanCache` (table `template_scans`, migration m010)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, template_sha256: str, scanner: str) -> Scan | None:
        row = self.db.one(
            "SELECT scan_json FROM template_scans WHERE template_sha256 = ? AND scanner = ?",
            (template_sha256, scanner),
        )
        return None if row is None else scan_from_json(row["scan_json"])

    def put(self, template_sha256: str, scanner: str, scan: Scan) -> None:
        """Keep a scan; a registry that cannot be written simply does not remember it."""
        if self.db.read_only:
            return
        try:
            with self.db.keeping() as conn:
                conn.execute(
                    "INSERT OR REPLACE INTO template_scans (template_sha256, scanner, scan_json, scanned_at) "
                    "VALUES (?, ?, ?, ?)",
                    (template_sha256, scanner, scan_to_json(scan), now_iso()),
                )
        except (RegistryError, sqlite3.Error):
            pass  # a cache: the check itself has its result already
