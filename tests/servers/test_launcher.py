"""The launcher with real servers: port already taken, an impostor on the port, a user's binary."""

from __future__ import annotations

import itertools
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import psutil
import pytest
from _registry_helpers import model

from specreg.errors import ServerError, ServerStartError
from specreg.servers.launcher import bundled_command, external_command, free_ports, launch, owns_port
from specreg.servers.runtime import runtime_info


class _Healthy(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "15")
        self.end_headers()
        self.wfile.write(b'{"status":"ok"}')

    def log_message(self, *args: object) -> None: ...


@pytest.fixture()
def impostor() -> Iterator[int]:
    """Someone else's healthy HTTP server on a loopback port."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_port_held_by_someone_else_is_retried_on_another(tmp_path: Path, impostor: int) -> None:
    target = model(tmp_path, "t.gguf")
    ports = itertools.chain([impostor], free_ports())
    args = ["-m", str(target), "--spec-type", "none", "-c", "256", "-t", "1", "--metrics"]
    server = launch(bundled_command(), args, tmp_path / "s.log", start_timeout_s=30, ports=ports)
    try:
        assert server.port != impostor and server.alive()
        assert len(server.attempts) == 1 and server.attempts[0].startswith(f"port {impostor}: ")
        assert server.attempts[0].split(": ", 1)[1] in ("port taken", "not our server")
        assert owns_port(server.pid, server.port) and not owns_port(server.pid, impostor)
        assert httpx.get(f"{server.base_url}/props", timeout=10).json()["model_path"] == str(target)
    finally:
        server.stop()
    assert not server.alive() and not psutil.pid_exists(server.pid)
    assert "couldn't bind" in (tmp_path / "s.log").read_text() or "attempt 2" in (tmp_path / "s.log").read_text()


def test_every_port_taken_gives_up_with_the_attempts(tmp_path: Path) -> None:
    target = model(tmp_path, "t.gguf")
    holders = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        holders.append(s)
    try:
        ports = iter([h.getsockname()[1] for h in holders])
        with pytest.raises(ServerStartError, match="no free port after 2 attempts") as err:
            launch(
                bundled_command(),
                ["-m", str(target), "-c", "256", "-t", "1"],
                tmp_path / "s.log",
                start_timeout_s=30,
                ports=ports,
                max_attempts=2,
            )
        assert "couldn't bind" in "\n".join(err.value.lines)
    finally:
        for h in holders:
            h.close()


def test_user_binary_identity_and_serving(tmp_path: Path) -> None:
    """A user's llama-server: here the installed `specreg-llama-server` script, run as a binary."""
    exe = shutil.which("specreg-llama-server") or str(
        Path(__import__("sys").executable).with_name("specreg-llama-server")
    )
    cmd = external_command(exe)
    info = runtime_info(cmd)
    assert info.kind == "external" and info.path == str(Path(exe).resolve())
    import hashlib

    assert info.sha256 == hashlib.sha256(Path(exe).read_bytes()).hexdigest()
    assert "version:" in info.version_text and "xllamacpp" in info.version_text
    target = model(tmp_path, "t.gguf")
    server = launch(
        cmd, ["-m", str(target), "-c", "256", "-t", "1", "--metrics"], tmp_path / "u.log", start_timeout_s=30
    )
    try:
        r = httpx.get(server.base_url + "/health", trust_env=False)
        assert r.status_code == 200
        assert server.argv[0] == str(Path(exe).resolve()) and "--port" in server.argv
    finally:
        server.stop()
    assert not psutil.pid_exists(server.pid)


def test_version_probe_that_hangs_is_stopped_with_its_children(tmp_path: Path) -> None:
    """A `--server` whose `--version` never answers: a clear error, and no process left behind."""
    pidfile = tmp_path / "child.pid"
    script = tmp_path / "hangs"
    script.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {pidfile}\nwait\n")
    script.chmod(0o755)
    t0 = time.monotonic()
    with pytest.raises(ServerError, match="--version did not answer within 1s"):
        runtime_info(external_command(script), timeout_s=1.0)
    assert time.monotonic() - t0 < 10
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while (
        time.monotonic() < deadline
        and psutil.pid_exists(child)
        and psutil.Process(child).status() != psutil.STATUS_ZOMBIE
    ):
        time.sleep(0.05)
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
