"""The registry schema as an ordered list of small, named migrations, each applied once.

Applied migrations are recorded in sqlite-utils' format: table `_sqlite_migrations` (id,
migration_set "specreg", name, applied_at), so `sqlite_utils.Migrations` and `sqlite-utils`
tooling read a registry's state as their own (tests/registry/test_migrations.py holds both to it).
specreg applies them itself, on the plain `sqlite3` connection, because importing sqlite-utils
imports numpy and click, and a first `specreg check pair` creates the registry.
`Database` runs `apply()` inside its own `BEGIN IMMEDIATE`, and `apply()` looks at what is
pending again under that lock, so two processes opening a fresh database at once cannot both
apply the same migration; a migration and its record commit together or not at all.

Adding a migration (other areas: the benchmark runs tables, ...):
  1. append a function here, named `mNNN_what_it_does(db)`, decorated with `@migrations()`;
     never edit or reorder one that has shipped — add another that alters;
  2. use plain SQL (`db.execute("CREATE TABLE ...")`): explicit types, NOT NULL, foreign
     keys and an index on every column that list views filter, join or sort on;
  3. update `tests/registry/test_migrations.py`, which pins every table and its columns.

One module, however long: it is a list of small functions applied in order, each frozen once
shipped, and reading the schema's history is reading this file top to bottom.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

Migration = Callable[[sqlite3.Connection], None]


class MigrationSet:
    """An ordered, named set of migrations with `sqlite_utils.Migrations`' records and semantics
    (registration, pending check, apply), run on a plain `sqlite3.Connection`."""

    migrations_table = "_sqlite_migrations"

    @dataclass
    class _Migration:
        name: str
        fn: Migration

    def __init__(self, name: str) -> None:
        self.name = name
        self._migrations: list[MigrationSet._Migration] = []

    def __call__(self, *, name: str | None = None) -> Callable[[Migration], Migration]:
        def inner(func: Migration) -> Migration:
            migration_name = name or func.__name__
            if any(m.name == migration_name for m in self._migrations):
                raise ValueError(f"Migration '{migration_name}' is already registered in set '{self.name}'")
            self._migrations.append(self._Migration(migration_name, func))
            return func

        return inner

    def names(self) -> list[str]:
        """Every migration this specreg knows, in order (what a result bundle's schema is checked against)."""
        return [m.name for m in self._migrations]

    def _applied(self, conn: sqlite3.Connection) -> list[str]:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (self.migrations_table,)
        ).fetchone()
        if not exists:
            return []
        sql = f"SELECT name FROM {self.migrations_table} WHERE migration_set = ? ORDER BY rowid"
        return [r[0] for r in conn.execute(sql, (self.name,))]

    def pending_names(self, conn: sqlite3.Connection) -> list[str]:
        """Names of the migrations not applied yet (read-only)."""
        applied = set(self._applied(conn))
        return [m.name for m in self._migrations if m.name not in applied]

    def unknown_names(self, conn: sqlite3.Connection) -> list[str]:
        """Applied migrations of this set that this specreg does not have (a newer one wrote them)."""
        known = {m.name for m in self._migrations}
        return [n for n in self._applied(conn) if n not in known]

    def apply(self, conn: sqlite3.Connection) -> None:
        """Apply the pending migrations, each followed by its record, on a connection that is
        inside a write transaction (the caller's `BEGIN IMMEDIATE`)."""
        if not conn.in_transaction:
            raise RuntimeError("migrations are applied inside the caller's write transaction")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS [{self.migrations_table}] "
            "([id] INTEGER PRIMARY KEY, [migration_set] TEXT, [name] TEXT, [applied_at] TEXT)"
        )
        conn.execute(
            f"CREATE UNIQUE INDEX IF NOT EXISTS [idx_{self.migrations_table}_migration_set_name] "
            f"ON [{self.migrations_table}] ([migration_set], [name])"
        )
        pending = set(self.pending_names(conn))
        for m in self._migrations:
            if m.name in pending:
                m.fn(conn)
                conn.execute(
                    f"INSERT INTO {self.migrations_table} (migration_set, name, applied_at) VALUES (?, ?, ?)",
                    (self.name, m.name, str(datetime.now(UTC))),
                )


