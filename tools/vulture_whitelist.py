"""What vulture reports as unused but something does use, where vulture cannot see it.

Run the dead-code check (not part of CI: every new record field read only through JSON would
need a line here) with

    .venv/bin/vulture specreg benchmarks tools --min-confidence 60

It should print nothing. A new finding is either dead (delete it) or used in a way vulture cannot
follow; then add it below, under the reason that applies. Something used only by tests belongs
here only when the tests legitimately need it (a seam that shows what the code did), never to
keep code alive that the package itself does not use.
"""

# ruff: noqa: B018, F821

# Typer commands and click/rich hooks: called by the framework, registered by decorator or name.
register_cmd
artifacts_cmd
audit_cmd
pair_cmd
pairs_cmd
demo_cmd
deploy_cmd
drafts_cmd
export_cmd
import_cmd
fetch_cmd
inspect_cmd
list_cmd
diff_cmd
sign_cmd
_.list_commands  # click.Group: the order `--help` lists the commands in
_.collect_usage_pieces  # click.Command: the usage line
_.format_options  # click.Command: the options block of `--help`
_.get_renderables  # rich.progress.Progress: what the live view draws
__getattr__  # specreg.cli's module __getattr__: `specreg.cli.app`, built on first use

# Migrations: registered by the `@migrations()` decorator, applied in order by name.
m001_artifacts
m002_pairs_verdicts
m003_bench_runs
m004_pairs_strict_verdict
m005_run_origins
m006_bench_condition_warmup
m007_artifact_paths_ctime
m008_artifact_shards
m009_artifact_layout
m010_template_scans
m011_bench_request_prompt_n
m012_run_digests
m013_bench_request_records
m014_bench_condition_load
m015_bench_request_sampler
m016_imported_verdicts
m018_bench_request_triage
m021_run_attestations
m022_verdict_attestations
m023_machine_probes

# pydantic: model configuration and validators, read by pydantic itself.
model_config
_._prompt_or_messages
_._listed
_._levels
_._lengths
_._temperatures_listed
_._temperatures
_._modes_listed
_._modes

# Record fields written to JSON (the registry, `--json`, bundles, reports) and read by people or
# by other tools, not by specreg's own code.
format_version
schema_migrations
peak_vram_by_pid
_.peak_vram_by_pid
warmup_s
requests_s
after_s
cache_n
stream_ids_n
output_sha256
expect_detail
_.expect_detail
build_info
tokenizer_model
tokenizer_pre
compatibility
logical_cores
physical_cores
load_avg_1m
max_tokens_override
warmup_requests
client_clock
server_cpus
predicted_decode_speedup
decode_tps
_.decode_tps
accepted_length_source
_.accepted_length_source
vram_overhead_bytes
_.vram_overhead_bytes
alpha_range
measured_speedup
measured_ci95
parameters
licence_note
n_cost_pairs
scores_sha256
fim_pre_id
fim_suf_id
fim_mid_id
add_sep  # also a key of every shipped rule set (validators/rules/*.json, extra keys refused)
target_kv_bytes
draft_vocab_bytes
host_bytes
kv_cells
registered_at
strict_verdict_id
n_verdicts
entries
_.entries
unk  # a key of every shipped rule set (validators/rules/*.json, extra keys refused)
vocab_type_ids  # likewise; `rules diff` compares it by name (ruleset_diff.py)

# Every `--spec-type` of llama.cpp: `--method` is validated against the enum as a whole.
NGRAM_MAP_K
NGRAM_MAP_K4V
NGRAM_CACHE

# The exit codes, declared together in errors.py (0 is returned as a literal).
EXIT_ADMITTED

# Attributes another library reads: sqlite3, zipfile, xllamacpp's CommonParams.
_.row_factory
_.compress_type
_.external_attr
_.hostnames
_.endpoint_metrics
_.n_parallel
_.n_ctx_checkpoints
_.n_threads_http
_.n_threads
_.n_gpu_layers

# An import that checks an optional extra is installed (exchange/dsse.py: need_extra).
securesystemslib

# The parameters of a protocol method (`__exit__`), named as the protocol names them.
et

# entry.py's stand-in for pydantic's plugin loader, which pydantic calls.
_.get_plugins

# A benchmark's configuration of the loopback hub (tests/hubserver.py reads it).
_.tags

# Used by tests, which legitimately need them: what a read jumped over or matched to its twin,
# the header's size, the generated table's runtime, the hub-dependent examples, the fixtures'
# own test data and fetchers.
_.header_size
_.jumped
_.twinned
RUNTIME
NETWORK
LOOP_TEXT
template_files
ensure_llama_source
vocab_heap_bytes
