"""The registry under stress: concurrent writers, a killed writer, read-only and full disks."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import resource
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from _registry_helpers import cli, immutable, model, one_line_error, run

from specreg.atomic import write_atomic
from specreg.errors import RegistryError
from specreg.registry.store import Registry
from specreg.schemas.checks import CheckResult, PairVerdict

N_PROCS = 8


def _verdict(t: str, d: str | None, method: str = "draft-simple") -> PairVerdict:
    return PairVerdict(
        admitted=True,
        method=method,
        target_sha256=t,
        draft_sha256=d,
        rule_set="rs",
        checks=[CheckResult(code="vocab.type", severity="pass", message="same")],
    )


def _worker(db: str, shared: list[str], own: list[str], barrier: object, out: object) -> None:
    """One of N processes: open a (maybe fresh) registry, register, record verdicts."""
    try:
        barrier.wait()  # type: ignore[attr-defined]
        reg = Registry(db, show_progress=False)
        target = reg.add_artifact(shared[0]).sha256
        drafts = [reg.add_artifact(p).sha256 for p in shared[1:]]
        for p in own:
            reg.add_artifact(p)
        for d in drafts:
            reg.record_verdict(_verdict(target, d))
        reg.record_verdict(_verdict(target, None, "ngram-mod"))
        reg.close()
        out.put(None)  # type: ignore[attr-defined]
    except BaseException as exc:  # report to the parent, which asserts
        out.put(repr(exc))  # type: ignore[attr-defined]


def test_eight_processes_register_and_record_at_once(tmp_path: Path) -> None:
    shared = [str(model(tmp_path, f"s{i}.gguf", seed=100 + i, age=False)) for i in range(N_PROCS + 1)]
    own = [[str(model(tmp_path, f"p{i}_{j}.gguf", seed=10 * i + j)) for j in range(2)] for i in range(N_PROCS)]
    db = str(tmp_path / "reg.db")  # not created yet: the first opens race too
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(N_PROCS), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(db, shared, own[i], barrier, out)) for i in range(N_PROCS)]
    for p in procs:
        p.start()
    errors = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert errors == [None] * N_PROCS
    with Registry(db) as reg:
        q = lambda sql: reg.conn.execute(sql).fetchone()[0]  # noqa: E731
        assert q("SELECT count(*) FROM artifacts") == 1 + N_PROCS + 2 * N_PROCS
        assert q("SELECT count(*) FROM artifact_paths") == 1 + N_PROCS + 2 * N_PROCS
        assert q("SELECT count(*) FROM pairs") == N_PROCS + 1
        assert q("SELECT count(*) FROM verdicts") == N_PROCS * (N_PROCS + 1)
        assert {p.n_verdicts for p in reg.pairs()} == {N_PROCS}
        assert q("SELECT count(*) FROM _sqlite_migrations") == len(
            {r[0] for r in reg.conn.execute("SELECT name FROM _sqlite_migrations")}
        )
        assert q("PRAGMA integrity_check") == "ok"


_KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from specreg.registry.store import Registry
    reg = Registry(sys.argv[1], show_progress=False)
    reg.add_artifact(sys.argv[2])                      # committed
    with reg.write() as db:                            # never committed
        db.execute("UPDATE artifacts SET name = 'uncommitted'")
        reg.add_artifact(sys.argv[3])
        print("inside", flush=True)
        time.sleep(120)
    """
)


def test_writer_killed_mid_transaction_keeps_last_commit(tmp_path: Path) -> None:
    db = tmp_path / "reg.db"
    a, b = model(tmp_path, "a.gguf", seed=1, name="A"), model(tmp_path, "b.gguf", seed=2, name="B")
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(db), str(a), str(b)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "inside"
        # the lock is really held
        with Registry(db, busy_timeout_s=0.2) as other, pytest.raises(RegistryError, match="locked"):
            other.add_artifact(b)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()
    with Registry(db, busy_timeout_s=5) as reg:
        assert reg.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [(r.name, r.paths) for r in reg.artifacts()] == [("A", [str(a)])]
        assert reg.add_artifact(b).name == "B"  # the dead writer's lock is gone
        assert reg.conn.execute("SELECT count(*) FROM artifacts").fetchone()[0] == 2


