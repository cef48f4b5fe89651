"""A real headless Chromium driven through chromedriver's W3C WebDriver HTTP API (stdlib only).

Used by the report tests to open the HTML, read the browser's console log (errors, failed loads,
uncaught exceptions) and query the DOM. Debian's `chromium` and `chromium-driver` packages provide
the binaries (`.ci/system-packages.txt` installs them).
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

INSTALL_HINT = ("headless Chromium is needed to check the report: "
                "apt-get install -y --no-install-recommends chromium chromium-driver")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


def find_binaries() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver") or (Path("/usr/bin/chromedriver").exists() and "/usr/bin/chromedriver")
    if not chromium or not driver:
        raise RuntimeError(f"{INSTALL_HINT} (found chromium={chromium}, chromedriver={driver})")
    return chromium, driver


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Browser:
    """with Browser() as b: b.open(path); b.console(); b.js("return ...")"""

    def __init__(self, width: int = 1366, height: int = 900):
        self.chromium, driver = find_binaries()
        self.port = _free_port()
        self.profile = tempfile.mkdtemp(prefix="ql-chromium-")
        self.proc = subprocess.Popen([driver, f"--port={self.port}"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 30
        while True:
            try:
                self._req("GET", "/status")
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise RuntimeError("chromedriver did not start; " + INSTALL_HINT) from None
                time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": self.chromium,
                                   "args": FLAGS + [f"--user-data-dir={self.profile}", f"--window-size={width},{height}"]},
            "goog:loggingPrefs": {"browser": "ALL"},
        }}}
        try:
            self.sid = self._req("POST", "/session", caps)["value"]["sessionId"]
        except Exception:
            self.close()
            raise

    def _req(self, method: str, path: str, body=None, timeout: float = 120):
        data = None if body is None else json.dumps(body).encode()
        r = urllib.request.Request(self.base + path, data=data, method=method,
                                   headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(r, timeout=timeout) as f:
            return json.load(f)

    def open(self, path: str | Path) -> None:
        self._req("POST", f"/session/{self.sid}/url", {"url": Path(path).resolve().as_uri()})

    def js(self, script: str, *args):
        return self._req("POST", f"/session/{self.sid}/execute/sync", {"script": script, "args": list(args)})["value"]

    def console(self) -> list[dict]:
        """Browser log entries since the last call (console messages, JS errors, failed loads)."""
        return self._req("POST", f"/session/{self.sid}/se/log", {"type": "browser"})["value"]

    def screenshot(self, out: str | Path) -> None:
        png = self._req("GET", f"/session/{self.sid}/screenshot")["value"]
        Path(out).write_bytes(base64.b64decode(png))

    def close(self) -> None:
        try:
            if getattr(self, "sid", None):
                self._req("DELETE", f"/session/{self.sid}", timeout=30)
        except Exception:
            pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