migrations = MigrationSet("specreg")
# Migrations of tables that only this registry keeps for itself (caches of what it computed from
# its own rows). A bundle never carries them, so its schema does not name them: a bundle from a
# specreg that added one is not "newer" to a specreg that has not (exchange/bundle.py).
# Who vouched for an imported run or verdict (m021, m022) is this registry's record of the
# envelopes it verified; the envelopes themselves travel, not the tables. A memory fit (m023)
# judges a configuration against this machine's budget, and a machine probe (m025) prices a model
# on this machine: they do not travel either. What `specreg watch` saw of a deployed server (m024)
# is evidence about this registry's own production, not a result another machine can re-derive:
# it stays here too. Where a run came from (m026: its Ray node) is this registry's record as well;
# a bundle carries the node in the run's manifest. A pair probe (m027) prices a pair on this machine.
LOCAL_ONLY = frozenset(
    {
        "m010_template_scans",
        "m012_run_digests",
        "m021_run_attestations",
        "m022_verdict_attestations",
        "m023_memory_fits",
        "m024_watch_windows",
        "m025_machine_probes",
        "m026_run_origin_nodes",
        "m027_pair_probes",
    }
)


def bundle_schema() -> list[str]:
    """The migrations that shape what a result bundle carries, in order."""
    return [m for m in migrations.names() if m not in LOCAL_ONLY]


