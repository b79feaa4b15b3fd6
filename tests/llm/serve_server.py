"""Start ``python -m pygpukit serve`` as a subprocess on 127.0.0.1 for the server tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

#: Seconds the server may take to load and warm up (the CPU backend on a busy 2-core machine).
START_TIMEOUT_S = 600


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess:
    """A running server: its base URL, process and the lines it wrote to stderr."""

    url: str
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def log(self) -> str:
        """Everything the server wrote so far."""
        return "".join(self.lines)


@contextlib.contextmanager
def run_server(models: Sequence[str], *options: str) -> Iterator[ServerProcess]:
    """Run the server with ``models`` and ``options`` until the block ends (then SIGTERM)."""
    port = free_port()
    cmd = [sys.executable, "-m", "pygpukit", "serve", *models, "--host", "127.0.0.1",
           "--port", str(port), "--log-level", "warning", *options]  # fmt: skip
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env=dict(os.environ))  # fmt: skip
    server = ServerProcess(f"http://127.0.0.1:{port}", proc)
    ready = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            server.lines.append(line)
            if "ready in" in line:
                ready.set()
        ready.set()  # the process ended

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready.wait(0.2) and time.monotonic() < deadline:
        pass
    if proc.poll() is not None or "ready in" not in server.log():
        proc.kill()
        raise RuntimeError(f"the server did not start:\n{server.log()}")
    try:
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
