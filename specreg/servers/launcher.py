"""Start and stop one llama.cpp server process per condition, bundled or the user's binary.

Each server runs in its own session (process group) so stopping it stops everything it
spawned, and carries a token in its environment so that a daemon it double-forked out of the
group is found and stopped too; its stdout+stderr go through a pipe into a bounded log file
kept with the run (`logpump`). The port is picked free, and a
server that answers on it is trusted only when our own child holds the listening socket
(someone else may have grabbed the port between our check and the child's bind).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from specreg import remote
from specreg.errors import RemoteError, ServerError, ServerStartError
from specreg.servers.logpump import LogPump
from specreg.servers.serverlog import bind_failed, error_lines, last_lines, tail_text

HOST = "127.0.0.1"
# llama-server reads LLAMA_ARG_* from the environment (e.g. LLAMA_ARG_SPEC_SYNTH_RATES): a run
# must be what its argv says, so those never reach the child.
ENV_PREFIXES_DROPPED = ("LLAMA_ARG_",)
TOKEN_VAR = "SPECREG_SERVER_TOKEN"  # inherited by everything a server starts, daemons included


@dataclass(frozen=True)
class ServerCommand:
    """How to start a server: the argv prefix the condition's flags are appended to."""

    kind: str  # "bundled" | "external"
    prefix: tuple[str, ...]
    path: str  # the binary (external) or the bundled module's file

    def argv(self, args: list[str]) -> list[str]:
        return [*self.prefix, *args]


def bundled_command() -> ServerCommand:
    """The bundled xllamacpp server, run with this interpreter (same venv, no PATH lookup)."""
    from specreg.servers import bundled_server

    return ServerCommand("bundled", (sys.executable, "-m", "specreg.servers.bundled_server"), bundled_server.__file__)


def external_command(path: str | Path) -> ServerCommand:
    """A user's llama-server binary; refused unless it is an executable regular file."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ServerError(f"server binary {p} does not exist", hint="give --server the path to llama-server")
    if not p.is_file():
        raise ServerError(f"server binary {p} is not a regular file")
    if not os.access(p, os.X_OK):
        raise ServerError(f"server binary {p} is not executable", hint=f"chmod +x {p}")
    return ServerCommand("external", (str(p.resolve()),), str(p.resolve()))


def child_env(token: str | None = None) -> dict[str, str]:
    """The environment for a server: ours minus anything that changes llama.cpp's flags, plus
    the token that marks its processes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES_DROPPED) and k != TOKEN_VAR}
    if token is not None:
        env[TOKEN_VAR] = token
    return env


def free_ports() -> Iterator[int]:
    """Ports the kernel reports free right now (still a race; the launcher checks ownership)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            port = int(s.getsockname()[1])
        yield port  # after close: a suspended generator must not hold the port


@dataclass
class ServerProcess:
    """A running server child: its process, port and log file."""

    proc: subprocess.Popen[bytes]
    port: int
    argv: list[str]
    log_path: Path
    create_time: float
    attempts: list[str] = field(default_factory=list)
    pump: LogPump | None = None
    token: str | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pids(self) -> list[int]:
        """The server and every descendant (for memory sampling)."""
        try:
            root = psutil.Process(self.proc.pid)
            return [root.pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.Error:
            return []

    def log_tail(self, n_lines: int = 40) -> str:
        return tail_text(self.log_path, n_lines)

    def settle_log(self, timeout: float = 1.0) -> None:
        """After the server exited: give the log a moment to receive its last lines."""
        if self.pump is not None:
            self.pump.wait(timeout)

    def stop(self, grace_s: float = 5.0) -> int | None:
        """SIGTERM the process group, SIGKILL what is left after `grace_s` (daemons it left
        behind included); returns the exit code."""
        stop_group(self.proc.pid, grace_s, proc=self.proc, token=self.token)
        if self.pump is not None:
            self.pump.close()
        return self.proc.returncode


def stop_group(
    pid: int, grace_s: float = 5.0, proc: subprocess.Popen[bytes] | None = None, token: str | None = None
) -> None:
    """Stop a session leader's whole group (and strays that left it): TERM, wait, KILL; then
    every process still carrying `token` in its environment (a double-forked daemon)."""
    try:
        _stop_group(pid, grace_s, proc)
    finally:
        if token is not None:
            kill_marked(token)


def marked(token: str, var: str = TOKEN_VAR) -> list[psutil.Process]:
    """Live processes of ours whose environment carries `token` (in `var`)."""
    found = []
    me = os.getuid() if hasattr(os, "getuid") else None
    for p in psutil.process_iter(["uids"]):
        try:
            if me is not None and p.info["uids"] and p.info["uids"].real != me:
                continue
            if p.environ().get(var) == token and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def kill_marked(token: str, var: str = TOKEN_VAR) -> list[int]:
    """SIGKILL every process carrying `token` (in `var`); returns the pids of any that survived."""
    procs = [p for p in marked(token, var) if p.pid != os.getpid()]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    _, alive = psutil.wait_procs(procs, timeout=3.0)
    return [p.pid for p in alive]


def _stop_group(pid: int, grace_s: float, proc: subprocess.Popen[bytes] | None) -> None:
    try:
        strays = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        strays = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        for child in strays:
            with contextlib.suppress(psutil.Error):
                child.send_signal(sig)
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            if proc is not None:
                if proc.poll() is not None and not _any_alive(strays):
                    return
            elif not _pid_alive(pid) and not _any_alive(strays):
                return
            time.sleep(0.02)
    if proc is not None:
        proc.poll()


def _pid_alive(pid: int) -> bool:
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _any_alive(procs: list[psutil.Process]) -> bool:
    return any(_pid_alive(p.pid) for p in procs)


def owns_port(pid: int, port: int) -> bool:
    """True when `pid` or one of its descendants holds a LISTEN socket on `port`."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return False
    for p in procs:
        try:
            for c in p.net_connections(kind="tcp"):
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
                    return True
        except psutil.Error:
            continue
    return False


