"""llama.cpp's own server on loopback, for the comparisons that run it beside the engine: the
renderer's parity (benchmarks/template_parity.py), the reasoning budget's (tests/test_budget_server_parity.py)
and generation throughput (benchmarks/gen_throughput.py). The binary comes from
``llama_tools.extra_tool("llama-server")`` (the same vendored source and patches as the engine);
the workflow itself never starts a server.

One place picks the port (a free one, another if it is taken between the probe and the bind), waits
until ``/health`` answers, posts JSON, keeps the server's output for the error that needs it, and
stops the process (terminate, then kill)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path


class ServerError(RuntimeError):
    """The server did not start, or answered a request with an error (its output's tail included)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """``llama-server <args> --host 127.0.0.1 --port P`` as a context manager::

        with LlamaServer(exe, ["-m", model, "--jinja", "-np", "1"]) as srv:
            srv.post("/apply-template", {"messages": [...]})["prompt"]
    """

    def __init__(self, exe: str | os.PathLike, args: list[str], *, log: str | os.PathLike | None = None,
                 ready_s: float = 120.0, tries: int = 3):
        self.cmd = [str(exe), *(str(a) for a in args), "--host", "127.0.0.1"]
        self.log_path = Path(log) if log is not None else None
        self.ready_s, self.tries = ready_s, tries
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self._log = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _open_log(self):
        return open(self.log_path, "w+b") if self.log_path is not None else tempfile.TemporaryFile()

    def tail(self, n: int = 3000) -> str:
        if self._log is None or self._log.closed:
            return self.log_path.read_text(errors="replace")[-n:] if self.log_path and self.log_path.exists() else ""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-n:]

    def start(self) -> LlamaServer:
        for _ in range(self.tries):  # a port taken between the probe and the bind: another one
            self.port = free_port()
            self._log = self._open_log()
            self.proc = subprocess.Popen(self.cmd + ["--port", str(self.port)], stdout=self._log,
                                         stderr=subprocess.STDOUT)
            deadline = time.monotonic() + self.ready_s
            while self.proc.poll() is None and time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(self.base + "/health", timeout=5) as r:
                        if r.status == 200:
                            return self
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
                time.sleep(0.05)
            exited = self.proc.poll()
            why = (f"exited with {exited}" if exited is not None else f"not ready in {self.ready_s:g} s")
            tail = self.tail()
            self.close()
            if exited is None or "bind" not in tail.lower():
                raise ServerError(f"llama-server {why} ({' '.join(self.cmd)}):\n{tail}")
        raise ServerError(f"llama-server found no free port in {self.tries} tries ({' '.join(self.cmd)})")

    def request(self, path: str, body: dict, timeout: float = 600.0) -> tuple[int, dict | str]:
        """POST ``body`` as JSON: (HTTP status, the parsed answer, or the error's text)."""
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def post(self, path: str, body: dict, timeout: float = 600.0) -> dict:
        """POST ``body`` as JSON and return the answer; an error status is a ServerError with its text."""
        status, got = self.request(path, body, timeout)
        if status != 200:
            raise ServerError(f"llama-server {path}: HTTP {status}: {str(got)[:500]}\n{self.tail()}")
        return got

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None and not self._log.closed:
            self._log.close()

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