@pytest.mark.parametrize("what", ["file", "folder"])
def test_read_only_registry_is_one_clear_line_and_nothing_changes(tmp_path: Path, what: str) -> None:
    folder = tmp_path / "regdir"
    folder.mkdir()
    db = folder / "reg.db"
    a, b = model(tmp_path, "a.gguf", seed=1), model(tmp_path, "b.gguf", seed=2)
    with Registry(db) as reg:
        reg.add_artifact(a)
    before = db.read_bytes()
    with immutable(db if what == "file" else folder):
        line = one_line_error(cli("register", str(b), db=db))
        assert line == f"error: registry {db} is read-only; nothing was written" or (
            line.startswith(f"error: registry {db} is read-only (")
        ), line
        rc, out, _ = run("artifacts", "--json", db=db)  # reading still works
        assert rc == 0 and [r["paths"] for r in json.loads(out)] == [[str(a)]]
    assert db.read_bytes() == before
    with Registry(db) as reg:
        assert [r.paths for r in reg.artifacts()] == [[str(a)]]


@contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_read_only_filesystem(tmp_path: Path) -> None:
    a, b = model(tmp_path, "a.gguf", seed=1), model(tmp_path, "b.gguf", seed=2)
    with _tmpfs(tmp_path / "mnt", "8m") as mnt:
        db = mnt / "reg.db"
        with Registry(db) as reg:
            reg.add_artifact(a)
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        line = one_line_error(cli("register", str(b), db=db))
        assert line == f"error: registry {db} is read-only; nothing was written", line
        rc, out, _ = run("artifacts", "--json", db=db)
        assert rc == 0 and [r["paths"] for r in json.loads(out)] == [[str(a)]]
        subprocess.run(["mount", "-o", "remount,rw", str(mnt)], check=True)
        with Registry(db) as reg:
            assert [r.paths for r in reg.artifacts()] == [[str(a)]]


def test_full_disk_tmpfs_keeps_earlier_records(tmp_path: Path) -> None:
    a, b = model(tmp_path, "a.gguf", seed=1), model(tmp_path, "b.gguf", seed=2)
    with _tmpfs(tmp_path / "mnt", "1m") as mnt:
        db = mnt / "reg.db"
        with Registry(db) as reg:
            reg.add_artifact(a)
        filler = mnt / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:  # take every free block
            while os.write(fd, b"\1" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        line = one_line_error(cli("register", str(b), db=db))
        assert line.startswith(f"error: registry {db}: no space left to write"), line
        filler.unlink()
        with Registry(db) as reg:
            assert reg.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert [r.paths for r in reg.artifacts()] == [[str(a)]]
            reg.add_artifact(b)  # space again: works


def _limit_file_size(limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes then fail with EFBIG instead of killing us
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_file_size_limit_mid_write_keeps_earlier_records(tmp_path: Path) -> None:
    """No mount needed: with RLIMIT_FSIZE at the WAL's current size, the first frame the writer
    appends inside its transaction fails with EFBIG (SQLite: "database or disk is full")."""
    db = tmp_path / "reg.db"
    a, b = model(tmp_path, "a.gguf", seed=1), model(tmp_path, "b.gguf", seed=2)
    with Registry(db) as reg:  # held open: the WAL and its index stay as they are
        reg.add_artifact(a)
        wal, shm = Path(f"{db}-wal"), Path(f"{db}-shm")
        limit = max(wal.stat().st_size, shm.stat().st_size)
        env = {**os.environ, "SPECREG_DB": str(db)}
        proc = subprocess.run(
            [sys.executable, "-m", "specreg.cli", "register", str(b)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=lambda: _limit_file_size(limit),
        )
        line = one_line_error(proc)
        assert str(db) in line and "no space left to write" in line, line
    with Registry(db) as reg:
        assert reg.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [r.paths for r in reg.artifacts()] == [[str(a)]]
        reg.add_artifact(b)


def test_write_atomic_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    write_atomic(target, "old")
    write_atomic(target, b"new bytes")
    assert target.read_bytes() == b"new bytes"
    assert oct(target.stat().st_mode & 0o777) == oct(0o644 & ~_umask())
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_write_atomic_failure_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    write_atomic(target, "previous report")
    script = "import sys; from specreg.atomic import write_atomic; write_atomic(sys.argv[1], b'x' * (1 << 20))"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(target)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: _limit_file_size(64 * 1024),
    )
    assert proc.returncode != 0 and "File too large" in proc.stderr
    assert target.read_text() == "previous report"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]  # no temp file left behind