def launch(
    cmd: ServerCommand,
    args: list[str],
    log_path: Path,
    *,
    start_timeout_s: float = 60.0,
    ports: Iterator[int] | None = None,
    max_attempts: int = 3,
    on_spawn: Callable[[int, float], None] | None = None,
    cpus: set[int] | None = None,
) -> ServerProcess:
    """Start a server with `args` (+ host/port) and wait until `/health` says ok.

    A port that turns out to be taken (bind failure in the log, or a healthy answer from a
    process that is not our child) is retried on another port.

    Args:
        cmd: the bundled server or the user's `llama-server`.
        args: llama-server flags, without host and port (the launcher adds them).
        log_path: where the server's output goes (bounded by `LogPump`).
        start_timeout_s: how long to wait for `/health`, over every attempt.
        ports: ports to try in turn (default: ports the kernel reports free).
        max_attempts: how many ports to try before giving up.
        on_spawn: called with `(pid, start_time)` as soon as each child exists, so a caller can
            record it before it is healthy (and reap it if specreg dies).
        cpus: the cores the server may run on, set as soon as it exists (before it has loaded
            a model or started a thread, so every thread it starts inherits them); a machine
            that refuses is left as it is.

    Raises:
        ServerStartError: when the server exits or never becomes healthy, with the log's last
            lines.
    """
    ports = ports or free_ports()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + start_timeout_s
    attempts: list[str] = []
    for attempt in range(1, max_attempts + 1):
        port = next(ports)
        argv = cmd.argv([*args, "--host", HOST, "--port", str(port)])
        with open(log_path, "ab") as log:
            log.write(f"# specreg: attempt {attempt} on port {port}\n".encode())
        token = uuid.uuid4().hex
        read_fd, write_fd = os.pipe()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=write_fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                env=child_env(token),
            )
        except OSError as exc:
            os.close(read_fd)
            raise ServerStartError(
                f"cannot start server {argv[0]}: {exc.strerror or exc}", log_path=str(log_path)
            ) from exc
        finally:
            os.close(write_fd)
        try:  # from here on a Ctrl-C or SIGTERM stops the child before it goes on (the server is not made yet)
            if cpus:
                with contextlib.suppress(OSError, AttributeError):  # not Linux, or the cores are not ours to give
                    os.sched_setaffinity(proc.pid, cpus)
            pump = LogPump(read_fd, log_path)
            try:
                created = psutil.Process(proc.pid).create_time()
            except psutil.Error:
                created = time.time()
        except BaseException:
            stop_group(proc.pid, proc=proc, token=token)
            raise
        server = ServerProcess(proc, port, argv, log_path, created, attempts, pump=pump, token=token)
        try:
            if on_spawn is not None:  # recorded before waiting, so a killed specreg leaves a findable pid
                on_spawn(proc.pid, created)
            outcome = _wait_healthy(server, deadline)
        except BaseException:  # Ctrl-C while waiting: never leave the child behind
            server.stop()
            raise
        if outcome == "ready":
            return server
        server.stop()
        attempts.append(f"port {port}: {outcome}")
        if outcome not in ("port taken", "not our server"):
            raise _start_error(server, outcome, start_timeout_s)
    raise ServerStartError(
        f"no free port after {max_attempts} attempts ({'; '.join(attempts)})",
        log_path=str(log_path),
        lines=tail_text(log_path, 20).splitlines(),
    )


def _start_error(server: ServerProcess, outcome: str, timeout_s: float) -> ServerStartError:
    tail = server.log_tail(30)
    errors = error_lines(tail)
    if outcome == "timeout":
        msg = f"server did not become healthy within {timeout_s:g}s"
    else:
        msg = f"server exited during start ({outcome})"
    if errors:
        msg += f": {errors[-1].strip()}"
    return ServerStartError(msg, log_path=str(server.log_path), lines=errors or last_lines(tail, 10))


def _wait_healthy(server: ServerProcess, deadline: float) -> str:
    """'ready', 'port taken', 'not our server', 'timeout' or 'exit code N'."""
    delay = 0.02
    # short: llama-server answers /health at once (503 while loading); a port that accepts but
    # never answers belongs to someone else. Only the status is read, within a second in all
    # (specreg.remote): whatever else answers there cannot hold the start with its body.
    with remote.client(timeout=httpx.Timeout(0.5, connect=0.5), trust_env=False) as http:
        while True:
            code = server.proc.poll()
            if code is not None:
                server.settle_log()
                if bind_failed(tail_text(server.log_path, 60)):
                    return "port taken"
                return f"exit code {code}"
            try:
                with (
                    remote.operation("the /health probe", seconds=1.0, join=False),
                    http.stream("GET", f"{server.base_url}/health") as r,
                ):
                    status = r.status_code
                if status == 200:
                    if owns_port(server.pid, server.port):
                        return "ready"
                    if server.proc.poll() is None:
                        # someone else answers on "our" port; give our child a moment to fail
                        time.sleep(0.2)
                        if owns_port(server.pid, server.port):
                            return "ready"
                    return "not our server"
            except (httpx.HTTPError, RemoteError):
                pass
            if time.monotonic() >= deadline:
                return "timeout"
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)
