"""`watch --listen HOST:PORT`: each window as Prometheus gauges, for Grafana and Alertmanager.

A registry of its own (never prometheus-client's global one, which would also export this
process's own metrics), served by prometheus-client's HTTP server on a daemon thread. Every
gauge carries the watched URL, the pair and the stratum as labels; the server's identity (its
files, build, method) is the labels of `specreg_watch_server_info`, so a redeploy starts a new
info series without renaming the others. A value the window does not have is NaN (a gap), never 0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from specreg.errors import UsageError
from specreg.schemas.watch import WATCH_STATES

if TYPE_CHECKING:
    from specreg.schemas.watch import WatchWindow

GAUGE_PREFIX = "specreg_watch_"
_LABELS = ("url", "pair", "stratum")
_INFO = ("url", "pair", "stratum", "via", "target_sha256", "draft_sha256", "build", "spec_type", "method")


def parse_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT` -> (host, port); `:PORT` or `PORT` alone listens on loopback only (exporting
    to other machines is a choice: `0.0.0.0:PORT`)."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    return host, int(port)


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


class Exporter:
    """The gauges of one watch, updated once per window."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Gauge

        self.registry = CollectorRegistry(auto_describe=True)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = _LABELS) -> Gauge:
            return Gauge(GAUGE_PREFIX + name, doc, labels, registry=self.registry)

        self.acceptance = gauge("acceptance", "Accepted / drafted tokens in the last window (NaN: none drafted)")
        self.audited_acceptance = gauge("audited_acceptance", "Acceptance the audit measured for the deploy")
        self.decode = gauge("decode_tokens_per_second", "Generated tokens / generating seconds, last window")
        self.audited_decode = gauge("audited_decode_tokens_per_second", "Decode rate the audit measured")
        self.mean_length = gauge("mean_accepted_length", "1 + accepted / drafting steps, last window")
        self.generated = gauge("generated_tokens", "Tokens generated in the last window")
        self.state = gauge("state", "1 for the window's state, 0 for the others", (*_LABELS, "state"))
        self.mismatch = gauge("mismatch", "1 when the server is not the audited one (the fields differ)")
        self.windows = gauge("windows_tested", "Windows in the drift test since the server's last restart")
        self.last = gauge("last_window_timestamp_seconds", "When the last window ended (Unix time)")
        self.info = gauge("server_info", "The watched server's identity, as labels (value 1)", _INFO)
        self._info_labels: tuple[str, ...] | None = None
        self._server: object | None = None

    def serve(self, host: str, port: int) -> None:
        """Start the HTTP endpoint; UsageError when the address cannot be bound."""
        from prometheus_client import start_http_server

        try:
            started = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise UsageError(f"--listen {host}:{port}: {exc.strerror or exc}") from None
        self._server = started[0] if isinstance(started, tuple) else None  # (server, thread) since 0.20

    def close(self) -> None:
        server = self._server
        if server is not None:
            server.shutdown()  # type: ignore[attr-defined]
            server.server_close()  # type: ignore[attr-defined]
            self._server = None

    def update(self, w: WatchWindow) -> None:
        """Every gauge from one window."""
        labels = (w.url, str(w.pair_id) if w.pair_id is not None else "", w.stratum or "")
        a = w.audited
        self.acceptance.labels(*labels).set(_nan(w.acceptance))
        self.audited_acceptance.labels(*labels).set(_nan(a.acceptance if a else None))
        self.decode.labels(*labels).set(_nan(w.decode_tps))
        self.audited_decode.labels(*labels).set(_nan(a.decode_tps if a and a.compare_decode else None))
        self.mean_length.labels(*labels).set(_nan(w.mean_accepted_length))
        self.generated.labels(*labels).set(_nan(w.generated))
        for state in WATCH_STATES:
            self.state.labels(*labels, state).set(1.0 if state == w.state else 0.0)
        self.mismatch.labels(*labels).set(1.0 if w.mismatches else 0.0)
        self.windows.labels(*labels).set(w.tested)
        self.last.labels(*labels).set(w.ended_at.timestamp())
        s = w.server
        if s is None:
            return
        info = (
            *labels,
            s.via,
            s.target_sha256 or "",
            s.draft_sha256 or "",
            str(s.build) if s.build is not None else "",
            s.spec_type or "",
            w.method or "",
        )
        if info != self._info_labels:
            if self._info_labels is not None:
                self.info.remove(*self._info_labels)
            self.info.labels(*info).set(1.0)
            self._info_labels = info
