"""Result bundles: export, import, and every way a bundle is refused (on a real benchmark run).

The source registry is the shared audit world (one real run on the bundled llama.cpp server).
Bundles "from another host" are that bundle rewritten and resealed the way another specreg
would have written it (tests/_bundle_helpers.py); tampered bundles are the same, unsealed.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from _audit_world import AuditWorld, specreg
from _bundle_helpers import db_rows as _rows
from _bundle_helpers import dump, edit_run, members, rename_run, rewrite, slowed, write_members

from specreg import __version__
from specreg.benchmark.store.digest_cache import builder_id
from specreg.errors import BundleError
from specreg.exchange.bundle import export_bundle, import_bundles
from specreg.exchange.bundle_format import HEADER, open_bundle
from specreg.exchange.bundle_runs import local_digest, run_parts
from specreg.registry.migrations import LOCAL_ONLY, bundle_schema, migrations
from specreg.registry.store import Registry
from specreg.schemas.record import to_python


@pytest.fixture
def source(audit_world: AuditWorld, tmp_path: Path) -> Path:
    return audit_world.copy(tmp_path / "source.db")


@pytest.fixture
def bundle(source: Path, tmp_path: Path) -> Path:
    code, out, err = specreg("export", "--all", "-o", str(tmp_path / "all.zip"), db=source)
    assert code == 0, err
    assert "1 run (" in out
    return tmp_path / "all.zip"


def test_round_trip_keeps_every_record(audit_world: AuditWorld, source: Path, bundle: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest.db"
    code, out, err = specreg("import", str(bundle), db=dest)
    assert code == 0, err
    assert "imported 1 run (" in out
    with Registry(source, show_progress=False) as a, Registry(dest, show_progress=False) as b:
        rid = audit_world.run_id
        assert run_parts(a.conn, rid) == run_parts(b.conn, rid)  # every row, byte for byte
        assert local_digest(a.conn, rid) == local_digest(b.conn, rid)
        # the digest the audit reads: kept when the run finished there, and when it arrived here
        kept = "SELECT builder, digest_json FROM run_digests WHERE run_id = ? AND spread = 0"
        ka, kb = (json.loads(r.conn.execute(kept, (rid,)).fetchone()[1]) for r in (a, b))
        assert ka == kb  # as JSON: an import writes the run's JSON members with sorted keys
        assert b.conn.execute(kept, (rid,)).fetchone()[0] == builder_id()
        n = b.conn.execute("SELECT count(*) FROM bench_requests WHERE run_id = ?", (rid,)).fetchone()[0]
        assert n == a.conn.execute("SELECT count(*) FROM bench_requests").fetchone()[0] > 0
        # artifacts by SHA-256, without the source's paths (the bytes are not here)
        assert {r.sha256 for r in a.artifacts()} == {r.sha256 for r in b.artifacts()}
        assert all(not r.paths for r in b.artifacts())
        assert {(r.sha256, r.licence.effective, r.provenance.revision) for r in a.artifacts()} == {
            (r.sha256, r.licence.effective, r.provenance.revision) for r in b.artifacts()
        }
        # pairs by identity; every verdict with its checks, kept as evidence about the source host:
        # none of them admits a pair here (the files are not here, so nothing was checked here)
        key = lambda p: (p.target_sha256, p.draft_sha256 or "", p.method, p.rule_set)  # noqa: E731
        assert sorted(map(key, a.pairs())) == sorted(map(key, b.pairs()))
        assert not b.admitted_pairs() and a.admitted_pairs()
        for pa in a.pairs():
            pb = next(p for p in b.pairs() if key(p) == key(pa))
            assert not pb.checked_here and not pb.admitted and b.pair_history(pb.id) == []
            assert pb.elsewhere is not None and pb.elsewhere.admitted == pa.admitted
            assert pb.elsewhere.host == socket.gethostname()
            got = b.conn.execute("SELECT checks_json FROM imported_verdicts WHERE pair_id = ? ORDER BY id", (pb.id,))
            assert [json.loads(c) for (c,) in got] == [[to_python(c) for c in v.checks] for v in a.pair_history(pa.id)]
        # the run points at the local pair id of its pair
        run_pair = b.conn.execute("SELECT pair_id FROM bench_runs").fetchone()[0]
        assert b.get_pair(run_pair).method == "draft-simple"
    host, version = _rows(dest, "SELECT host, specreg_version FROM run_origins")[0]
    assert (host, version) == (socket.gethostname(), __version__)
    # server logs travel with the run and land next to this registry's runs
    logs = _rows(dest, "SELECT log_path FROM bench_conditions WHERE log_path IS NOT NULL")
    src_logs = _rows(source, "SELECT log_path FROM bench_conditions WHERE log_path IS NOT NULL ORDER BY idx")
    assert len(logs) == len(src_logs) > 0
    assert sorted(Path(p).read_bytes() for (p,) in logs) == sorted(Path(p).read_bytes() for (p,) in src_logs)


def test_import_twice_changes_nothing(source: Path, bundle: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest.db"
    with Registry(dest, show_progress=False) as reg:
        first = import_bundles(reg, [bundle])
    before = dump(dest)
    with Registry(dest, show_progress=False) as reg:
        second = import_bundles(reg, [bundle, bundle])
    assert dump(dest) == before
    assert first.runs and not second.runs and second.present == first.runs * 2
    assert (second.artifacts, second.pairs, second.verdicts) == (0, 0, 0)
    # and the exporting registry itself already holds all of it
    before = dump(source)
    with Registry(source, show_progress=False) as reg:
        again = import_bundles(reg, [bundle])
    assert dump(source) == before and again.present == first.runs


def test_reexport_of_an_imported_run_keeps_its_origin_and_digest(bundle: Path, tmp_path: Path) -> None:
    def other_host(data: dict[str, bytes], header: dict) -> None:
        header["origin"] = {"host": "gpu-node-7", "specreg_version": "0.0.9"}
        for run in header["runs"]:
            run["origin"] = header["origin"]

    moved = rewrite(bundle, tmp_path / "node7.zip", other_host)
    central = tmp_path / "central.db"
    assert specreg("import", str(moved), db=central)[0] == 0
    assert _rows(central, "SELECT host, specreg_version FROM run_origins") == [("gpu-node-7", "0.0.9")]
    code, out, _ = specreg("runs", db=central)
    assert code == 0 and "gpu-node-7" in out
    with Registry(central, show_progress=False) as reg:
        again = export_bundle(reg, tmp_path / "again.zip", everything=True)
    assert [r.origin.host for r in again.header.runs] == ["gpu-node-7"]
    assert [r.digest for r in again.header.runs] == [json.loads(members(moved)[HEADER])["runs"][0]["digest"]]


def _refused(db: Path, path: Path, *words: str) -> str:
    before = dump(db) if db.exists() else None
    code, out, err = specreg("import", str(path), db=db)
    assert code == 2, (code, out, err)
    assert "Traceback" not in err
    line = err.splitlines()[0]
    assert line.startswith("error:") and all(w in err for w in words), err
    assert (dump(db) if before is not None else None) == before  # nothing written
    return err


def test_a_tampered_member_is_refused_before_anything_is_written(bundle: Path, tmp_path: Path) -> None:
    def flip(data: dict[str, bytes], header: dict) -> None:
        name = next(n for n in data if n.endswith("requests.jsonl"))
        data[name] = data[name].replace(b'"ok":1', b'"ok":0', 1)

    dest = tmp_path / "dest.db"
    Registry(dest).close()
    _refused(dest, rewrite(bundle, tmp_path / "t.zip", flip, reseal=False), "requests.jsonl", "SHA-256", "altered")
    assert not list((Path(str(dest)).parent).glob("runs/*"))


def test_an_edited_manifest_is_refused(bundle: Path, tmp_path: Path) -> None:
    def more(data: dict[str, bytes], header: dict) -> None:
        header["counts"]["runs"] = 99

    _refused(tmp_path / "d.db", rewrite(bundle, tmp_path / "m.zip", more, reseal=False), "bundle.json", "altered")


def test_truncated_missing_and_extra_members_are_refused(bundle: Path, tmp_path: Path) -> None:
    blob = bundle.read_bytes()
    cut = tmp_path / "cut.zip"
    for size in (len(blob) // 2, len(blob) - 30, 100):
        cut.write_bytes(blob[:size])
        _refused(tmp_path / "d.db", cut, "truncated")
    data = members(bundle)
    name = next(n for n in data if n.endswith("summaries.jsonl"))
    gone = write_members(tmp_path / "gone.zip", {n: b for n, b in data.items() if n != name})
    _refused(tmp_path / "d.db", gone, name, "missing")
    extra = write_members(tmp_path / "extra.zip", {**data, "runs/evil.sh": b"rm -rf /"})
    _refused(tmp_path / "d.db", extra, "runs/evil.sh", "not in the manifest")
    _refused(tmp_path / "d.db", write_members(tmp_path / "plain.zip", {"a.txt": b"x"}), "not a specreg bundle")


def test_a_bundle_from_a_newer_specreg_is_refused(bundle: Path, tmp_path: Path) -> None:
    def format_2(data: dict[str, bytes], header: dict) -> None:
        header["format_version"] = 2

    def schema_m099(data: dict[str, bytes], header: dict) -> None:
        header["schema_migrations"].append("m099_quantum_runs")

    err = _refused(tmp_path / "d.db", rewrite(bundle, tmp_path / "v2.zip", format_2), "format 2", "newer")
    assert "hint: upgrade specreg" in err
    _refused(tmp_path / "d.db", rewrite(bundle, tmp_path / "s.zip", schema_m099), "newer registry schema", "m099")


def test_tables_a_registry_keeps_for_itself_do_not_make_a_bundle_newer(bundle: Path) -> None:
    """A specreg without the local caches (template scans m010, run digests m012) reads this bundle."""
    header = json.loads(members(bundle)[HEADER])
    assert header["schema_migrations"] == bundle_schema()
    assert not LOCAL_ONLY & set(header["schema_migrations"]) and "m011_bench_request_prompt_n" in bundle_schema()
    older = [m for m in migrations.names() if m not in LOCAL_ONLY]
    assert open_bundle(bundle, older).header.digest == open_bundle(bundle, migrations.names()).header.digest


def test_a_reused_run_id_with_other_content_is_refused_naming_both_digests(
    audit_world: AuditWorld, bundle: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "dest.db"
    assert specreg("import", str(bundle), db=dest)[0] == 0
    rid = audit_world.run_id

    def remeasured(data: dict[str, bytes], header: dict) -> None:
        # the same run id, one request slower; and a second, new run that must not land either
        name = f"runs/{rid}/requests.jsonl"
        rows = [json.loads(x) for x in data[name].splitlines()]
        rows[0]["total_ms"] = (rows[0].get("total_ms") or 0) + 1000.0
        data[name] = b"".join(
            json.dumps(r, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\n" for r in rows
        )
        copy = {n: b for n, b in data.items() if n.startswith(f"runs/{rid}/")}
        other = dict(copy)
        sub = {"runs": [dict(header["runs"][0])]}
        rename_run(other, sub, rid, "zz-new-run")
        data.update({n: b for n, b in other.items() if n.startswith("runs/zz-new-run/")})
        header["runs"].append(sub["runs"][0])

    clash = rewrite(bundle, tmp_path / "clash.zip", remeasured)
    with Registry(dest, show_progress=False) as reg:
        mine = local_digest(reg.conn, rid)
    theirs = next(r["digest"] for r in json.loads(members(clash)[HEADER])["runs"] if r["run_id"] == rid)
    assert mine != theirs
    _refused(dest, clash, rid, mine or "", theirs, "different content")


def test_import_is_one_transaction_over_all_files(bundle: Path, tmp_path: Path) -> None:
    """A good bundle next to a bad one: nothing of either lands."""
    bad = rewrite(bundle, tmp_path / "bad.zip", lambda d, h: d.update({"x": b"1"}), reseal=False)
    dest = tmp_path / "dest.db"
    Registry(dest).close()
    before = dump(dest)
    with Registry(dest, show_progress=False) as reg, pytest.raises(BundleError):
        import_bundles(reg, [bundle, bad])
    assert dump(dest) == before


def test_a_second_host_shows_side_by_side(audit_world: AuditWorld, bundle: Path, tmp_path: Path) -> None:
    rid = audit_world.run_id

    def on_a_gpu_box(data: dict[str, bytes], header: dict) -> None:
        rename_run(data, header, rid, "l4-run-1")

        def gpu(rec: dict) -> None:
            hw = rec["manifest"]["hardware"]
            hw["gpu"] = {"present": True, "devices": [{"index": 0, "name": "NVIDIA L4"}], "peak_vram_by_pid": {}}
            hw["placement"] = "gpu (-ngl all)"

        edit_run(data, "l4-run-1", gpu)
        header["origin"] = {"host": "l4-box", "specreg_version": __version__}
        header["runs"][0]["origin"] = header["origin"]

    l4 = rewrite(bundle, tmp_path / "l4.zip", on_a_gpu_box)
    dest = tmp_path / "fleet.db"
    code, _, err = specreg("import", str(bundle), str(l4), db=dest)
    assert code == 0, err
    code, out, _ = specreg("runs", "--json", db=dest)
    runs = {r["run_id"]: r for r in json.loads(out)}
    assert "NVIDIA L4" in runs["l4-run-1"]["hardware"] and "no GPU" in runs[rid]["hardware"]
    assert runs["l4-run-1"]["host"] == "l4-box"
    code, out, _ = specreg("runs", "--by-hardware", db=dest)
    assert code == 0 and "H1" in out and "H2" in out and "NVIDIA L4" in out


def _on_an_l4(rid: str, new_id: str) -> Callable[[dict[str, bytes], dict], None]:
    """The run as an L4 box would have sent it: new id, a GPU in its hardware block."""

    def edit(data: dict[str, bytes], header: dict) -> None:
        rename_run(data, header, rid, new_id)

        def gpu(rec: dict) -> None:
            hw = rec["manifest"]["hardware"]
            hw["gpu"] = {"present": True, "devices": [{"index": 0, "name": "NVIDIA L4"}], "peak_vram_by_pid": {}}
            hw["placement"] = "gpu (-ngl all)"

        edit_run(data, new_id, gpu)
        header["origin"] = {"host": "l4-box", "specreg_version": __version__}
        header["runs"][0]["origin"] = header["origin"]

    return edit


def test_audit_decides_per_hardware_class(audit_world: AuditWorld, source: Path, bundle: Path, tmp_path: Path) -> None:
    rid, pair = audit_world.run_id, audit_world.pairs["draft-simple"]
    # its draft condition 100 times slower, as a slower box would have measured it
    slow = slowed(bundle, tmp_path / "slow.zip", rid, "draft-simple", 100.0, tmp_path / "slow")
    l4 = rewrite(slow, tmp_path / "l4.zip", _on_an_l4(rid, "l4-run-1"))
    assert specreg("import", str(l4), db=source)[0] == 0  # the source still has the model files
    policy = audit_world.policy_file(tmp_path, speed={"min_speedup": 0.02})
    code, out, err = specreg("audit", "--pair", str(pair), "--policy", str(policy), "--json", db=source)
    report = json.loads(out)
    assert len(report["hardware_classes"]) == 2, err
    by_hw = {("L4" if "L4" in p["hardware"] else "cpu"): p for p in report["pairs"]}
    assert by_hw["cpu"]["run_id"] == rid and by_hw["L4"]["run_id"] == "l4-run-1"
    speed = {k: next(g for g in p["gates"] if g["gate"] == "speed") for k, p in by_hw.items()}
    assert speed["L4"]["passed"] is False and speed["cpu"]["passed"] is True, speed
    assert code == 1  # one class fails
    decided = {(d["hardware"], d["stratum"]): d["choice"] for d in report["decisions"]}
    l4_class = by_hw["L4"]["hardware"]
    assert all(choice == "none" for (hw, _), choice in decided.items() if hw == l4_class)
    assert any(choice != "none" for (hw, _), choice in decided.items() if hw != l4_class)
    code, out, _ = specreg(
        "audit", "--pair", str(pair), "--policy", str(policy), "--report", str(tmp_path / "a.md"), db=source
    )
    assert "H1" in out and "H2" in out and "FAIL speed" in out and "PASS" in out
    md = (tmp_path / "a.md").read_text()
    assert "## Per hardware class" in md and "NVIDIA L4" in md and "FAIL speed" in md


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["export", "-o", "x.zip"], "say what to export"),
        (["export", "--all"], "-o FILE"),
        (["export", "--run", "nope", "-o", "x.zip"], "no benchmark run 'nope'"),
        (["export", "--all", "-o", "/no/such/folder/x.zip"], "does not exist"),
        (["export", "--format", "tar", "--all"], "choose one of bundle, cyclonedx"),
        (["export", "3", "-o", "x.zip"], "for --format cyclonedx"),
        (["import", "/no/such/bundle.zip"], "no such file"),
    ],
)
def test_bad_export_and_import_requests_are_one_line_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    Registry(tmp_path / "r.db", show_progress=False).close()  # an empty registry: export never creates one
    code, _, err = specreg(*args, db=tmp_path / "r.db")
    assert code == 2 and needle in err and "Traceback" not in err, err


def test_a_run_marked_running_or_an_odd_log_index_is_refused(
    audit_world: AuditWorld, bundle: Path, tmp_path: Path
) -> None:
    rid = audit_world.run_id

    def running(data: dict[str, bytes], header: dict) -> None:
        edit_run(data, rid, lambda rec: rec.update(status="running"))

    def odd_log(data: dict[str, bytes], header: dict) -> None:
        logs = header["runs"][0]["logs"]
        logs["../x"] = next(iter(logs.values()))

    _refused(tmp_path / "d.db", rewrite(bundle, tmp_path / "r.zip", running), "still running")
    _refused(tmp_path / "d.db", rewrite(bundle, tmp_path / "l.zip", odd_log), "log member")
