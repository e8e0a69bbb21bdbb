"""A real browser for the report tests: Debian's headless `chromium`, driven over the DevTools
protocol on a pipe (`--remote-debugging-pipe`: fd 3 in, fd 4 out, NUL-terminated JSON), so no
port, no websocket library and no browser-automation package is needed.

`look(page, width)` loads a report file at a phone's (390 px) or a laptop's (1280 px) width and
returns what a person would see: whether the page scrolls sideways (and which elements stick
out), where the decision ends, the plots drawn, every URL the page asked for, and a screenshot
of the first screen (plus the whole page) as PNG files.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCREENS = {390: 844, 1280: 800}  # a phone (iPhone 12-14) and a laptop: width -> first screen height

# What the test asks the page (evaluated in the page after load; the reports themselves have no script).
_MEASURE = r"""
(() => {
  const vw = window.innerWidth, doc = document.documentElement;
  const wide = [], cut = [];  // cut: drawn past its plot's edge (clipped away)
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    const cls = el.className && typeof el.className === 'string' ? '.' + el.className.split(' ')[0] : '';
    const svg = el.closest('svg'), box = svg ? svg.getBoundingClientRect() : null;
    if (box && r.width && r.right > box.right + 2) cut.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : ''));
    if (!svg && r.right > vw + 1 && !el.closest('.scroll'))
      wide.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + cls + ' ' + Math.round(r.right));
  }
  const d = document.getElementById('decision');
  const plots = [...document.querySelectorAll('figure svg')].map(s => {
    const r = s.getBoundingClientRect(), pt = parseFloat(s.getAttribute('width'));
    return [Math.round(r.width), Math.round(r.height), r.width / (pt * 4 / 3)];  // drawn at this scale
  });
  const small = [...document.querySelectorAll('body *')].filter(el => el.children.length === 0
      && el.textContent.trim() && el.getBoundingClientRect().width > 0
      && parseFloat(getComputedStyle(el).fontSize) < 11).map(el => el.tagName.toLowerCase()).slice(0, 5);
  const pres = [...document.querySelectorAll('pre')].map(p => getComputedStyle(p).wordBreak + ' '
    + getComputedStyle(p).whiteSpace);
  return JSON.stringify({
    innerWidth: vw, scrollWidth: doc.scrollWidth, bodyScrollWidth: document.body.scrollWidth,
    wide: wide.slice(0, 10), cut: cut.slice(0, 10), decisionBottom: d ? d.getBoundingClientRect().bottom : null,
    decisionText: d ? d.innerText : null, plots, small, pres,
    scrollBoxes: [...document.querySelectorAll('.scroll')].map(b => [b.clientWidth, b.scrollWidth]),
  });
})()
"""


def chromium() -> str | None:
    """Debian's chromium (`apt-get install chromium`), or None."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class Look:
    width: int
    height: int
    metrics: dict[str, Any]
    requests: list[str]
    screenshot: Path
    full_page: Path
    failed: list[str] = field(default_factory=list)  # requests the browser could not load

    @property
    def external(self) -> list[str]:
        """Requested URLs that are not the file itself (or inline data)."""
        return [u for u in self.requests if not u.startswith(("file://", "data:", "about:"))]


