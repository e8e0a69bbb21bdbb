"""The integrity gate's file checks, run in a forked child while the audit itself goes on.

Re-verifying an audit's files is I/O and hashing (every admitted pair's target and draft, by
default hashed again); the rest of an audit is Python over the registry's rows. The two do not
depend on each other until the first gate needs an answer, so `audit --all` forks a child at
its start: the child opens the registry on its own connection, verifies every admitted pair's
artifacts exactly as `Registry.verify_artifacts` does (same results, same refreshed stat cache)
and sends back one JSON object, while the parent imports its schemas and reads pairs and runs.
On a machine with two cores that hides the verification (0.2-0.3 s of a fleet audit of 4,200
small files; on large files it already uses every core). Whatever the child does not answer -
it failed, was killed, could not fork (no `os.fork`, threads already running) - the parent
verifies itself, so the answer never depends on the child.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from pathlib import Path

Integrity = dict[str, tuple[bool, str | None]]  # sha256 -> (ok, problem)


def _child(db: Path, rehash: bool, out: int) -> None:
    """In the forked child: verify, write the answer, and leave without running the parent's cleanup."""
    code = 1
    try:
        from specreg.registry.store import Registry

        with Registry(db, create=False) as reg:
            found = reg.verify_artifacts(reg.artifact_sizes(reg.admitted_artifacts()), rehash=rehash)
        with os.fdopen(out, "wb") as pipe:
            pipe.write(json.dumps(found).encode())
        code = 0
    except BaseException:  # any failure means "no answer": the parent verifies itself
        pass
    finally:
        os._exit(code)  # never return into the parent's stack (its CLI, its open files)


class IntegrityPrefetch:
    """A running child verifying the admitted pairs' files; `result()` waits for its answer."""

    def __init__(self, pid: int, pipe: int) -> None:
        self.pid, self.pipe = pid, pipe
        self._result: Integrity | None = None
        self._asked = self._reaped = False
        self._status: int | None = None

    @classmethod
    def start(cls, db: Path, *, rehash: bool) -> IntegrityPrefetch | None:
        """Fork the child; None where forking is not safe or not possible (the parent then verifies)."""
        if not hasattr(os, "fork") or threading.active_count() > 1 or not db.exists():
            return None
        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            return None
        if pid == 0:
            os.close(read)
            _child(db, rehash, write)
        os.close(write)
        return cls(pid, read)

    def result(self) -> Integrity | None:
        """The child's answer (waited for once), or None when it has none."""
        if not self._asked:
            self._asked = True
            try:
                with os.fdopen(self.pipe, "rb", closefd=False) as pipe:
                    data = pipe.read()
            except BaseException:  # interrupted while waiting: the child goes too
                self.close()
                raise
            self.close(kill=False)
            if self._status == 0:
                self._result = _parse(data)
        return self._result

    def close(self, *, kill: bool = True) -> None:
        """Reap the child, stopping it first unless its answer was read (the audit failed, or was
        interrupted, before it asked)."""
        if self._reaped:
            return
        self._reaped = True
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        os.close(self.pipe)
        _, status = os.waitpid(self.pid, 0)
        self._status = os.waitstatus_to_exitcode(status)


def _parse(data: bytes) -> Integrity | None:
    try:
        raw = json.loads(data)
        return {str(sha): (bool(ok), None if problem is None else str(problem)) for sha, (ok, problem) in raw.items()}
    except (ValueError, TypeError, AttributeError):
        return None
