"""Headless Chromium driven over the DevTools protocol on a pipe: the review page's tests and its benchmark.

``--remote-debugging-pipe`` makes Chromium read protocol messages on file
descriptor 3 and answer on 4, each one JSON object ended by a NUL byte, so no
port is opened and no websocket library is needed. A fresh profile and the
flags below keep it off the network: the page under test must load from a
file, with nothing to fetch.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

#: Off the network and quiet: no sync, no component or safe-browsing fetches, no first-run pages.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
]


class BrowserError(RuntimeError):
    """Chromium is missing, did not answer in time, or refused a command."""


def find_chromium() -> str | None:
    """``$CHROMIUM``, or the first of the usual names on PATH (Debian's package installs ``chromium``)."""
    named = os.environ.get("CHROMIUM")
    if named:
        return named
    return next((path for name in ("chromium", "chromium-browser", "google-chrome") if (path := shutil.which(name))), None)


class Chromium:
    """One headless browser with one page; ``with Chromium() as browser: browser.open(url)``."""

    def __init__(self, width: int = 1400, height: int = 1000, timeout: float = 60.0, binary: str | None = None):
        binary = binary or find_chromium()
        if binary is None:
            raise BrowserError("no Chromium found: install Debian's chromium package (scripts/setup.sh does) or set CHROMIUM")
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="fucina-chromium-")
        to_browser, commands = os.pipe()
        replies, from_browser = os.pipe()
        args = [binary, *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}", "--remote-debugging-pipe", "about:blank"]
        # bash puts the two pipe ends at descriptors 3 and 4, whatever numbers they have here.
        self.process = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser}', *args],
            pass_fds=(to_browser, from_browser),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser)
        os.close(from_browser)
        self._commands, self._replies = commands, replies
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        try:
            target = self.call("Target.createTarget", url="about:blank")["targetId"]
            self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            self.call("Page.enable", page=True)
            self.call("Runtime.enable", page=True)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the protocol -------------------------------------------------------------

    def call(self, method: str, page: bool = False, **params: Any) -> dict[str, Any]:
        """Send one command (to the page's session when ``page``) and wait for its answer; events are kept in ``events``."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if page:
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, event: str) -> dict[str, Any]:
        """The next (or an already received) event named ``event``."""
        while True:
            for i, e in enumerate(self.events):
                if e.get("method") == event:
                    return self.events.pop(i)
            self.events.append(self._read())

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise BrowserError(f"Chromium did not answer within {self.timeout:.0f} s")
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium exited (status {self.process.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    # -- what the tests use ----------------------------------------------------------

    def open(self, url: str, ready: str | None = None) -> float:
        """Load ``url`` and wait for its load event, then until the JavaScript condition ``ready`` holds; return the seconds that took."""
        self.events = [e for e in self.events if e.get("method") != "Page.loadEventFired"]
        started = time.perf_counter()
        self.call("Page.navigate", page=True, url=url)
        self.wait_for("Page.loadEventFired")
        if ready is not None:
            self.evaluate(f"""new Promise((resolve, reject) => {{ const t0 = performance.now();
                const check = () => ({ready}) ? resolve(true) : performance.now() - t0 > {self.timeout * 1000}
                  ? reject(new Error("not ready: " + {json.dumps(ready)})) : setTimeout(check, 5);
                check(); }})""")
        return time.perf_counter() - started

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited); a thrown error raises ``BrowserError``."""
        result = self.call("Runtime.evaluate", page=True, expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise BrowserError(f"JavaScript error: {details.get('exception', {}).get('description') or details.get('text')}")
        return result["result"].get("value")

    def mouse(self, kind: str, x: float, y: float) -> None:
        """A real mouse event at page coordinates: ``mouseMoved``, or a click (``mousePressed`` then ``mouseReleased``)."""
        if kind == "click":
            for phase in ("mousePressed", "mouseReleased"):
                self.call("Input.dispatchMouseEvent", page=True, type=phase, x=x, y=y, button="left", clickCount=1)
        else:
            self.call("Input.dispatchMouseEvent", page=True, type=kind, x=x, y=y)

    def screenshot(self, path: Path) -> Path:
        """The viewport as a PNG."""
        data = self.call("Page.captureScreenshot", page=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                try:
                    os.write(self._commands, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
                    self.process.wait(timeout=10)
                except (OSError, subprocess.TimeoutExpired):
                    self.process.kill()
                    self.process.wait()
        finally:
            for fd in (self._commands, self._replies):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self.profile, ignore_errors=True)
