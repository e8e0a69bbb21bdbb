"""What a task on a cluster node leaves behind is removed when the task ends, however it ends.

A node task measures in a folder of its own (a scratch registry, the servers' logs) and starts
llama.cpp servers. When the task returns, it removes them itself. When its worker is killed
instead (the driver ends a task past its deadline, Ray's node dies, the user presses Ctrl-C on
the driver), nothing in that worker runs again: this guard does it. It is a small process the
task starts, detached from the worker (its own session, and a grandchild, so that neither Ray's
clean-up of a worker's children nor a terminal's Ctrl-C stops it first), holding the read end of
a pipe whose write end only the worker holds. The kernel closes that end when the worker exits,
by any signal: the guard then stops every process carrying the task's token (the servers, and
anything they started) and removes the folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TASK_VAR = "SPECREG_TASK_TOKEN"  # inherited by everything a node task starts (servers included)
GUARD_VAR = "SPECREG_TASK_GUARD"  # the guard's own mark: a driver on the same machine waits for it


class TaskGuard:
    """The guard of one task: `release()` when the task has cleaned up after itself."""

    def __init__(self, folder: Path, token: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != TASK_VAR}  # the guard must not stop itself
        env[GUARD_VAR] = token
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specreg.exchange.task_guard", str(folder), token],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
            env=env,
            cwd=folder,  # `-m` looks in its folder first: never a source tree the worker happens to sit in
        )
        self.proc.wait()  # the first child exits at once, leaving its own child to watch the pipe

    def release(self) -> None:
        """Close the pipe: the guard looks once more (nothing left, normally) and exits."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()


def _watch(folder: Path, token: str) -> None:
    from specreg.servers.launcher import kill_marked

    sys.stdin.buffer.read()  # returns at end of file: the task released it, or its worker died
    kill_marked(token, TASK_VAR)
    shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        raise SystemExit("usage: python -m specreg.exchange.task_guard FOLDER TOKEN")
    if os.fork() > 0:  # a grandchild of the worker: not among the children Ray stops with it
        return  # this process ends as any does (it has nothing of its own to clean up)
    _watch(Path(argv[1]), argv[2])


if __name__ == "__main__":
    main(sys.argv)