class Browser:
    """One headless chromium; `look` opens a fresh tab per page and width."""

    def __init__(self, workdir: Path) -> None:
        exe = chromium()
        if exe is None:
            raise RuntimeError("chromium is not installed (apt-get install chromium)")
        self._profile = tempfile.mkdtemp(prefix="chromium-", dir=workdir)
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds() -> None:
            """The pipe's ends as fd 3 and 4 in the child. Copied above 10 first: a pipe end may
            itself be fd 3 or 4, and dup2 onto itself would leave it close-on-exec."""
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_chrome_r, from_chrome_w)]
            os.dup2(high[0], 3)  # dup2 makes them inheritable
            os.dup2(high[1], 4)

        args = [
            exe,
            "--headless",
            "--no-sandbox",  # CI runs as root
            "--remote-debugging-pipe",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--mute-audio",
            "--hide-scrollbars",
            f"--user-data-dir={self._profile}",
            "about:blank",
        ]
        self._proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL if not os.environ.get("SPECREG_CHROMIUM_LOG") else None,
            close_fds=False,  # only the inheritable fds 0-4 pass (Python's own fds are not inheritable)
            preexec_fn=fds,  # a test is single-threaded here
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            self.send("Browser.close")
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- protocol -----------------------------------------------------------------------------

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            ready, _, _ = select.select([self._from_chrome], [], [], left)
            if ready:
                chunk = os.read(self._from_chrome, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium exited (code {self._proc.poll()})")
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return dict(json.loads(msg))

    def send(self, method: str, session: str | None = None, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        mid = self._next_id
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read(deadline)
            if answer.get("id") == mid:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return dict(answer.get("result", {}))
            self._events.append(answer)

    def wait_event(self, method: str, session: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, ev in enumerate(self._events):
                if ev.get("method") == method and ev.get("sessionId") == session:
                    return dict(self._events.pop(i))
            self._events.append(self._read(deadline))

    # ---- what a person sees -------------------------------------------------------------------

    def look(self, page: Path, width: int, shots: Path, name: str) -> Look:
        height = SCREENS.get(width, 800)
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        try:
            self._events.clear()
            for domain in ("Page", "Network", "Runtime"):
                self.send(f"{domain}.enable", session)
            self.send(
                "Emulation.setDeviceMetricsOverride",
                session,
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=width < 600,  # a phone honours the page's viewport meta tag
            )
            self.send("Page.navigate", session, url=page.resolve().as_uri())
            self.wait_event("Page.loadEventFired", session)
            found = self.send("Runtime.evaluate", session, expression=_MEASURE, returnByValue=True)
            metrics = json.loads(found["result"]["value"])
            shots.mkdir(parents=True, exist_ok=True)
            first = shots / f"{name}-{width}.png"
            shot = self.send("Page.captureScreenshot", session, format="png")
            first.write_bytes(base64.b64decode(shot["data"]))
            full = shots / f"{name}-{width}-full.png"
            shot = self.send("Page.captureScreenshot", session, format="png", captureBeyondViewport=True)
            full.write_bytes(base64.b64decode(shot["data"]))
            events = [e for e in self._events if e.get("sessionId") == session]
            requests = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
            failed = [e["params"].get("errorText", "") for e in events if e.get("method") == "Network.loadingFailed"]
            return Look(width, height, metrics, requests, first, full, failed)
        finally:
            self.send("Target.closeTarget", targetId=target)


def check_page(browser: Browser, page: Path, shots: Path, name: str, plots: int | None = None) -> list[Look]:
    """Assert what issue 25 asks of every report page at 390 and 1280 px; return the looks."""
    looks = []
    for width in SCREENS:
        look = browser.look(page, width, shots, name)
        m = look.metrics
        where = f"{name} at {width} px (screenshot {look.full_page})"
        assert m["innerWidth"] == width, (where, m["innerWidth"])  # no zoom-out to fit a too-wide page
        assert m["scrollWidth"] <= width and not m["wide"], (where, m["scrollWidth"], m["wide"])
        assert not m["cut"], (where, "plot text cut at its edge", m["cut"])
        assert m["decisionBottom"] is not None, (where, "no #decision")
        assert 0 < m["decisionBottom"] <= look.height, (where, "decision below the first screen", m["decisionBottom"])
        assert not look.external, (where, look.external)
        assert not look.failed, (where, look.failed)
        assert all(p == "normal pre" for p in m["pres"]), (
            where,
            "commands wrap only at their continuations",
            m["pres"],
        )
        assert not m["small"], (where, "text under 11 px", m["small"])
        if plots is not None:
            assert len(m["plots"]) == plots, (where, m["plots"])
        assert all(w > 100 and h > 50 for w, h, _ in m["plots"]), (where, m["plots"])
        assert all(w <= width for w, _, _ in m["plots"]), (where, m["plots"])
        # 11-point labels (9-10 pt ticks and legends) stay >= ~8 px: a plot is never shrunk below 0.6
        assert all(scale >= 0.6 for _, _, scale in m["plots"]), (where, "plot text too small", m["plots"])
        looks.append(look)
    return looks