@migrations()
def m001_artifacts(db: sqlite3.Connection) -> None:
    """Artifacts keyed by SHA-256, the paths (and stat cache) where each was seen."""
    db.execute(
        """
        CREATE TABLE artifacts (
            sha256 TEXT PRIMARY KEY CHECK (length(sha256) = 64),
            size INTEGER NOT NULL,
            name TEXT,
            architecture TEXT,
            file_type INTEGER,
            file_type_name TEXT,
            n_tokens INTEGER,
            summary_json TEXT NOT NULL,
            effective_license TEXT,
            licence_source TEXT,
            licence_conflict INTEGER NOT NULL DEFAULT 0,
            licence_json TEXT NOT NULL,
            repo TEXT,
            revision TEXT,
            filename TEXT,
            provenance_source TEXT,
            provenance_json TEXT NOT NULL DEFAULT '{}',
            registered_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX idx_artifacts_repo ON artifacts (repo, revision)")
    db.execute("CREATE INDEX idx_artifacts_registered_at ON artifacts (registered_at)")
    db.execute(
        """
        CREATE TABLE artifact_paths (
            id INTEGER PRIMARY KEY,
            sha256 TEXT NOT NULL REFERENCES artifacts (sha256),
            path TEXT NOT NULL UNIQUE,
            device INTEGER NOT NULL,
            inode INTEGER NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            hashed_at_ns INTEGER NOT NULL,
            first_seen_at TEXT NOT NULL,
            last_verified_at TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX idx_artifact_paths_sha256 ON artifact_paths (sha256)")
    db.execute("CREATE INDEX idx_artifact_paths_inode ON artifact_paths (device, inode)")


@migrations()
def m002_pairs_verdicts(db: sqlite3.Connection) -> None:
    """Pairs (stable id, latest verdict denormalised for fast lists) and every verdict."""
    db.execute(
        """
        CREATE TABLE pairs (
            id INTEGER PRIMARY KEY,
            target_sha256 TEXT NOT NULL REFERENCES artifacts (sha256),
            draft_sha256 TEXT REFERENCES artifacts (sha256),
            method TEXT NOT NULL,
            rule_set TEXT NOT NULL,
            admitted INTEGER NOT NULL,
            strict INTEGER NOT NULL DEFAULT 0,
            latest_verdict_id INTEGER,
            n_verdicts INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        )
        """
    )
    # NULL drafts (self-speculation) would be "distinct" in a plain UNIQUE; key them as ''.
    db.execute(
        "CREATE UNIQUE INDEX idx_pairs_identity ON pairs (target_sha256, ifnull(draft_sha256, ''), method, rule_set)"
    )
    db.execute("CREATE INDEX idx_pairs_admitted ON pairs (admitted, id)")
    db.execute("CREATE INDEX idx_pairs_draft ON pairs (draft_sha256)")
    db.execute(
        """
        CREATE TABLE verdicts (
            id INTEGER PRIMARY KEY,
            pair_id INTEGER NOT NULL REFERENCES pairs (id),
            admitted INTEGER NOT NULL,
            strict INTEGER NOT NULL DEFAULT 0,
            checks_json TEXT NOT NULL,
            created_at TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX idx_verdicts_pair ON verdicts (pair_id, id)")


@migrations()
def m003_bench_runs(db: sqlite3.Connection) -> None:
    """Benchmark runs (specreg/benchmark): run manifest, conditions, prompts, request rows, summaries.

    Rows are written as they finish, one short transaction each, so a crash keeps them; a run
    keeps the runner's pid and each condition its server's pid (with process start times) so the
    next start can mark a killed run aborted and stop its orphaned server.
    """
    db.execute(
        """
        CREATE TABLE bench_runs (
            run_id TEXT PRIMARY KEY,
            pair_id INTEGER REFERENCES pairs (id),
            status TEXT NOT NULL,
            status_reason TEXT,
            method TEXT NOT NULL,
            target_sha256 TEXT NOT NULL,
            draft_sha256 TEXT,
            target_licence_json TEXT NOT NULL DEFAULT '{}',
            draft_licence_json TEXT,
            manifest_json TEXT,
            runner_pid INTEGER,
            runner_started REAL,
            run_dir TEXT,
            started_at TEXT NOT NULL,
            finished_at TEXT
        )
        """
    )
    db.execute("CREATE INDEX idx_bench_runs_status ON bench_runs (status)")
    db.execute("CREATE INDEX idx_bench_runs_keys ON bench_runs (target_sha256, draft_sha256)")
    db.execute("CREATE INDEX idx_bench_runs_started ON bench_runs (started_at)")
    db.execute("CREATE INDEX idx_bench_runs_pair ON bench_runs (pair_id)")
    db.execute(
        """
        CREATE TABLE bench_conditions (
            run_id TEXT NOT NULL REFERENCES bench_runs (run_id),
            idx INTEGER NOT NULL,
            name TEXT NOT NULL,
            method TEXT NOT NULL,
            status TEXT NOT NULL,
            failure TEXT,
            failure_lines_json TEXT NOT NULL DEFAULT '[]',
            spec_json TEXT NOT NULL,
            argv_json TEXT NOT NULL DEFAULT '[]',
            port INTEGER,
            server_pid INTEGER,
            server_started REAL,
            log_path TEXT,
            log_tail TEXT,
            metrics_before_json TEXT,
            metrics_after_json TEXT,
            counters_json TEXT,
            memory_json TEXT,
            started_at TEXT,
            finished_at TEXT,
            PRIMARY KEY (run_id, idx)
        )
        """
    )
    db.execute("CREATE INDEX idx_bench_conditions_status ON bench_conditions (status)")
    db.execute(
        """
        CREATE TABLE bench_prompts (
            run_id TEXT NOT NULL REFERENCES bench_runs (run_id),
            prompt_id TEXT NOT NULL,
            stratum TEXT NOT NULL,
            kind TEXT NOT NULL,
            content_sha256 TEXT NOT NULL,
            input_tokens INTEGER,
            max_tokens INTEGER NOT NULL,
            expect_json TEXT,
            PRIMARY KEY (run_id, prompt_id)
        )
        """
    )
    db.execute(
        """
        CREATE TABLE bench_requests (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES bench_runs (run_id),
            condition_idx INTEGER NOT NULL,
            condition TEXT NOT NULL,
            prompt_id TEXT NOT NULL,
            stratum TEXT NOT NULL,
            repeat INTEGER NOT NULL,
            started_at TEXT NOT NULL,
            ok INTEGER NOT NULL,
            error TEXT,
            timed_out INTEGER NOT NULL DEFAULT 0,
            ttft_ms REAL,
            total_ms REAL,
            tpot_ms REAL,
            output_tokens INTEGER,
            finish_reason TEXT,
            prompt_ms REAL,
            predicted_ms REAL,
            draft_n INTEGER,
            draft_n_accepted INTEGER,
            cache_n INTEGER,
            output_text TEXT,
            output_ids_json TEXT,
            output_sha256 TEXT,
            matches_baseline INTEGER,
            first_diff INTEGER,
            diff_unit TEXT,
            expect_ok INTEGER,
            expect_detail TEXT
        )
        """
    )
    db.execute("CREATE INDEX idx_bench_requests_run ON bench_requests (run_id, condition_idx, prompt_id)")
    db.execute(
        """
        CREATE TABLE bench_summaries (
            run_id TEXT NOT NULL REFERENCES bench_runs (run_id),
            condition TEXT NOT NULL,
            stratum TEXT NOT NULL,
            target_sha256 TEXT NOT NULL,
            draft_sha256 TEXT,
            summary_json TEXT NOT NULL,
            PRIMARY KEY (run_id, condition, stratum)
        )
        """
    )
    db.execute("CREATE INDEX idx_bench_summaries_keys ON bench_summaries (target_sha256, draft_sha256)")


@migrations()
def m004_pairs_strict_verdict(db: sqlite3.Connection) -> None:
    """A strict check is kept beside the normal verdict instead of replacing it.

    `latest_verdict_id` (with `admitted`, `strict`) now names the verdict a pair stands on: its
    latest normal one, else its latest strict one; `strict_verdict_id` / `strict_admitted` name
    its latest strict one. Existing pairs are filled in from their verdict history.
    """
    db.execute("ALTER TABLE pairs ADD COLUMN strict_verdict_id INTEGER REFERENCES verdicts (id)")
    db.execute("ALTER TABLE pairs ADD COLUMN strict_admitted INTEGER")
    db.execute(
        "UPDATE pairs SET strict_verdict_id = "
        "(SELECT max(v.id) FROM verdicts v WHERE v.pair_id = pairs.id AND v.strict = 1)"
    )
    db.execute(
        "UPDATE pairs SET strict_admitted = (SELECT v.admitted FROM verdicts v WHERE v.id = pairs.strict_verdict_id)"
    )
    db.execute(
        "UPDATE pairs SET latest_verdict_id = coalesce("
        "(SELECT max(v.id) FROM verdicts v WHERE v.pair_id = pairs.id AND v.strict = 0), strict_verdict_id) "
        "WHERE latest_verdict_id IS NOT NULL"
    )
    db.execute(
        "UPDATE pairs SET admitted = (SELECT v.admitted FROM verdicts v WHERE v.id = pairs.latest_verdict_id), "
        "strict = (SELECT v.strict FROM verdicts v WHERE v.id = pairs.latest_verdict_id) "
        "WHERE latest_verdict_id IS NOT NULL"
    )


@migrations()
def m005_run_origins(db: sqlite3.Connection) -> None:
    """Where an imported benchmark run came from (specreg/exchange/bundle.py).

    One row per run merged from a result bundle: the host and specreg version that ran it, the
    digest of its content (a later bundle with the same run id must match it) and of the bundle.
    Runs measured here have no row.
    """
    db.execute(
        """
        CREATE TABLE run_origins (
            run_id TEXT PRIMARY KEY REFERENCES bench_runs (run_id),
            host TEXT NOT NULL,
            specreg_version TEXT NOT NULL,
            run_digest TEXT NOT NULL CHECK (length(run_digest) = 64),
            bundle_digest TEXT NOT NULL CHECK (length(bundle_digest) = 64),
            bundle_created_at TEXT,
            imported_at TEXT NOT NULL
        )
        """
    )


@migrations()
def m006_bench_condition_warmup(db: sqlite3.Connection) -> None:
    """Each condition's warm-up: per server start, the uncounted requests' latencies and whether
    two in a row agreed within the tolerance (benchmark/run/execute.py). Additive: older rows get '[]'."""
    db.execute("ALTER TABLE bench_conditions ADD COLUMN warmup_json TEXT NOT NULL DEFAULT '[]'")


@migrations()
def m007_artifact_paths_ctime(db: sqlite3.Connection) -> None:
    """The stat cache keys on ctime too (registry/hashing.py: an in-place rewrite can restore size
    and mtime, never ctime). Older rows have NULL and are hashed once more on their next use."""
    db.execute("ALTER TABLE artifact_paths ADD COLUMN ctime_ns INTEGER")


@migrations()
def m008_artifact_shards(db: sqlite3.Connection) -> None:
    """The shards after the first of a split GGUF (registry/shards.py): per shard file, its number,
    the SHA-256 pinned for that number at registration, and its stat cache."""
    db.execute(
        """
        CREATE TABLE artifact_shards (
            id INTEGER PRIMARY KEY,
            artifact_sha256 TEXT NOT NULL REFERENCES artifacts (sha256),
            shard_no INTEGER NOT NULL,
            sha256 TEXT NOT NULL CHECK (length(sha256) = 64),
            size INTEGER NOT NULL,
            path TEXT NOT NULL UNIQUE,
            device INTEGER NOT NULL,
            inode INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            ctime_ns INTEGER,
            hashed_at_ns INTEGER NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX idx_artifact_shards_artifact ON artifact_shards (artifact_sha256, shard_no)")


@migrations()
def m009_artifact_layout(db: sqlite3.Connection) -> None:
    """Where a registered file's long string arrays (tokens, merges) lie, with their SHA-256
    (GGUFFile.string_array_layout): a re-read of the same bytes jumps over them. Additive:
    older rows get NULL and are read in full (and filled in when next read)."""
    db.execute("ALTER TABLE artifacts ADD COLUMN layout_json TEXT")


@migrations()
def m010_template_scans(db: sqlite3.Connection) -> None:
    """Chat-template scans by the template's SHA-256 and the scanner's id (registry/template_scans.py)."""
    db.execute(
        """
        CREATE TABLE template_scans (
            template_sha256 TEXT NOT NULL,
            scanner TEXT NOT NULL,
            scan_json TEXT NOT NULL,
            scanned_at TEXT NOT NULL,
            PRIMARY KEY (template_sha256, scanner)
        )
        """
    )


@migrations()
def m011_bench_request_prompt_n(db: sqlite3.Connection) -> None:
    """Each request's prompt tokens processed (`timings.prompt_n`): with `prompt_ms`, the baseline's
    per-token prompt cost that models a verification batch (benchmark/store/stepcost.py). Older rows: NULL."""
    db.execute("ALTER TABLE bench_requests ADD COLUMN prompt_n INTEGER")


# Every table holding a part of a run: a write to any of a run's rows drops the run's kept digests.
_RUN_TABLES = ("bench_runs", "bench_conditions", "bench_summaries", "bench_prompts", "bench_requests")


@migrations()
def m012_run_digests(db: sqlite3.Connection) -> None:
    """Each finished run's digest as the audit reads it (benchmark/store/digest_cache.py), by the digest
    code's id; triggers drop a run's digests whenever any of its rows is written."""
    db.execute(
        """
        CREATE TABLE run_digests (
            run_id TEXT NOT NULL REFERENCES bench_runs (run_id) ON DELETE CASCADE,
            spread INTEGER NOT NULL,
            builder TEXT NOT NULL,
            digest_json TEXT NOT NULL,
            PRIMARY KEY (run_id, spread)
        )
        """
    )
    for table in _RUN_TABLES:
        for event, row in (("INSERT", "NEW"), ("UPDATE", "OLD"), ("DELETE", "OLD")):
            also = " OR run_id = NEW.run_id" if event == "UPDATE" else ""
            db.execute(
                f"CREATE TRIGGER run_digests_{table}_{event.lower()} AFTER {event} ON {table} "
                f"BEGIN DELETE FROM run_digests WHERE run_id = {row}.run_id{also}; END"
            )


@migrations()
def m013_bench_request_records(db: sqlite3.Connection) -> None:
    """What each request's record rests on: where its token ids came from (a stream leaves out the
    ids of tokens whose text it held back), how many the stream carried, when its tokens reached
    the client (arrivals: TPOT and ITL), the server's own per-token time, and the first difference
    from the baseline in characters with its context. Older rows: NULL (ids judged by their count)."""
    for col, kind in (
        ("ids_source", "TEXT"),
        ("stream_ids_n", "INTEGER"),
        ("arrivals_json", "TEXT"),
        ("server_tpot_ms", "REAL"),
        ("first_diff_char", "INTEGER"),
        ("diff_context", "TEXT"),
    ):
        db.execute(f"ALTER TABLE bench_requests ADD COLUMN {col} {kind}")


@migrations()
def m014_bench_condition_load(db: sqlite3.Connection) -> None:
    """How busy the machine was during each of a condition's slots (others' CPU, steal, load) and
    whether that set the slot aside (benchmark/store/contention.py). Older rows: NULL (nothing known)."""
    db.execute("ALTER TABLE bench_conditions ADD COLUMN load_json TEXT")


@migrations()
def m015_bench_request_sampler(db: sqlite3.Connection) -> None:
    """The sampler each request was made with and its seed (a sampled run's repetitions each have
    their own, recorded so the run can be made again). Older rows: NULL (greedy, the run's seed)."""
    for col, kind in (
        ("seed", "INTEGER"),
        ("temperature", "REAL"),
        ("top_p", "REAL"),
        ("top_k", "INTEGER"),
        ("min_p", "REAL"),
    ):
        db.execute(f"ALTER TABLE bench_requests ADD COLUMN {col} {kind}")


@migrations()
def m016_imported_verdicts(db: sqlite3.Connection) -> None:
    """Verdicts that came in a result bundle: evidence about another machine, kept apart from the
    verdicts made here (registry/evidence.py). A pair's standing verdict (`latest_verdict_id`,
    `admitted`) is made of this machine's own checks only; an imported one records who made it
    (host, specreg version), when, the bundle it came in and when it arrived. Verdicts imported
    before this migration are in `verdicts` and cannot be told apart any more."""
    db.execute(
        """
        CREATE TABLE imported_verdicts (
            id INTEGER PRIMARY KEY,
            pair_id INTEGER NOT NULL REFERENCES pairs (id),
            admitted INTEGER NOT NULL,
            strict INTEGER NOT NULL DEFAULT 0,
            checks_json TEXT NOT NULL,
            created_at TEXT NOT NULL,
            host TEXT NOT NULL,
            specreg_version TEXT NOT NULL,
            bundle_digest TEXT NOT NULL CHECK (length(bundle_digest) = 64),
            imported_at TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX idx_imported_verdicts_pair ON imported_verdicts (pair_id, created_at, id)")


@migrations()
def m018_bench_request_triage(db: sqlite3.Connection) -> None:
    """A mismatched row's triage: the baseline's top candidates at its first differing token and
    whether that was a near tie or a confident divergence (schemas/triage.py). Older rows: NULL."""
    db.execute("ALTER TABLE bench_requests ADD COLUMN triage_json TEXT")


@migrations()
def m021_run_attestations(db: sqlite3.Connection) -> None:
    """Who vouched for an imported run (signing/attestations.py): per verified DSSE envelope and run,
    the run's digest as signed, the signing key's id, the policy's name for it when the import
    had a policy, the bundle and the envelope's SHA-256. Runs nobody signed have no row."""
    db.execute(
        """
        CREATE TABLE run_attestations (
            run_id TEXT NOT NULL REFERENCES bench_runs (run_id),
            run_digest TEXT NOT NULL CHECK (length(run_digest) = 64),
            key_id TEXT NOT NULL CHECK (length(key_id) = 64),
            signer TEXT,
            bundle_digest TEXT NOT NULL CHECK (length(bundle_digest) = 64),
            envelope_sha256 TEXT NOT NULL CHECK (length(envelope_sha256) = 64),
            signed_at TEXT,
            imported_at TEXT NOT NULL,
            PRIMARY KEY (run_id, run_digest, key_id, bundle_digest)
        )
        """
    )


@migrations()
def m022_verdict_attestations(db: sqlite3.Connection) -> None:
    """Who vouched for an imported verdict (signing/attestations.py): per verified DSSE envelope
    whose statement binds the bundle's pairs.jsonl, and per verdict the bundle's own host made,
    the signing key's id, the policy's name for it when the import had a policy, the bundle and
    the envelope's SHA-256. Verdicts nobody signed have no row."""
    db.execute(
        """
        CREATE TABLE verdict_attestations (
            verdict_id INTEGER NOT NULL REFERENCES imported_verdicts (id),
            key_id TEXT NOT NULL CHECK (length(key_id) = 64),
            signer TEXT,
            bundle_digest TEXT NOT NULL CHECK (length(bundle_digest) = 64),
            envelope_sha256 TEXT NOT NULL CHECK (length(envelope_sha256) = 64),
            signed_at TEXT,
            imported_at TEXT NOT NULL,
            PRIMARY KEY (verdict_id, key_id, bundle_digest)
        )
        """
    )


@migrations()
def m023_memory_fits(db: sqlite3.Connection) -> None:
    """A serving configuration judged against a memory budget (`check pair --budget`,
    registry/memory_fits.py): kept beside a pair's verdicts, never one of them, since the same two
    files fit one machine and not another. One row per judgement, by the pair's files and method
    and the configuration (schemas/memory.py config_key); the latest is what `deploy` pins."""
    db.execute(
        """
        CREATE TABLE memory_fits (
            id INTEGER PRIMARY KEY,
            target_sha256 TEXT NOT NULL,
            draft_sha256 TEXT,
            method TEXT NOT NULL,
            config TEXT NOT NULL,
            fits INTEGER NOT NULL,
            budget_bytes INTEGER,
            cache_ram_mib INTEGER,
            ctx_checkpoints INTEGER,
            fit_json TEXT NOT NULL,
            created_at TEXT NOT NULL
        )
        """
    )
    db.execute(
        "CREATE INDEX idx_memory_fits_config ON memory_fits "
        "(target_sha256, ifnull(draft_sha256, ''), method, config, id)"
    )


@migrations()
def m024_watch_windows(db: sqlite3.Connection) -> None:
    """What `specreg watch` saw of a running server, one row per window (watch/windows.py owns it):
    the pair and stratum it was matched to, the server's identity (a digest over what it runs;
    the identity itself on a watch's first window of it), the state and why, the counter deltas
    the numbers come from, the counters at the window's end (where the next `--once` resumes), and
    the window as JSON (schemas/watch.py, less the identity). An `unknown` window has no numbers;
    a number a server did not give is NULL."""
    db.execute(
        """
        CREATE TABLE watch_windows (
            id INTEGER PRIMARY KEY,
            pair_id INTEGER NOT NULL REFERENCES pairs (id),
            stratum TEXT,
            url TEXT NOT NULL,
            identity_key TEXT NOT NULL CHECK (length(identity_key) = 64),
            server_json TEXT,
            run_id TEXT,
            started_at TEXT NOT NULL,
            ended_at TEXT NOT NULL,
            seconds REAL NOT NULL CHECK (seconds >= 0),
            state TEXT NOT NULL CHECK (state IN ('holds', 'drifted', 'not speculating', 'unknown')),
            reason TEXT,
            restarted INTEGER NOT NULL DEFAULT 0,
            mismatches INTEGER NOT NULL DEFAULT 0 CHECK (mismatches >= 0),
            generated INTEGER CHECK (generated >= 0),
            generating_s REAL CHECK (generating_s >= 0),
            drafted INTEGER CHECK (drafted >= 0),
            accepted INTEGER CHECK (accepted >= 0),
            audited_acceptance REAL,
            audited_decode_tps REAL,
            window_json TEXT NOT NULL,
            counters_json TEXT
        )
        """
    )
    db.execute("CREATE INDEX idx_watch_windows_pair ON watch_windows (pair_id, ended_at, id)")
    db.execute("CREATE INDEX idx_watch_windows_identity ON watch_windows (identity_key, id)")


@migrations()
def m025_machine_probes(db: sqlite3.Connection) -> None:
    """What a model costs on one machine (registry/machine_probes.py): per file SHA-256, hardware
    class, runtime and speed flags, llama.cpp's decode and batch timings from a short server
    start, every repetition kept (schemas/machine_probe.py). A cache of a measurement: a newer
    probe of the same key replaces the older."""
    db.execute(
        """
        CREATE TABLE machine_probes (
            sha256 TEXT NOT NULL CHECK (length(sha256) = 64),
            hardware TEXT NOT NULL,
            runtime TEXT NOT NULL,
            flags TEXT NOT NULL,
            probe_json TEXT NOT NULL,
            probed_at TEXT NOT NULL,
            PRIMARY KEY (sha256, hardware, runtime, flags)
        )
        """
    )


@migrations()
def m026_run_origin_nodes(db: sqlite3.Connection) -> None:
    """Where a run dispatched to a Ray cluster ran (exchange/ray_executor.py): the node's id, its
    address and the resources the run was placed with, beside the host. Such a run arrives row by
    row while it is measured, in no bundle: its bundle digest is NULL, and its content digest is
    NULL until it has finished. SQLite cannot relax a NOT NULL in place, so the table is made
    again with its rows (nothing references it)."""
    db.execute(
        """
        CREATE TABLE run_origins_new (
            run_id TEXT PRIMARY KEY REFERENCES bench_runs (run_id),
            host TEXT NOT NULL,
            specreg_version TEXT NOT NULL,
            run_digest TEXT CHECK (run_digest IS NULL OR length(run_digest) = 64),
            bundle_digest TEXT CHECK (bundle_digest IS NULL OR length(bundle_digest) = 64),
            bundle_created_at TEXT,
            imported_at TEXT NOT NULL,
            node_id TEXT,
            node_address TEXT,
            resources_json TEXT
        )
        """
    )
    cols = "run_id, host, specreg_version, run_digest, bundle_digest, bundle_created_at, imported_at"
    db.execute(f"INSERT INTO run_origins_new ({cols}) SELECT {cols} FROM run_origins")
    db.execute("DROP TABLE run_origins")
    db.execute("ALTER TABLE run_origins_new RENAME TO run_origins")


@migrations()
def m027_pair_probes(db: sqlite3.Connection) -> None:
    """A target and a draft run together on a few prompts on one machine
    (benchmark/run/pair_probe.py): per both files' SHA-256, method, draft length, hardware class,
    runtime and speed flags, each prompt's decode time alone and with the draft and the draft
    counts (schemas/machine_probe.py). A cache of a measurement, like a machine probe."""
    db.execute(
        """
        CREATE TABLE pair_probes (
            target_sha256 TEXT NOT NULL CHECK (length(target_sha256) = 64),
            draft_sha256 TEXT NOT NULL CHECK (length(draft_sha256) = 64),
            method TEXT NOT NULL,
            draft_length INTEGER NOT NULL,
            hardware TEXT NOT NULL,
            runtime TEXT NOT NULL,
            flags TEXT NOT NULL,
            probe_json TEXT NOT NULL,
            probed_at TEXT NOT NULL,
            PRIMARY KEY (target_sha256, draft_sha256, method, draft_length, hardware, runtime, flags)
        )
        """
    )
