"""A headless Chromium driven over the DevTools protocol, and a static file server, for the tests.

One browser process, one tab, reused for every page. The browser cannot reach anything but the
loopback interface: every host name resolves to nothing except localhost and 127.0.0.1, and any
other address (an IP literal, say) goes to a proxy on a closed loopback port. Every request the
page makes is still recorded, so a test can assert that none left the machine.
"""

import functools
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import websocket

from addnorm_lib.grading._pytest_runner import short_temp_base

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--window-size=1280,900",
    "--remote-debugging-port=0",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",  # loopback is never proxied; everything else dead-ends
]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


class StaticServer:
    """Serve `folder` on a free port of 127.0.0.1 from a thread, as `python -m http.server` does."""

    def __init__(self, folder: Path):
        handler = functools.partial(_QuietHandler, directory=str(folder))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Chromium:
    """Headless chromium, one tab: `call` sends a DevTools command; `events` collects events."""

    def __init__(self, executable: str, folder: Path, timeout: float = 30.0):
        self.timeout = timeout
        self.log = folder / "chromium.log"  # a file, not a pipe: a full pipe would block chromium
        # Chromium puts its singleton socket in TMPDIR, and a socket path has at most 107 bytes.
        self.temporary = tempfile.mkdtemp(prefix="chromium-", dir=short_temp_base())
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [executable, *FLAGS, f"--user-data-dir={folder / 'profile'}", "about:blank"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "TMPDIR": self.temporary},
            )
        self.events: list[dict] = []
        self._next_id = 0
        try:
            port = self._wait_for_port(folder / "profile" / "DevToolsActivePort")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
                tab = next(t for t in json.load(reply) if t["type"] == "page")
            self.socket = websocket.create_connection(
                tab["webSocketDebuggerUrl"], timeout=timeout, suppress_origin=True
            )
        except BaseException:
            self.close()
            raise
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def _wait_for_port(self, path: Path) -> int:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited early:\n{self.log.read_text()[-3000:]}")
            if path.is_file() and path.read_text().strip():
                return int(path.read_text().split()[0])
            time.sleep(0.05)
        raise TimeoutError("chromium did not open its DevTools port")

    def _receive(self) -> dict:
        message = json.loads(self.socket.recv())
        if "method" in message:
            self.events.append(message)
        return message

    def call(self, method: str, **params) -> dict:
        self._next_id += 1
        self.socket.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        while True:
            message = self._receive()
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def wait_for_event(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout
        seen = len(self.events)
        while time.monotonic() < deadline:
            for event in self.events[seen:]:
                if event["method"] == method:
                    return event
            seen = len(self.events)
            self._receive()
        raise TimeoutError(f"no {method} within {self.timeout} s")

    def navigate(self, url: str):
        """Open `url` in the tab and return once its load event fired; `events` starts afresh."""
        self.events.clear()
        result = self.call("Page.navigate", url=url)
        if "errorText" in result:
            raise RuntimeError(f"{url}: {result['errorText']}")
        self.wait_for_event("Page.loadEventFired")

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def close(self):
        if getattr(self, "socket", None) is not None:
            self.socket.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.temporary, ignore_errors=True)
